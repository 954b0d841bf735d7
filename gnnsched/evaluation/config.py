"""What the evaluation runs: shapes, systems and the resolved settings, and the pieces every
mode of ``gnnsched bench`` resolves alike (launcher, names, command line, targets).

Everything here is a name or a number the other modules look up, so a new shape or system is
one entry here (and, for a shape, one YAML file in ``shapes/``, package data read with
:mod:`importlib.resources`, so the installed package evaluates without a checkout); a new
dataset is one entry in :mod:`.data`. The goals runs are judged against are data too, read
only when asked (:mod:`.targets`).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from gnnsched.evaluation.data import (  # noqa: F401 - the datasets, as config named them
    DATASETS,
    DEFAULT_DATASETS,
    OWN_FIELDS,
    OWN_ITERATIONS,
    OWN_MAX_WIDTH,
    OWN_NORMALIZE,
    OWN_PROJECT_TO,
    SPLIT_SEED,
    DatasetCfg,
    dataset_at_hand,
    dataset_path,
    is_path,
    own_dataset,
    pick_datasets,
)
from gnnsched.evaluation.targets import NONE, Targets, load_targets
from gnnsched.plan import Plan
from gnnsched.spec import ClusterSpec, JobSpec

SHAPES: dict[str, tuple[str, bool]] = {  # name: (what, colocation resource-limited)
    "plentiful": ("4 hosts, each a store with a GPU, 100 Mbit/s NICs (colocation is right)",
                  False),
    "gpuless": ("2 GPU-less stores + 2 GPU hosts, all on 100 Mbit/s (like examples/lab4)", True),
    "hetero": ("stores on 50 / 100 Mbit/s, GPU hosts on 200 Mbit/s with a full- and a "
               "half-speed device", True),
    "mixedgen": ("stores with old GPUs at 1/4 speed on 100 Mbit/s, current-GPU hosts on "
                 "200 Mbit/s", True),
    "corestore": ("8-core stores without a GPU + 1-core hosts with a full- and a half-speed "
                  "GPU, all on 100 Mbit/s (limited in compute: the scale model's)", True),
}
# what a full evaluation runs by default; the scale model adds the compute-limited shapes
DEFAULT_SHAPES = ("plentiful", "gpuless", "hetero", "mixedgen")
SCALE_MODEL_SHAPES = (*DEFAULT_SHAPES, "corestore")


@dataclass(frozen=True)
class System:
    key: str
    label: str
    placer: str | None  # None: DistDGL
    policy: str | None


SYSTEMS: dict[str, System] = {s.key: s for s in (
    System("distdgl", "DistDGL", None, None),
    System("colocation+fifo", "colocation + fifo", "colocation", "fifo"),
    System("gnnsched+fifo", "gnnsched placement + fifo", "gnnsched", "fifo"),
    System("gnnsched+gnnsched", "gnnsched (placement + policy)", "gnnsched", "gnnsched"),
)}
RUNTIME_SYSTEMS = ("colocation+fifo", "gnnsched+fifo", "gnnsched+gnnsched")
HEADLINE = "gnnsched+gnnsched"

EVAL_BATCH = 256
ACC_POINTS = 0.01  # "within 1 point": what the invariants allow between equal mini-batches
# the prediction error the scale model's planning allows for: gnnsched keeps colocation's plan
# unless its own is predicted faster by more than two such errors can misjudge (a method
# parameter, not a target: it plans the same with or without --targets)
PREDICTION_ERROR = 0.10
SIM_SEEDS = 3
SPREAD_SEEDS, SPREAD_SEEDS_QUICK = 5, 0  # single-process runs per dataset for accuracy noise
STUDY_SEEDS, STUDY_SEEDS_QUICK = 10, 0  # job seeds per side in the accuracy study
COLOURS = {"distdgl": "#6a1b9a", "colocation+fifo": "#c62828", "gnnsched+fifo": "#81c784",
           "gnnsched+gnnsched": "#2e7d32", "bound": "#000000"}
LOCAL_NA = ("not judged on local processes: they share one loopback with no NIC shaping, "
            "while the simulator and the targets are about the cluster's NICs (run as root "
            "for network namespaces)")


# ------------------------------------------------------------------------------ settings


@dataclass
class Settings:
    quick: bool
    out: Path
    work: Path
    launcher: str  # netns | local
    launcher_reason: str
    datasets: list[str]
    shapes: list[str]
    systems: list[str]
    epochs: int
    repeats: int
    budget: float
    samples: int
    sizes: list[int]
    real: bool
    scale: bool
    reference: bool
    seed: int
    command: str = ""
    nic_queue_ms: float | None = None
    nic_bands: bool = False  # emulated NICs with TOS priority bands (a QoS switch)
    scale_model: bool = False  # hosts in control groups, everything slowed by one factor D
    dilation: float | None = None  # D on the scale model (None: the smallest that fits)
    box: str | None = None  # the box's calibration file (scale model)
    cores: float | None = None  # the box's cores the quotas may fill (None: all)
    into: str | None = None  # scale model: the evaluation file its results merge into
    accuracy_seeds: int = 0  # job seeds per side in the accuracy study (0: no study)
    data_dir: str | None = None  # where the .npz graphs are (None: the datasets' own search)
    # a user's own .npz per dataset key (its file stem): own_dataset()'s fields
    own_datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    normalize: str | None = None  # --normalize (None: none for cora/physics, row for a file)
    notes: list[str] = field(default_factory=list)  # what resolve() changed, said up front
    targets: Targets = NONE  # the goals judged (--targets FILE; none by default)

    def to_dict(self) -> dict[str, Any]:
        """The settings as results.json keeps them (the goals are its ``targets_goal``)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k != "targets"}

    @property
    def goals(self) -> dict[str, float]:
        """The evaluation's goals (``--targets``' ``evaluation`` section; empty: none)."""
        return self.targets.evaluation

    def dataset(self, ds: str) -> DatasetCfg:
        """Dataset ``ds`` as this evaluation trains it: a known one, or a user's file."""
        own = self.own_datasets.get(ds)
        d = DatasetCfg(**{k: own[k] for k in OWN_FIELDS}) if own else DATASETS[ds]
        if self.normalize is not None and own is None:
            d = replace(d, normalize=self.normalize)
        return d

    def job(self, ds: str, seed: int | None = None, epochs: int | None = None) -> JobSpec:
        """The job of dataset ``ds`` in this evaluation (job seed ``seed``, default its own)."""
        return make_job(ds, self.epochs if epochs is None else epochs,
                        self.seed if seed is None else seed, self.data_dir, self.dataset(ds))


def resolve(args: argparse.Namespace) -> Settings:
    """Defaults by mode, checked names, and the launcher (``auto``: netns when it works).
    Outputs default to folders under the current directory: ``runs/bench[-quick]`` and, for
    the full results, ``docs/results`` (a checkout's, when run from its root)."""
    q = bool(args.quick)
    data_dir = getattr(args, "data_dir", None)
    normalize = getattr(args, "normalize", None)
    scale_model = bool(getattr(args, "scale_model", False) or getattr(args, "calibrate_box",
                                                                        False))
    shapes = args.shapes or (["gpuless"] if q else list(
        SCALE_MODEL_SHAPES if scale_model else DEFAULT_SHAPES))
    systems = args.systems or list(SYSTEMS)
    check_names("gnnsched bench", "shape", shapes, SHAPES)
    check_names("gnnsched bench", "system", systems, SYSTEMS)
    datasets, own, notes = pick_datasets(args.datasets, q, data_dir, normalize,
                                         int(getattr(args, "split", 0) or 0))
    if q and own and not args.shapes and "distdgl" in systems and not scale_model:
        shapes = ["gpuless", "plentiful"]  # DistDGL cannot run where stores have no GPU
        notes.append("your own dataset: --quick runs the plentiful shape beside gpuless, so "
                     "DistDGL (which needs a GPU on every store) shows beside gnnsched "
                     "(--shapes to choose)")
    launcher, reason = pick_launcher(args)
    if scale_model and launcher != "netns":
        raise SystemExit("gnnsched bench: --scale-model needs the netns launcher (root, "
                         f"network namespaces): {reason}")
    if getattr(args, "dilation", None) is not None and not 1 <= args.dilation <= 1e6:
        raise SystemExit(f"gnnsched bench: --dilation {args.dilation:g} out of range (1..1e6: "
                         "the model can only run slower than the real cluster)")
    if scale_model and not args.systems and "distdgl" in systems:
        systems = [s for s in systems if s != "distdgl"]
        notes.append("the scale model runs gnnsched's systems only: DistDGL's processes are "
                     "not placed in the hosts' control groups, so its times would not be "
                     "dilated like the others'")
    tag = "bench-quick" if q else "bench"
    epochs = args.epochs or (2 if q else 8)
    if epochs < 2:
        raise SystemExit("gnnsched bench: --epochs must be >= 2 (the first epoch is warm-up)")
    into = getattr(args, "into", None)
    # re-judging a stored folder merges it when it is the scale model's
    again = bool(getattr(args, "resimulate", False) or getattr(args, "merge", False))
    if into is not None and getattr(args, "no_into", False):
        raise SystemExit("gnnsched bench: --into and --no-into: choose one")
    if into is not None and not into.endswith(".json"):
        raise SystemExit(f"gnnsched bench: --into {into}: not a .json file (an evaluation's "
                         "results.json, e.g. docs/results/results.json)")
    if into is not None and not (scale_model or again):
        raise SystemExit("gnnsched bench: --into goes with --scale-model (the scale model's "
                         "results merge into a full evaluation's file)")
    # the scale model's results have their own folder (the evaluation's file gets them by
    # --into): docs/results-scale-model for Cora alone, -NAME... for other datasets
    full_out = Path("docs") / "results"
    if scale_model:
        named = [] if datasets == ["cora"] else datasets
        full_out = Path("docs") / "-".join(["results-scale-model", *named])
    out = Path(args.out) if args.out else (Path("runs") / tag if q else full_out)
    default_into = Path("docs") / "results" / "results.json"
    if into is not None and (out / "results.json").resolve() == Path(into).resolve():
        raise SystemExit(f"gnnsched bench: --into {into} is OUT's own results.json: pass "
                         "another --out (default docs/results-scale-model...)")
    if (into is None and (scale_model or again) and not q and not getattr(args, "no_into", False)
            and (out / "results.json").resolve() != default_into.resolve()):
        into = str(default_into)
    return Settings(
        quick=q, out=out, into=into,
        work=Path(args.work) if args.work else Path("runs") / tag,
        launcher=launcher, launcher_reason=reason, datasets=datasets, shapes=shapes,
        systems=[s for s in SYSTEMS if s in systems], epochs=epochs,
        repeats=max(1, int(args.repeats)), budget=args.budget or (3.0 if q else 10.0),
        samples=args.samples or (8 if q else 32),
        sizes=args.sizes or ([16, 32] if q else [16, 32, 64, 128, 256]),
        real=not args.no_real, scale=not args.no_scale, reference=not args.no_reference,
        seed=int(args.seed), command=command_line(),
        nic_queue_ms=args.nic_queue_ms, nic_bands=bool(getattr(args, "nic_bands", False)),
        accuracy_seeds=_accuracy_seeds(args, q), data_dir=data_dir, own_datasets=own,
        normalize=normalize, notes=notes, scale_model=scale_model,
        dilation=getattr(args, "dilation", None), box=getattr(args, "box", None),
        cores=getattr(args, "cores", None), targets=load_targets(getattr(args, "targets", None)))


# gnnsched bench's modes, one subcommand each, and the flag that chose each mode before there
# were subcommands (``gnnsched bench --scale``), in the order they were checked then
MODES = ("eval", "scale", "scale-model", "calibrate-box", "merge", "resimulate",
         "accuracy-study")
LEGACY_FLAGS = {"--scale": "scale", "--merge": "merge", "--resimulate": "resimulate",
                "--accuracy-study": "accuracy-study", "--calibrate-box": "calibrate-box",
                "--scale-model": "scale-model"}


def legacy_mode(words: list[str]) -> str:
    """The mode an old spelling's flags chose (``--scale`` before ``--merge``, ...)."""
    return next((m for f, m in LEGACY_FLAGS.items() if f in words), "eval")


def modern_spelling(words: list[str]) -> list[str]:
    """``bench`` and its words with the mode as a subcommand: ``bench --scale --quick`` ->
    ``bench scale --quick`` (unchanged when it already has one)."""
    if words[:1] != ["bench"] or words[1:2] and words[1] in MODES:
        return list(words)
    rest = words[1:]
    return ["bench", legacy_mode(rest), *(w for w in rest if w not in LEGACY_FLAGS)]


def check_names(verb: str, kind: str, names: list[str], valid: Any) -> None:
    """Every name in ``names`` is one of ``valid``, else a one-line error listing them."""
    bad = [n for n in names if n not in valid]
    if bad:
        raise SystemExit(f"{verb}: unknown {kind} {bad[0]!r} (valid: {', '.join(valid)})")


def command_line() -> str:
    """The command as typed (program name and arguments), for results.json."""
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])



def pick_launcher(args: argparse.Namespace) -> tuple[str, str]:
    """The launcher the evaluation runs on and why: network namespaces (shaped NICs) when
    they work and are asked for (``auto``), else local processes."""
    launcher = args.launcher
    if launcher not in ("auto", "netns"):
        return launcher, "local processes on 127.0.0.1, NICs not shaped (--launcher local)"
    from gnnsched.api import netns_unavailable_reason

    why = netns_unavailable_reason()
    if why is None:
        reason = "network namespaces with tbf-shaped NICs (root)"
        if getattr(args, "nic_bands", False):
            reason = ("network namespaces with tbf-shaped NICs whose queues serve three "
                      "priority bands by IP TOS, like a switch with QoS (root, --nic-bands)")
        if args.nic_queue_ms is not None:
            reason += f", every NIC's queue bounded to {args.nic_queue_ms:g} ms"
        return "netns", reason
    if launcher == "netns":
        raise SystemExit(f"gnnsched bench: --launcher netns: {why}")
    return "local", f"local processes on 127.0.0.1, NICs not shaped: {why}"


def _accuracy_seeds(args: argparse.Namespace, quick: bool) -> int:
    n = getattr(args, "accuracy_seeds", None)
    if n is None:
        return STUDY_SEEDS_QUICK if quick else STUDY_SEEDS
    if n != 0 and n < 2:
        raise SystemExit("gnnsched bench: --accuracy-seeds must be 0 (no study) or at least 2 "
                         "(a spread needs two runs)")
    return int(n)


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# ------------------------------------------------------------------------------ inputs


def load_shape(name: str) -> ClusterSpec:
    """Cluster shape ``name`` (``shapes/NAME.yaml`` of this package)."""
    from gnnsched.spec import load_cluster

    with resources.as_file(resources.files(__package__) / "shapes" / f"{name}.yaml") as path:
        return load_cluster(path)



def make_job(ds: str, epochs: int, seed: int = 0, data_dir: str | None = None,
             d: DatasetCfg | None = None) -> JobSpec:
    """The job of dataset ``ds`` (``d``: its settings, default the known dataset's):
    GraphSAGE, fan-outs 10/25, 2 trainers over 4 METIS parts."""
    from gnnsched.spec import job_from_dict

    d = d or DATASETS[ds]
    spec: dict[str, Any] = {
        "name": f"{ds}-sage", "dataset": dataset_path(ds, data_dir, d),
        "feature_dim": d.feature_dim, "num_parts": 4, "part_method": "metis", "model": "sage",
        "hidden": 128, "fanouts": [10, 25], "batch_size": d.batch_size, "epochs": epochs,
        "lr": 0.01, "dropout": 0.5, "trainers": 2, "seed": seed, "split": d.file_split,
        "prefetch": 2, "eval_every": epochs,
    }
    if d.normalize != "none":
        spec["features"] = {"normalize": d.normalize}
    return job_from_dict(spec, source=f"bench:{ds}")


def job_for_repeat(ds: str, st: Settings, rep: int) -> JobSpec:
    """The job of repetition ``rep``: job seed ``st.seed + rep`` (same in every system)."""
    return st.job(ds, st.seed + rep)


def canonical(plan: Plan) -> Plan:
    """The plan with trainers ordered by their lowest partition and numbered 0..W-1.

    Batches and sampling seeds follow the trainer index, so two plans with the same seed
    split then train exactly the same mini-batches whatever order the placer listed them in.
    """
    ts = sorted(plan.trainers, key=lambda t: (min(t.parts), t.owned, t.id))
    return replace(plan, trainers=tuple(replace(t, id=i) for i, t in enumerate(ts)))


def seed_split(plan: Plan) -> list[list[int]]:
    """The plan's seed split (:func:`~gnnsched.placement.placer.split_of`) as results.json
    stores it: lists, trainer order for a :func:`canonical` plan."""
    from gnnsched.placement.placer import split_of

    if any(t.shares for t in plan.trainers):  # [part, share] pairs, in trainer order
        return [[[p, s] for p, s in zip(t.parts, t.seed_shares)] for t in plan.trainers]
    return [list(g) for g in split_of(plan)]


def predicted(plan: Plan, name: str) -> Any:
    """Field ``name`` of the plan's prediction (:class:`gnnsched.prediction.Prediction`);
    None where the plan has none or did not record it."""
    return getattr(plan.prediction, name, None) if plan.prediction is not None else None


def predicted_scalars(plan: Plan) -> dict[str, Any]:
    """The plan's prediction as results.json keeps it beside the plan: its numbers, names
    and flags by the names the plan file uses (nested records left out)."""
    legacy = plan.prediction.as_legacy_dict() if plan.prediction is not None else {}
    return {k: v for k, v in legacy.items() if isinstance(v, (int, float, str, bool))}


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    return [{"trainer": i, "machine": t.machine, "device": t.device, "parts": list(t.parts),
             **({"shares": list(t.shares)} if t.shares else {}),
             "samplers": [f"{m}x{c}" for m, c in t.samplers], "fetch_at": t.fetch_at}
            for i, t in enumerate(plan.trainers)]


# ------------------------------------------------------------------------------ small helpers


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 2000 else text[:2000] + " ..."


def fmt(v: Any, spec: str = ".3f", none: str = "–") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def num(v: Any) -> float | None:
    """``v`` as a float; None for a missing or NaN number."""
    return None if v is None or math.isnan(float(v)) else float(v)


def acc(r: dict[str, Any]) -> float | None:
    return num(r.get("test_accuracy"))


def metric_fields(result: Any) -> dict[str, Any]:
    """The task metric of a run's result (coordinator, reference or DistDGL result, or its
    dict): ``metric`` (accuracy, macro_f1, roc_auc), ``test_metric``, the last
    ``val_metric`` and ``majority_rate``; empty from a runtime that does not report one."""
    get = result.get if isinstance(result, dict) else lambda k: getattr(result, k, None)
    name = get("metric")
    if not name:
        return {}
    val = get("val_metric")
    if isinstance(val, (list, tuple)):
        val = val[-1] if val else None
    out = {"metric": str(name), "test_metric": _number(get("test_metric")),
           "val_metric": _number(val)}
    if get("majority_rate") is not None:
        out["majority_rate"] = _number(get("majority_rate"))
    return out


def _number(v: Any) -> float | None:
    try:
        return num(v)
    except (TypeError, ValueError):
        return None


def metric_text(r: dict[str, Any], spec: str = ".4f") -> str:
    """``", macro_f1 0.7312"`` for a row whose task metric is not accuracy (accuracy is
    printed anyway); empty otherwise."""
    name = r.get("metric")
    if not name or name == "accuracy":
        return ""
    return f", {name} {fmt(r.get('test_metric'), spec)}"


def row_metric(r: dict[str, Any]) -> float | None:
    """A run row's test metric: the job's metric, else its accuracy; None if neither (or
    NaN)."""
    v = r.get("test_metric")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        v = r.get("test_accuracy")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def mean_row_metric(rows: list[dict[str, Any]]) -> float | None:
    """The mean :func:`row_metric` over ``rows`` that have one; None if none."""
    vals = [v for v in (row_metric(r) for r in rows) if v is not None]
    return statistics.fmean(vals) if vals else None


def mean_accuracy(accs: list[Any]) -> float | None:
    """Mean test accuracy over a system's repetitions (one per job seed); None if none."""
    vals = [v for v in map(num, accs) if v is not None]
    return statistics.fmean(vals) if vals else None


def accuracy_stats(accs: list[float]) -> dict[str, Any]:
    """Test accuracies over seeds, with their mean, standard deviation and range."""
    return {"test_accuracy": accs, "mean": statistics.fmean(accs),
            "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "min": min(accs), "max": max(accs)}
