"""Partition a :class:`~gnnsched.datasets.Graph` into DGL's distributed partition format.

The files are DGL's own format (``NAME.json`` plus ``partK/graph.dgl``, ``node_feat.dgl``,
``edge_feat.dgl``), so real DistDGL servers load the same partitions gnnsched schedules over:
the DistDGL baseline and gnnsched run on identical data. They are written part by part by
:mod:`.partition_writer` (the same nodes, node data, features and edges as
``dgl.distributed.partition_graph`` writes from the same assignment, at a fraction of its
memory; ``writer="dgl"`` still calls DGL). Beside them ``gnnsched.json`` records what the
schedulers need without loading any graph (sizes, edge cut, balance, per-part counts) and a
sha256 for every file, so a store that serves a corrupted or half-copied partition is caught
at open time, with the file named, instead of training on garbage.

Node ids: DGL renumbers nodes so each part owns a contiguous range of *new* ids.
``orig_nids.npy`` (as DGL returns it) maps new id -> original id; ``node_part.npy`` maps
original id -> part. Edges are owned by the part of their destination node (DGL stores the
in-edges of its inner nodes, with the sources outside the part as halo nodes).

METIS: the node -> part assignment is computed here (:func:`metis_assignment`, METIS k-way
through the METIS C library that ``pymetis`` ships, seeded; on graphs too big for METIS within
4x the graph's size, from a seeded sample of the edges) and the files are written from it.
DGL's own METIS call cannot be made reproducible: it hard-codes METIS's "drop edges" coarsening, whose median-weight lookup reads past the filled part of a work array
(uninitialised heap memory; valgrind flags ``CreateCoarseGraph``), so the same graph gives a
different assignment from call to call, and it passes no seed. Same graph + same seed -> same
assignment and the same part contents (every file but DGL's ``graph.dgl`` is byte-identical;
DGL writes stray memory bytes into that file's headers, so its checksum differs run to run).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnsched.spec import SpecError

from .npz import MASK_KEYS, Graph
from .partition_writer import (
    check_memory,
    estimate_partition_bytes,
    graph_nbytes,
    metis_max_entries,
    stage,
    write_partitions,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from gnnsched.compat import dgl

META_FILE = "gnnsched.json"
NODE_PART_FILE = "node_part.npy"
ORIG_NIDS_FILE = "orig_nids.npy"
FORMAT = "gnnsched-partition"
FORMAT_VERSION = 1
METHODS = ("metis", "random")
WRITERS = ("gnnsched", "dgl")
NDATA = ("feat", "label", *MASK_KEYS)
_NTYPE = "_N"  # DGL's default node type; node features are stored as "_N/<name>"


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


@dataclass
class LocalPart:
    """One partition as a graph store holds it.

    ``graph`` is DGL's local graph (inner nodes first, then halo nodes; ndata ``_ID`` holds
    new global ids, ``inner_node`` marks owned nodes). The node tensors cover inner nodes
    only, in the order of ``inner_new_ids`` / ``inner_orig_ids``.
    """

    part_id: int
    graph: dgl.DGLGraph
    book: Any  # dgl.distributed.GraphPartitionBook
    inner_local: torch.Tensor
    inner_new_ids: np.ndarray
    inner_orig_ids: np.ndarray
    features: torch.Tensor
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def num_inner(self) -> int:
        return int(self.inner_new_ids.shape[0])


def _graph_name(name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "graph"
    return clean


def _only(type_map: dict[str, Any]) -> list[list[int]]:
    """The id ranges of the single node/edge type of a homogeneous graph."""
    return next(iter(type_map.values()))


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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


# --------------------------------------------------------------------------------------
# METIS, reproducibly


_METIS_LOCK = threading.Lock()  # METIS draws from libc rand(): one process-wide stream
_METIS: dict[str, Any] = {}


def _metis() -> dict[str, Any]:
    """The METIS C API from the library pymetis ships (loaded once).

    ``pymetis.part_graph`` always passes one balancing constraint, so the C functions are
    called directly (ctypes, zero-copy int64 arrays): that gives the multi-constraint balance
    DGL uses and full control of the options (seed)."""
    if _METIS:
        return _METIS
    try:
        from importlib.metadata import version

        import pymetis._internal as internal
    except ImportError:
        raise SpecError("partition", "method", "METIS partitioning needs the pymetis package",
                        "pip install pymetis, or method='random'") from None
    if internal._idx_type_width() != 64:
        raise SpecError("partition", "method", f"pymetis's METIS uses "
                        f"{internal._idx_type_width()}-bit indices", "a 64-bit build of pymetis")
    lib = ctypes.CDLL(internal.__file__)
    lib.METIS_SetDefaultOptions.argtypes = [ctypes.c_void_p]
    lib.METIS_SetDefaultOptions.restype = ctypes.c_int
    lib.METIS_PartGraphKway.argtypes = [ctypes.c_void_p] * 13
    lib.METIS_PartGraphKway.restype = ctypes.c_int
    _METIS.update(lib=lib, nopts=int(internal.Options._len()), idx=internal.options_indices,
                  cut=int(internal.ObjType.CUT), library=f"pymetis {version('pymetis')}")
    return _METIS


@contextlib.contextmanager
def _stdout_fd_captured(sink: list[str]):
    """METIS printf()s its complaints ("too many parts") to file descriptor 1, below Python's
    sys.stdout: keep them out of stdout (``--json``) and hand them to the caller."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode(errors="replace"))


def metis_vertex_weights(num_nodes: int, dst: np.ndarray, node_types: np.ndarray | None = None,
                         balance_edges: bool = True) -> np.ndarray | None:
    """METIS balancing constraints, as ``dgl.partition.metis_partition_assignment`` builds
    them: one 0/1 column per value of ``node_types`` (balances e.g. training seeds), then with
    ``balance_edges`` the in-degree of the nodes of each type (of all nodes when there are no
    types), so each part holds about as many edges. Shape ``[num_nodes, ncon]``; None: no
    constraint but the node count."""
    cols: list[np.ndarray] = []
    indeg = np.bincount(np.asarray(dst, dtype=np.int64), minlength=num_nodes).astype(np.int64)
    if node_types is not None:
        types = np.asarray(node_types)
        kinds = np.unique(types)
        cols += [(types == t).astype(np.int64) for t in kinds]
        if balance_edges:
            cols += [np.where(types == t, indeg, 0) for t in kinds]
    elif balance_edges:
        cols.append(indeg)
    return np.stack(cols, axis=1) if cols else None


def metis_assignment(src: np.ndarray, dst: np.ndarray, num_nodes: int, num_parts: int, *,
                     vwgt: np.ndarray | None = None, seed: int = 0,
                     messages: list[str] | None = None, max_entries: int | None = None,
                     info: dict[str, Any] | None = None) -> np.ndarray:
    """Node -> part (int64) with METIS k-way edge-cut minimisation on the symmetrised graph
    (self-loops and duplicate edges dropped), balancing the columns of ``vwgt``.

    ``max_entries``: METIS needs about 120 bytes per adjacency entry on graphs whose edges do
    not contract as it coarsens (every level keeps nearly all edges), 5 GB for the 1M-node
    scale graph; when the symmetrised graph has more entries, METIS is given a seeded
    uniform sample of its undirected edges (both directions of a kept edge), about
    ``max_entries`` of them. A uniform sample keeps each cut's share of edges in
    expectation, so METIS still minimises the real cut, with less information (the scale
    graph's cut rose from 53% to 63% at half the edges; a homophilous 200k-node graph's
    from 15.4% to 16.4%). ``info`` receives ``entries`` and ``kept`` (entries METIS got).

    Deterministic: the same graph, ``vwgt``, ``seed`` and ``max_entries`` give the same
    assignment, and the seed decides it. METIS seeds libc's ``srand``, for which 0 and 1 are
    the same stream, so METIS is handed ``seed + 1``. ``messages`` collects what METIS
    printed."""
    if num_parts == 1 or num_nodes == 0:
        return np.zeros(num_nodes, dtype=np.int64)
    metis = _metis()
    n = int(num_nodes)
    xadj, adjncy = _symmetric_csr(np.asarray(src, dtype=np.int64),
                                  np.asarray(dst, dtype=np.int64), n)
    entries = int(adjncy.shape[0])
    if max_entries is not None and entries > max_entries:
        xadj, adjncy = _sample_csr(xadj, adjncy, max_entries / entries, seed)
    if info is not None:
        info.update(entries=entries, kept=int(adjncy.shape[0]))
    weights = None
    ncon = 1
    if vwgt is not None:
        weights = np.ascontiguousarray(np.asarray(vwgt, dtype=np.int64).reshape(n, -1))
        ncon = weights.shape[1]
    idx = metis["idx"]
    options = np.full(metis["nopts"], -1, dtype=np.int64)
    metis["lib"].METIS_SetDefaultOptions(options.ctypes.data)
    options[idx.OBJTYPE] = metis["cut"]  # minimise the edge cut, as DGL asks
    options[idx.SEED] = int(seed) + 1
    scalars = np.array([n, ncon, int(num_parts), 0], dtype=np.int64)  # nvtxs ncon nparts objval
    part = np.zeros(n, dtype=np.int64)
    addr = scalars.ctypes.data
    printed: list[str] = []
    with _METIS_LOCK, _stdout_fd_captured(printed):
        ret = metis["lib"].METIS_PartGraphKway(
            addr, addr + 8, xadj.ctypes.data, adjncy.ctypes.data,
            None if weights is None else weights.ctypes.data, None, None, addr + 16,
            None, None, options.ctypes.data, addr + 24, part.ctypes.data)
    said = " ".join(line.strip(" *\t") for line in "".join(printed).splitlines() if line.strip())
    if messages is not None and said:
        messages.append(said)
    if ret != 1:  # METIS_OK
        kind = {-2: "input error", -3: "out of memory"}.get(ret, f"error {ret}")
        raise RuntimeError(f"METIS failed ({kind})" + (f": {said}" if said else ""))
    return part


def _edge_keys(src: np.ndarray, dst: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """``src * n + dst`` into ``out`` (int64), in place: no edge-length temporaries."""
    np.multiply(src, n, out=out, casting="unsafe")
    np.add(out, dst, out=out, casting="unsafe")
    return out


def _symmetric_csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """METIS's input: the CSR (``xadj``, ``adjncy``, int64) of the symmetrised simple graph
    (self-loops and duplicates dropped), rows sorted.

    A graph already stored that way (sorted by (src, dst), no duplicates or self-loops, both
    directions; the synthetic graphs and the bundled datasets) is used as it is: ``adjncy`` is
    ``dst`` itself, so METIS gets the edges without a copy. Otherwise both directions are
    sorted and deduplicated in one int64 key array. Either way the peak is about two int64
    keys per directed edge, never the Python-object or per-direction temporaries."""
    m = int(src.shape[0])
    key = _edge_keys(src, dst, n, np.empty(m, dtype=np.int64))
    simple = bool(m == 0 or (np.all(key[1:] > key[:-1]) and not np.any(src == dst)))
    if simple:
        rev = _edge_keys(dst, src, n, np.empty(m, dtype=np.int64))
        rev.sort()
        simple = bool(np.array_equal(key, rev))
        del rev
    if simple and src.dtype == np.int64 and dst.dtype == np.int64:
        del key
        xadj = np.searchsorted(src, np.arange(n + 1, dtype=np.int64)).astype(np.int64)
        return xadj, np.ascontiguousarray(dst)
    del key
    keep = src != dst
    k = int(keep.sum())
    both = np.empty(2 * k, dtype=np.int64)
    if k == m:
        _edge_keys(src, dst, n, both[:k])
        _edge_keys(dst, src, n, both[k:])
    else:
        both[:k] = src[keep]
        both[:k] *= n
        both[:k] += dst[keep]
        both[k:] = dst[keep]
        both[k:] *= n
        both[k:] += src[keep]
    del keep
    both.sort()
    if both.shape[0]:
        first = np.empty(both.shape[0], dtype=bool)
        first[0] = True
        np.not_equal(both[1:], both[:-1], out=first[1:])
        both = both[first]
        del first
    xadj = np.searchsorted(both, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    np.remainder(both, n, out=both)
    return xadj, both


def _pair_hash(a: np.ndarray, b: np.ndarray, seed: int) -> np.ndarray:
    """A seeded 64-bit hash (splitmix64 finaliser) of the unordered pair {a, b}: both
    directions of an edge get the same value, so sampling by it keeps the graph symmetric."""
    lo, hi = np.minimum(a, b).astype(np.uint64), np.maximum(a, b).astype(np.uint64)
    x = lo * np.uint64(0x9E3779B97F4A7C15)
    x ^= hi + np.uint64((0xD1B54A32D192ED03 * (seed + 1)) & 0xFFFFFFFFFFFFFFFF)
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        x ^= x >> np.uint64(shift)
        x *= np.uint64(mult)
    x ^= x >> np.uint64(31)
    return x


def _sample_csr(xadj: np.ndarray, adjncy: np.ndarray, fraction: float, seed: int,
                chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """Keep each undirected edge of a symmetric CSR with probability ``fraction`` (seeded
    hash of the pair, both directions together), in chunks: one bool per entry extra."""
    n, m = xadj.shape[0] - 1, adjncy.shape[0]
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    keep = np.empty(m, dtype=bool)
    counts = np.zeros(n, dtype=np.int64)
    for lo in range(0, m, chunk):
        hi = min(lo + chunk, m)
        rows = np.searchsorted(xadj, np.arange(lo, hi, dtype=np.int64), side="right") - 1
        np.less(_pair_hash(rows, adjncy[lo:hi], seed), threshold, out=keep[lo:hi])
        counts += np.bincount(rows[keep[lo:hi]], minlength=n)
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out, adjncy[keep]


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
    ``entries_used`` under ``metis``); False gives METIS every edge. Before it starts, a partitioning that would need more memory than the
    machine has available is refused with a SpecError naming both (``GNNSCHED_NO_MEMCHECK=1``
    skips the check). DGL's progress prints and METIS's complaints are swallowed unless
    ``quiet=False``.
    """
    from gnnsched.compat import dgl

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
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise SpecError(str(out), "", "output directory is not empty", "an empty directory")
        if not (out / META_FILE).exists():
            raise SpecError(str(out), "", f"refusing to overwrite a non-empty directory with "
                            f"no {META_FILE}", "an empty directory or an old gnnsched partition")
        for child in out.iterdir():  # replace an old partition cleanly: no stale part dirs
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    name = _graph_name(graph.name)
    train_types = None
    if method == "metis" and balance_train and graph.train_mask.any():
        train_types = graph.train_mask.astype(np.int64)
    sink: Any = io.StringIO() if quiet else sys.stderr  # never pollute stdout (CLI --json)
    assigned: np.ndarray
    metis_meta: dict[str, Any] | None = None
    try:
        if method == "metis":
            stage("metis")
            vwgt = metis_vertex_weights(n, graph.dst, train_types, balance_edges=balance_edges)
            said: list[str] = []
            sizes: dict[str, Any] = {}
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
            metis_meta = {"library": _metis()["library"] if num_parts > 1 else None,
                          "seed": seed + 1 if num_parts > 1 else None,  # as METIS got it
                          "ncon": 1 if vwgt is None else int(vwgt.shape[1]),
                          "balanced": balanced, "entries": sizes.get("entries"),
                          "entries_used": sizes.get("kept")}
            del vwgt, train_types
        else:
            dgl.seed(seed)  # DGL's random assignment, as its partition_graph draws it
            assigned = np.asarray(dgl.random.choice(num_parts, n).numpy(), dtype=np.int64)
        empty = np.flatnonzero(np.bincount(assigned, minlength=num_parts) == 0)
        if empty.size and num_parts > 1:
            raise RuntimeError(f"{method.upper()} left part(s) {', '.join(map(str, empty))} "
                               "empty and DGL's format cannot hold an empty part"
                               + (f" (METIS: {said[0]})" if method == "metis" and said else ""))
        t_dgl = time.perf_counter()
        if writer == "gnnsched":
            orig_nids = write_partitions(graph, assigned, num_parts, out, name, method)
        else:
            stage("dgl partition_graph")
            g = graph.to_dgl()
            with contextlib.redirect_stdout(sink), _dgl_takes_assignment(assigned, num_parts):
                orig_nids_t, _ = dgl.distributed.partition_graph(
                    g, name, num_parts, str(out), part_method=method,
                    balance_edges=balance_edges and method == "metis",
                    return_mapping=True,
                )
            del g
            orig_nids = np.asarray(orig_nids_t.numpy(), dtype=np.int64)
            del orig_nids_t
    except (dgl.DGLError, AssertionError, IndexError, RuntimeError) as exc:
        # e.g. METIS asked for more parts than the graph can be cut into.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError("partition", "num_parts", f"DGL could not partition {graph.name!r} "
                        f"({graph.num_nodes} nodes) into {num_parts} parts with {method}: "
                        f"{first}", "fewer parts or method='random'") from None
    dgl_seconds = time.perf_counter() - t_dgl

    stage("stats")
    config = out / f"{name}.json"
    dgl_meta = json.loads(config.read_text())
    node_ranges = _only(dgl_meta["node_map"])
    edge_ranges = _only(dgl_meta["edge_map"])
    node_part = np.empty(n, dtype=np.int32)
    for p, (lo, hi) in enumerate(node_ranges):
        node_part[orig_nids[lo:hi]] = p
    if not np.array_equal(node_part, assigned):
        raise RuntimeError(f"the partitions written in {out} differ from the assignment "
                           "they were made from")
    del assigned
    part_nodes = [int(hi - lo) for lo, hi in node_ranges]
    part_edges = [int(hi - lo) for lo, hi in edge_ranges]

    cut_edges, halo = _cut_and_halo(graph.src, graph.dst, node_part, num_parts)
    part_train = np.bincount(node_part[graph.train_mask], minlength=num_parts)
    part_val = np.bincount(node_part[graph.val_mask], minlength=num_parts)
    part_test = np.bincount(node_part[graph.test_mask], minlength=num_parts)
    mean_nodes = n / num_parts
    mean_edges = m / num_parts
    balance = max(part_nodes) / mean_nodes if n else 1.0
    edge_balance = max(part_edges) / mean_edges if m else 1.0

    np.save(out / NODE_PART_FILE, node_part)
    np.save(out / ORIG_NIDS_FILE, orig_nids)
    stage("checksums")
    checksums = {
        str(f.relative_to(out)): sha256_file(f)
        for f in sorted(out.rglob("*")) if f.is_file() and f.name != META_FILE
    }
    seconds = time.perf_counter() - t0

    report = PartitionReport(
        name=graph.name, out_dir=str(out), config=str(config), method=method,
        num_parts=num_parts, num_nodes=n, num_edges=m, feature_dim=graph.feature_dim,
        num_classes=graph.num_classes, edge_cut=cut_edges / m if m else 0.0,
        cut_edges=cut_edges, balance=balance, edge_balance=edge_balance,
        part_nodes=part_nodes, part_edges=part_edges, part_halo_nodes=halo.tolist(),
        part_train=part_train.tolist(), seconds=seconds, dgl_seconds=dgl_seconds,
    )
    meta = {
        "format": FORMAT, "version": FORMAT_VERSION,
        "dataset": graph.name, "graph_name": name, "dgl_config": config.name,
        "num_nodes": n, "num_edges": m, "num_parts": num_parts, "method": method,
        "seed": seed, "balance_edges": balance_edges, "balance_train": balance_train,
        "metis": metis_meta, "normalize": graph.meta.get("normalize", "none"),
        "feature_dim": graph.feature_dim, "num_classes": graph.num_classes,
        "split": graph.meta.get("split", 0),
        "edge_cut": report.edge_cut, "cut_edges": cut_edges,
        "balance": balance, "edge_balance": edge_balance,
        "parts": [
            {"nodes": part_nodes[i], "edges": part_edges[i], "halo_nodes": int(halo[i]),
             "train": int(part_train[i]), "val": int(part_val[i]), "test": int(part_test[i])}
            for i in range(num_parts)
        ],
        "node_part": NODE_PART_FILE, "orig_nids": ORIG_NIDS_FILE,
        "dataset_meta": graph.meta,
        "seconds": seconds, "dgl_seconds": dgl_seconds,
        "sha256": checksums,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return report


@dataclass
class PartitionSet:
    """An on-disk partitioning, validated: counts from ``gnnsched.json``, data from DGL's files.

    ``node_part[orig_id]`` is the owning part; ``orig_nids[new_id]`` the original id of a
    renumbered node and ``new_nids[orig_id]`` the reverse.
    """

    root: Path
    meta: dict[str, Any]
    config: Path
    node_part: np.ndarray
    orig_nids: np.ndarray
    new_nids: np.ndarray = field(repr=False)
    dgl_meta: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return str(self.meta["dataset"])

    @property
    def method(self) -> str:
        return str(self.meta["method"])

    @property
    def num_parts(self) -> int:
        return int(self.meta["num_parts"])

    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def feature_dim(self) -> int:
        return int(self.meta["feature_dim"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    def part_nodes(self, i: int) -> np.ndarray:
        """Original ids of the nodes part ``i`` owns, in new-id order (no graph load)."""
        lo, hi = self.node_range(i)
        return self.orig_nids[lo:hi]

    def node_range(self, i: int) -> tuple[int, int]:
        """The contiguous range of new ids that part ``i`` owns."""
        if not self.dgl_meta:
            self.dgl_meta = json.loads(self.config.read_text())
        lo, hi = _only(self.dgl_meta["node_map"])[i]
        return int(lo), int(hi)

    def load_part(self, i: int) -> LocalPart:
        """Load part ``i`` with DGL (``dgl.distributed.load_partition``)."""
        from gnnsched.compat import dgl

        if not 0 <= i < self.num_parts:
            raise SpecError(str(self.root), "part", f"part {i} does not exist",
                            f"0..{self.num_parts - 1}")
        try:
            local, node_feats, _, book, *_ = dgl.distributed.load_partition(str(self.config), i)
        except Exception as exc:  # DGL asserts or fails to parse: name the file
            raise SpecError(str(self.config), f"part-{i}", f"DGL could not load it ({exc})",
                            "re-run gnnsched partition") from None
        for key in NDATA:
            if f"{_NTYPE}/{key}" not in node_feats:
                raise SpecError(str(self.config), f"part-{i}.node_feats",
                                f"has no {key!r} tensor", ", ".join(NDATA))
        inner = local.ndata["inner_node"].bool()
        inner_local = inner.nonzero().flatten()
        inner_new = local.ndata[dgl.NID][inner].numpy().astype(np.int64)
        feats = {k: node_feats[f"{_NTYPE}/{k}"] for k in NDATA}
        return LocalPart(
            part_id=i, graph=local, book=book, inner_local=inner_local,
            inner_new_ids=inner_new, inner_orig_ids=self.orig_nids[inner_new],
            features=feats["feat"], labels=feats["label"],
            train_mask=feats["train_mask"].bool(), val_mask=feats["val_mask"].bool(),
            test_mask=feats["test_mask"].bool(),
        )

    def full_graph(self) -> Graph:
        """Reassemble the whole graph in original ids from the part files.

        Edges come back sorted by (src, dst), the ``.npz`` convention, so a graph loaded from
        a schema file round-trips exactly.
        """
        from gnnsched.compat import dgl

        n, f = self.num_nodes, self.feature_dim
        features = np.zeros((n, f), dtype=np.float32)
        labels = np.zeros(n, dtype=np.int64)
        masks = {k: np.zeros(n, dtype=bool) for k in MASK_KEYS}
        keys: list[np.ndarray] = []
        for i in range(self.num_parts):
            part = self.load_part(i)
            rows = part.inner_orig_ids
            features[rows] = part.features.numpy()
            labels[rows] = part.labels.numpy()
            for k in MASK_KEYS:
                masks[k][rows] = getattr(part, k).numpy()
            g = part.graph
            u, v = g.edges()
            own = g.edata["inner_edge"].bool() if "inner_edge" in g.edata else None
            if own is not None:
                u, v = u[own], v[own]
            gid = g.ndata[dgl.NID].numpy()
            src = self.orig_nids[gid[u.numpy()]]
            dst = self.orig_nids[gid[v.numpy()]]
            keys.append(src * n + dst)
        key = np.sort(np.concatenate(keys)) if keys else np.empty(0, np.int64)
        if key.shape[0] != self.num_edges:
            raise SpecError(str(self.root), "num_edges", f"parts hold {key.shape[0]} edges, "
                            f"{META_FILE} says {self.num_edges}", "re-run gnnsched partition")
        src, dst = np.divmod(key, n)
        return Graph(
            name=self.name, num_nodes=n, src=src, dst=dst, features=features, labels=labels,
            train_mask=masks["train_mask"], val_mask=masks["val_mask"],
            test_mask=masks["test_mask"], num_classes=self.num_classes,
            meta={"source": str(self.root), "split": self.meta.get("split", 0),
                  "partitioned": True},
        )

    def verify(self) -> None:
        """Re-hash every file listed in ``gnnsched.json``; SpecError naming the first bad one."""
        verify_checksums(self.root, self.meta)


def verify_checksums(root: str | Path, meta: dict[str, Any] | None = None, *,
                     parts: Collection[int] | None = None, shared: bool = True) -> int:
    """Re-hash partition files against the sha256 sums in ``gnnsched.json`` before trusting
    them; a SpecError names the first missing or corrupted file (in path order).

    ``parts``: only the files of these parts (``partN/...``), None: of every part; ``shared``:
    also the files outside the part folders (node map, DGL config). A store checks only what
    it loads, so the cost is spread over the stores. ``meta``: the already-read
    ``gnnsched.json``. Returns the bytes hashed."""
    root = Path(root)
    if meta is None:
        meta = json.loads((root / META_FILE).read_text())
    sums = meta.get("sha256")
    if not isinstance(sums, dict) or not sums:
        raise SpecError(str(root / META_FILE), "sha256", "is missing or empty",
                        "re-run gnnsched partition")
    folders = None if parts is None else {f"part{p}" for p in parts}
    hashed = 0
    for rel, expected in sorted(sums.items()):
        top = rel.split("/", 1)[0] if "/" in rel else None
        if not (shared if top is None else folders is None or top in folders):
            continue
        path = root / rel
        if not path.is_file():
            raise SpecError(str(path), "", "partition file is missing",
                            f"listed in {META_FILE}; restore it or re-run gnnsched partition")
        actual = sha256_file(path)
        if actual != expected:
            raise SpecError(str(path), "sha256", f"checksum mismatch: expected "
                            f"{expected[:16]}..., got {actual[:16]}... (corrupted or changed "
                            "after partitioning)", "re-run gnnsched partition")
        hashed += path.stat().st_size
    return hashed


def open_partitions(path: str | Path, *, verify: bool = True) -> PartitionSet:
    """Open a partition directory written by :func:`partition_graph`.

    With ``verify`` every file is re-hashed against ``gnnsched.json`` first (about 1 s/GB),
    so corruption is reported as a SpecError that names the file.
    """
    root = Path(path)
    if root.is_file():  # accept the gnnsched.json or the DGL json path as well
        root = root.parent
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise SpecError(str(meta_path), "", "not found: not a gnnsched partition directory",
                        "a directory written by `gnnsched partition`")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(str(meta_path), "", f"is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SpecError(str(meta_path), "format", "not a gnnsched partition file", FORMAT)
    for key in ("num_parts", "num_nodes", "num_edges", "feature_dim", "num_classes",
                "dgl_config", "dataset", "method"):
        if key not in meta:
            raise SpecError(str(meta_path), key, "is missing (required)")
    if verify:
        verify_checksums(root, meta)
    config = root / str(meta["dgl_config"])
    if not config.is_file():
        raise SpecError(str(config), "", "DGL partition config is missing")
    try:
        dgl_meta = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(str(config), "", f"is not valid JSON ({exc})") from None
    for key in ("num_parts", "num_nodes", "num_edges"):
        if dgl_meta.get(key) != meta[key]:
            raise SpecError(str(config), key, f"is {dgl_meta.get(key)!r} but {META_FILE} says "
                            f"{meta[key]!r}", "files from one partitioning run")
    n = int(meta["num_nodes"])
    arrays = {}
    for key, default in (("node_part", NODE_PART_FILE), ("orig_nids", ORIG_NIDS_FILE)):
        f = root / str(meta.get(key, default))
        try:
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise SpecError(str(f), "", f"cannot be read ({exc})") from None
        if arr.shape != (n,) or arr.dtype.kind not in "iu":
            raise SpecError(str(f), "", f"must be an integer array of shape [{n}], got "
                            f"{arr.dtype} {arr.shape}")
        arrays[key] = arr
    orig_nids = arrays["orig_nids"].astype(np.int64, copy=False)
    node_part = arrays["node_part"]
    if n and (node_part.min() < 0 or node_part.max() >= int(meta["num_parts"])):
        raise SpecError(str(root / NODE_PART_FILE), "", "part ids out of range",
                        f"0..{int(meta['num_parts']) - 1}")
    if n and (orig_nids.min() < 0 or orig_nids.max() >= n
              or not np.all(np.bincount(orig_nids, minlength=n) == 1)):
        raise SpecError(str(root / ORIG_NIDS_FILE), "", "is not a permutation of the node ids")
    new_nids = np.empty(n, dtype=np.int64)
    new_nids[orig_nids] = np.arange(n, dtype=np.int64)
    return PartitionSet(root=root, meta=meta, config=config, node_part=node_part,
                        orig_nids=orig_nids, new_nids=new_nids, dgl_meta=dgl_meta)


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
