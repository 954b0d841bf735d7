"""Which nodes' features are hottest: the order feature caches fill in.

A mini-batch's input nodes are reached through sampled in-edges, so a node with more
in-edges is an input more often: on the products-like scale graph, the in-degree order's
top 20% of another partition's nodes covers about 27% of the remote input rows, against 20%
for any order (GNNLab's pre-sampling does a few points better; in-degree is its cheap
fallback, and needs no sampling).

The order is computed one partition at a time from DGL's partition files (a part's graph
holds every in-edge of its own nodes), so no process holds the whole graph, and it is
written once beside the partitions (``hot_order.npy``), or under the user cache when that
directory is read-only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from .partition import PartitionSet

HOT_FILE = "hot_order.npy"


def in_degrees(pset: PartitionSet) -> np.ndarray:
    """In-degree of every node (original ids), summed part by part."""
    import json

    from gnnsched.compat import dgl

    meta = json.loads(pset.config.read_text())
    deg = np.zeros(pset.num_nodes, dtype=np.int64)
    for i in range(pset.num_parts):
        graphs, _ = dgl.load_graphs(str(pset.root / meta[f"part-{i}"]["part_graph"]))
        g = graphs[0]
        inner = g.ndata["inner_node"].bool()
        local_deg = g.in_degrees().numpy()[inner.numpy()]
        new_ids = g.ndata[dgl.NID][inner].numpy().astype(np.int64)
        deg[pset.orig_nids[new_ids]] = local_deg
        del graphs, g
    return deg


def hot_order(pset: PartitionSet) -> np.ndarray:
    """Node ids (original), most in-edges first (ties by id): loaded, or computed and kept."""
    for path in _candidates(pset):
        if path.is_file():
            order = np.load(path, allow_pickle=False)
            if order.shape == (pset.num_nodes,):
                return order
    deg = in_degrees(pset)
    order = np.argsort(-deg, kind="stable").astype(np.int64)
    for path in _candidates(pset):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
            np.save(tmp, order)
            tmp.replace(path)
            break
        except OSError:
            continue
    return order


def _candidates(pset: PartitionSet) -> list[Path]:
    home = Path(os.environ.get("GNNSCHED_CACHE", Path.home() / ".cache" / "gnnsched"))
    key = str(pset.meta.get("sha256", {}).get("node_part.npy", ""))[:16] or \
        hashlib.sha256(str(pset.root.resolve()).encode()).hexdigest()[:16]
    return [pset.root / HOT_FILE, home / "hot" / f"{key}-{HOT_FILE}"]


def cache_nodes(order: np.ndarray, node_part: np.ndarray, part_store: list[int],
                machine: int, rows: int) -> np.ndarray:
    """The ``rows`` hottest nodes that ``machine`` does not store (a machine's own rows are
    read from its stores' shared memory, so caching them would only duplicate them)."""
    if rows <= 0:
        return np.empty(0, dtype=np.int64)
    owner = np.asarray(part_store, dtype=np.int64)[node_part[order]]
    return order[owner != machine][:rows]


__all__ = ["HOT_FILE", "cache_nodes", "hot_order", "in_degrees"]
