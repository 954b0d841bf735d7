"""Measure a cost profile from real DGL sampling and training on real partitions.

Per partition, mini-batches of the job's batch size are sampled with the job's fan-outs; the
profile records sampling CPU seconds, sampled edges, input nodes owned by each partition (so
the bytes every (store, trainer) pair moves follow) and a real forward/backward's seconds on
this machine. The simulator and placer read the resulting cost.json.
"""

from __future__ import annotations

import argparse

from gnnsched.commands import input_dir, output_file, positive_int, seed_int

HELP = "profile per-mini-batch costs on real partitions (writes cost.json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, help="job file (YAML)")
    p.add_argument("--partitions", default=None,
                   help="partition directory (default: the job's, or partition it into a cache)")
    p.add_argument("--out", type=output_file, default="cost.json", help="where to write the profile")
    p.add_argument("--samples", type=positive_int, default=16, help="mini-batches profiled per partition")
    p.add_argument("--data-dir", type=input_dir, default=None, help="folder of .npz graphs")
    p.add_argument("--seed", type=seed_int, default=0, help="seed for drawing mini-batches")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def summarize(prof) -> dict:
    import numpy as np

    rows = []
    for pp in prof.parts:
        nodes = pp.mean_input_nodes(prof.num_parts)
        rows.append({"part": pp.part, "train_seeds": pp.train_seeds,
                     "sample_ms": 1e3 * float(np.median(pp.sample_s)),
                     "train_ms": 1e3 * float(np.median(pp.train_s)),
                     "edges": float(pp.edges.mean()),
                     "input_nodes": float(nodes.sum()),
                     "local_frac": float(nodes[pp.part] / max(nodes.sum(), 1)),
                     "feat_kb": float(nodes.sum() * prof.feature_bytes / 1e3)})
    return {"num_parts": prof.num_parts, "feature_bytes": prof.feature_bytes,
            "grad_bytes": prof.grad_bytes, "reference": prof.reference, "parts": rows}


def table(summary: dict) -> str:
    lines = [f"{'part':>4} {'seeds':>6} {'sample ms':>9} {'train ms':>8} {'edges':>8} "
             f"{'inputs':>7} {'local':>6} {'feat KB':>8}"]
    for r in summary["parts"]:
        lines.append(f"{r['part']:>4} {r['train_seeds']:>6} {r['sample_ms']:>9.2f} "
                     f"{r['train_ms']:>8.2f} {r['edges']:>8.0f} {r['input_nodes']:>7.0f} "
                     f"{r['local_frac']:>6.0%} {r['feat_kb']:>8.1f}")
    lines.append(f"feature row {summary['feature_bytes']} B, gradients "
                 f"{summary['grad_bytes'] / 1e6:.2f} MB, reference device: "
                 f"{summary['reference']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import json

    from tqdm import tqdm

    from gnnsched.datasets import open_partitions
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.runtime.profiler import profile_partitions
    from gnnsched.spec import load_job

    job = load_job(args.job)
    path = args.partitions or partitions_for(job, args.data_dir, quiet=args.json)
    pset = open_partitions(path)
    with tqdm(total=pset.num_parts, desc="profiling", unit="part", disable=args.json) as bar:
        prof = profile_partitions(pset, job, samples=args.samples, seed=args.seed,
                                  progress=lambda _: bar.update())
    prof.save(args.out)
    s = summarize(prof)
    if args.json:
        print(json.dumps({"out": str(args.out), **s}))
    else:
        print(table(s))
        print(f"wrote {args.out}")
    return 0
