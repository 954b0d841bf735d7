"""Summarise the timeline of a run made with ``gnnsched train --trace``.

Per transfer kind, how long a transfer took from queued to acknowledged; per sending
machine, how much of the time it had a transfer in progress and how many at once; per
mini-batch, how long from dispatch to sampled, from sampled to its last feature row, and
from dispatch to the start of its training step. Steady state only (training steps after the
first epoch). Set beside ``gnnsched simulate --gantt`` of the same plan: a simulator that
predicts the epoch but not these distributions is right for the wrong reasons.
"""

from __future__ import annotations

import argparse
import json

HELP = "summarise a traced run (transfer times, NIC sharing, pipeline lead)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="run directory of `gnnsched train --trace` (its "
                                   "metrics.jsonl)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _ms(p: dict | None) -> str:
    if not p:
        return "-"
    return f"{1e3 * p['p10']:6.0f} {1e3 * p['p50']:6.0f} {1e3 * p['p90']:6.0f}"


def run(args: argparse.Namespace) -> int:
    from gnnsched.trace import load, summarize

    try:
        s = summarize(load(args.run_dir))
    except ValueError as exc:
        raise SystemExit(f"gnnsched trace: {exc}") from None
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"{args.run_dir}: {s['batches']} steady-state training steps\n")
    print(f"{'transfer':<10} {'n':>5} {'KB p50':>8}   ms p10    p50    p90")
    for kind, k in s["transfers"].items():
        print(f"{kind:<10} {k['seconds']['n']:>5} {k['bytes']['p50'] / 1e3:>8.0f}   "
              f"{_ms(k['seconds'])}")
    print(f"\n{'sender':<12} {'transfers':>9} {'busy':>6} {'in flight':>10}")
    for src, v in s["senders"].items():
        print(f"{src:<12} {v['transfers']:>9} {v['busy_fraction']:>6.0%} "
              f"{v['mean_in_flight']:>10.2f}")
    print(f"\n{'per mini-batch':<24}   ms p10    p50    p90")
    for name, p in s["pipeline"].items():
        print(f"{name.replace('_', ' '):<24} {_ms(p)}")
    return 0
