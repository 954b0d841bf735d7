"""Summarise the timeline of a run made with ``gnnsched train --trace``.

Per transfer kind (struct: store to sampler, block: sampler to trainer, feat: store to
where the features are gathered, relay: relay to trainer), how long a transfer took from
queued to received; per sending machine, how much of the time it had a transfer of any kind
in progress and how many at once; per mini-batch, how long from dispatch to sampled, from
sampled to its last feature row at the gather (the trainer, or its relay), and from dispatch
to the start of its training step. Steady state only (training steps after the
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


def run(args: argparse.Namespace) -> int:
    from gnnsched.spec import SpecError
    from gnnsched.trace import format_summary, load, summarize

    try:
        s = summarize(load(args.run_dir))
    except SpecError:
        raise
    except ValueError as exc:  # no trace records in a readable run
        raise SpecError(str(args.run_dir), "", str(exc)) from None
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(format_summary(s, args.run_dir))
    return 0
