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
from dataclasses import dataclass, replace
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
}


@dataclass(frozen=True)
class DatasetCfg:
    key: str
    dataset: str
    label: str
    feature_dim: int | None  # None: keep the raw features
    batch_size: int  # seeds per trainer and iteration
    split: tuple[int, int, int] | None = None  # seeded (train, val, test); None: public split


DATASETS: dict[str, DatasetCfg] = {
    "cora": DatasetCfg("cora", "cora", "Cora", None, 8),
    "physics": DatasetCfg("physics", "coauthor_physics", "Coauthor Physics", 128, 32,
                          (1000, 500, 5000)),
}
SPLIT_SEED = 0


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
    accuracy_seeds: int = 0  # job seeds per side in the accuracy study (0: no study)
    data_dir: str | None = None  # where the .npz graphs are (None: the datasets' own search)

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}

    def job(self, ds: str, seed: int | None = None, epochs: int | None = None) -> JobSpec:
        """The job of dataset ``ds`` in this evaluation (job seed ``seed``, default its own)."""
        return make_job(ds, self.epochs if epochs is None else epochs,
                        self.seed if seed is None else seed, self.data_dir)


def resolve(args: argparse.Namespace) -> Settings:
    """Defaults by mode, checked names, and the launcher (``auto``: netns when it works).
    Outputs default to folders under the current directory: ``runs/bench[-quick]`` and, for
    the full results, ``docs/results`` (a checkout's, when run from its root)."""
    q = bool(args.quick)
    datasets = args.datasets or (["cora"] if q else list(DATASETS))
    shapes = args.shapes or (["gpuless"] if q else list(SHAPES))
    systems = args.systems or list(SYSTEMS)
    for kind, names, valid in (("dataset", datasets, DATASETS), ("shape", shapes, SHAPES),
                               ("system", systems, SYSTEMS)):
        bad = [n for n in names if n not in valid]
        if bad:
            raise SystemExit(f"gnnsched bench: unknown {kind} {bad[0]!r} "
                             f"(valid: {', '.join(valid)})")
    launcher, reason = _launcher(args)
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
        accuracy_seeds=_accuracy_seeds(args, q), data_dir=getattr(args, "data_dir", None))


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


def dataset_path(ds: str, data_dir: str | None = None) -> str:
    """The job's ``dataset``: the shared name, or a copy with a seeded split (made once)."""
    d = DATASETS[ds]
    if d.split is None:
        return d.dataset
    import numpy as np

    from gnnsched.datasets import available_datasets
    from gnnsched.datasets.cache import cache_root
    from gnnsched.spec import SpecError

    tr, va, te = d.split
    path = cache_root() / "datasets" / f"{d.dataset}-{tr}-{va}-{te}-s{SPLIT_SEED}.npz"
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


def make_job(ds: str, epochs: int, seed: int = 0, data_dir: str | None = None) -> JobSpec:
    """The job of dataset ``ds``: GraphSAGE, fan-outs 10/25, 2 trainers over 4 METIS parts."""
    from gnnsched.spec import job_from_dict

    d = DATASETS[ds]
    return job_from_dict({
        "name": f"{ds}-sage", "dataset": dataset_path(ds, data_dir),
        "feature_dim": d.feature_dim, "num_parts": 4, "part_method": "metis", "model": "sage",
        "hidden": 128, "fanouts": [10, 25], "batch_size": d.batch_size, "epochs": epochs,
        "lr": 0.01, "dropout": 0.5, "trainers": 2, "seed": seed, "prefetch": 2,
        "eval_every": epochs,
    }, source=f"bench:{ds}")


def job_for_repeat(ds: str, st: Settings, rep: int) -> JobSpec:
    """The job of repetition ``rep``: job seed ``st.seed + rep`` (same in every system)."""
    return st.job(ds, st.seed + rep)


def canonical(plan: Plan) -> Plan:
    """The plan with trainers ordered by their lowest partition and numbered 0..W-1.

    Batches and sampling seeds follow the trainer index, so two plans with the same seed
    split then train exactly the same mini-batches whatever order the placer listed them in.
    """
    ts = sorted(plan.trainers, key=lambda t: min(t.parts))
    return replace(plan, trainers=tuple(replace(t, id=i) for i, t in enumerate(ts)))


def seed_split(plan: Plan) -> list[list[int]]:
    """The plan's seed split (:func:`~gnnsched.placement.placer.split_of`) as results.json
    stores it: lists, trainer order for a :func:`canonical` plan."""
    from gnnsched.placement.placer import split_of

    return [list(g) for g in split_of(plan)]


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    return [{"trainer": i, "machine": t.machine, "device": t.device, "parts": list(t.parts),
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


def mean_accuracy(accs: list[Any]) -> float | None:
    """Mean test accuracy over a system's repetitions (one per job seed); None if none."""
    vals = [v for v in map(num, accs) if v is not None]
    return statistics.fmean(vals) if vals else None


def accuracy_stats(accs: list[float]) -> dict[str, Any]:
    """Test accuracies over seeds, with their mean, standard deviation and range."""
    return {"test_accuracy": accs, "mean": statistics.fmean(accs),
            "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "min": min(accs), "max": max(accs)}
