"""The node -> part assignment with METIS, reproducibly (:func:`metis_assignment`).

METIS k-way runs through the METIS C library that ``pymetis`` ships (ctypes, seeded, with
DGL's multi-constraint balance, :func:`metis_vertex_weights`); on graphs too big for METIS
within 4x the graph's size, it is given a seeded sample of the edges. DGL's own METIS call
cannot be made reproducible: it hard-codes METIS's "drop edges" coarsening, whose
median-weight lookup reads past the filled part of a work array (uninitialised heap memory;
valgrind flags ``CreateCoarseGraph``), so the same graph gives a different assignment from
call to call, and it passes no seed. Same graph + same seed -> same assignment.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from typing import Any

import numpy as np

from gnnsched.spec import SpecError

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


__all__ = ["metis_assignment", "metis_vertex_weights"]
