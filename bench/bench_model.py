"""Trainer layers vs DGL: forward + backward of gnnsched's model against a ``dgl.nn.SAGEConv``
stack of the same shape, on the same sampled blocks, on CPU.

    python bench/bench_model.py [--nodes 200000] [--degree 40] [--repeats 15] [--threads 1 2]

The batch is realistic: a seeded synthetic graph (:func:`datasets.synthetic.generate`, 100-d
features, 47 classes), DGL's ``NeighborSampler`` with the scale job's fan-outs (15/10/5, input
layer first) and 1024 seeds, and the DGL blocks converted to :class:`runtime.model.Block` as the
trainer receives them. Both models get the same weights (checked: same output), the same
ReLU + dropout between layers (dropout 0.5, same RNG seed per step) and the same loss; each
timed step is ``zero_grad, forward, cross-entropy, backward`` (no optimiser: identical on both).
gnnsched's model gets new ``Block`` objects every step, as the trainer does, so whatever it
derives from the edges is timed; DGL's blocks are reused, so their sparse formats, built in
the warm-up, are not: the comparison leans towards DGL.
The table shows the median of ``--repeats`` steps after warm-up (wall seconds, and CPU seconds
of the process, which a busy box disturbs less), for each thread count, and is written to
``docs/bench/model.json``; ``ratio`` is gnnsched's median over DGL's (below 1: faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gnnsched.compat import dgl
from gnnsched.datasets.synthetic import generate
from gnnsched.runtime.model import Block, blocks_to_tensors, build_model

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "model.json"


class DGLStack(torch.nn.Module):
    """``dgl.nn.SAGEConv(mean)`` layers with ReLU + dropout between, as :class:`GNN`."""

    def __init__(self, dims: list[int], dropout: float) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            dgl.nn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(len(dims) - 1))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def make_batch(nodes: int, degree: float, fanouts: list[int], batch: int, feat_dim: int,
               classes: int, seed: int):
    g = generate(nodes, avg_degree=degree, num_classes=classes, feature_dim=feat_dim,
                 homophily=0.3, feature_noise=1.75, seed=seed)
    graph = dgl.graph((torch.from_numpy(g.src), torch.from_numpy(g.dst)), num_nodes=g.num_nodes)
    dgl.utils.set_num_threads(1)  # DGL's sampling RNG streams depend on the thread count
    dgl.seed(seed)
    torch.manual_seed(seed)
    seeds = torch.randperm(g.num_nodes)[:batch]
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    input_nodes, _, dblocks = sampler.sample_blocks(graph, seeds)
    x = torch.from_numpy(g.features[input_nodes.numpy()]).float()
    y = torch.from_numpy(g.labels[seeds.numpy()]).long()
    return dblocks, x, y


def fresh(blocks: list[Block]) -> list[Block]:
    """New block objects, as the trainer gets every mini-batch: nothing cached from a run."""
    return [Block(b.src, b.dst, b.num_src, b.num_dst) for b in blocks]


def step(model, blocks, x, y, seed: int) -> tuple[float, float]:
    """One forward + backward: (wall seconds, CPU seconds of the whole process)."""
    torch.manual_seed(seed)  # same dropout masks for both models
    if blocks and isinstance(blocks[0], Block):
        blocks = fresh(blocks)
    t0, c0 = time.perf_counter(), time.process_time()
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(blocks, x), y)
    loss.backward()
    return time.perf_counter() - t0, time.process_time() - c0


def time_models(models: dict, x, y, repeats: int, warmup: int) -> dict[str, dict]:
    """Median forward+backward seconds per model, steps interleaved so drift hits both."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
    for r in range(warmup + repeats):
        for name, (model, blocks) in models.items():
            t = step(model, blocks, x, y, r)
            if r >= warmup:
                times[name].append(t)
    return {name: {"median_s": statistics.median(w for w, _ in ts),
                   "min_s": min(w for w, _ in ts),
                   "median_cpu_s": statistics.median(c for _, c in ts),
                   "repeats": len(ts)} for name, ts in times.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--degree", type=float, default=40)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--classes", type=int, default=47)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    dblocks, x, y = make_batch(args.nodes, args.degree, args.fanouts, args.batch, args.features,
                               args.classes, args.seed)
    blocks = blocks_to_tensors(dblocks)
    layers = len(args.fanouts)
    dims = [args.features] + [args.hidden] * (layers - 1) + [args.classes]
    torch.manual_seed(args.seed)
    ours = build_model("sage", args.features, args.hidden, args.classes, layers, args.dropout)
    theirs = DGLStack(dims, args.dropout)
    with torch.no_grad():
        for lo, lt in zip(ours.layers, theirs.layers):
            lt.fc_self.weight.copy_(lo.fc_self.weight)
            lt.fc_self.bias.copy_(lo.fc_self.bias)
            lt.fc_neigh.weight.copy_(lo.fc_neigh.weight)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        diff = float((ours(blocks, x) - theirs(dblocks, x)).abs().max())
    ours.train(), theirs.train()
    shape = [{"num_src": b.num_src, "num_dst": b.num_dst, "edges": b.num_edges} for b in blocks]
    print(f"blocks (input layer first): {shape}; max |ours - dgl| = {diff:.2e}")

    rows = []
    load_before = os.getloadavg()
    for threads in args.threads:
        torch.set_num_threads(threads)
        dgl.utils.set_num_threads(threads)
        res = time_models({"gnnsched": (ours, blocks), "dgl": (theirs, dblocks)}, x, y,
                          args.repeats, args.warmup)
        ratio = res["gnnsched"]["median_s"] / res["dgl"]["median_s"]
        rows.append({"threads": threads, "gnnsched": res["gnnsched"], "dgl": res["dgl"],
                     "ratio": ratio,
                     "cpu_ratio": res["gnnsched"]["median_cpu_s"] / res["dgl"]["median_cpu_s"]})

    print(f"{'threads':>7}  {'gnnsched ms':>11}  {'dgl SAGEConv ms':>15}  {'ours/dgl':>8}  "
          f"{'cpu ms ours':>11}  {'cpu ms dgl':>10}  {'cpu ours/dgl':>12}")
    for r in rows:
        o, d = r["gnnsched"], r["dgl"]
        print(f"{r['threads']:>7}  {1e3 * o['median_s']:>11.1f}  {1e3 * d['median_s']:>15.1f}  "
              f"{r['ratio']:>8.2f}  {1e3 * o['median_cpu_s']:>11.1f}  "
              f"{1e3 * d['median_cpu_s']:>10.1f}  {r['cpu_ratio']:>12.2f}")
    result = {
        "what": "median forward+backward seconds of one mini-batch, gnnsched's SAGE layers vs "
                "a dgl.nn.SAGEConv(mean) stack, same blocks and weights, CPU",
        "command": " ".join(["python bench/bench_model.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "blocks": shape, "max_abs_diff": diff,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(), "torch": torch.__version__, "dgl": dgl.__version__, "machine": platform.processor()
        or platform.machine(), "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
