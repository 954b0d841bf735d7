"""The whole path on the bundled Cora graph and the examples/lab4 cluster, on local processes.

Loads the bundled graph, partitions it (METIS, 4 parts), profiles real mini-batches, plans with
gnnsched and with colocation, trains both for real, and prints epoch times and accuracies side
by side. Stages that are not installed yet are skipped with a note.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "run the whole path on the bundled Cora graph (examples/lab4, local processes)"


def _example(name: str) -> Path:
    here = Path(__file__).resolve().parents[2] / "examples" / name
    if here.is_dir():
        return here
    raise FileNotFoundError(f"examples/{name} not found next to the package ({here})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--example", default="lab4", help="folder under examples/ with "
                   "cluster.yaml and job.yaml")
    p.add_argument("--epochs", type=int, default=None, help="override the job's epochs")
    p.add_argument("--samples", type=int, default=8, help="mini-batches profiled per partition")
    p.add_argument("--out", default="runs/demo", help="run directory (plans, cost, metrics)")
    p.add_argument("--json", action="store_true",
                   help="end by printing one JSON object with every system's results")


def run(args: argparse.Namespace) -> int:
    from gnnsched.commands.profile import summarize, table
    from gnnsched.datasets import load_dataset, open_partitions
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.runtime.profiler import profile_partitions
    from gnnsched.spec import check_compatible, load_cluster, load_job

    say = (lambda *a: None) if args.json else print
    ex = _example(args.example)
    cluster, job = load_cluster(ex / "cluster.yaml"), load_job(ex / "job.yaml")
    check_compatible(cluster, job)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = load_dataset(job.dataset, split=job.split, feature_dim=job.feature_dim,
                         seed=job.seed)
    say(f"[1/4] loaded {graph.summary()}")
    parts = partitions_for(job, quiet=args.json)
    pset = open_partitions(parts)
    meta = pset.meta if hasattr(pset, "meta") else {}
    say(f"[2/4] {job.num_parts} {job.part_method} partitions in {parts}"
        + (f": edge cut {meta.get('edge_cut', float('nan')):.1%}, "
           f"balance {meta.get('balance', float('nan')):.2f}" if meta else ""))
    prof = profile_partitions(pset, job, samples=args.samples, seed=job.seed)
    prof.save(out / "cost.json")
    summary = summarize(prof)
    say(f"[3/4] profiled {args.samples} real mini-batches per partition -> {out / 'cost.json'}")
    say(table(summary))
    result: dict = {"dataset": graph.name, "partitions": str(parts), "profile": summary,
                    "systems": {}}
    try:
        from gnnsched.demo import plan_and_train  # grows with placement + runtime
    except ImportError:
        say("[4/4] plan + train: not built yet")
    else:
        result["systems"] = plan_and_train(cluster, job, prof, out, epochs=args.epochs,
                                           quiet=args.json)
    if args.json:
        print(json.dumps(result))
    return 0
