"""This box's calibration for the scale model: the per-box constants a profile cannot know.

A profile is measured in one quiet process: DGL's sampler and one training step, no runtime
around them. In the runtime a mini-batch's sampling is a round of requests per layer through
ZeroMQ, a training step also decodes its blocks, and gloo's all-reduce over TCP costs more
than its bytes at line rate. On the scale model those costs are CPU work inside each host's
quota (:mod:`gnnsched.runtime.cgroups`), so, as the real cluster's seconds (measured / D),
they are a property of the runtime and the box, not of the shape it runs on.

``gnnsched bench calibrate-box`` measures them once: one colocation + fifo run per dataset
on the calibration cluster (``shapes/calibration.yaml``, two hosts, which no evaluation shape
is), on the scale model, read with :func:`gnnsched.calibrate.insitu_profile`: ``train`` (a
training step's seconds over the profile's), ``sample`` (a mini-batch's sampling seconds
over the profile's, median over partitions), ``wire_overhead`` (the NICs' bytes over the
payload the runtime sent across them, minus 1: headers, the other direction's ACKs,
framing; 5-8% in every run of the scale-model evaluation, and the shapers count those
bytes), ``allreduce_overhead_s`` (the all-reduce's own seconds beyond its bytes on the
wire at line rate) and ``barrier_skew_s`` (how far apart the trainers left each all-reduce:
without it the calibration cluster's own epoch simulates 6% short, with it within 2%). The
evaluation then predicts every run from the profile with these factors
(:meth:`BoxCalibration.apply`) before the run starts; it never calibrates from the run it
predicts.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import SYSTEMS, Settings, canonical, job_for_repeat, load_shape, say
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.predict import row_profile, simulate_system
from gnnsched.evaluation.runs import Testbed, aggregate_runtime, run_runtime_once
from gnnsched.profile import CostProfile

CALIBRATION_SHAPE = "calibration"
SYSTEM = "colocation+fifo"


@dataclass(frozen=True)
class BoxCalibration:
    """Per dataset, the runtime's costs on this box as factors of a profile's."""

    train: float  # a training step's seconds / the profile's (x the trainer's load)
    sample: float  # a mini-batch's sampling seconds / the profile's
    allreduce_overhead_s: float  # the all-reduce's seconds beyond its bytes at line rate
    dilation: float  # D of the calibration run
    epoch_time_s: float  # the calibration run's epoch, as the real cluster's seconds
    meta: dict[str, Any] = field(default_factory=dict)
    # per steady iteration of the calibration run, how long after the first each trainer left
    # the all-reduce (the real cluster's seconds): the box's scheduling jitter, which every
    # iteration pays at its barrier (:attr:`CostProfile.barrier_skew_s`)
    barrier_skew_s: tuple[tuple[float, ...], ...] = ()
    # wire bytes per payload byte - 1 (:attr:`CostProfile.wire_overhead`); 0 in older files
    wire_overhead: float = 0.0

    def __post_init__(self) -> None:  # JSON gives lists: keep the profile's tuple form
        object.__setattr__(self, "barrier_skew_s",
                           tuple(tuple(float(x) for x in r) for r in self.barrier_skew_s))

    def apply(self, prof: CostProfile) -> CostProfile:
        """``prof`` with this box's runtime costs: what the a-priori prediction simulates."""
        parts = [replace(p, sample_s=p.sample_s * self.sample, train_s=p.train_s * self.train)
                 for p in prof.parts]
        return replace(prof, parts=parts,
                       allreduce_overhead_s=prof.allreduce_overhead_s
                       + self.allreduce_overhead_s,
                       barrier_skew_s=self.barrier_skew_s or prof.barrier_skew_s,
                       wire_overhead=self.wire_overhead or prof.wire_overhead)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    try:
        doc = json.loads(p.read_text())
        return {ds: BoxCalibration(**{k: v for k, v in d.items()})
                for ds, d in doc["datasets"].items()}
    except FileNotFoundError:
        raise SystemExit(f"{p}: no box calibration there (make one with `gnnsched bench "
                         "calibrate-box --box FILE`)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SystemExit(f"{p}: not a box calibration ({type(exc).__name__}: {exc}); expected "
                         '{"datasets": {NAME: {"train", "sample", "allreduce_overhead_s", '
                         '"dilation", "epoch_time_s"}}} as `gnnsched bench calibrate-box` '
                         "writes it") from None


def save_box(path: str | Path, boxes: dict[str, BoxCalibration], st: Settings) -> None:
    doc = {"box": {"host": platform.node(), "cpus": os.cpu_count(),
                   "platform": platform.platform()},
           "made": time.strftime("%Y-%m-%d %H:%M"), "shape": CALIBRATION_SHAPE,
           "system": SYSTEM, "epochs": st.epochs, "repeats": st.repeats,
           "nic_bands": st.nic_bands, "nic_queue_ms": st.nic_queue_ms,
           "datasets": {ds: b.to_dict() for ds, b in boxes.items()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def calibrate(ctx: Context, ds: str) -> BoxCalibration:
    """One colocation + fifo run of dataset ``ds`` on the calibration cluster, on the scale
    model (``ctx.st.repeats`` repetitions, median), read as this box's factors."""
    from gnnsched.placement import get_placer

    st = ctx.st
    cluster = load_shape(CALIBRATION_SHAPE)
    job, prof, part_dir = st.job(ds), ctx.profiles[ds], ctx.parts[ds]
    label = f"{CALIBRATION_SHAPE}/{ds}"
    run_dir = st.work / "runs" / f"{CALIBRATION_SHAPE}-{ds}"
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = canonical(get_placer(SYSTEMS[SYSTEM].placer or "colocation").place(
        cluster, job, prof, seed=st.seed))
    plan.save(run_dir / "plan-colocation.json")
    cfg: dict[str, Any] = {}
    bed = Testbed(st, cluster, cfg, label)
    try:
        reps = [run_runtime_once(st, cluster, job_for_repeat(ds, st, r), plan, prof, SYSTEM,
                                 part_dir, run_dir, bed.net, bed.counters, r)
                for r in range(st.repeats)]
    finally:
        bed.close()
    row = aggregate_runtime(reps)
    wire = wire_overhead(row)
    # the all-reduce's overhead beyond its bytes on the wire, not beyond its payload
    cal, f = row_profile(row, replace(prof, wire_overhead=wire), plan, cluster, job)
    box = BoxCalibration(
        train=float(f["cpu"]), sample=float(statistics.median(f["sample"])),
        allreduce_overhead_s=float(f["allreduce_overhead_s"]),
        dilation=float(row.get("dilation") or 1.0),
        epoch_time_s=float(row.get("real_epoch_time_s") or row["epoch_time_s"]),
        meta={"dataset": ds, "sample_by_part": [float(x) for x in f["sample"]],
              "allreduce_measured_s": f.get("allreduce_measured_s"),
              "allreduce_model_s": f.get("allreduce_model_s"), "run_dir": row["run_dir"],
              "last_departure_s": f.get("last_departure_s")},
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
