"""Sampling CPU per mini-batch: gnnsched's ``sample_blocks`` over partitions vs DGL's sampler.

Run: ``python bench/bench_sampler.py [--nodes 200000] [--batches 10] [--label after]``

A seeded synthetic graph (:func:`gnnsched.datasets.synthetic.generate`: ``--nodes``,
``--degree`` directed out-edges per node, ``--features``-d) is cut into ``--parts`` partitions
(``--method random`` by default, for speed; ``metis`` also works; ``--part-dir`` keeps and
reuses them). For ``--batches`` mini-batches of ``--batch`` training seeds and fan-outs
``--fanouts`` (the scale job: 1024 seeds, 15/10/5), both samplers get the same seeds:

- **gnnsched**: :func:`~gnnsched.runtime.sampler.sample_blocks` with
  :func:`~gnnsched.runtime.sampler.local_sampler` over every partition in one process (what the
  single-process reference does; a sampler process runs the same code, with some hops answered
  by its stores). Its CPU is split into DGL's sampling on the partitions (``sample_parts``) and
  the rest (splitting the frontier by partition, concatenation, block compaction).
- **DGL**: ``dgl.dataloading.NeighborSampler(fanouts).sample_blocks`` on the whole graph
  (CSC), which samples and builds the blocks (``to_block``) in C++.

CPU seconds of this thread (:func:`time.thread_time`) per mini-batch, medians over the batches
after one warm-up each, with one thread for torch, DGL and OpenMP. Prints a table and merges
an entry (by ``--label``) into ``docs/bench/sampler.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labelled import write_labelled  # bench/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]


def _median(xs: list[float]) -> float:
    import numpy as np

    return round(float(np.median(xs)), 5)


def run(a: argparse.Namespace, part_dir: Path) -> dict[str, Any]:
    import numpy as np
    import torch

    from gnnsched.compat import dgl
    from gnnsched.datasets import open_partitions, partition_graph
    from gnnsched.datasets.synthetic import generate
    from gnnsched.runtime.sampler import local_sampler, sample_blocks
    from gnnsched.runtime.store import load_parts

    torch.set_num_threads(1)
    dgl.utils.set_num_threads(1)
    t0 = time.perf_counter()
    graph = generate(a.nodes, avg_degree=a.degree, feature_dim=a.features,
                     num_classes=a.classes, homophily=0.3, feature_noise=1.75, seed=a.seed)
    print(f"generated {graph.summary()} in {time.perf_counter() - t0:.1f} s", flush=True)
    if not (part_dir / "gnnsched.json").is_file():
        t0 = time.perf_counter()
        partition_graph(graph, a.parts, part_dir, method=a.method, seed=a.seed)
        print(f"partitioned into {a.parts} ({a.method}) in {time.perf_counter() - t0:.1f} s",
              flush=True)
    pset = open_partitions(part_dir, verify=False)
    parts = load_parts(str(part_dir), list(range(pset.num_parts)), keep_features=False)
    node_part = np.asarray(pset.node_part)
    g = graph.to_dgl().formats(["csc"])
    dsampler = dgl.dataloading.NeighborSampler(list(a.fanouts))
    train = np.nonzero(graph.train_mask)[0]
    rng = np.random.default_rng(a.seed)
    batches = [rng.choice(train, size=min(a.batch, len(train)), replace=False)
               for _ in range(a.batches + 1)]

    sample_cpu = [0.0]
    inner = local_sampler(parts)

    def timed(requests: dict[int, tuple[np.ndarray, int, int]]) -> Any:
        c0 = time.thread_time()
        out = inner(requests)
        sample_cpu[0] += time.thread_time() - c0
        return out

    ours: dict[str, list[float]] = {"total": [], "sample_parts": [], "rest": [],
                                    "edges": [], "input_nodes": []}
    theirs: dict[str, list[float]] = {"total": [], "edges": [], "input_nodes": []}
    for i, seeds in enumerate(batches):
        sample_cpu[0] = 0.0
        c0 = time.thread_time()
        b = sample_blocks(seeds, list(a.fanouts), node_part, a.seed, 0, i, timed)
        c = time.thread_time() - c0
        tseeds = torch.from_numpy(seeds)
        d0 = time.thread_time()
        inp, _, blocks = dsampler.sample_blocks(g, tseeds)
        d = time.thread_time() - d0
        if i == 0:
            continue  # warm-up
        ours["total"].append(c)
        ours["sample_parts"].append(sample_cpu[0])
        ours["rest"].append(c - sample_cpu[0])
        ours["edges"].append(b.num_edges)
        ours["input_nodes"].append(len(b.input_nodes))
        theirs["total"].append(d)
        theirs["edges"].append(sum(int(x.num_edges()) for x in blocks))
        theirs["input_nodes"].append(len(inp))
    res = {
        "gnnsched_cpu_s_per_batch": _median(ours["total"]),
        "gnnsched_sample_parts_cpu_s": _median(ours["sample_parts"]),
        "gnnsched_rest_cpu_s": _median(ours["rest"]),
        "dgl_cpu_s_per_batch": _median(theirs["total"]),
        "gnnsched_edges": int(np.mean(ours["edges"])),
        "dgl_edges": int(np.mean(theirs["edges"])),
        "gnnsched_input_nodes": int(np.mean(ours["input_nodes"])),
        "dgl_input_nodes": int(np.mean(theirs["input_nodes"])),
        "samples_gnnsched_cpu_s": [round(x, 5) for x in ours["total"]],
        "samples_dgl_cpu_s": [round(x, 5) for x in theirs["total"]],
    }
    res["ratio"] = round(res["gnnsched_cpu_s_per_batch"] / res["dgl_cpu_s_per_batch"], 2)
    return res


def table(r: dict[str, Any]) -> str:
    rows = [("sampler", "CPU-s/batch", "edges", "input nodes"),
            ("gnnsched sample_blocks", f"{r['gnnsched_cpu_s_per_batch']:.4f}",
             str(r["gnnsched_edges"]), str(r["gnnsched_input_nodes"])),
            ("  DGL sampling on the parts", f"{r['gnnsched_sample_parts_cpu_s']:.4f}", "", ""),
            ("  split + concat + compaction", f"{r['gnnsched_rest_cpu_s']:.4f}", "", ""),
            ("DGL NeighborSampler, whole graph", f"{r['dgl_cpu_s_per_batch']:.4f}",
             str(r["dgl_edges"]), str(r["dgl_input_nodes"])),
            ("ratio gnnsched / DGL", f"{r['ratio']:.2f}x", "", "")]
    w = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w[0]) if i == 0 else c.rjust(w[i])
                               for i, c in enumerate(row)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--degree", type=float, default=40.0, help="mean out-degree")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--classes", type=int, default=47)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--method", default="random", choices=["random", "metis"])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--part-dir", default=None, help="partition folder (reused if it exists)")
    p.add_argument("--label", default="", help="a name for this measurement (before/after)")
    p.add_argument("--out", default=str(ROOT / "docs" / "bench" / "sampler.json"))
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as tmp:
        part_dir = Path(a.part_dir) if a.part_dir else Path(tmp) / "parts"
        r = run(a, part_dir)
    load1 = os.getloadavg()
    print(table(r))
    entry = {
        "label": a.label or f"synthetic-{a.nodes}",
        "command": "python bench/bench_sampler.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "load_avg_1min_before_after": [round(load0[0], 2), round(load1[0], 2)]},
        "graph": {"nodes": a.nodes, "avg_degree": a.degree, "features": a.features,
                  "parts": a.parts, "method": a.method, "seed": a.seed},
        "job": {"batch": a.batch, "fanouts": list(a.fanouts), "batches": a.batches,
                "threads": 1},
        **r,
    }
    write_labelled(a.out, __doc__.split("\n\n")[0], entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
