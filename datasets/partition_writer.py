"""Write DGL's distributed partition format one part at a time, in bounded memory.

Why not ``dgl.distributed.partition_graph``: it builds a homogeneous copy of the graph, a
reshuffled copy, in- and out-CSR, and every part's halo subgraph before it writes the first
file, so on the 1M-node / 40M-edge scale graph the partitioning step peaked at 9.2x the
graph's in-memory size. This writer produces the same files from the same node -> part
assignment while holding at most one part's subgraph, plus three edge-length arrays
(:func:`estimate_partition_bytes` says how much).

What is identical to DGL 2.1 (checked by tests/datasets/test_partition_memory.py against DGL's own
writer with the same assignment): the node renumbering (DGL sorts the assignment with
``torch.sort``, which is not stable; the same call here gives the same permutation), the
node map, every part's node list (inner nodes, then halo nodes in the order DGL finds them:
sources of the in-edges in in-CSR order, then destinations of out-edges), ``_ID``,
``inner_node`` and ``part_id`` node data, the node features, the config JSON and the per-part
edge counts (edge map). What differs: the numbering of edges *inside* a part. DGL's edge
reassignment sorts edges by part with an unstable ``std::sort`` on equal keys (a
homogeneous graph still carries an edge-type column), which scatters a part's edges in an
arbitrary order; here a part's edges are numbered in in-CSR order (by destination, then by
original edge id). Both give each part a contiguous edge-id range and the same edges, with
the same halo flags; nothing in gnnsched or DistDGL's sampling depends on which edge id
within a part an edge has (the graphs carry no edge features).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.spec import SpecError

from .npz import MASK_KEYS, Graph

LOG = logging.getLogger("gnnsched.partition")
NTYPE = "_N"
ETYPE = "_N:_E:_N"  # DGL's canonical edge type of a homogeneous graph, as the config spells it
NO_MEMCHECK_ENV = "GNNSCHED_NO_MEMCHECK"
GB = 1e9


def stage(name: str) -> None:
    """Mark the start of a partitioning stage (a DEBUG record on ``gnnsched.partition`` with
    ``extra={"stage": name}``): the memory bench attributes peak RSS to stages by these."""
    LOG.debug("stage %s", name, extra={"stage": name})


# ------------------------------------------------------------------------------ memory


def graph_nbytes(num_nodes: int, num_edges: int, feature_dim: int) -> int:
    """The in-memory size of a :class:`Graph`: int64 src and dst per directed edge, float32
    features, int64 labels and three boolean masks per node (as ``graph_bytes`` in
    gnnsched.evaluation.scale counts it)."""
    return 16 * int(num_edges) + int(num_nodes) * (4 * int(feature_dim) + 8 + 3)


RUNTIME_BYTES = 600_000_000  # interpreter, numpy, torch and DGL (0.45 GB measured) + margin
MIN_METIS_ENTRIES = 1 << 24  # never sample METIS's input below this: small graphs run whole
GOAL_X = 4.0  # the partition step's peak memory goal, in graph sizes (issue 26)


def metis_levels(num_parts: int) -> int:
    """How many graphs METIS holds at once while coarsening for a k-way cut: it halves the
    node count until ``n / (20 log2 k)`` nodes are left (plus the input and a margin)."""
    return int(np.ceil(np.log2(20 * max(1.0, np.log2(max(num_parts, 2)))))) + 1


def metis_entry_bytes(num_parts: int) -> int:
    """Bytes per adjacency entry of METIS's input, at worst: our copy of the entry, METIS's
    unit edge weight, and an adjacency + weight entry at each coarser level (a graph whose
    edges do not contract, such as the scale graph, keeps ~95% of them at every level:
    measured 120 bytes per entry with 4 parts at 40M entries)."""
    return 16 + 16 * metis_levels(num_parts)


def metis_max_entries(num_nodes: int, num_edges: int, feature_dim: int, num_parts: int
                      ) -> int:
    """How many adjacency entries METIS may get so that the partition step stays within
    :data:`GOAL_X` times the graph's size (graph, runtime, METIS's graphs and the vertex
    weights), never fewer than :data:`MIN_METIS_ENTRIES`: a function of the sizes only,
    so the assignment stays a function of graph and seed."""
    graph = graph_nbytes(num_nodes, num_edges, feature_dim)
    spare = GOAL_X * graph - graph - RUNTIME_BYTES - num_edges - 48 * num_nodes
    return max(MIN_METIS_ENTRIES, int(spare // metis_entry_bytes(num_parts)))


def estimate_partition_bytes(num_nodes: int, num_edges: int, feature_dim: int,
                             num_parts: int) -> int:
    """Peak extra memory (beyond the graph itself) that :func:`partition_graph` needs, an
    upper estimate from the sizes alone.

    METIS (when ``num_parts > 1``): its graphs for at most :func:`metis_max_entries` entries
    (:func:`metis_entry_bytes` each), the vertex weights and the runtime. Writing: the edge
    order (4-8 bytes each for source and destination, 8 for the permutation while it is
    computed) and one part's subgraph (about 40 bytes per edge of the part, its local ids,
    edge ids and DGL's copy) and feature rows."""
    n, m, d, k = int(num_nodes), int(num_edges), int(feature_dim), max(int(num_parts), 1)
    idx = 4 if max(n, m) < 2**31 else 8
    metis = 0
    if k > 1:
        entries = min(m, metis_max_entries(n, m, d, k))
        metis = entries * metis_entry_bytes(k) + m + 48 * n
    write = (2 * idx + 8) * m + 40 * -(-m // k) + 2 * -(-n // k) * (4 * d + 16) + 32 * n
    return int(max(metis, write) + 64 * 2**20)


def mem_available() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(what: str, need: int, detail: str = "") -> None:
    """Refuse to start a step that needs ``need`` more bytes than the machine has available
    (SpecError naming both), instead of being OOM-killed half way through. Skipped where
    ``GNNSCHED_NO_MEMCHECK=1`` or /proc/meminfo is missing."""
    if os.environ.get(NO_MEMCHECK_ENV, "") not in ("", "0"):
        return
    avail = mem_available()
    if avail is None or need <= avail:
        return
    raise SpecError(what, "memory", f"needs about {need / GB:.2f} GB more memory"
                    + (f" ({detail})" if detail else "")
                    + f" but only {avail / GB:.2f} GB is available (MemAvailable)",
                    f"free memory, a smaller graph, or {NO_MEMCHECK_ENV}=1 to try anyway")


# ------------------------------------------------------------------------------ writer


def _idx_dtype(*sizes: int) -> type[np.integer]:
    return np.int32 if max(sizes, default=0) < 2**31 else np.int64


def dgl_order(node_part: np.ndarray) -> np.ndarray:
    """new id -> original id, exactly as DGL's ``reshuffle_graph`` renumbers (``torch.sort``
    of the int64 assignment; not stable, hence torch and not numpy)."""
    import torch

    _, new2old = torch.sort(torch.from_numpy(np.ascontiguousarray(node_part, np.int64)))
    return new2old.numpy()


def _first_seen(values: np.ndarray) -> np.ndarray:
    """The distinct values in order of first appearance."""
    if values.shape[0] == 0:
        return values
    _, first = np.unique(values, return_index=True)
    first.sort()
    return values[first]


def _save_part(part_dir: Path, graph: Any, node_feats: dict[str, Any]) -> None:
    from gnnsched.compat import dgl

    part_dir.mkdir(parents=True, exist_ok=True)
    dgl.data.utils.save_tensors(str(part_dir / "node_feat.dgl"), node_feats)
    dgl.data.utils.save_tensors(str(part_dir / "edge_feat.dgl"), {})
    dgl.data.utils.save_graphs(str(part_dir / "graph.dgl"), [graph])


def _node_feats(graph: Graph, rows: np.ndarray | slice) -> dict[str, Any]:
    """The node tensors DGL stores for the inner nodes ``rows`` (original ids), in the order
    :meth:`Graph.to_dgl` sets them (masks as bool tensors: DGL stores them as uint8)."""
    import torch

    out = {f"{NTYPE}/feat": torch.from_numpy(np.ascontiguousarray(graph.features[rows],
                                                                   np.float32)),
           f"{NTYPE}/label": torch.from_numpy(np.ascontiguousarray(graph.labels[rows],
                                                                    np.int64))}
    for key in MASK_KEYS:
        out[f"{NTYPE}/{key}"] = torch.from_numpy(
            np.ascontiguousarray(getattr(graph, key)[rows], bool))
    return out


def _config(name: str, graph: Graph, method: str, num_parts: int,
            node_ranges: list[list[int]], edge_ranges: list[list[int]]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "graph_name": name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "part_method": method, "num_parts": num_parts, "halo_hops": 1,
        "node_map": {NTYPE: node_ranges}, "edge_map": {ETYPE: edge_ranges},
        "ntypes": {NTYPE: 0}, "etypes": {ETYPE: 0},
    }
    for i in range(num_parts):
        meta[f"part-{i}"] = {"node_feats": f"part{i}/node_feat.dgl",
                             "edge_feats": f"part{i}/edge_feat.dgl",
                             "part_graph": f"part{i}/graph.dgl"}
    return meta


def write_partitions(graph: Graph, node_part: np.ndarray, num_parts: int, out: Path,
                     name: str, method: str,
                     on_part: Callable[[int], None] | None = None) -> np.ndarray:
    """Write ``graph`` cut by ``node_part`` (original id -> part, every part non-empty) in
    DGL's partition format (``out/NAME.json``, ``out/partK/{graph,node_feat,edge_feat}.dgl``,
    1-hop halo, as ``dgl.distributed.partition_graph`` writes it; see the module docstring).
    Returns new id -> original id (DGL's ``orig_nids``)."""
    from gnnsched.compat import dgl

    n, m = graph.num_nodes, graph.num_edges
    out.mkdir(parents=True, exist_ok=True)
    if num_parts == 1:
        return _write_one_part(graph, out, name, method)

    stage("relabel")
    orig_nids = dgl_order(node_part)
    counts = np.bincount(np.asarray(node_part, np.int64), minlength=num_parts)
    if (counts == 0).any():
        raise ValueError(f"part(s) {', '.join(map(str, np.flatnonzero(counts == 0)))} are "
                         "empty and DGL's format cannot hold an empty part")
    bounds = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    idx = _idx_dtype(n, m)
    new_nids = np.empty(n, dtype=idx)
    new_nids[orig_nids] = np.arange(n, dtype=idx)

    # Edges in new-id in-CSR order: by new destination, ties by original edge id (stable);
    # a part's edges are then one contiguous range, its edge-id range.
    stage("edge order")
    new_dst = new_nids[graph.dst]
    order = np.argsort(new_dst, kind="stable")
    new_dst.sort()  # == new_dst[order], without a second array
    new_src = np.empty(m, dtype=idx)
    for lo in range(0, m, 1 << 24):  # gather in chunks: no edge-length int64 temporary
        hi = min(lo + (1 << 24), m)
        np.take(new_nids, np.take(graph.src, order[lo:hi]), out=new_src[lo:hi])
    del order
    ebounds = np.searchsorted(new_dst, bounds).astype(np.int64)

    local_of = np.full(n, -1, dtype=np.int64)
    for p in range(num_parts):
        stage(f"write part {p}")
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        e0, e1 = int(ebounds[p]), int(ebounds[p + 1])
        s_in, d_in = new_src[e0:e1], new_dst[e0:e1]
        # out-edges of the part's nodes into other parts (DGL keeps them, not as inner edges)
        mask = (new_src >= lo) & (new_src < hi)
        mask[e0:e1] = False
        out_eids = np.flatnonzero(mask)
        del mask
        s_out, d_out = new_src[out_eids], new_dst[out_eids]
        # local ids: inner nodes in new-id order, then halo nodes as DGL meets them
        outside = (s_in < lo) | (s_in >= hi)
        halo_in = _first_seen(s_in[outside])
        del outside
        local_of[lo:hi] = np.arange(hi - lo)
        local_of[halo_in] = np.arange(hi - lo, hi - lo + halo_in.shape[0])
        # DGL then walks the out-CSR (by source, then destination) for sources not seen yet
        by_src = d_out[np.argsort(s_out, kind="stable")]
        halo_out = _first_seen(by_src[local_of[by_src] < 0])
        del by_src
        start = hi - lo + halo_in.shape[0]
        local_of[halo_out] = np.arange(start, start + halo_out.shape[0])
        gids = np.concatenate([np.arange(lo, hi, dtype=np.int64),
                               halo_in.astype(np.int64), halo_out.astype(np.int64)])
        del halo_in, halo_out
        u = np.concatenate([local_of[s_in], local_of[s_out]])
        v = np.concatenate([d_in.astype(np.int64) - lo, local_of[d_out]])
        local_of[gids] = -1
        del s_out, d_out
        g = _dgl_part(dgl, u, v, gids, bounds, num_parts, hi - lo,
                      np.concatenate([np.arange(e0, e1, dtype=np.int64), out_eids]), e1 - e0)
        del u, v, out_eids
        _save_part(out / f"part{p}", g, _node_feats(graph, orig_nids[lo:hi]))
        del g, gids
        if on_part is not None:
            on_part(p)
    del new_src, new_dst, local_of
    node_ranges = [[int(bounds[i]), int(bounds[i + 1])] for i in range(num_parts)]
    edge_ranges = [[int(ebounds[i]), int(ebounds[i + 1])] for i in range(num_parts)]
    _write_config(out, _config(name, graph, method, num_parts, node_ranges, edge_ranges))
    return orig_nids


def _dgl_part(dgl: Any, u: np.ndarray, v: np.ndarray, gids: np.ndarray, bounds: np.ndarray,
              num_parts: int, num_inner: int, eids: np.ndarray, num_inner_edges: int) -> Any:
    """One part's local DGLGraph with the node and edge data DGL's writer stores."""
    import torch

    g = dgl.graph((torch.from_numpy(u), torch.from_numpy(v)), num_nodes=gids.shape[0],
                  idtype=torch.int64)
    part_id = np.searchsorted(bounds, gids, side="right") - 1
    inner_node = np.zeros(gids.shape[0], dtype=np.uint8)
    inner_node[:num_inner] = 1
    inner_edge = np.zeros(eids.shape[0], dtype=np.uint8)
    inner_edge[:num_inner_edges] = 1
    g.ndata["part_id"] = torch.from_numpy(part_id.astype(np.int64, copy=False))
    g.ndata["inner_node"] = torch.from_numpy(inner_node)
    g.ndata[dgl.NID] = torch.from_numpy(gids)
    g.edata["inner_edge"] = torch.from_numpy(inner_edge)
    g.edata[dgl.EID] = torch.from_numpy(eids)
    return g


def _write_one_part(graph: Graph, out: Path, name: str, method: str) -> np.ndarray:
    """One part: DGL keeps ids and edge order and writes its homogeneous copy's type columns
    (``_TYPE``) beside ``_ID`` and the inner flags; so does this."""
    import torch

    from gnnsched.compat import dgl

    stage("write part 0")
    n, m = graph.num_nodes, graph.num_edges
    g = dgl.graph((torch.from_numpy(graph.src), torch.from_numpy(graph.dst)), num_nodes=n,
                  idtype=torch.int64)
    g.ndata[dgl.NTYPE] = torch.zeros(n, dtype=torch.int32)
    g.ndata[dgl.NID] = torch.arange(n, dtype=torch.int64)
    g.ndata["inner_node"] = torch.ones(n, dtype=torch.uint8)
    g.edata[dgl.ETYPE] = torch.zeros(m, dtype=torch.int32)
    g.edata[dgl.EID] = torch.arange(m, dtype=torch.int64)
    g.edata["inner_edge"] = torch.ones(m, dtype=torch.uint8)
    _save_part(out / "part0", g, _node_feats(graph, slice(None)))
    del g
    _write_config(out, _config(name, graph, method, 1, [[0, n]], [[0, m]]))
    return np.arange(n, dtype=np.int64)


def _write_config(out: Path, meta: dict[str, Any]) -> None:
    with open(out / f"{meta['graph_name']}.json", "w") as f:  # as DGL's _dump_part_config
        json.dump(meta, f, sort_keys=False, indent=4)
