"""What the scale tier runs (``gnnsched bench scale``): its graph, job, cluster shapes, systems
and resolved settings. The launcher, the name checks, the command line and the goals are
resolved as for the evaluation (:mod:`.config`, :mod:`.targets`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import check_names, command_line, pick_launcher
from gnnsched.evaluation.targets import NONE, Targets, load_targets
from gnnsched.spec import ClusterSpec, JobSpec

PRESET = "products"
TEST_NODES, TEST_NODES_QUICK = 20_000, 1_000
METRIC_POINTS = 0.01  # the invariant: gnnsched's runs match the reference within 1 point

SCALE_SHAPES: dict[str, str] = {
    "plentiful": "4 hosts, each storing one partition with one trainer device (speed 1.0), "
                 "2 cores, 1 Gbit/s NICs (DistDGL's home ground; compute should bind)",
    "limited": "2 GPU-less stores (2 cores) with 2 partitions each + 2 hosts with 2 devices "
               "and 4 cores each, 1 Gbit/s NICs (colocation must move its trainers; no "
               "DistDGL)",
}
CLUSTER_SYSTEMS = ("distdgl", "colocation+fifo", "colocation+fifo+cache", "gnnsched+fifo",
           "gnnsched+gnnsched", "gnnsched+fifo+cache", "gnnsched+gnnsched+cache")
# colocation with the same caches runs by default beside gnnsched with caches: a win over a
# baseline without them would be the caches', not placement's
DEFAULT_SYSTEMS = ("distdgl", "colocation+fifo", "colocation+fifo+cache", "gnnsched+gnnsched",
                   "gnnsched+gnnsched+cache")
# gnnsched as a user runs it on this shape: its placement and policy, and feature caches in
# half of the memory its plan leaves free (`gnnsched plan --cache-share 0.5`)
HEADLINE = "gnnsched+gnnsched+cache"
CACHE_SHARE = 0.5
LABELS = {"limit": "the best single-process pipeline (the box's limit)",
          "reference": "single-process reference (1 thread)",
          "distdgl": "DistDGL", "colocation+fifo": "colocation + fifo",
          "gnnsched+fifo": "gnnsched placement + fifo",
          "gnnsched+gnnsched": "gnnsched (placement + policy), no caches",
          "gnnsched+gnnsched+cache": "gnnsched (placement + policy + feature caches)",
          "gnnsched+fifo+cache": "gnnsched placement + fifo + feature caches",
          "colocation+fifo+cache": "colocation + fifo + the same caches (degree-ordered, "
                                   "static)"}
COLOURS = {"reference": "#9e9e9e", "distdgl": "#6a1b9a", "colocation+fifo": "#c62828",
           "gnnsched+fifo": "#81c784", "gnnsched+gnnsched": "#2e7d32",
           "gnnsched+gnnsched+cache": "#1b5e20", "colocation+fifo+cache": "#ef9a9a",
           "gnnsched+fifo+cache": "#a5d6a7"}
SUBNETS = {"plentiful": 20, "limited": 22}  # 10.78.X.0/24 (quick: X + 1)


@dataclass
class ScaleSettings:
    quick: bool
    nodes: int
    degree: float
    epochs: int
    out: Path
    work: Path
    launcher: str
    launcher_reason: str
    shapes: list[str]
    systems: list[str]
    seed: int
    budget: float
    samples: int
    repeats: int
    nic_gbps: float = 1.0
    hidden: int = 256
    fanouts: tuple[int, ...] = (15, 10, 5)
    batch: int = 1024
    lr: float = 0.003  # DGL's distributed GraphSAGE example's
    test_nodes: int = TEST_NODES
    # the job's features.normalize (--normalize): standardised columns, so the first steps
    # do not diverge on raw features (which made one epoch's accuracy swing by 28 points
    # between two runs of one seed)
    normalize: str = "standard"
    limit_batches: tuple[int, int] = (2, 6)  # warm-up, timed
    command: str = ""
    notes: list[str] = field(default_factory=list)
    cache_share: float = CACHE_SHARE  # of free memory, for the systems with caches
    reference: bool = True  # train the single-process reference (--no-reference: skip it)
    targets: Targets = NONE  # the goals judged (--targets FILE; none by default)

    def to_dict(self) -> dict[str, Any]:
        """The settings as results.json keeps them (the goals are its ``goals``)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k != "targets"}


def defaults(quick: bool) -> dict[str, Any]:
    """The flags' defaults by mode: what ``resolve`` fills in and ``reproduce`` leaves out."""
    return {"nodes": 20_000 if quick else 1_000_000, "epochs": 1 if quick else 2,
            "out": Path("runs") / "bench-scale-quick" if quick
            else Path("docs") / "results" / "scale"}


def resolve(args: argparse.Namespace) -> ScaleSettings:
    """``gnnsched bench scale`` flags -> settings (defaults by mode, names checked)."""
    q = bool(args.quick)
    shapes = args.shapes or ["plentiful"]
    systems = args.systems or list(DEFAULT_SYSTEMS)
    check_names("gnnsched bench scale", "shape", shapes, SCALE_SHAPES)
    check_names("gnnsched bench scale", "system", systems, CLUSTER_SYSTEMS)
    launcher, reason = pick_launcher(args)
    d = defaults(q)
    nodes = int(getattr(args, "nodes", None) or d["nodes"])
    st = ScaleSettings(
        quick=q, nodes=nodes, degree=20.0 if q else 40.0, epochs=int(args.epochs or d["epochs"]),
        out=Path(args.out) if args.out else d["out"],
        work=Path(args.work) if args.work else Path("runs") / ("bench-scale-quick" if q
                                                               else "bench-scale"),
        launcher=launcher, launcher_reason=reason, shapes=list(dict.fromkeys(shapes)),
        systems=[s for s in CLUSTER_SYSTEMS if s in systems], seed=int(args.seed),
        budget=float(args.budget or (2.0 if q else 10.0)),
        samples=int(args.samples or (2 if q else 8)), repeats=max(1, int(args.repeats)),
        command=command_line(), reference=not getattr(args, "no_reference", False),
        targets=load_targets(getattr(args, "targets", None)))
    if getattr(args, "normalize", None):
        st = replace(st, normalize=str(args.normalize))
    if q:
        st = replace(st, hidden=64, fanouts=(10, 5, 5), batch=128, test_nodes=TEST_NODES_QUICK,
                     limit_batches=(1, 4))
    if nodes < 1000:
        raise SystemExit("gnnsched bench scale: --nodes must be at least 1000")
    return st


def reproduce(st: ScaleSettings) -> str:
    """The command that reruns these settings: every flag away from its default."""
    d = defaults(st.quick)
    return ("gnnsched bench scale" + (" --quick" if st.quick else "")
            + (f" --nodes {st.nodes}" if st.nodes != d["nodes"] else "")
            + (f" --epochs {st.epochs}" if st.epochs != d["epochs"] else "")
            + (f" --repeats {st.repeats}" if st.repeats != 1 else "")
            + (f" --shapes {' '.join(st.shapes)}" if st.shapes != ["plentiful"] else "")
            + (f" --systems {' '.join(st.systems)}" if st.systems != list(DEFAULT_SYSTEMS)
               else "")
            + ("" if st.reference else " --no-reference")
            + (f" --normalize {st.normalize}" if st.normalize != "standard" else "")
            + (f" --out {st.out}" if Path(st.out) != d["out"] else "")
            + st.targets.flag())


def graph_params(st: ScaleSettings) -> dict[str, Any]:
    """The generator's parameters: the products preset at ``st.nodes`` nodes, the test set a
    seeded sample of at most ``st.test_nodes`` nodes (the rest of the non-training nodes are
    validation nodes, which no run evaluates: ``eval_every: 0`` and the cap)."""
    from gnnsched.datasets.synthetic import PRESETS, preset

    p = preset(PRESET, num_nodes=st.nodes, avg_degree=st.degree, seed=st.seed)
    if not st.quick:  # as many training nodes as at full size (one epoch = 35 iterations),
        # up to half the graph
        full = PRESETS[PRESET]
        p["train_frac"] = round(min(0.5, float(full["train_frac"]) * int(full["num_nodes"])
                                    / st.nodes), 9)
    else:
        p["train_frac"] = 0.1
    test = min(1.0 - float(p["train_frac"]) - float(p["val_frac"]), st.test_nodes / st.nodes)
    p["val_frac"] = round(1.0 - float(p["train_frac"]) - test, 9)
    return p


def make_job(st: ScaleSettings, seed: int | None = None) -> JobSpec:
    """The scale tier's job: GraphSAGE on the products-like graph, 4 trainers over 4 parts."""
    from gnnsched.spec import job_from_dict

    spec = {
        "name": f"scale-{PRESET}-{st.nodes}", "dataset": "synthetic",
        "synthetic": graph_params(st), "num_parts": 4, "part_method": "metis",
        "model": "sage", "hidden": st.hidden, "fanouts": list(st.fanouts),
        "batch_size": st.batch, "epochs": st.epochs, "lr": st.lr, "dropout": 0.5,
        "trainers": 4, "seed": st.seed if seed is None else seed, "prefetch": 2,
        "eval_every": 0,
        "evaluation": {"batch_size": 1024 if not st.quick else 512,
                       "max_nodes": st.test_nodes},
    }
    if st.normalize != "none":
        spec["features"] = {"normalize": st.normalize}
    return job_from_dict(spec, source="bench --scale")


def make_cluster(st: ScaleSettings, shape: str) -> ClusterSpec:
    """The shape's cluster: machine names, partitions and addresses (10.78.X.0/24, X per
    shape and mode, so a quick run beside a full one does not collide)."""
    from gnnsched.spec import cluster_from_dict

    net = SUBNETS[shape] + (1 if st.quick else 0)
    gpu = {"kind": "t4", "speed": 1.0, "memory_gb": 16}
    nic = st.nic_gbps
    if shape == "plentiful":
        machines = [{"name": f"h{i}", "cpus": 2, "memory_gb": 16, "nic_gbps": nic,
                     "partitions": [i], "address": f"10.78.{net}.{i + 1}", "gpus": [gpu]}
                    for i in range(4)]
    else:
        machines = [{"name": f"store{i}", "cpus": 2, "memory_gb": 16, "nic_gbps": nic,
                     "partitions": [2 * i, 2 * i + 1], "address": f"10.78.{net}.{i + 1}"}
                    for i in range(2)]
        machines += [{"name": f"gpu{i}", "cpus": 4, "memory_gb": 16, "nic_gbps": nic,
                      "address": f"10.78.{net}.{i + 3}", "gpus": [gpu, gpu]} for i in range(2)]
    name = f"scale{'q' if st.quick else ''}-{shape[:4]}"
    return cluster_from_dict({"name": name, "storage": "shared", "machines": machines},
                             source=f"bench --scale: {shape}")


def graph_bytes(params: dict[str, Any], directed_edges: int) -> int:
    """The generated graph's in-memory size: int64 src and dst per directed edge, float32
    features, int64 labels and three boolean masks per node."""
    n, d = int(params["num_nodes"]), int(params.get("feature_dim", 128))
    return 16 * int(directed_edges) + n * (4 * d + 8 + 3)


def plan_key(sysname: str) -> str:
    """The plan a system runs: its placer, with ``+cache`` when it has feature caches
    (``gnnsched+gnnsched+cache`` runs the gnnsched placer's plan with caches)."""
    parts = sysname.split("+")
    return parts[0] + ("+cache" if "cache" in parts[2:] else "")


def policy_pairs(systems: list[str]) -> list[tuple[str, str]]:
    """The (fifo, gnnsched) systems that differ only in the online policy (same placer, same
    caches): the policy A/B at the scale tier (issue 29)."""
    out = []
    for s in systems:
        parts = s.split("+")
        if len(parts) > 1 and parts[1] == "gnnsched":
            fifo = "+".join([parts[0], "fifo", *parts[2:]])
            if fifo in systems:
                out.append((fifo, s))
    return out
