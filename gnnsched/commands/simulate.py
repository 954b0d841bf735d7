"""Simulate one epoch of a plan under an online scheduling policy.

Draws every mini-batch from the cost profile (seeded), runs the event-driven simulator
(samplers on cores, transfers on NICs, training on devices, the all-reduce barrier) and prints
the epoch and steady-state iteration time next to the lower bound of the same mini-batches,
the bottleneck, where the critical path spends its time and the busiest resources.
``--json`` prints one object instead; ``--gantt`` draws the schedule.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gnnsched.commands import image_file, milliseconds, positive_int, seed_int

HELP = "simulate a plan's epoch under a scheduling policy (fifo | gnnsched | ...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, help="cluster file (YAML)")
    p.add_argument("--job", required=True, help="job file (YAML)")
    p.add_argument("--plan", required=True, help="plan file (from `gnnsched plan`)")
    p.add_argument("--cost", default=None,
                   help="cost profile from `gnnsched profile` (default: the one the plan was made "
                        "with, else synthetic, for jobs "
                   "on synthetic graphs)")
    from gnnsched.policy import policies

    p.add_argument("--policy", default="gnnsched", choices=sorted(policies()),
                   help="online policy: the built-ins and any installed as a plug-in (entry "
                        "point group gnnsched.policies)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the mini-batch draws")
    p.add_argument("--iterations", type=positive_int, default=None,
                   help="simulate this many iterations and extrapolate the epoch")
    p.add_argument("--nic-window", type=milliseconds, default=None, metavar="MS",
                   help="model NICs as the gnnsched runtime drives them: each sender hands "
                        "transfers to its kernel, in the policy's order, while less than MS "
                        "milliseconds of its egress are queued there, and the kernel sends "
                        "them over one connection per receiver, in that order, connections "
                        "sharing the NICs fairly (the runtime's stores use 150; "
                        "default: ideal NICs that serve their queue as the policy says)")
    p.add_argument("--any-job", action="store_true",
                   help="use a plan made for a different job (batch size, fan-outs, ...; a "
                        "warning says what differs) instead of refusing it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--gantt", type=image_file, default=None, metavar="PNG", help="draw the schedule here")
    p.add_argument("--timeline", action="store_true",
                   help="also summarise the simulated timeline as `gnnsched trace` does a "
                        "traced run (transfer times, how many shared each sender, the "
                        "pipeline's lead), to set the two side by side")


def _fmt(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def report(res: Any, plan_bound: Any) -> str:
    window = res.meta.get("nic_window_s")
    nics = (f"{res.meta['sharing']} NICs" if window is None else
            f"runtime NICs: connections behind a {window * 1e3:g} ms window")
    lines = [f"policy {res.policy} ({nics}), {res.iterations} iterations"
             + (" simulated, epoch extrapolated" if res.extrapolated else ""),
             f"  epoch time        {_fmt(res.epoch_time_s)}",
             f"  iteration time    {_fmt(res.iteration_time_s)} (steady state)",
             f"  lower bound       {_fmt(res.lower_bound_s)}  (ratio "
             f"{res.epoch_time_s / res.lower_bound_s:.3f}; bottleneck: "
             f"{res.meta['bottleneck']})",
             f"  plan bound (mean) {_fmt(plan_bound.epoch_s)}  ({plan_bound.bottleneck})",
             "  critical path     " + ", ".join(
                 f"{k} {v / max(res.makespan_s, 1e-300):.0%}"
                 for k, v in sorted(res.critical_share.items(), key=lambda kv: -kv[1])),
             "  busiest           " + ", ".join(
                 f"{k} {v:.0%}" for k, v in sorted(res.utilisation.items(),
                                                   key=lambda kv: -kv[1])[:5])]
    n = len(res.stages)
    avg = {k: sum(s[k] for s in res.stages) / n for k in res.stages[0]}
    lines.append("  per trainer (mean) " + ", ".join(f"{k} {_fmt(v)}" for k, v in avg.items())
                 + " (seconds summed over the simulated iterations)")
    lines.append(f"  simulator         {res.events} events in {res.wall_s:.2f} s "
                 f"({res.events_per_s:,.0f} events/s)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from gnnsched import api
    from gnnsched.simulator import workload_for
    from gnnsched.spec import SpecError

    if args.nic_window is not None and not args.nic_window > 0:
        raise SpecError("--nic-window", "", f"must be > 0 milliseconds, got {args.nic_window}",
                        "150 (what the runtime's stores queue), or leave it out")
    inp = api.prepare(args.cluster, args.job, args.plan, args.cost, verb="simulate",
                      any_job=args.any_job)
    cluster, job, plan, profile = inp.cluster, inp.job, inp.plan, inp.profile
    res = api.simulate(inp, policy=args.policy, seed=args.seed, iterations=args.iterations,
                       record=bool(args.gantt or args.timeline),
                       nic_window_s=None if args.nic_window is None else args.nic_window / 1e3)
    timeline = None
    if args.timeline:
        from gnnsched.trace import summarize_sim

        timeline = summarize_sim(res)
    plan_bound = workload_for(cluster, job, profile).bound(plan)
    if args.gantt:
        from gnnsched.gantt import draw

        draw(res, args.gantt, title=f"{plan.placer} plan, {res.policy} policy: epoch "
             f"{res.makespan_s:.4g} s, lower bound {res.lower_bound_s:.4g} s")
    if args.json:
        out = res.summary()
        out.update(plan=args.plan, placer=plan.placer, seed=args.seed,
                   plan_bound_s=plan_bound.epoch_s, plan_bottleneck=plan_bound.bottleneck,
                   stages=res.stages, utilisation=res.utilisation)
        if args.gantt:
            out["gantt"] = args.gantt
        if timeline is not None:
            out["timeline"] = timeline
        print(json.dumps(out, indent=1, default=float))
    else:
        print(report(res, plan_bound))
        if args.gantt:
            print(f"  gantt             {args.gantt}")
        if timeline is not None:
            from gnnsched.trace import format_summary

            print("\n" + format_summary(timeline, f"simulated ({res.policy})"))
    return 0
