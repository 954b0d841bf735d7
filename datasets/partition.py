"""Partition a :class:`~gnnsched.datasets.Graph` into DGL's distributed partition format.

The files are DGL's own format (``NAME.json`` plus ``partK/graph.dgl``, ``node_feat.dgl``,
``edge_feat.dgl``), so real DistDGL servers load the same partitions gnnsched schedules over:
the DistDGL baseline and gnnsched run on identical data. :func:`partition_graph` is the
workflow: the node -> part assignment (METIS, :mod:`.metis`, or random), the files written
part by part by :mod:`.partition_writer` (the same nodes, node data, features and edges as
``dgl.distributed.partition_graph`` writes from the same assignment, at a fraction of its
memory; ``writer="dgl"`` still calls DGL), and beside them ``gnnsched.json``: what the
schedulers need without loading any graph (sizes, edge cut, balance, per-part counts) and a
sha256 for every file. :mod:`.partition_reader` opens and checks what it wrote
(:func:`open_partitions`; its names are re-exported here).

Same graph + same seed -> same assignment and the same part contents (every file but DGL's
``graph.dgl`` is byte-identical; DGL writes stray memory bytes into that file's headers, so its
checksum differs run to run).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.spec import SpecError

from .metis import _metis, metis_assignment, metis_vertex_weights
from .npz import Graph
from .partition_reader import (
    FORMAT,
    FORMAT_VERSION,
    META_FILE,
    NDATA,
    NODE_PART_FILE,
    ORIG_NIDS_FILE,
    SPLIT_BITS,
    SPLITS_FILE,
    LocalPart,
    PartitionSet,
    _only,
    open_partitions,
    sha256_file,
    verify_checksums,
)
from .partition_writer import (
    check_memory,
    estimate_partition_bytes,
    graph_nbytes,
    metis_max_entries,
    stage,
    write_partitions,
)

METHODS = ("metis", "random")
WRITERS = ("gnnsched", "dgl")


@dataclass
class PartitionReport:
    """What a partitioning produced: sizes, quality (edge cut, balance) and timings."""

    name: str
    out_dir: str
    config: str
    method: str
    num_parts: int
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    edge_cut: float
    cut_edges: int
    balance: float
    edge_balance: float
    part_nodes: list[int]
    part_edges: list[int]
    part_halo_nodes: list[int]
    part_train: list[int]
    seconds: float
    dgl_seconds: float
    load_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """A plain-text report: header line, quality line, one row per part."""
        lines = [
            f"partitioned {self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges, "
            f"{self.feature_dim} features, {self.num_classes} classes -> {self.num_parts} "
            f"parts ({self.method}) in {self.out_dir}",
            f"edge cut {self.edge_cut:.2%} ({self.cut_edges:,} edges)  node balance "
            f"{self.balance:.3f}  edge balance {self.edge_balance:.3f}  time "
            f"{self.seconds:.2f} s (writing {self.dgl_seconds:.2f} s"
            + (f", load {self.load_seconds:.2f} s" if self.load_seconds is not None else "")
            + ")",
        ]
        header = f"{'part':>4}  {'nodes':>10}  {'edges':>12}  {'halo':>10}  {'train':>8}"
        lines += [header, "-" * len(header)]
        for i in range(self.num_parts):
            lines.append(
                f"{i:>4}  {self.part_nodes[i]:>10,}  {self.part_edges[i]:>12,}  "
                f"{self.part_halo_nodes[i]:>10,}  {self.part_train[i]:>8,}"
            )
        return "\n".join(lines)


def _graph_name(name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "graph"
    return clean


def _cut_and_halo(src: np.ndarray, dst: np.ndarray, node_part: np.ndarray,
                  num_parts: int) -> tuple[int, np.ndarray]:
    """Cut edges, and per part the distinct sources of its cut in-edges (its halo nodes),
    with narrow part ids and one boolean node mask per part instead of a sort of the cut."""
    narrow = node_part.astype(np.int16 if num_parts < 2**15 else np.int32)
    ps, pd = narrow[src], narrow[dst]
    cut = ps != pd
    del ps
    halo = np.zeros(num_parts, dtype=np.int64)
    seen = np.zeros(node_part.shape[0], dtype=bool)
    for p in range(num_parts):
        seen[src[cut & (pd == p)]] = True
        halo[p] = int(np.count_nonzero(seen))
        seen[:] = False
    return int(np.count_nonzero(cut)), halo


@contextlib.contextmanager
def _dgl_takes_assignment(assigned: np.ndarray, num_parts: int):
    """While ``dgl.distributed.partition_graph`` runs, its METIS step (or its random draw)
    returns ``assigned`` instead of calling DGL's METIS (which cannot be seeded or repeated,
    see the module docstring). DGL 2.1 looks both functions up in its
    ``dgl.distributed.partition`` module at call time; if neither was called (another DGL),
    the run fails instead of silently using DGL's own assignment."""
    import torch

    module = importlib.import_module("dgl.distributed.partition")
    originals = {k: getattr(module, k) for k in ("metis_partition_assignment", "random_choice")}
    calls: list[int] = []

    def take(g: Any, k: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        nodes = g if isinstance(g, (int, np.integer)) else g.num_nodes()
        if int(nodes) != assigned.shape[0] or k != num_parts:
            raise RuntimeError(f"DGL asked for {k} parts of {nodes} nodes, "
                               f"not {num_parts} of {assigned.shape[0]}")
        calls.append(k)
        return torch.from_numpy(assigned)

    module.metis_partition_assignment = take
    module.random_choice = lambda k, n: take(n, k)
    try:
        yield
    finally:
        for key, fn in originals.items():
            setattr(module, key, fn)
    if num_parts > 1 and not calls:
        raise RuntimeError("this DGL did not ask for the node assignment (gnnsched needs "
                           "DGL 2.1's partition_graph)")


def partition_graph(
    graph: Graph,
    num_parts: int,
    out_dir: str | Path,
    method: str = "metis",
    seed: int = 0,
    *,
    balance_edges: bool = True,
    balance_train: bool = True,
    overwrite: bool = True,
    quiet: bool = True,
    writer: str = "gnnsched",
    metis_sample: bool = True,
) -> PartitionReport:
    """Partition ``graph`` into ``out_dir`` in DGL's format and write ``gnnsched.json`` beside it.

    ``method`` is ``"metis"`` (min edge cut; with ``balance_edges`` it also balances
    in-degrees, with ``balance_train`` the training seeds, so each trainer's share of seeds
    is even) or ``"random"`` (uniform node assignment: the worst-case baseline).
    ``seed`` decides the assignment for both methods: it seeds METIS (see
    :func:`metis_assignment`) and DGL's RNG for random assignment. The same graph and seed
    give the same node -> part map and the same part contents, in any process;
    ``gnnsched.json`` records the seed (and for METIS the library, seed and constraints it
    was run with). ``writer``: ``"gnnsched"`` writes the files part by part in bounded memory
    (:mod:`.partition_writer`; at most about 2x the graph's size on top of it), ``"dgl"``
    hands the assignment to ``dgl.distributed.partition_graph`` (about 8x: kept to check
    the two agree). With ``metis_sample`` a graph too big for METIS within 4x its own size
    gets METIS's cut from a seeded sample of its edges (:func:`metis_assignment`,
    :func:`~.partition_writer.metis_max_entries`; ``gnnsched.json`` records ``entries`` and
    ``entries_used`` under ``metis``); False gives METIS every edge. Before it starts, a
    partitioning that would need more memory than the machine has available is refused with
    a SpecError naming both (``GNNSCHED_NO_MEMCHECK=1`` skips the check). DGL's progress
    prints and METIS's complaints are swallowed unless ``quiet=False``.
    """
    from gnnsched.compat import dgl

    num_parts = _check_request(graph, num_parts, method, writer)
    out = _clear_out_dir(Path(out_dir), overwrite)
    t0 = time.perf_counter()
    name = _graph_name(graph.name)
    sink: Any = io.StringIO() if quiet else sys.stderr  # never pollute stdout (CLI --json)
    said: list[str] = []
    try:
        assigned, metis_meta = _assign(graph, num_parts, method, seed, said, sink,
                                       balance_edges=balance_edges,
                                       balance_train=balance_train, metis_sample=metis_sample)
        empty = np.flatnonzero(np.bincount(assigned, minlength=num_parts) == 0)
        if empty.size and num_parts > 1:
            raise RuntimeError(f"{method.upper()} left part(s) {', '.join(map(str, empty))} "
                               "empty and DGL's format cannot hold an empty part"
                               + (f" (METIS: {said[0]})" if method == "metis" and said else ""))
        t_dgl = time.perf_counter()
        orig_nids = _write(graph, assigned, num_parts, out, name, method, writer, sink,
                           balance_edges)
    except (dgl.DGLError, AssertionError, IndexError, RuntimeError) as exc:
        # e.g. METIS asked for more parts than the graph can be cut into.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError("partition", "num_parts", f"DGL could not partition {graph.name!r} "
                        f"({graph.num_nodes} nodes) into {num_parts} parts with {method}: "
                        f"{first}", "fewer parts or method='random'") from None
    dgl_seconds = time.perf_counter() - t_dgl
    stage("stats")
    config = out / f"{name}.json"
    node_part, node_ranges, edge_ranges = _node_map(config, orig_nids, graph.num_nodes)
    if not np.array_equal(node_part, assigned):
        raise RuntimeError(f"the partitions written in {out} differ from the assignment "
                           "they were made from")
    del assigned
    stats = _part_stats(graph, node_part, node_ranges, edge_ranges, num_parts)
    np.save(out / NODE_PART_FILE, node_part)
    np.save(out / ORIG_NIDS_FILE, orig_nids)
    np.save(out / SPLITS_FILE, split_codes(graph))
    stage("checksums")
    checksums = {
        str(f.relative_to(out)): sha256_file(f)
        for f in sorted(out.rglob("*")) if f.is_file() and f.name != META_FILE
    }
    seconds = time.perf_counter() - t0
    report = PartitionReport(
        name=graph.name, out_dir=str(out), config=str(config), method=method,
        num_parts=num_parts, num_nodes=graph.num_nodes, num_edges=graph.num_edges,
        feature_dim=graph.feature_dim, num_classes=graph.num_classes,
        edge_cut=stats["cut_edges"] / graph.num_edges if graph.num_edges else 0.0,
        cut_edges=stats["cut_edges"], balance=stats["balance"],
        edge_balance=stats["edge_balance"], part_nodes=stats["part_nodes"],
        part_edges=stats["part_edges"], part_halo_nodes=stats["halo"].tolist(),
        part_train=stats["part_train"].tolist(), seconds=seconds, dgl_seconds=dgl_seconds,
    )
    meta = _meta(graph, report, stats, name, config, seed, metis_meta, checksums,
                 balance_edges=balance_edges, balance_train=balance_train)
    (out / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return report


def _check_request(graph: Graph, num_parts: int, method: str, writer: str) -> int:
    """``num_parts`` as an int, once the method, the writer, the count and the machine's
    memory allow the partitioning (SpecError otherwise)."""
    if method not in METHODS:
        raise SpecError("partition", "method", f"unknown method {method!r}", ", ".join(METHODS))
    if writer not in WRITERS:
        raise SpecError("partition", "writer", f"unknown writer {writer!r}", ", ".join(WRITERS))
    if (isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer))
            or not 1 <= num_parts <= max(graph.num_nodes, 1)):
        raise SpecError("partition", "num_parts",
                        f"must be an integer in [1, num_nodes={graph.num_nodes}], got {num_parts}")
    num_parts = int(num_parts)
    n, m, d = graph.num_nodes, graph.num_edges, graph.feature_dim
    gbytes = graph_nbytes(n, m, d)
    need = (estimate_partition_bytes(n, m, d, num_parts) if writer == "gnnsched"
            else 8 * gbytes)
    check_memory("partition", need,
                 f"partitioning {n:,} nodes, {m:,} edges, {d} features into {num_parts} parts "
                 f"with the {writer} writer, on top of the {gbytes / 1e9:.2f} GB graph")
    return num_parts


def _clear_out_dir(out: Path, overwrite: bool) -> Path:
    """An empty ``out``: an old gnnsched partition there is replaced cleanly (no stale part
    folders); any other non-empty folder is refused."""
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise SpecError(str(out), "", "output directory is not empty", "an empty directory")
        if not (out / META_FILE).exists():
            raise SpecError(str(out), "", f"refusing to overwrite a non-empty directory with "
                            f"no {META_FILE}", "an empty directory or an old gnnsched partition")
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def _assign(graph: Graph, num_parts: int, method: str, seed: int, said: list[str], sink: Any,
            *, balance_edges: bool, balance_train: bool, metis_sample: bool
            ) -> tuple[np.ndarray, dict[str, Any] | None]:
    """Node -> part, and for METIS what ``gnnsched.json`` records of its run (``said``
    collects what METIS printed, also echoed to ``sink``)."""
    from gnnsched.compat import dgl

    n = graph.num_nodes
    if method != "metis":
        dgl.seed(seed)  # DGL's random assignment, as its partition_graph draws it
        return np.asarray(dgl.random.choice(num_parts, n).numpy(), dtype=np.int64), None
    train_types = None
    if balance_train and graph.train_mask.any():
        train_types = graph.train_mask.astype(np.int64)
    stage("metis")
    vwgt = metis_vertex_weights(n, graph.dst, train_types, balance_edges=balance_edges)
    sizes: dict[str, Any] = {}
    m, d = graph.num_edges, graph.feature_dim
    assigned = metis_assignment(
        graph.src, graph.dst, n, num_parts, vwgt=vwgt, seed=seed, messages=said,
        max_entries=metis_max_entries(n, m, d, num_parts) if metis_sample else None,
        info=sizes)
    for line in said:
        print(f"METIS: {line}", file=sink)
    kinds = [] if train_types is None else [
        "train" if t else "not_train" for t in np.unique(train_types)]
    balanced = [f"nodes:{k}" for k in kinds] or ["nodes"]
    if balance_edges:
        balanced += [f"in_degree:{k}" for k in kinds] or ["in_degree"]
    return assigned, {"library": _metis()["library"] if num_parts > 1 else None,
                      "seed": seed + 1 if num_parts > 1 else None,  # as METIS got it
                      "ncon": 1 if vwgt is None else int(vwgt.shape[1]),
                      "balanced": balanced, "entries": sizes.get("entries"),
                      "entries_used": sizes.get("kept")}


def _write(graph: Graph, assigned: np.ndarray, num_parts: int, out: Path, name: str,
           method: str, writer: str, sink: Any, balance_edges: bool) -> np.ndarray:
    """The part files from the assignment, by ``writer``; returns ``orig_nids``."""
    from gnnsched.compat import dgl

    if writer == "gnnsched":
        return write_partitions(graph, assigned, num_parts, out, name, method)
    stage("dgl partition_graph")
    g = graph.to_dgl()
    with contextlib.redirect_stdout(sink), _dgl_takes_assignment(assigned, num_parts):
        orig_nids_t, _ = dgl.distributed.partition_graph(
            g, name, num_parts, str(out), part_method=method,
            balance_edges=balance_edges and method == "metis",
            return_mapping=True,
        )
    del g
    return np.asarray(orig_nids_t.numpy(), dtype=np.int64)


def _node_map(config: Path, orig_nids: np.ndarray, n: int
              ) -> tuple[np.ndarray, list[list[int]], list[list[int]]]:
    """Original id -> part as the written files say, and each part's node and edge ranges."""
    dgl_meta = json.loads(config.read_text())
    node_ranges = _only(dgl_meta["node_map"])
    edge_ranges = _only(dgl_meta["edge_map"])
    node_part = np.empty(n, dtype=np.int32)
    for p, (lo, hi) in enumerate(node_ranges):
        node_part[orig_nids[lo:hi]] = p
    return node_part, node_ranges, edge_ranges


def _part_stats(graph: Graph, node_part: np.ndarray, node_ranges: list[list[int]],
                edge_ranges: list[list[int]], num_parts: int) -> dict[str, Any]:
    """The parts' sizes, halo nodes, seeds, cut and balance."""
    n, m = graph.num_nodes, graph.num_edges
    part_nodes = [int(hi - lo) for lo, hi in node_ranges]
    part_edges = [int(hi - lo) for lo, hi in edge_ranges]
    cut_edges, halo = _cut_and_halo(graph.src, graph.dst, node_part, num_parts)
    return {
        "part_nodes": part_nodes, "part_edges": part_edges, "cut_edges": cut_edges,
        "halo": halo,
        "part_train": np.bincount(node_part[graph.train_mask], minlength=num_parts),
        "part_val": np.bincount(node_part[graph.val_mask], minlength=num_parts),
        "part_test": np.bincount(node_part[graph.test_mask], minlength=num_parts),
        "balance": max(part_nodes) / (n / num_parts) if n else 1.0,
        "edge_balance": max(part_edges) / (m / num_parts) if m else 1.0,
    }


def split_codes(graph: Graph) -> np.ndarray:
    """One byte per original id, a bit per phase the node is in (``SPLIT_BITS``): what
    ``splits.npy`` holds, so the job's evaluation sample is known before any part loads."""
    codes = np.zeros(graph.num_nodes, dtype=np.uint8)
    for phase, bit in SPLIT_BITS.items():
        codes[np.asarray(getattr(graph, f"{phase}_mask"), dtype=bool)] |= np.uint8(bit)
    return codes


def _meta(graph: Graph, report: PartitionReport, stats: dict[str, Any], name: str,
          config: Path, seed: int, metis_meta: dict[str, Any] | None,
          checksums: dict[str, str], *, balance_edges: bool, balance_train: bool
          ) -> dict[str, Any]:
    """The contents of ``gnnsched.json``."""
    halo, train, val, test = (stats[k] for k in ("halo", "part_train", "part_val",
                                                   "part_test"))
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "dataset": graph.name, "graph_name": name, "dgl_config": config.name,
        "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "num_parts": report.num_parts, "method": report.method,
        "seed": seed, "balance_edges": balance_edges, "balance_train": balance_train,
        "metis": metis_meta, "normalize": graph.meta.get("normalize", "none"),
        "feature_dim": graph.feature_dim, "num_classes": graph.num_classes,
        "split": graph.meta.get("split", 0),
        "edge_cut": report.edge_cut, "cut_edges": report.cut_edges,
        "balance": report.balance, "edge_balance": report.edge_balance,
        "parts": [
            {"nodes": report.part_nodes[i], "edges": report.part_edges[i],
             "halo_nodes": int(halo[i]), "train": int(train[i]), "val": int(val[i]),
             "test": int(test[i])}
            for i in range(report.num_parts)
        ],
        "node_part": NODE_PART_FILE, "orig_nids": ORIG_NIDS_FILE, "splits": SPLITS_FILE,
        "dataset_meta": graph.meta,
        "seconds": report.seconds, "dgl_seconds": report.dgl_seconds,
        "sha256": checksums,
    }


def run_partition(args: Any) -> int:
    """CLI body of ``gnnsched partition``: load, partition, print the table (or JSON).

    ``args`` needs ``dataset``, ``parts``, ``out``, ``method``, ``data_dir``, ``feature_dim``,
    ``seed``, ``split``, ``normalize`` and ``json``; missing attributes take the defaults
    (``normalize``: ``none``; the features are scaled as a job's ``features.normalize`` says,
    and the partitions record it, so a job asking for another scaling is refused). An optional
    ``synthetic`` (dict, or ``"num_nodes=100000,avg_degree=10"``) sets generator parameters
    when ``dataset`` is ``synthetic``.
    """
    from . import load_dataset
    from .synthetic import parse_params

    synthetic = getattr(args, "synthetic", None)
    if isinstance(synthetic, str):
        try:
            synthetic = parse_params(synthetic)
        except ValueError as exc:
            raise SpecError("--synthetic", "", str(exc), "KEY=VALUE,KEY=VALUE") from None
    t0 = time.perf_counter()
    graph = load_dataset(
        args.dataset, data_dir=getattr(args, "data_dir", None),
        split=getattr(args, "split", 0) or 0, feature_dim=getattr(args, "feature_dim", None),
        seed=getattr(args, "seed", 0) or 0, synthetic=synthetic or None,
        normalize=getattr(args, "normalize", None) or "none",
    )
    load_seconds = time.perf_counter() - t0
    report = partition_graph(
        graph, int(args.parts), args.out, method=getattr(args, "method", "metis") or "metis",
        seed=getattr(args, "seed", 0) or 0,
    )
    report.load_seconds = load_seconds
    if getattr(args, "json", False):
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.table())
    return 0


__all__ = ["FORMAT", "FORMAT_VERSION", "META_FILE", "METHODS", "NDATA", "NODE_PART_FILE",
           "ORIG_NIDS_FILE", "WRITERS", "LocalPart", "PartitionReport", "PartitionSet",
           "metis_assignment", "metis_vertex_weights", "open_partitions", "partition_graph",
           "run_partition", "sha256_file", "verify_checksums"]
