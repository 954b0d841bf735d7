"""This box's calibration for the scale model: the per-box constants a profile cannot know.

A profile is measured in one quiet process: DGL's sampler and one training step, no runtime
around them. In the runtime a mini-batch's sampling is a round of requests per layer through
ZeroMQ, a training step also decodes its blocks, and gloo's all-reduce over TCP costs more
than its bytes at line rate. On the scale model those costs are CPU work inside each host's
quota (:mod:`gnnsched.runtime.cgroups`), so, as the real cluster's seconds (measured / D),
they are a property of the runtime and the box, not of the shape it runs on.

:func:`measure` measures them: one colocation + fifo run of a job on a small calibration
cluster (``shapes/calibration.yaml``, two hosts, which no evaluation shape is; for a job of
other partitions or trainers, :func:`calibration_cluster`), on the scale model, read with
:func:`gnnsched.calibrate.insitu_profile`: ``train`` (a training step's seconds over the
profile's), ``sample`` (a mini-batch's sampling seconds over the profile's, median over
partitions), ``wire_overhead`` (the NICs' bytes over the payload the runtime sent across
them, minus 1: headers, the other direction's ACKs, framing; 5-8% in every run of the
scale-model evaluation, and the shapers count those bytes), ``allreduce_overhead_s`` (the
all-reduce's own seconds beyond its bytes on the wire at line rate) and ``barrier_skew_s``
(how far apart the trainers left each all-reduce: without it the calibration cluster's own
epoch simulates 6% short, with it within 2%). Every prediction is then made from the profile
with these factors (:meth:`BoxCalibration.apply`) before the run starts; none is calibrated
from the run it predicts.

Two callers, one mechanism: ``gnnsched bench calibrate-box`` (:func:`calibrate`, per dataset
of the evaluation, into ``OUT/box.json``) and ``gnnsched cluster calibrate``
(:func:`calibrate_cluster`, a user's job, into ``CLUSTER.calibration.json`` beside the
cluster file, where ``plan`` and ``simulate`` find it:
:func:`gnnsched.calibrate.find_calibration`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsched.calibrate import (
    HOLDS_HOP_WAIT,
    BoxCalibration,
    calibration_path,
    dataset_key,
    read_boxes,
    write_boxes,
)
from gnnsched.evaluation.config import SYSTEMS, Settings, canonical, job_for_repeat, load_shape, say
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.predict import row_profile, simulate_system
from gnnsched.evaluation.runs import Testbed, aggregate_runtime, run_runtime_once
from gnnsched.plan import Plan
from gnnsched.profile import CostProfile
from gnnsched.spec import ClusterSpec, JobSpec, SpecError

CALIBRATION_SHAPE = "calibration"
SYSTEM = "colocation+fifo"
__all__ = ["BoxCalibration", "CALIBRATION_SHAPE", "SYSTEM", "calibrate", "calibrate_cluster",
           "calibration_cluster", "ensure_box", "load_box", "measure", "save_box",
           "wire_overhead"]


def wire_overhead(row: dict[str, Any]) -> float:
    """A measured run's wire bytes per payload byte, minus 1: its NICs' transmitted bytes
    (``bytes_run``, every host, the whole run) over what the runtime sent across them
    (features, structure and control: ``run_network_bytes``; gradients:
    ``allreduce_bytes``). 0 when the run has no NIC counters."""
    nic, payload = row.get("bytes_run"), (row.get("run_network_bytes") or 0) + (
        row.get("allreduce_bytes") or 0)
    return max(0.0, float(nic) / payload - 1.0) if nic and payload > 0 else 0.0


def load_box(path: str | Path) -> dict[str, BoxCalibration]:
    """A box file's calibrations by dataset key; a clear error naming the file and field."""
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{p}: no box calibration there (make one with `gnnsched bench "
                         "calibrate-box --box FILE`)")
    try:
        return read_boxes(p)[1]
    except SpecError as exc:
        raise SystemExit(f"{p}: {exc.problem}; expected {exc.valid}") from None


def _box_header(st: Settings, shape: str) -> dict[str, Any]:
    """What a box file says about how it was made: the box, the date, the runs' settings."""
    return {"box": {"host": platform.node(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
            "made": time.strftime("%Y-%m-%d %H:%M"), "shape": shape,
            "system": SYSTEM, "epochs": st.epochs, "repeats": st.repeats,
            "nic_bands": st.nic_bands, "nic_queue_ms": st.nic_queue_ms}


def save_box(path: str | Path, boxes: dict[str, BoxCalibration], st: Settings) -> None:
    write_boxes(path, _box_header(st, CALIBRATION_SHAPE), boxes)


# ------------------------------------------------------------------------------ one measurement


def measure(st: Settings, cluster: ClusterSpec, job_of: Callable[[int], JobSpec],
            prof: CostProfile, part_dir: Path, run_dir: Path, label: str,
            testbed: Callable[[], Any], key: str) -> BoxCalibration:
    """One colocation + fifo run (``st.repeats`` repetitions, median; repetition ``r`` trains
    ``job_of(r)``) on ``cluster``, the emulated cluster ``testbed()`` brings up (an object with
    ``net``, ``counters`` and ``close()``, as :class:`~gnnsched.evaluation.runs.Testbed`),
    read as this box's factors of ``prof`` for dataset ``key``."""
    from gnnsched.placement import get_placer

    job = job_of(0)
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = canonical(get_placer(SYSTEMS[SYSTEM].placer or "colocation").place(
        cluster, job, prof, seed=st.seed))
    plan.save(run_dir / "plan-colocation.json")
    bed = testbed()
    try:
        reps = [run_runtime_once(st, cluster, job_of(r), plan, prof, SYSTEM, part_dir, run_dir,
                                 bed.net, bed.counters, r) for r in range(st.repeats)]
    finally:
        bed.close()
    return _read(st, cluster, job, plan, prof, aggregate_runtime(reps), label, key)


def _read(st: Settings, cluster: ClusterSpec, job: JobSpec, plan: Plan, prof: CostProfile,
          row: dict[str, Any], label: str, key: str) -> BoxCalibration:
    """A calibration run's row as a :class:`BoxCalibration`, checked by simulating the run's
    own plan with it."""
    wire = wire_overhead(row)
    # the all-reduce's overhead beyond its bytes on the wire, not beyond its payload
    cal, f = row_profile(row, replace(prof, wire_overhead=wire), plan, cluster, job)
    box = BoxCalibration(
        train=float(f["cpu"]), sample=float(statistics.median(f["sample"])),
        allreduce_overhead_s=float(f["allreduce_overhead_s"]),
        dilation=float(row.get("dilation") or 1.0),
        epoch_time_s=float(row.get("real_epoch_time_s") or row["epoch_time_s"]),
        meta={"dataset": key, "sample_by_part": [float(x) for x in f["sample"]],
              "allreduce_measured_s": f.get("allreduce_measured_s"),
              "allreduce_model_s": f.get("allreduce_model_s"), "run_dir": row["run_dir"],
              "last_departure_s": f.get("last_departure_s"),
              # the sampling factor leaves out the samplers' wait for remote hops
              "sample_net_of_wait": not cal.meta.get(HOLDS_HOP_WAIT)},
        barrier_skew_s=cal.barrier_skew_s, wire_overhead=wire)
    check = simulate_system(cluster, job, plan, box.apply(prof), SYSTEMS[SYSTEM].policy or "fifo",
                            st.seed)["epoch_time_s"]
    box.meta["simulated_epoch_s"] = check
    say(f"[{label}] box: training x{box.train:.2f}, sampling x{box.sample:.2f}, wire bytes "
        f"x{1 + wire:.3f} of the payload, all-reduce "
        f"+{box.allreduce_overhead_s * 1e3:.1f} ms, trainers leave it "
        f"{1e3 * (f.get('last_departure_s') or 0):.1f} ms apart (D = {box.dilation:.3g}; "
        f"epoch {box.epoch_time_s:.3f} s of the real cluster, {check:.3f} s simulated with "
        "these factors)")
    return box


# ------------------------------------------------------------------------------ the evaluation


def calibrate(ctx: Context, ds: str) -> BoxCalibration:
    """One colocation + fifo run of dataset ``ds`` on the calibration cluster, on the scale
    model (``ctx.st.repeats`` repetitions, median), read as this box's factors."""
    st = ctx.st
    cluster = load_shape(CALIBRATION_SHAPE)
    label = f"{CALIBRATION_SHAPE}/{ds}"
    return measure(st, cluster, lambda r: job_for_repeat(ds, st, r), ctx.profiles[ds],
                   ctx.parts[ds], st.work / "runs" / f"{CALIBRATION_SHAPE}-{ds}", label,
                   lambda: Testbed(st, cluster, {}, label), ds)


def ensure_box(ctx: Context) -> dict[str, BoxCalibration]:
    """The box calibration for every dataset of the evaluation: from ``--box`` (default
    ``OUT/box.json``), calibrating (and saving) the datasets it lacks."""
    st = ctx.st
    path = Path(st.box) if st.box else st.out / "box.json"
    boxes = load_box(path) if path.is_file() else {}
    if boxes:
        made = json.loads(path.read_text())
        same = (bool(made.get("nic_bands")) == st.nic_bands
                and made.get("nic_queue_ms") == st.nic_queue_ms)
        if not same:  # calibrated on other NICs: its all-reduce overhead does not carry over
            say(f"{path}: calibrated with nic_bands={made.get('nic_bands')}, nic_queue_ms="
                f"{made.get('nic_queue_ms')}; this evaluation's NICs differ: calibrating again")
            boxes = {}
    missing = [ds for ds in st.datasets if ds not in boxes]
    for ds in missing:
        ctx.prepare(ds)
        boxes[ds] = calibrate(ctx, ds)
    if missing:
        save_box(path, boxes, st)
        say(f"box calibration for {', '.join(missing)} -> {path}")
    return boxes


# ------------------------------------------------------------------------------ a user's cluster


def calibration_cluster(job: JobSpec) -> ClusterSpec:
    """The calibration cluster for ``job``: the hosts of ``shapes/calibration.yaml`` (each a
    store with 2 CPUs, a GPU of speed 1.0 and a 100 Mbit/s NIC), one per trainer (at most one
    per partition, GPUs enough for the trainers: for 2 trainers over 4 partitions, that
    shape's two hosts of two partitions each), the partitions split in contiguous runs. Its
    name and addresses are its own (``calibrate-DATASET``, 10.78.10.0/24), so it can be up
    beside the evaluation's calibration cluster and any user's."""
    from gnnsched.spec import cluster_from_dict

    base = load_shape(CALIBRATION_SHAPE)
    hosts = max(1, min(job.trainers, job.num_parts))
    gpus = math.ceil(job.trainers / hosts)
    cuts = [round(i * job.num_parts / hosts) for i in range(hosts + 1)]
    proto = base.to_dict()["machines"][0]
    machines = [{**proto, "name": f"cal{i}", "address": f"10.78.10.{i + 1}",
                 "partitions": list(range(cuts[i], cuts[i + 1])),
                 "gpus": [dict(proto["gpus"][0]) for _ in range(gpus)]} for i in range(hosts)]
    return cluster_from_dict({"name": f"calibrate-{dataset_key(job)}"[:40],
                              "storage": "shared", "machines": machines},
                             source=f"calibration cluster for {job.source}")


class NetnsBed:
    """The calibration cluster on network namespaces with the NICs a user's ``gnnsched cluster
    up`` gives (its flags, its defaults), and its NIC counters."""

    def __init__(self, cluster: ClusterSpec, nic: dict[str, Any], dilation: float | None,
                 cores: float | None) -> None:
        from gnnsched.api import EmulatedCluster
        from gnnsched.evaluation.measure import NicCounters

        self.net = EmulatedCluster(cluster, cgroups=True, dilation=dilation, cores=cores,
                                   **nic).up()
        try:
            self.counters: Any = NicCounters(self.net)
        except BaseException:
            self.net.down()
            raise

    def close(self) -> None:
        self.counters.close()
        self.net.down()


NIC_KEYS = ("payload_rates", "bands", "queue_ms", "mtu")


def calibrate_cluster(cluster_file: str | Path, job: JobSpec, prof: CostProfile,
                      part_dir: Path, *, work: Path, epochs: int = 3, repeats: int = 1,
                      nic: dict[str, Any] | None = None, dilation: float | None = None,
                      cores: float | None = None, out: str | Path | None = None
                      ) -> tuple[Path, BoxCalibration]:
    """``gnnsched cluster calibrate``: :func:`measure` ``job`` (``epochs`` epochs, the first
    a warm-up) on its :func:`calibration_cluster`, on the scale model with the NICs ``nic``
    (``cluster up``'s ``payload_rates``, ``bands``, ``queue_ms``, ``mtu``), and keep it under
    the job's dataset in ``out`` (default: beside the cluster file,
    :func:`gnnsched.calibrate.calibration_path`), with the file's other datasets when they
    were calibrated on the same NICs. Returns the file and the calibration."""
    nic = {k: v for k, v in (nic or {}).items() if k in NIC_KEYS}
    st = Settings(quick=True, out=work, work=work, launcher="netns",
                  launcher_reason="gnnsched cluster calibrate", datasets=[dataset_key(job)],
                  shapes=[], systems=[SYSTEM], epochs=epochs, repeats=repeats, budget=10.0,
                  samples=0, sizes=[], real=True, scale=False, reference=False, seed=job.seed,
                  nic_queue_ms=nic.get("queue_ms"), nic_bands=bool(nic.get("bands")),
                  scale_model=True, dilation=dilation, cores=cores)
    cluster = calibration_cluster(job)
    key = dataset_key(job)
    label = f"calibrate/{key}"

    def job_of(r: int) -> JobSpec:
        return replace(job, epochs=epochs, seed=job.seed + r, eval_every=epochs)

    box = measure(st, cluster, job_of, prof, part_dir, work / "runs" / f"calibration-{key}",
                  label, lambda: NetnsBed(cluster, nic, dilation, cores), key)
    box.meta.update(job_key=job.profile_key(), trainers=job.trainers,
                    profile=prof.meta.get("file") if prof.meta else None)
    path = Path(out) if out is not None else calibration_path(cluster_file)
    header = {**_box_header(st, cluster.name), "nic": nic, "launcher": "netns",
              "calibrates": str(cluster_file),
              "how": "gnnsched cluster calibrate: one colocation + fifo run on the calibration "
                     "cluster, on the scale model; factors in the real cluster's seconds"}
    boxes: dict[str, BoxCalibration] = {}
    if path.is_file():
        try:
            old, boxes = read_boxes(path)
        except SpecError:
            old, boxes = {}, {}
        if old.get("nic") != nic:  # other NICs: their all-reduce overheads do not carry over
            boxes = {}
    boxes[key] = box
    write_boxes(path, header, boxes)
    return path, box
