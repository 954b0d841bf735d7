"""Measure a cost profile from real DGL neighbour sampling on real partitions.

For every partition ``p`` we draw mini-batches of ``batch_size`` training seeds owned by ``p``
and sample their multi-hop neighbourhoods with ``dgl.dataloading.NeighborSampler`` on the graph
reassembled from the partition files, timing the sampler's CPU seconds. For each mini-batch we
record which partition owns every input node (the feature bytes each store sends) and every
expanded frontier node (the remote hops a sampler sends to each store), then run one real
forward/backward + optimizer step of the job's model on the blocks to time training on this
machine (the reference device: a GPU with ``speed: 1.0`` in a cluster file trains this fast).

This module measures, so it lives with the runtime; the profile's data classes are pure logic
(:mod:`gnnsched.profile`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from gnnsched.compat import dgl
from gnnsched.datasets import PartitionSet
from gnnsched.profile import CostProfile, PartProfile
from gnnsched.spec import JobSpec


def _train_step_timer(job: JobSpec, in_dim: int, num_classes: int) -> tuple[Callable, int]:
    """A closure timing one training step of the job's model; returns (fn, num_params)."""
    from gnnsched.runtime.model import blocks_to_tensors, build_model

    torch.manual_seed(job.seed)
    model = build_model(job.model, in_dim, job.hidden, num_classes, job.layers, job.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=job.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(blocks, feats: torch.Tensor, labels: torch.Tensor) -> float:
        t0 = time.perf_counter()
        model.train()
        out = model(blocks_to_tensors(blocks), feats)
        loss = loss_fn(out, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    return step, sum(p.numel() for p in model.parameters())


# shares of a partition's hottest nodes at which feature-cache coverage is recorded
HOT_GRID = np.array([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0])


def hot_rank(in_deg: np.ndarray, node_part: np.ndarray, num_parts: int) -> np.ndarray:
    """Each node's rank among its partition's nodes by in-degree (most first, ties by id),
    as a share of the partition in [0, 1): a cache of a partition's hottest share x holds
    exactly the nodes whose rank is below x."""
    n = len(in_deg)
    order = np.lexsort((np.arange(n), -in_deg.astype(np.int64), node_part))
    sizes = np.bincount(node_part, minlength=num_parts)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.arange(n) - starts[node_part[order]]
    rank = np.empty(n, dtype=np.float64)
    rank[order] = pos / np.maximum(sizes[node_part[order]], 1)
    return rank


def profile_partitions(pset: PartitionSet, job: JobSpec, *, samples: int = 16,
                       seed: int = 0, progress: Callable[[int], None] | None = None
                       ) -> CostProfile:
    """Profile ``samples`` real mini-batches per partition (fewer if the part has few seeds)."""
    torch.set_num_threads(1)
    graph = pset.full_graph()
    g = graph.to_dgl()
    g = g.formats(["csc"])  # in-edge sampling needs CSC; build it once, outside the timing
    node_part = np.asarray(pset.node_part, dtype=np.int64)
    P = pset.num_parts
    fanouts = list(job.fanouts)
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    feat = torch.from_numpy(np.ascontiguousarray(graph.features, dtype=np.float32))
    labels = torch.from_numpy(graph.labels)
    step, n_params = _train_step_timer(job, graph.feature_dim, graph.num_classes)
    rng = np.random.default_rng(seed)
    train_nodes = np.nonzero(graph.train_mask)[0]
    warm = torch.from_numpy(train_nodes[: job.batch_size])
    inp, _, blocks = sampler.sample_blocks(g, warm)
    step(blocks, feat[inp], labels[warm])  # first step pays one-off allocation: not timed
    rank = hot_rank(np.asarray(g.in_degrees().numpy()), node_part, P)
    coverage: list[np.ndarray] = []
    parts: list[PartProfile] = []
    for p in range(P):
        seeds_p = train_nodes[node_part[train_nodes] == p]
        hits = np.zeros(len(HOT_GRID))
        remote_rows = 0
        rows: dict[str, list] = {k: [] for k in
                                 ("sample_s", "train_s", "edges", "ip", "ic", "ep", "ec")}
        pool = seeds_p if len(seeds_p) else np.nonzero(node_part == p)[0][:1]
        for _ in range(samples):
            k = min(job.batch_size, len(pool))
            batch = torch.from_numpy(rng.choice(pool, size=k, replace=False))
            t0 = time.process_time()
            input_nodes, _, blocks = sampler.sample_blocks(g, batch)
            rows["sample_s"].append(time.process_time() - t0)
            inp_np = input_nodes.numpy()
            remote = rank[inp_np[node_part[inp_np] != p]]
            remote_rows += len(remote)
            hits += np.searchsorted(np.sort(remote), HOT_GRID, side="left")
            owners = np.bincount(node_part[inp_np], minlength=P)
            nz = np.nonzero(owners)[0]
            rows["ip"].append(nz.astype(np.int32))
            rows["ic"].append(owners[nz].astype(np.float64))
            per_part = np.zeros(P)
            edges = 0
            for b in blocks:
                dst_ids = b.dstdata[dgl.NID].numpy()
                deg = b.in_degrees().numpy()
                np.add.at(per_part, node_part[dst_ids], deg)
                edges += int(b.num_edges())
            nz = np.nonzero(per_part)[0]
            rows["ep"].append(nz.astype(np.int32))
            rows["ec"].append(per_part[nz])
            rows["edges"].append(edges)
            rows["train_s"].append(step(blocks, feat[input_nodes], labels[batch]))
        coverage.append(hits / max(remote_rows, 1) if remote_rows else HOT_GRID.copy())
        parts.append(PartProfile(p, int(len(seeds_p)), np.array(rows["sample_s"]),
                                 np.array(rows["train_s"]), np.array(rows["edges"]),
                                 rows["ip"], rows["ic"], rows["ep"], rows["ec"]))
        if progress:
            progress(p)
    grad_bytes = 4 * n_params
    return CostProfile(
        job.profile_key(), P, graph.feature_dim * 4, grad_bytes, 3 * grad_bytes, parts,
        reference=f"cpu ({torch.get_num_threads()} thread, torch {torch.__version__})",
        meta={"dataset": graph.name, "num_nodes": graph.num_nodes,
              "num_edges": graph.num_edges, "samples_per_part": samples, "seed": seed,
              "part_nodes": np.bincount(node_part, minlength=P).astype(int).tolist(),
              "hot_coverage": {
                  "order": "in-degree within each partition (gnnsched.datasets.hot)",
                  "x": HOT_GRID.tolist(), "parts": [c.round(4).tolist() for c in coverage]}})
