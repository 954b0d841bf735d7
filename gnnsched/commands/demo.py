"""The whole path on the bundled Cora graph and the examples/lab4 cluster, on local processes.

Loads the bundled graph, partitions it (METIS, 4 parts), profiles real mini-batches, plans with
gnnsched and with colocation, trains both for real, and prints epoch times and accuracies side
by side. Stages that are not installed yet are skipped with a note.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnsched.commands import epochs_int, output_dir, positive_int, seconds

HELP = "run the whole path on the bundled Cora graph (examples/lab4, local processes)"


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def examples() -> list[str]:
    """The folders under examples/ (next to the package) that hold a cluster and a job."""
    if not EXAMPLES.is_dir():
        return []
    return sorted(d.name for d in EXAMPLES.iterdir()
                  if (d / "cluster.yaml").is_file() and (d / "job.yaml").is_file())


def _example(name: str) -> Path:
    from gnnsched.spec import SpecError

    here = EXAMPLES / name
    if name in examples():
        return here
    raise SpecError("--example", "", f"no cluster.yaml and job.yaml in {here}",
                    ", ".join(examples()) or "a repository checkout with examples/")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--example", default="lab4", choices=examples() or None,  # none: _example says why
                   help="folder under examples/ with cluster.yaml and job.yaml")
    p.add_argument("--epochs", type=epochs_int, default=None, help="override the job's epochs")
    p.add_argument("--samples", type=positive_int, default=8, help="mini-batches profiled per partition")
    p.add_argument("--out", type=output_dir, default="runs/demo", help="run directory (plans, cost, metrics)")
    p.add_argument("--budget", type=seconds, default=10.0, help="planning seconds for gnnsched")
    p.add_argument("--json", action="store_true",
                   help="end by printing one JSON object with every system's results")


def run(args: argparse.Namespace) -> int:
    from gnnsched import api
    from gnnsched.commands.profile import summarize, table
    from gnnsched.spec import check_compatible, load_cluster, load_job

    say = (lambda *a: None) if args.json else print
    ex = _example(args.example)
    cluster, job = load_cluster(ex / "cluster.yaml"), load_job(ex / "job.yaml")
    check_compatible(cluster, job)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = api.load_dataset(job.dataset, split=job.split, feature_dim=job.feature_dim,
                         seed=job.seed)
    say(f"[1/4] loaded {graph.summary()}")
    pset = api.open_job_partitions(job, quiet=args.json)
    parts = pset.root
    meta = pset.meta if hasattr(pset, "meta") else {}
    say(f"[2/4] {job.num_parts} {job.part_method} partitions in {parts}"
        + (f": edge cut {meta.get('edge_cut', float('nan')):.1%}, "
           f"balance {meta.get('balance', float('nan')):.2f}" if meta else ""))
    prof = api.profile_partitions(pset, job, samples=args.samples, seed=job.seed)
    prof.save(out / "cost.json")
    summary = summarize(prof)
    say(f"[3/4] profiled {args.samples} real mini-batches per partition -> {out / 'cost.json'}")
    say(table(summary))
    result: dict = {"dataset": graph.name, "partitions": str(parts), "profile": summary,
                    "systems": {}}
    say("[4/4] plan with gnnsched and with colocation, then train both for real")
    result["systems"] = plan_and_train(cluster, job, prof, out, epochs=args.epochs,
                                       budget=args.budget, quiet=args.json)
    if args.json:
        print(json.dumps(result))
    return 0


SYSTEMS = (  # (label, placer, policy): gnnsched beside the DistDGL-style baseline
    ("gnnsched", "gnnsched", "gnnsched"),
    ("colocation", "colocation", "fifo"),
)


def plan_and_train(cluster, job, prof, out: Path, *, epochs: int | None = None,
                   budget: float = 10.0, quiet: bool = False) -> dict:
    """Plan and really train every system in :data:`SYSTEMS`; print them side by side."""
    from gnnsched import api
    from gnnsched.commands.progress import Progress
    from gnnsched.simulator import simulate

    say = (lambda *a: None) if quiet else print
    systems: dict = {}
    for label, placer, policy in SYSTEMS:
        plan = api.get_placer(placer).place(cluster, job, prof, seed=job.seed, budget=budget)
        sim = simulate(cluster, job, plan, prof, policy, seed=job.seed)
        plan = plan.with_prediction(epoch_time_s=sim.epoch_time_s, policy=policy)
        plan.save(out / f"plan-{label}.json")
        for note in plan.notes:
            say(f"  {label}: {note}")
        say(f"  {label}: planned ({placer} placement, {policy} policy), predicted epoch "
            f"{sim.epoch_time_s:.3f} s; training...")
        progress = Progress(quiet=True)
        try:
            res = api.train(cluster, job, plan, policy=policy, out_dir=out / label,
                        epochs=epochs, profile=prof, progress=progress)
        finally:
            progress.close()
        systems[label] = {**api.summary(res), "predicted_epoch_time_s": sim.epoch_time_s}
    say("")
    say(f"{'system':<11} {'placer':<10} {'policy':<8} {'epoch s':>8} {'predicted':>9} "
        f"{'test acc':>8} {'MB sent':>8}")
    for (label, placer, policy) in SYSTEMS:
        r = systems[label]
        say(f"{label:<11} {placer:<10} {policy:<8} {r['epoch_time_s']:>8.3f} "
            f"{r['predicted_epoch_time_s']:>9.3f} {r['test_accuracy']:>8.3f} "
            f"{r['bytes_sent'] / 1e6:>8.1f}")
    say("(predicted: the simulator on the cluster file's NICs; local processes talk over an "
        "unshaped loopback, so measured times are CPU-bound here: `gnnsched train --launcher "
        "netns` runs the same plans on shaped NICs)")
    pa, pb = (systems[k]["predicted_epoch_time_s"] for k in ("colocation", "gnnsched"))
    a, b = systems["colocation"]["epoch_time_s"], systems["gnnsched"]["epoch_time_s"]
    if pa and pb:
        say(f"on the cluster's NICs gnnsched is predicted at {pa / pb:.2f}x the speed of "
            "colocation" + (f"; on these local processes (CPU-bound, which the plans do not "
                            f"target) it measured {a / b:.2f}x" if a and b else ""))
    return systems
