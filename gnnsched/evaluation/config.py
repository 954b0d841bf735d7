"""What the evaluation runs: shapes, datasets, systems, targets and the resolved settings.

Everything here is a name or a number the other modules look up, so a new shape, dataset or
system is one entry here (and, for a shape, one YAML file in ``shapes/``, package data read
with :mod:`importlib.resources`, so the installed package evaluates without a checkout).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

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
class DatasetCfg:
    key: str
    dataset: str
    label: str
    feature_dim: int | None  # None: keep the raw features
    batch_size: int  # seeds per trainer and iteration
    split: tuple[int, int, int] | None = None  # seeded (train, val, test); None: public split
    path: str | None = None  # a user's own .npz (its content-keyed link in the cache)
    file_split: int = 0  # the job's split: which row of the file's [S, N] masks
    normalize: str = "none"  # the job's features.normalize


DATASETS: dict[str, DatasetCfg] = {
    "cora": DatasetCfg("cora", "cora", "Cora", None, 8),
    "physics": DatasetCfg("physics", "coauthor_physics", "Coauthor Physics", 128, 32,
                          (1000, 500, 5000)),
}
SPLIT_SEED = 0
OWN_NORMALIZE = "row"  # a user's file: raw bag-of-words counts train to nothing unscaled
OWN_MAX_WIDTH, OWN_PROJECT_TO = 4096, 128  # wider raw features are projected, as Physics'
OWN_ITERATIONS = 16  # a user's batch size aims at this many iterations per trainer and epoch


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
ACC_POINTS = 0.01  # "within 1 point"
SIM_SEEDS = 3
SPREAD_SEEDS, SPREAD_SEEDS_QUICK = 5, 0  # single-process runs per dataset for accuracy noise
STUDY_SEEDS, STUDY_SEEDS_QUICK = 10, 0  # job seeds per side in the accuracy study
TARGETS = {"speedup_vs_distdgl": 1.2, "speedup_vs_colocation_limited": 1.5,
           "sim_error": 0.10, "accuracy_vs_distdgl": ACC_POINTS}
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
    accuracy_seeds: int = 0  # job seeds per side in the accuracy study (0: no study)
    data_dir: str | None = None  # where the .npz graphs are (None: the datasets' own search)
    # a user's own .npz per dataset key (its file stem): own_dataset()'s fields
    own_datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    normalize: str | None = None  # --normalize (None: none for cora/physics, row for a file)
    notes: list[str] = field(default_factory=list)  # what resolve() changed, said up front

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}

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
    for kind, names, valid in (("shape", shapes, SHAPES), ("system", systems, SYSTEMS)):
        bad = [n for n in names if n not in valid]
        if bad:
            raise SystemExit(f"gnnsched bench: unknown {kind} {bad[0]!r} "
                             f"(valid: {', '.join(valid)})")
    datasets, own, notes = _datasets(args.datasets, q, data_dir, normalize,
                                     int(getattr(args, "split", 0) or 0))
    launcher, reason = _launcher(args)
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
    return Settings(
        quick=q, out=Path(args.out) if args.out else (Path("runs") / tag if q
                                                     else Path("docs") / "results"),
        work=Path(args.work) if args.work else Path("runs") / tag,
        launcher=launcher, launcher_reason=reason, datasets=datasets, shapes=shapes,
        systems=[s for s in SYSTEMS if s in systems], epochs=epochs,
        repeats=max(1, int(args.repeats)), budget=args.budget or (3.0 if q else 10.0),
        samples=args.samples or (8 if q else 32),
        sizes=args.sizes or ([16, 32] if q else [16, 32, 64, 128, 256]),
        real=not args.no_real, scale=not args.no_scale, reference=not args.no_reference,
        seed=int(args.seed), command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        nic_queue_ms=args.nic_queue_ms, nic_bands=bool(getattr(args, "nic_bands", False)),
        accuracy_seeds=_accuracy_seeds(args, q), data_dir=data_dir, own_datasets=own,
        normalize=normalize, notes=notes, scale_model=scale_model,
        dilation=getattr(args, "dilation", None), box=getattr(args, "box", None),
        cores=getattr(args, "cores", None))


def is_path(name: str) -> bool:
    """A ``--datasets`` entry that names a file rather than a known dataset."""
    return name.endswith(".npz") or "/" in name or name not in DATASETS and Path(
        name).expanduser().is_file()


def _datasets(names: list[str] | None, quick: bool, data_dir: str | None,
              normalize: str | None, split: int
              ) -> tuple[list[str], dict[str, dict[str, Any]], list[str]]:
    """The datasets to evaluate (keys), each user file's settings, and notes to say.

    By default the evaluation runs Cora and Physics; without Physics' file at hand (no
    ``--data-dir``, ``$GNNSCHED_DATA_DIR`` or checkout's ``../shared``) it runs on the
    bundled Cora and says so. A dataset asked for by name that is not at hand is a one-line
    error naming where it was looked for; a path is validated with the dataset loader."""
    notes: list[str] = []
    if not names:
        names = ["cora"] if quick else list(DATASETS)
        missing = [n for n in names if not dataset_at_hand(n, data_dir)]
        if missing:
            names = [n for n in names if n not in missing]
            notes.append(
                "skipped " + ", ".join(f"{DATASETS[n].label} ({DATASETS[n].dataset}.npz)"
                                       for n in missing)
                + ": not found in the data directories; running on "
                + ", ".join(DATASETS[n].label for n in names) + " (point --data-dir or "
                "$GNNSCHED_DATA_DIR at a folder with the file to evaluate it too)")
    keys: list[str] = []
    own: dict[str, dict[str, Any]] = {}
    for name in names:
        if is_path(name):
            d = own_dataset(name, split, normalize)
            key = d["key"]
        elif name in DATASETS:
            key = name
            if not dataset_at_hand(name, data_dir):
                raise SystemExit(
                    f"gnnsched bench: dataset {name!r} needs {DATASETS[name].dataset}.npz, "
                    "not found in the data directories (pass --data-dir DIR or set "
                    "$GNNSCHED_DATA_DIR to the folder that holds it; Cora ships with the "
                    "package)")
        else:
            raise SystemExit(f"gnnsched bench: unknown dataset {name!r} (valid: "
                             f"{', '.join(DATASETS)}, or a path to a .npz graph file)")
        if key in keys:
            raise SystemExit(f"gnnsched bench: two datasets named {key!r} (a file's name is "
                             "its stem): rename one file")
        keys.append(key)
        if is_path(name):
            own[key] = d
    return keys, own, notes


def dataset_at_hand(ds: str, data_dir: str | None = None) -> bool:
    """Whether known dataset ``ds`` can be loaded here (its file, or its seeded copy)."""
    from gnnsched.datasets import available_datasets

    d = DATASETS[ds]
    return d.dataset in available_datasets(data_dir) or (
        d.split is not None and _split_copy(d).is_file())


OWN_FIELDS = ("key", "dataset", "label", "feature_dim", "batch_size", "path", "file_split",
              "normalize")


def own_dataset(name: str, split: int = 0, normalize: str | None = None) -> dict[str, Any]:
    """A user's ``.npz`` as an evaluation dataset: checked with the dataset loader (a bad
    file fails here with its message), keyed by its file stem, linked into the gnnsched
    cache under a name with its content hash (partitions are cached by the job's dataset
    path: an edited file must not reuse the old one's), with a batch size for about
    ``OWN_ITERATIONS`` iterations per trainer and epoch, its width kept up to
    ``OWN_MAX_WIDTH`` (projected to ``OWN_PROJECT_TO`` beyond), and ``normalize``
    (default ``OWN_NORMALIZE``). The fields are JSON (results.json keeps them)."""
    import hashlib

    from gnnsched.datasets import load_npz
    from gnnsched.datasets.cache import cache_root
    from gnnsched.spec import SpecError

    path = Path(name).expanduser()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise SystemExit(f"gnnsched bench: --datasets {name}: {what} (valid: cora, physics, "
                         "or a path to a .npz graph file, see docs/fields.md)")
    graph = load_npz(path, split=split)  # raises SpecError naming the file and the key
    train, test = int(graph.train_mask.sum()), int(graph.test_mask.sum())
    for what, count, least in (("train_mask", train, 4), ("test_mask", test, 1)):
        if count < least:
            raise SpecError(str(path), what, f"selects {count} node(s) in split {split}",
                            f"at least {least}: the evaluation trains 2 trainers over 4 "
                            "partitions and reports test accuracy")
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    link = cache_root() / "datasets" / f"{path.stem}-{sha.hexdigest()[:12]}.npz"
    if not link.is_file():
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f"{link.stem}.tmp{os.getpid()}.npz")
        try:
            tmp.symlink_to(path.resolve())
        except OSError:
            import shutil

            shutil.copyfile(path, tmp)
        tmp.replace(link)
    width = graph.feature_dim
    batch = max(8, min(1024, -(-train // (2 * OWN_ITERATIONS))))
    del graph
    return {"key": path.stem, "dataset": path.stem, "label": path.stem,
            "feature_dim": OWN_PROJECT_TO if width > OWN_MAX_WIDTH else None,
            "batch_size": int(batch), "path": str(link), "file_split": int(split),
            "normalize": normalize or OWN_NORMALIZE, "file": str(path.resolve()),
            "raw_feature_dim": int(width)}


def _launcher(args: argparse.Namespace) -> tuple[str, str]:
    """The launcher the evaluation runs on and why: network namespaces (shaped NICs) when
    they work and are asked for (``auto``), else local processes."""
    launcher = args.launcher
    if launcher not in ("auto", "netns"):
        return launcher, "local processes on 127.0.0.1, NICs not shaped (--launcher local)"
    from gnnsched.runtime.netns import unavailable_reason

    why = unavailable_reason()
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


def _split_copy(d: DatasetCfg) -> Path:
    """Where the copy of ``d`` with its seeded split lives (the gnnsched cache)."""
    from gnnsched.datasets.cache import cache_root

    assert d.split is not None
    tr, va, te = d.split
    return cache_root() / "datasets" / f"{d.dataset}-{tr}-{va}-{te}-s{SPLIT_SEED}.npz"


def dataset_path(ds: str, data_dir: str | None = None, d: DatasetCfg | None = None) -> str:
    """The job's ``dataset``: the shared name, a copy with a seeded split (made once), or
    a user's file (its link in the cache)."""
    d = d or DATASETS[ds]
    if d.path is not None:
        return d.path
    if d.split is None:
        return d.dataset
    import numpy as np

    from gnnsched.datasets import available_datasets
    from gnnsched.spec import SpecError

    tr, va, te = d.split
    path = _split_copy(d)
    if not path.is_file():
        src = available_datasets(data_dir).get(d.dataset)
        if src is None:
            raise SpecError(f"dataset {d.dataset!r}", "", "not found in the data directories",
                            "--data-dir DIR or $GNNSCHED_DATA_DIR holding "
                            f"{d.dataset}.npz")
        with np.load(src, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        n = int(arrays["num_nodes"])
        order = np.random.default_rng(SPLIT_SEED).permutation(n)
        for name, (a, b) in (("train_mask", (0, tr)), ("val_mask", (tr, tr + va)),
                             ("test_mask", (tr + va, tr + va + te))):
            mask = np.zeros(n, dtype=bool)
            mask[order[a:b]] = True
            arrays[name] = mask
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.rename(path)
    return str(path)


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


def mean_accuracy(accs: list[Any]) -> float | None:
    """Mean test accuracy over a system's repetitions (one per job seed); None if none."""
    vals = [v for v in map(num, accs) if v is not None]
    return statistics.fmean(vals) if vals else None


def accuracy_stats(accs: list[float]) -> dict[str, Any]:
    """Test accuracies over seeds, with their mean, standard deviation and range."""
    return {"test_accuracy": accs, "mean": statistics.fmean(accs),
            "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "min": min(accs), "max": max(accs)}
