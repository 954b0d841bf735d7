"""Calibration: the cost profile a measured run implies, so a user can re-plan from what their
cluster really did (``gnnsched profile --from-run RUN``, :func:`gnnsched.api.calibrate`).

The profiler measures each task alone in one quiet process. A real run differs: processes
share cores, a mini-batch's sampling is a round of requests per layer through busy
processes, and the collective library's all-reduce takes longer than bytes / bandwidth.
:func:`insitu_profile` puts what a run measured in place of the profiler's numbers; the
simulator then still predicts the rest (sampling hops, feature traffic, NIC sharing, the
pipeline, the barrier waits). :func:`from_run` does it for a finished run directory
(``metrics.jsonl`` and ``plan.json``); the evaluation does it for every run it makes.

A run on the scale model (``gnnsched cluster up``: everything slowed by one factor D)
records D; :func:`read_run` divides its times by it, so a profile from a dilated run holds the
real cluster's costs, as every prediction does.

The box calibration (:class:`BoxCalibration`) is the same reading of one run made *before*
the runs it predicts: ``gnnsched cluster calibrate`` (and the evaluation's ``bench
calibrate-box``, :mod:`gnnsched.evaluation.box`) measure it, and :func:`find_calibration`
finds it beside the cluster file (``CLUSTER.calibration.json``), where ``plan`` and
``simulate`` apply it by default (:func:`apply_calibration`).

Also here: :func:`summarize`, what a profile says in a few numbers (the ``gnnsched profile``
table and the evaluation's report both print it).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.plan import Plan
from gnnsched.profile import HOLDS_HOP_WAIT, CostProfile, profile_for
from gnnsched.spec import ClusterSpec, JobSpec, SpecError, load_cluster, load_job

# per trainer (its id as a string): columns of its steady training steps (see steady_steps)
Steps = dict[str, dict[str, list[float]]]
STAGES = ("sample_s", "fetch_s", "wait_s", "train_s", "allreduce_s")


# ------------------------------------------------------------------------------ a run's steps


def steady_train_batches(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's per-batch records of its training steps after the first epoch (the steady
    ones), from its ``metrics.jsonl``; empty if there is none."""
    from gnnsched.trace import load, steady_batches

    if not (Path(run_dir) / "metrics.jsonl").exists():
        return []
    return steady_batches(load(run_dir))


def steps_of(rows: list[dict[str, Any]]) -> Steps:
    """Per trainer, columns ``seq``, ``train_s``, ``sample_s``, ``allreduce_s`` and, when the
    trainers recorded it, ``barrier_at`` (seconds after the first) of steady training steps,
    rounded to microseconds so that what is stored is what is computed with."""
    t0 = min((float(r["barrier_at"]) for r in rows if "barrier_at" in r), default=None)
    out: Steps = {}
    for r in rows:
        got = out.setdefault(str(r["trainer"]), {})
        got.setdefault("seq", []).append(int(r["seq"]))
        for k in ("train_s", "sample_s", "allreduce_s"):
            got.setdefault(k, []).append(round(float(r.get(k) or 0.0), 6))
        if "sample_wait_s" in r:  # runs from before samplers reported it have none
            got.setdefault("sample_wait_s", []).append(round(float(r["sample_wait_s"]), 6))
        if t0 is not None:
            got.setdefault("barrier_at", []).append(round(float(r.get("barrier_at", t0)) - t0,
                                                          6))
    return out


def steady_steps(run_dir: str | Path) -> Steps:
    """:func:`steps_of` a run directory's steady training steps (:func:`steady_train_batches`):
    the evaluation keeps them in results.json, so ``--resimulate`` needs no run directory."""
    return steps_of(steady_train_batches(run_dir))


def allreduce_last_s(steps: Steps) -> float | None:
    """The all-reduce's own seconds in a run: per steady iteration, the all-reduce of the
    trainer that reached it last (the others also waited for it there), averaged. None if
    the run has no steps."""
    by_seq: dict[int, list[float]] = {}
    for got in steps.values():
        for seq, ar in zip(got["seq"], got["allreduce_s"]):
            by_seq.setdefault(int(seq), []).append(float(ar))
    if not by_seq:
        return None
    W = max(len(v) for v in by_seq.values())
    last = [min(v) for v in by_seq.values() if len(v) == W]
    return float(statistics.fmean(last)) if last else None


def barrier_release(steps: Steps) -> tuple[float, list[tuple[float, ...]]] | None:
    """The all-reduce itself and how apart trainers leave it, from when each trainer reached
    it (``barrier_at``) and left it (+ ``allreduce_s``), per steady iteration that every
    trainer recorded: the mean seconds from the last arrival to the first departure, and per
    iteration every trainer's departure after the first (trainer order). None without
    ``barrier_at`` (older runs)."""
    by_seq: dict[int, dict[int, tuple[float, float]]] = {}
    for w, got in steps.items():
        if "barrier_at" not in got:
            return None
        for seq, at, ar in zip(got["seq"], got["barrier_at"], got["allreduce_s"]):
            by_seq.setdefault(int(seq), {})[int(w)] = (float(at), float(at) + float(ar))
    W = len(steps)
    own, skew = [], []
    for v in by_seq.values():
        if len(v) != W or W < 2:
            continue
        first = min(e for _, e in v.values())
        own.append(max(0.0, first - max(a for a, _ in v.values())))
        skew.append(tuple(v[w][1] - first for w in sorted(v)))
    return (float(statistics.fmean(own)), skew) if own else None


def step_costs(steps: Steps) -> dict[str, dict[str, list[float]]]:
    """Per trainer, the training and sampling seconds of every steady training step; where the
    run recorded how long each sampler waited for remote hops' answers (``sample_wait_s``),
    the sampling seconds without that wait (``sample_s``) and the share of sampling it was
    (``sample_wait_share``): the simulator charges those rounds itself, on its network model
    (:mod:`gnnsched.simulator.window`), so a calibrated cost must not hold them twice."""
    out: dict[str, dict[str, list[float]]] = {}
    for w, got in steps.items():
        sample, wait = list(got["sample_s"]), got.get("sample_wait_s")
        row = {"train_s": list(got["train_s"]), "sample_s": sample}
        if wait is not None and len(wait) == len(sample):
            row["sample_s"] = [max(0.0, s - x) for s, x in zip(sample, wait)]
            total = sum(sample)
            row["sample_wait_share"] = [min(1.0, sum(wait) / total) if total > 0 else 0.0]
        out[w] = row
    return out


# ------------------------------------------------------------------------------ calibration


def _spread(profiled: Any, measured: list[float], mean: float) -> Any:
    """``profiled`` per-batch costs redrawn from the ``measured`` distribution rank for rank
    (a bigger profiled batch keeps a bigger cost) and scaled to ``mean``; only scaled when
    fewer than two costs were measured."""

    def scaled(a: Any) -> Any:
        return a * (mean / a.mean()) if len(a) and a.mean() > 0 else a

    if len(profiled) and len(measured) >= 2:
        ranks = np.argsort(np.argsort(profiled, kind="stable"), kind="stable")
        q = np.quantile(np.asarray(measured, dtype=float), (ranks + 0.5) / len(profiled))
        if q.mean() > 0:
            return scaled(q)
    return scaled(profiled)


def insitu_profile(prof: CostProfile, plan: Plan, cluster: ClusterSpec, job: JobSpec,
                   by_trainer: dict[str, dict[str, float]],
                   allreduce_s: float | None = None,
                   steps: dict[str, dict[str, list[float]]] | None = None,
                   barrier_skew: list[tuple[float, ...]] | None = None,
                   ) -> tuple[CostProfile, dict[str, Any]]:
    """The profile with the costs this run measured in place of the profiler's.

    On a loaded box many processes share few cores, so every CPU step takes several times
    what the profiler measured in one quiet process, a mini-batch's sampling is a round of
    requests per layer through busy processes, and gloo's all-reduce over TCP takes longer
    than bytes / bandwidth. All measured in the run: ``cpu`` (median over trainers of a
    training step's seconds, times its device speed — training is stretched to emulate
    slower devices — over the profile's mean for its parts times the trainer's load, its
    mini-batch over the profile's; training steps are pure compute)
    scales every ``train_s``; each trainer's mean sampling seconds per mini-batch over the
    profile's mean for its parts scales those parts' ``sample_s`` (at least by ``cpu``);
    ``allreduce_overhead_s`` (the all-reduce's own seconds -- :func:`barrier_release`'s last
    arrival to first departure, in older runs :func:`allreduce_last_s`, else the fastest
    trainer's mean -- minus the cost model's ring time, at least 0) is added to every
    all-reduce as time in which the NICs are *not* busy: the gradient bytes stay what they
    are, so the simulator reserves no more NIC time for them than they take (scaling the
    bytes instead would block every trainer NIC for the library's overhead too). With
    ``steps`` (:func:`step_costs`) each part's per-batch training and sampling costs also take
    the spread its trainer's steps had in the run (a loaded box's scheduling jitter, which
    decides how far apart trainers reach the barrier), at the same means; ``barrier_skew``
    (:func:`barrier_release`: how long after the first each trainer left an all-reduce)
    becomes the profile's ``barrier_skew_s``, from which the simulator draws when each trainer
    starts its next step. Returns the profile and the factors applied."""
    from gnnsched.workload import Workload

    def mean(t: Any, key: str) -> float:
        return float(np.mean(np.concatenate([getattr(prof.parts[q], key) for q in t.parts])))

    wl = Workload(cluster, job, prof)
    cpu, ar, sample = [], [], {}
    for t in plan.trainers:
        got = by_trainer.get(str(t.id)) or {}
        speed = cluster.machine(t.machine).gpus[t.device].speed
        # a measured step is the trainer's own mini-batch, its load times the profile's (the
        # simulator scales the profile's batches by the load again): compare like with like
        ld = wl.load(t.parts, t.shares) or 1.0
        p_train, p_sample = mean(t, "train_s") * ld, mean(t, "sample_s") * ld
        if got.get("train_s") and p_train > 0:
            cpu.append(got["train_s"] * speed / p_train)
        if got.get("allreduce_s"):
            ar.append(got["allreduce_s"])
        if got.get("sample_s") and p_sample > 0:
            # the mean stage holds the wait for remote hops; the steps say how much of it
            share = ((steps or {}).get(str(t.id)) or {}).get("sample_wait_share") or [0.0]
            sample.update(dict.fromkeys(t.parts, got["sample_s"] * (1 - share[0]) / p_sample))
    f_cpu = float(np.median(cpu)) if cpu else 1.0
    model_ar = wl.allreduce_s(plan)
    if allreduce_s:
        ar = [allreduce_s]
    extra = max(0.0, min(ar) - model_ar) if ar and model_ar > 0 else 0.0
    f_sample = {q: max(f_cpu, sample.get(q, f_cpu)) for q in range(len(prof.parts))}
    parts = [replace(pp, sample_s=pp.sample_s * f_sample[q], train_s=pp.train_s * f_cpu)
             for q, pp in enumerate(prof.parts)]
    for t in plan.trainers if steps else ():
        got = steps.get(str(t.id)) or {}
        for q in t.parts:
            pp, base = parts[q], prof.parts[q]
            parts[q] = replace(pp, train_s=_spread(base.train_s, got.get("train_s", []),
                                                   float(pp.train_s.mean())),
                               sample_s=_spread(base.sample_s, got.get("sample_s", []),
                                                float(pp.sample_s.mean())))
    skew = tuple(tuple(round(x, 6) for x in row) for row in barrier_skew or ())
    net = any((steps or {}).get(str(t.id), {}).get("sample_wait_share") for t in plan.trainers)
    meta = {k: v for k, v in (prof.meta or {}).items() if k != HOLDS_HOP_WAIT}
    if not net:  # a run from before samplers recorded their wait: sampling seconds hold it
        meta[HOLDS_HOP_WAIT] = True
    return (replace(prof, parts=parts, allreduce_overhead_s=prof.allreduce_overhead_s + extra,
                    barrier_skew_s=skew, meta=meta),
            {"cpu": f_cpu, "sample": [f_sample[q] for q in range(len(prof.parts))],
             "allreduce": (min(ar) / model_ar) if ar and model_ar > 0 else 1.0,
             "allreduce_overhead_s": extra,
             "allreduce_measured_s": float(min(ar)) if ar else None,
             "allreduce_model_s": float(model_ar),
             # mean seconds from the first to the last trainer leaving an all-reduce
             "last_departure_s": float(np.mean([max(r) for r in skew])) if skew else 0.0})


def run_profile(prof: CostProfile, plan: Plan, cluster: ClusterSpec, job: JobSpec,
                by_trainer: dict[str, dict[str, float]], steps: Steps,
                allreduce_last: float | None = None) -> tuple[CostProfile, dict[str, Any]]:
    """:func:`insitu_profile` from what a run measured: its mean stages per trainer and its
    steady steps (:func:`steady_steps`), whose barrier times give the all-reduce and the
    skew (:func:`barrier_release`; runs from before trainers recorded them fall back to
    :func:`allreduce_last_s`)."""
    rel = barrier_release(steps)
    if rel is not None:
        return insitu_profile(prof, plan, cluster, job, by_trainer, rel[0],
                              step_costs(steps), rel[1])
    return insitu_profile(prof, plan, cluster, job, by_trainer,
                          allreduce_last or allreduce_last_s(steps), step_costs(steps))


# ------------------------------------------------------------------------------ a run directory


@dataclass(frozen=True)
class MeasuredRun:
    """What a finished run directory recorded about its costs, in the real cluster's seconds
    (a scale-model run's measured times / its ``dilation``)."""

    run_dir: Path
    plan: Plan
    stages: dict[str, dict[str, float]]  # trainer -> stage -> mean seconds per steady step
    steps: Steps  # the steady training steps (:func:`steps_of`)
    dilation: float = 1.0  # D of the scale model it ran on (1: real hosts, local processes)


def run_dilation(records: list[dict[str, Any]]) -> float:
    """D of the scale model a run's records were measured on: its ``run`` record's, else the
    ``training`` event the coordinator writes when training starts (so an unfinished run has
    it too); 1 when neither says (real hosts, local processes, older runs)."""
    for kind in ("run", "training"):
        d = next((r.get("dilation") for r in reversed(records)
                  if r.get("type") == kind and r.get("dilation")), None)
        if d:
            return float(d)
    return 1.0


def undilated(stages: dict[str, dict[str, float]], steps: Steps, d: float
              ) -> tuple[dict[str, dict[str, float]], Steps]:
    """Stages and steps measured on a scale model of dilation ``d``, as the real cluster's
    seconds (measured / D; step numbers stay)."""
    if d == 1:
        return stages, steps
    return ({w: {k: float(v) / d for k, v in got.items()} for w, got in stages.items()},
            {w: {k: (list(v) if k == "seq" else [x / d for x in v])
                 for k, v in got.items()} for w, got in steps.items()})


def read_run(run_dir: str | Path) -> MeasuredRun:
    """A run directory of ``gnnsched train``: its ``plan.json``, the run's mean stages per
    trainer (the ``run`` record of ``metrics.jsonl``; for a run that did not finish, the mean
    over its epochs after the first, as the run itself computes them) and its steady steps,
    all in the real cluster's seconds: a scale-model run's times are divided by its D
    (:func:`run_dilation`), so what it implies is the real cluster's costs, not the model's
    D-times-slower ones."""
    from gnnsched.trace import load, steady_batches

    run_dir = Path(run_dir)
    plan_file = run_dir / "plan.json"
    if not plan_file.is_file():
        raise SpecError(str(plan_file), "", "not found",
                        "a run directory of `gnnsched train`, which copies its plan there")
    records = load(run_dir)
    plan = Plan.load(plan_file)
    stages = next((r["stages"] for r in reversed(records)
                   if r.get("type") == "run" and r.get("stages")), None)
    if stages is None:
        epochs = [r for r in records if r.get("type") == "epoch" and r.get("stages")]
        steady = epochs[1:] or epochs  # the first epoch includes warm-up
        if not steady:
            raise SpecError(str(run_dir / "metrics.jsonl"), "", "no training epoch recorded",
                            "a run that trained at least one epoch")
        stages = {w: {s: float(np.mean([e["stages"][w][s] for e in steady])) for s in STAGES}
                  for w in steady[0]["stages"]}
    d = run_dilation(records)
    stages, steps = undilated(stages, steps_of(steady_batches(records)), d)
    return MeasuredRun(run_dir, plan, stages, steps, d)


def _recorded(plan: Plan, key: str, source: str, flag: str) -> Path:
    """The file a plan records it was made with (``predicted.made_for``, else the older
    ``cluster_file`` / ``job_file``), which must still be there."""
    path = plan.prediction.made_with(key) if plan.prediction is not None else None
    if not path:
        raise SpecError(source, f"predicted.made_for.{key}", "the plan does not record its "
                        f"{key} file", f"pass {flag}")
    if not Path(path).is_file():
        raise SpecError(source, f"predicted.made_for.{key}", f"the plan was made with {path}, "
                        "which is not there (from this folder)", f"pass {flag}")
    return Path(path)


def calibrate_run(run_dir: str | Path, profile: CostProfile | str | Path | None = None, *,
                  cluster: ClusterSpec | str | Path | None = None,
                  job: JobSpec | str | Path | None = None) -> tuple[CostProfile, dict[str, Any]]:
    """:func:`from_run` with the factors it applied (``cpu``, ``sample``, ``allreduce``...)."""
    run = read_run(run_dir)
    source = str(run.run_dir / "plan.json")
    if not isinstance(cluster, ClusterSpec):
        cluster = load_cluster(cluster or _recorded(run.plan, "cluster", source, "--cluster"))
    if not isinstance(job, JobSpec):
        job = load_job(job or _recorded(run.plan, "job", source, "--job"))
    if isinstance(profile, CostProfile):
        profile.check_job(job, "profile")
    else:
        made = run.plan.prediction.made_for if run.plan.prediction is not None else None
        if profile is None and made is not None and made.cost:
            profile = _recorded(run.plan, "cost", source, "--cost")
        profile = profile_for(job, None if profile is None else str(profile))
    run.plan.validate(cluster, job, source)
    prof, factors = run_profile(profile, run.plan, cluster, job, run.stages, run.steps)
    meta = {**prof.meta, "calibrated": {"by": "run", "run": str(run.run_dir),
                                        "dilation": run.dilation}}
    return replace(prof, meta=meta), factors


def from_run(run_dir: str | Path, profile: CostProfile | str | Path | None = None, *,
             cluster: ClusterSpec | str | Path | None = None,
             job: JobSpec | str | Path | None = None) -> CostProfile:
    """The profile a finished run implies: ``profile`` (the one the plan was made with when
    not given: ``made_for.cost``, else the job's synthetic one) with the costs the run in
    ``run_dir`` measured in place of the profiler's (:func:`insitu_profile`). ``cluster`` and
    ``job`` default to the files the plan records (``gnnsched plan`` writes them)."""
    return calibrate_run(run_dir, profile, cluster=cluster, job=job)[0]


# ------------------------------------------------------------------------------ the box


@dataclass(frozen=True)
class BoxCalibration:
    """Per dataset, the runtime's costs on this box as factors of a profile's: what one
    colocation + fifo run on a small calibration cluster measured (read with
    :func:`insitu_profile`), in the real cluster's seconds (measured / D on the scale model).
    ``gnnsched cluster calibrate`` and ``gnnsched bench calibrate-box`` measure it
    (:mod:`gnnsched.evaluation.box`); :meth:`apply` predicts any plan with it."""

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
        meta = {k: v for k, v in (prof.meta or {}).items() if k != HOLDS_HOP_WAIT}
        if not self.meta.get("sample_net_of_wait"):  # measured before samplers recorded it
            meta[HOLDS_HOP_WAIT] = True
        return replace(prof, parts=parts, meta=meta,
                       allreduce_overhead_s=prof.allreduce_overhead_s
                       + self.allreduce_overhead_s,
                       barrier_skew_s=self.barrier_skew_s or prof.barrier_skew_s,
                       wire_overhead=self.wire_overhead or prof.wire_overhead)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """The factors in words, as ``plan`` and ``cluster calibrate`` print them."""
        return (f"training x{self.train:.2f}, sampling x{self.sample:.2f}, all-reduce "
                f"+{self.allreduce_overhead_s * 1e3:.1f} ms, wire bytes x"
                f"{1 + self.wire_overhead:.3f} of the payload, measured on the scale model at "
                f"D = {self.dilation:.3g} (times / D are the real cluster's)")


CALIBRATION_SUFFIX = ".calibration.json"
BOX_FORM = ('{"datasets": {NAME: {"train", "sample", "allreduce_overhead_s", "dilation", '
            '"epoch_time_s"}}}')


def read_boxes(path: str | Path) -> tuple[dict[str, Any], dict[str, BoxCalibration]]:
    """A box file (``box.json``, ``CLUSTER.calibration.json``): its header and its
    calibrations by dataset key; a SpecError naming the file and the field when it is not
    one."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(p), "", "no box calibration there",
                        "`gnnsched cluster calibrate --cluster CLUSTER.yaml --job JOB.yaml`")
    try:
        doc = json.loads(p.read_text())
        return doc, {ds: BoxCalibration(**dict(d)) for ds, d in doc["datasets"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise SpecError(str(p), "datasets", f"not a box calibration ({type(exc).__name__}: "
                        f"{exc})", f"{BOX_FORM}, as `gnnsched cluster calibrate` writes it"
                        ) from None


def write_boxes(path: str | Path, header: dict[str, Any],
                boxes: dict[str, BoxCalibration]) -> None:
    """Write a box file: ``header`` (what the box and the runs were) and the calibrations."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    doc = {**header, "datasets": {ds: b.to_dict() for ds, b in boxes.items()}}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def calibration_path(cluster_file: str | Path) -> Path:
    """Where a cluster file's calibration lives: beside it, ``NAME.calibration.json`` for
    ``NAME.yaml``."""
    p = Path(cluster_file)
    return p.with_name(p.stem + CALIBRATION_SUFFIX)


def dataset_key(job: JobSpec) -> str:
    """A job's key in a box file: its dataset's name (a file's stem: ``coauthor_cs`` for
    ``/data/coauthor_cs.npz``)."""
    name = str(job.dataset)
    return Path(name).stem if name.endswith(".npz") else name


@dataclass(frozen=True)
class FoundCalibration:
    """A box calibration for one job, and where it came from."""

    box: BoxCalibration
    path: Path
    key: str
    header: dict[str, Any]
    differs: tuple[str, ...] = ()  # job fields the calibration run had otherwise

    def line(self) -> str:
        """``calibration: FILE (KEY, made DATE): factors``, as ``plan`` prints it."""
        made = self.header.get("made")
        nic = self.header.get("nic")
        nics = "" if not isinstance(nic, dict) else (
            ", NICs with TOS bands" if nic.get("bands") else ", FIFO NICs")
        out = (f"calibration: {self.path} ({self.key}" + (f", made {made}" if made else "")
               + f"{nics}): {self.box.describe()}")
        if self.differs:
            out += f"; calibrated with a job of other {', '.join(self.differs)}"
        return out


def find_calibration(cluster_file: str | Path | None, job: JobSpec,
                     path: str | Path | None = None) -> FoundCalibration | None:
    """The box calibration for ``job`` beside ``cluster_file`` (:func:`calibration_path`) or
    in ``path``; None when there is no such file or it holds no calibration for the job's
    dataset. A file that is there but is not a box calibration is a SpecError."""
    where = Path(path) if path is not None else (
        calibration_path(cluster_file) if cluster_file is not None else None)
    if where is None or (path is None and not where.is_file()):
        return None
    header, boxes = read_boxes(where)
    key = dataset_key(job)
    box = boxes.get(key)
    if box is None:
        if path is not None:
            raise SpecError(str(where), f"datasets.{key}", f"no calibration for dataset {key}",
                            f"one of {', '.join(sorted(boxes)) or 'none'}, or calibrate "
                            "this job with `gnnsched cluster calibrate`")
        return None
    made = box.meta.get("job_key") or {}
    want = job.profile_key()
    differs = tuple(k for k in ("batch_size", "fanouts", "model", "hidden", "feature_dim")
                    if k in made and made[k] != want.get(k)
                    and not (k == "fanouts" and list(made[k]) == list(want.get(k) or [])))
    return FoundCalibration(box, where, key, header, differs)


def is_calibrated(prof: CostProfile) -> bool:
    """Whether ``prof`` already holds measured runtime costs (from a run, ``--from-run``, or
    a box calibration applied): another calibration on top would count them twice."""
    return bool((prof.meta or {}).get("calibrated"))


def apply_calibration(prof: CostProfile, found: FoundCalibration) -> CostProfile:
    """``prof`` with ``found``'s box costs, marked so (``meta.calibrated``) that nothing
    applies a calibration to it again."""
    out = found.box.apply(prof)
    meta = {**(out.meta or {}), "calibrated": {
        "by": "box", "file": str(found.path), "dataset": found.key,
        "dilation": found.box.dilation}}
    return replace(out, meta=meta)


# ------------------------------------------------------------------------------ summary


def summarize(prof: CostProfile) -> dict[str, Any]:
    """What a profile says: per partition (``parts``: median sampling and training ms, edges,
    input nodes, the share of them local, feature KB) and over all of them (mean seconds,
    input nodes, feature bytes per mini-batch, local share)."""
    P = prof.num_parts
    rows = []
    for pp in prof.parts:
        nodes = pp.mean_input_nodes(P)
        rows.append({"part": pp.part, "train_seeds": pp.train_seeds,
                     "sample_ms": 1e3 * float(np.median(pp.sample_s)),
                     "train_ms": 1e3 * float(np.median(pp.train_s)),
                     "edges": float(pp.edges.mean()),
                     "input_nodes": float(nodes.sum()),
                     "local_frac": float(nodes[pp.part] / max(nodes.sum(), 1)),
                     "feat_kb": float(nodes.sum() * prof.feature_bytes / 1e3)})
    sample = np.concatenate([p.sample_s for p in prof.parts])
    train = np.concatenate([p.train_s for p in prof.parts])
    inputs = [float(sum(c.sum() for c in p.input_nodes) / max(p.n, 1)) for p in prof.parts]
    local = [float(p.mean_input_nodes(P)[p.part] / max(p.mean_input_nodes(P).sum(), 1e-9))
             for p in prof.parts]
    return {"num_parts": P, "feature_bytes": prof.feature_bytes,
            "grad_bytes": prof.grad_bytes, "reference": prof.reference, "parts": rows,
            "samples_per_part": int(prof.parts[0].n), "sample_s": float(sample.mean()),
            "train_s": float(train.mean()), "input_nodes": float(np.mean(inputs)),
            "feature_bytes_per_batch": float(np.mean(inputs)) * prof.feature_bytes,
            "local_input_share": float(np.mean(local)), "feature_row_bytes": prof.feature_bytes,
            "train_seeds": [int(p.train_seeds) for p in prof.parts]}


__all__ = ["BoxCalibration", "CALIBRATION_SUFFIX", "FoundCalibration", "MeasuredRun",
           "allreduce_last_s", "apply_calibration", "barrier_release", "calibrate_run",
           "calibration_path", "dataset_key", "find_calibration", "from_run", "insitu_profile",
           "is_calibrated", "read_boxes", "read_run", "run_dilation", "run_profile",
           "steady_steps", "steady_train_batches", "step_costs", "steps_of", "summarize",
           "undilated", "write_boxes"]
