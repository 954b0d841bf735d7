"""Benchmark the dataset layer: synthetic generator throughput and partitioning time.

Run: ``python bench/bench_datasets.py [--quick] [--out docs/bench/datasets.json]``

Each generator size runs in a fresh subprocess so its peak RSS is its own (ru_maxrss never
goes down within a process). Partitioning compares METIS with random assignment on Cora,
Coauthor CS (when the shared datasets are present) and a synthetic graph; features are
projected to ``--feature-dim`` columns so timings measure partitioning, not densifying
bag-of-words matrices.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _proc_status(field: str) -> int:
    """A size field of /proc/self/status in bytes (0 where /proc is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so imports do not count (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _child_generate(num_nodes: int, avg_degree: float, feature_dim: int) -> None:
    from gnnsched.datasets import generate

    before = _proc_status("VmRSS")
    reset = _reset_peak_rss()
    t = time.perf_counter()
    g = generate(num_nodes, avg_degree=avg_degree, feature_dim=feature_dim, seed=0)
    seconds = time.perf_counter() - t
    peak = _proc_status("VmHWM") if reset else 0
    if not peak:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({
        "num_nodes": g.num_nodes, "num_edges": g.num_edges, "feature_dim": g.feature_dim,
        "seconds": seconds, "nodes_per_s": g.num_nodes / seconds,
        "edges_per_s": g.num_edges / seconds, "peak_rss_mb": peak / 2**20,
        "rss_before_mb": before / 2**20,
        "edge_homophily": g.edge_homophily(),
    }))


def bench_generator(sizes: list[int], avg_degree: float, feature_dim: int) -> list[dict]:
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--child-generate", str(n), "--avg-degree",
             str(avg_degree), "--feature-dim", str(feature_dim)],
            check=True, capture_output=True, text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def bench_partition(graphs: dict, parts: int) -> list[dict]:
    from gnnsched.datasets import partition_graph

    rows = []
    for name, g in graphs.items():
        for method in ("metis", "random"):
            with tempfile.TemporaryDirectory(prefix="gnnsched-bench-") as tmp:
                r = partition_graph(g, parts, Path(tmp) / "p", method=method)
            rows.append({
                "graph": name, "num_nodes": g.num_nodes, "num_edges": g.num_edges,
                "method": method, "parts": parts, "seconds": r.seconds,
                "dgl_seconds": r.dgl_seconds, "edge_cut": r.edge_cut, "balance": r.balance,
                "edge_balance": r.edge_balance,
            })
    return rows


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "datasets.json"))
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--avg-degree", type=float, default=20)
    ap.add_argument("--feature-dim", type=int, default=128)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--partition-nodes", type=int, default=None,
                    help="nodes of the synthetic graph to partition (default 200k, quick 20k)")
    ap.add_argument("--child-generate", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child_generate is not None:
        _child_generate(args.child_generate, args.avg_degree, args.feature_dim)
        return 0

    import torch

    from gnnsched.datasets import available_datasets, generate, load_dataset

    torch.set_num_threads(1)
    sizes = [10_000, 100_000] if args.quick else [100_000, 1_000_000]
    gen = bench_generator(sizes, args.avg_degree, args.feature_dim)
    print("synthetic generator (DC-SBM, power-law degrees), avg degree "
          f"{args.avg_degree:g}, {args.feature_dim} features")
    print(_table(
        ["nodes", "edges", "seconds", "nodes/s", "edges/s", "peak RSS MB", "(imports MB)",
         "homophily"],
        [[f"{r['num_nodes']:,}", f"{r['num_edges']:,}", f"{r['seconds']:.2f}",
          f"{r['nodes_per_s']:,.0f}", f"{r['edges_per_s']:,.0f}", f"{r['peak_rss_mb']:,.0f}",
          f"{r['rss_before_mb']:,.0f}", f"{r['edge_homophily']:.3f}"] for r in gen]))

    part_dim = 64
    graphs = {"cora": load_dataset("cora", feature_dim=part_dim)}
    if "coauthor_cs" in available_datasets(args.data_dir):
        graphs["coauthor_cs"] = load_dataset("coauthor_cs", data_dir=args.data_dir,
                                             feature_dim=part_dim)
    syn_n = args.partition_nodes or (20_000 if args.quick else 200_000)
    graphs[f"synthetic_{syn_n:,}"] = generate(syn_n, avg_degree=args.avg_degree,
                                                     feature_dim=part_dim, seed=0)
    part = bench_partition(graphs, args.parts)
    print(f"\npartitioning into {args.parts} parts ({part_dim}-dim features; time includes "
          "writing DGL files and checksums)")
    print(_table(
        ["graph", "nodes", "edges", "method", "seconds", "DGL s", "edge cut", "balance"],
        [[r["graph"], f"{r['num_nodes']:,}", f"{r['num_edges']:,}", r["method"],
          f"{r['seconds']:.2f}", f"{r['dgl_seconds']:.2f}", f"{r['edge_cut']:.3f}",
          f"{r['balance']:.3f}"] for r in part]))

    result = {
        "bench": "datasets", "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "generator": gen, "partition": part,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
