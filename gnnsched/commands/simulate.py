"""Simulate one epoch of a plan under an online scheduling policy.

Draws every mini-batch from the cost profile (seeded), runs the event-driven simulator
(samplers on cores, transfers on NICs, training on devices, the all-reduce barrier) and prints
the epoch and steady-state iteration time next to the two named lower bounds of
:mod:`gnnsched.bounds` on the same seed's mini-batches, word for word as ``gnnsched plan``
prints them: the *per-plan bound* (computed here, on the whole epoch's draws whatever
``--iterations``) and the *any-placement bound* (CP-SAT's, recorded in the plan by ``gnnsched
plan``, shown where the plan's draws are these), then where the critical path spends its time
and the busiest resources.
The NICs are modelled as the runtime drives them by default (``--network windowed``: send
windows of the runtime's 150 ms, ``--nic-window MS`` to change it); ``--network ideal`` makes
them serve their queue as the policy says. The output names the model (``network``).
``--json`` prints one object instead; ``--gantt`` draws the schedule.
"""

from __future__ import annotations

import argparse
import json
import sys
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
    from gnnsched.simulator import DEFAULT_NETWORK, NETWORKS
    from gnnsched.workload import NIC_WINDOW_S

    p.add_argument("--network", choices=list(NETWORKS), default=None,
                   help="NIC model. windowed (default): as the gnnsched runtime drives them: "
                        "one connection per sender and receiver, each handed "
                        "the sender's next transfer for it, in the policy's order, while less "
                        "than its send window of egress is queued in it, connections sharing "
                        "the NICs fairly. ideal: NICs that serve their "
                        "queue as the policy says (strict priority or fair sharing), no window "
                        f"(default: {DEFAULT_NETWORK})")
    p.add_argument("--nic-window", type=milliseconds, default=None, metavar="MS",
                   help="the windowed network's send window, in milliseconds of a sender's "
                        f"egress (default: the runtime's, {NIC_WINDOW_S * 1e3:g}); implies "
                        "--network windowed")
    p.add_argument("--any-job", action="store_true",
                   help="use a plan made for a different job (batch size, fan-outs, ...; a "
                        "warning says what differs) instead of refusing it")
    from gnnsched.commands.plan import add_calibration_arguments

    add_calibration_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--gantt", type=image_file, default=None, metavar="PNG", help="draw the schedule here")
    p.add_argument("--timeline", action="store_true",
                   help="also summarise the simulated timeline as `gnnsched trace` does a "
                        "traced run (transfer times, how many shared each sender, the "
                        "pipeline's lead), to set the two side by side")


def _fmt(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def network_text(network: str | None, window: float | None, sharing: str | None) -> str:
    """The network model in words: "windowed network (runtime NICs: ...)" or "ideal ..."."""
    from gnnsched.simulator import network_name

    network = network or network_name(window)
    if window is None:
        return f"{network} network ({sharing} NICs serving their queue as the policy says)"
    return f"{network} network (runtime NICs: connections behind a {window * 1e3:g} ms window)"


def report(res: Any, per: Any, anyb: Any = None, why_missing: str = "") -> str:
    """The text report; `per` and `anyb` are the plan's bounds (:mod:`gnnsched.bounds`),
    printed by :func:`gnnsched.bounds.bound_lines` as ``gnnsched plan`` prints them."""
    from gnnsched.bounds import bound_lines, ratio_line

    window = res.meta.get("nic_window_s")
    nics = network_text(res.meta.get("network"), window, res.meta.get("sharing"))
    what = "the simulated epoch" + (f" (extrapolated from {res.iterations} iterations: the "
                                    "bounds hold for whole simulated epochs)"
                                    if res.extrapolated else "")
    lines = [f"policy {res.policy} on the {nics}, {res.iterations} iterations"
             + (" simulated, epoch extrapolated" if res.extrapolated else ""),
             f"  epoch time        {_fmt(res.epoch_time_s)}",
             f"  iteration time    {_fmt(res.iteration_time_s)} (steady state)",
             "", *bound_lines(per, anyb, why_missing), ratio_line(res.epoch_time_s, per, anyb,
                                                                  what), "",
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
    from gnnsched.bounds import bound_fields, per_plan_bound, recorded_bounds
    from gnnsched.simulator import workload_for
    from gnnsched.spec import SpecError

    if args.nic_window is not None and not args.nic_window > 0:
        raise SpecError("--nic-window", "", f"must be > 0 milliseconds, got {args.nic_window}",
                        "150 (what the runtime's stores queue), or leave it out")
    if args.network == "ideal" and args.nic_window is not None:
        raise SpecError("--nic-window", "", "the ideal network has no send window",
                        "leave out --nic-window, or use --network windowed")
    from gnnsched.commands.plan import calibration_choice, calibration_lines

    inp = api.prepare(args.cluster, args.job, args.plan, args.cost, verb="simulate",
                      any_job=args.any_job, calibration=calibration_choice(args))
    said = calibration_lines(inp.profile, inp.calibration, args.cluster, args.job,
                             calibration_choice(args))
    cluster, job, plan, profile = inp.cluster, inp.job, inp.plan, inp.profile
    res = api.simulate(inp, policy=args.policy, seed=args.seed, iterations=args.iterations,
                       record=bool(args.gantt or args.timeline), network=args.network,
                       nic_window_s=None if args.nic_window is None else args.nic_window / 1e3)
    timeline = None
    if args.timeline:
        from gnnsched.trace import summarize_sim

        timeline = summarize_sim(res)
    per = per_plan_bound(workload_for(cluster, job, profile), plan, args.seed)
    anyb, why_missing = recorded_bounds(plan.prediction, per)
    if args.gantt:
        from gnnsched.gantt import draw

        draw(res, args.gantt, title=f"{plan.placer} plan, {res.policy} policy: epoch "
             f"{res.makespan_s:.4g} s ({res.meta['network']} network), per-plan bound "
             f"{per.epoch_s:.4g} s")
    if args.json:
        out = res.summary()
        # the simulated instance's own bound (of the iterations run) gives way to the named
        # bounds `gnnsched plan` stores under the same keys
        for key in ("lower_bound_s", "ratio_to_bound"):
            out.pop(key, None)
        out.update(plan=args.plan, placer=plan.placer, seed=args.seed,
                   **bound_fields(per, anyb), bottleneck=per.resource,
                   ratio_to_per_plan_bound=res.epoch_time_s / per.epoch_s,
                   ratio_to_any_placement_bound=None if anyb is None
                   else res.epoch_time_s / anyb.epoch_s,
                   stages=res.stages, utilisation=res.utilisation)
        if anyb is None:
            out["any_placement_bound_missing"] = why_missing
        out["calibration"] = None if inp.calibration is None else str(inp.calibration.path)
        if said[0].startswith("warning"):
            print("gnnsched simulate: " + "\n".join(said), file=sys.stderr)
        if args.gantt:
            out["gantt"] = args.gantt
        if timeline is not None:
            out["timeline"] = timeline
        print(json.dumps(out, indent=1, default=float))
    else:
        print("\n".join(said))
        print(report(res, per, anyb, why_missing))
        if args.gantt:
            print(f"  gantt             {args.gantt}")
        if timeline is not None:
            from gnnsched.trace import format_summary

            print("\n" + format_summary(timeline, f"simulated ({res.policy})"))
    return 0
