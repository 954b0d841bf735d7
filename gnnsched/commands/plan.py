"""Place every trainer, sampler and feature-gathering task of a job on a cluster.

Prints where each task runs, the predicted epoch time of this plan and of every baseline
(colocation, greedy, random) scored by the same simulator, the two named lower bounds of
:mod:`gnnsched.bounds` on the mini-batches the simulator draws with ``--seed`` (the
*per-plan bound* no schedule of this placement beats, and the *any-placement bound* no
placement beats: CP-SAT's proven bound, lowered to every compared plan's own), in the words
and numbers ``gnnsched simulate`` prints for the same plan and seed, and why: the most loaded
resource and the longest dependency chain per iteration. The heading names the network model
the plans were simulated on; where the placer scored them on another than the runtime's (the
ideal NICs), one more row gives this plan on the runtime's network (150 ms send windows),
the epoch ``gnnsched simulate`` prints by default.
Every store must hold its partitions in ``memory_gb`` (their real sizes from ``--partitions``,
the job's ``partitions`` or its cached partitions, else the profile's estimate): a cluster
where one cannot is refused, naming the host, the partitions and the bytes. Writes the plan as
JSON (``--out``) and optionally a picture.
The plan records the job fields its placement depends on (``job_key``: batch size, fan-outs,
model, dataset, trainers, ...): ``gnnsched train`` and ``simulate`` refuse it for a job where
any of them differs, naming them (``--any-job`` uses it anyway).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from gnnsched.commands import new_image_file, output_file, seconds, seed_int
from gnnsched.prediction import Prediction

# what a report is handed: a plan's prediction, or (a caller's) the plan file's mapping
Predicted = Prediction | dict[str, Any] | None

HELP = "place tasks on a cluster (CP-SAT + simulated search) and compare with baselines"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", default=None, help="cluster file (YAML); required unless "
                   "--from-ray, where it only adds what Ray does not say (NICs, partitions)")
    p.add_argument("--from-ray", default=None, metavar="ADDR",
                   help="read the hosts' CPUs, memory and GPUs from the Ray cluster at ADDR "
                   "(nodes named by their gnnsched-host:NAME resource) and write the cluster "
                   "file to train with beside the plan (--cluster-out)")
    p.add_argument("--cluster-out", default=None, metavar="YAML",
                   help="--from-ray: where the cluster file goes (default: the plan's name "
                   "with .cluster.yaml)")
    p.add_argument("--job", required=True, help="job file (YAML)")
    p.add_argument("--cost", default=None,
                   help="cost profile from `gnnsched profile` (default: synthetic, for jobs "
                   "on synthetic graphs)")
    p.add_argument("--partitions", default=None, metavar="DIR",
                   help="partition directory whose real sizes every store's memory_gb is "
                   "checked against (default: the job's `partitions`, else its cached "
                   "partitions when they exist, else the profile's estimate)")
    from gnnsched import api

    p.add_argument("--placer", default="gnnsched", choices=sorted(api.placers()),
                   help="placement algorithm: the built-ins and any installed as a plug-in "
                        "(entry point group gnnsched.placers)")
    p.add_argument("--budget", type=seconds, default=30.0,
                   help="planning seconds: CP-SAT's limit (cpsat), the search's (gnnsched). "
                   "gnnsched first simulates each of its starts on every draw, which a large "
                   "epoch can make longer than this; the report says where the time went")
    p.add_argument("--cache-share", type=share, default=0.0, metavar="X",
                   help="give feature caches X (0..1) of the memory the plan leaves free on "
                   "every host that gathers features: each replicates the hottest rows (by "
                   "in-degree) of the nodes it does not store, and the prediction charges "
                   "only the misses (default 0: no caches)")
    p.add_argument("--keep-colocation", type=margin, default=0.0, metavar="X",
                   help="gnnsched only: keep colocation's plan (where feasible) unless the "
                   "best plan is predicted more than X faster on every draw, e.g. 0.22 when "
                   "predictions are trusted within 10%% (1.1 / 0.9 - 1; default 0)")
    add_calibration_arguments(p)
    p.add_argument("--seed", type=seed_int, default=0, help="seed of search and simulation")
    p.add_argument("--out", type=output_file, default="plan.json", help="where to write the plan")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--plot", type=new_image_file, default=None, metavar="PNG", help="draw the plan to this file")


def add_calibration_arguments(p: argparse.ArgumentParser) -> None:
    """``--calibration FILE`` / ``--no-calibration`` (``plan`` and ``simulate``)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--calibration", default=None, metavar="FILE",
                   help="the box calibration to predict with (`gnnsched cluster calibrate`); "
                        "default: the plan's, else CLUSTER.calibration.json beside the "
                        "cluster file when it calibrates the job's dataset")
    g.add_argument("--no-calibration", action="store_true",
                   help="predict from the profile alone (one quiet process), as before any "
                        "calibration")


def calibration_choice(args: argparse.Namespace) -> Any:
    """What ``--calibration`` / ``--no-calibration`` ask for (:data:`gnnsched.api.Calibration`)."""
    if getattr(args, "no_calibration", False):
        return None
    return getattr(args, "calibration", None) or "auto"


# how far predictions from the profile alone were off (said when `plan` has no calibration):
# docs/results-scale-model (Cora, 5 shapes x 3 systems, the scale model, before the box
# calibration is applied: `sim_profile` against the measured epoch / D) and issue 51's first
# day on two new graphs (4-host emulated clusters, `plan` against `train`)
UNCALIBRATED = ("predictions from the profile alone were -12% to +18% off the measured epoch "
                "on the evaluation's scale model (median 6.6%; 14 of 15 within 10% with the box "
                "calibration), and 12-68% short (3x on one graph) on a user's first new graphs")


def calibration_lines(profile: Any, found: Any, cluster: str | None, job: str,
                      choice: Any = "auto") -> list[str]:
    """Which calibration the predictions used, or a warning that they used none (why: none
    beside the cluster file, none for this dataset, or ``--no-calibration``), how far off
    that was, and the command that makes one."""
    made = (getattr(profile, "meta", None) or {}).get("calibrated") or {}
    if found is not None:
        return [found.line()]
    if made.get("by") == "run":
        d = float(made.get("dilation") or 1.0)
        return [f"calibration: the profile's own, measured on run {made.get('run')}"
                + (f" (scale model, D = {d:.3g}: its times / D)" if d != 1 else "")]
    if made.get("by") == "box":
        return [f"calibration: the profile's own ({made.get('file')})"]
    from gnnsched.calibrate import calibration_path

    where = ""
    if choice is None:
        where = " (--no-calibration)"
    elif cluster:
        path = calibration_path(cluster)
        where = (f" ({path} does not calibrate this job's dataset)" if path.is_file()
                 else f" ({path} is not there)")
    return [f"warning: no calibration of this box{where}: the predictions come from a "
            "profile measured in one quiet process, which leaves out the runtime's own costs; "
            + UNCALIBRATED,
            f"  calibrate first (root, ~1 min): gnnsched cluster calibrate --cluster "
            f"{cluster or 'CLUSTER.yaml'} --job {job}"]


def share(text: str) -> float:
    """A fraction in [0, 1] (argparse type)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (valid: 0..1)") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..1")
    return v


def margin(text: str) -> float:
    """A fraction >= 0 and < 10 (argparse type of --keep-colocation)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (valid: 0 <= X < 10)"
                                         ) from None
    if not 0 <= v < 10:
        raise argparse.ArgumentTypeError(f"{text} is outside 0 <= X < 10")
    return v


# what the colocation row is where no store of a trainer's data can host it: colocation's own
# placement cannot run, so the baseline planned, predicted and trained is this fallback (never
# called "infeasible" beside the epoch it is given)
FALLBACK = "colocation's placement with trainers moved to GPU hosts"
FALLBACK_NOTE = f"{FALLBACK} (no store of their data can host them: see notes)"


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def _secs(s: float) -> str:
    return f"{s:.4g} s"


def scored_network(predicted: Predicted) -> str | None:
    """The network model the plan's predicted epochs were simulated with: what the plan
    records (a placer's own ``network`` key), else read from ``scored_by`` — the placer's
    simulator scorer (:func:`gnnsched.placement.placer.simulator_scorer`) runs the ideal
    network unless it says otherwise; None when the plan was not scored by the simulator."""
    pr = Prediction.of(predicted)
    if pr.extras.get("network"):
        return str(pr.extras["network"])
    how = str(pr.scored_by or "")
    if not how.startswith("simulator"):
        return None
    return "windowed" if "windowed" in how else "ideal"


def runtime_prediction(problem: Any, plan: Any, seed: int) -> dict[str, Any] | None:
    """This plan simulated on the network the runtime drives (``gnnsched simulate``'s
    default, :data:`gnnsched.simulator.DEFAULT_NETWORK`), when the placer scored it on another
    one; None when the plan's own prediction already is that model's."""
    from gnnsched import api
    from gnnsched.simulator import DEFAULT_NETWORK

    if scored_network(plan.prediction) in (None, DEFAULT_NETWORK):
        return None
    res = api.simulate(problem.cluster, problem.job, plan, problem.profile, seed=seed,
                       network=DEFAULT_NETWORK)
    return {"network": res.meta["network"], "nic_window_s": res.meta["nic_window_s"],
            "epoch_time_s": float(res.epoch_time_s),
            "iteration_time_s": float(res.iteration_time_s)}


STEADY_LIMIT = 20_000  # trainers x iterations: beyond, three more simulated epochs are slow


def steady_epochs(problem: Any, plan: Any, seed: int, policy: str = "gnnsched"
                  ) -> dict[str, float] | None:
    """What ``train`` will report for this plan and for colocation's: its epoch is the median
    after the first, so the pipeline is already full, while a plan's predicted epoch is one
    simulated epoch from empty (its fill included). The steady epoch is the middle of three
    simulated back to back on the runtime's network, as the evaluation predicts every run
    (:func:`gnnsched.evaluation.predict.steady_epoch`); ``policy`` is ``train``'s default.
    None for an epoch too large to simulate thrice quickly (:data:`STEADY_LIMIT`)."""
    from gnnsched import api
    from gnnsched.evaluation.predict import steady_epoch

    pr = Prediction.of(plan.prediction)
    if (pr.iterations or 0) * len(plan.trainers) > STEADY_LIMIT:
        return None
    cl, job, prof = problem.cluster, problem.job, problem.profile
    out = {"plan": steady_epoch(cl, job, plan, prof, policy, seed)[0]}
    try:
        colo = api.get_placer("colocation").place(cl, job, prof, seed=seed)
    except Exception:  # noqa: BLE001 - colocation's row already says why it cannot place
        return out
    out["colocation"] = steady_epoch(cl, job, colo, prof, policy, seed)[0]
    return out


def steady_line(steady: dict[str, float] | None, placer: str) -> list[str]:
    """The line that says what ``train`` will measure (:func:`steady_epochs`)."""
    if not steady:
        return []
    colo = (f", colocation's {_secs(steady['colocation'])}" if "colocation" in steady else "")
    return [f"what `train` will measure (the median epoch after the first, the pipeline "
            f"already full; the steady simulated epoch, gnnsched policy): {placer}'s plan "
            f"{_secs(steady['plan'])}{colo}"]


def table(problem: Any, plan: Any, runtime: dict[str, Any] | None = None,
          calibration: list[str] | None = None,
          steady: dict[str, float] | None = None) -> str:
    """The human-readable report: tasks per trainer, then times against the baselines, and
    ``runtime`` (:func:`runtime_prediction`): this plan on the runtime's network;
    ``calibration`` (:func:`calibration_lines`) says what the predictions were calibrated
    with; ``steady`` (:func:`steady_epochs`) what ``train`` will measure."""
    pr = Prediction.of(plan.prediction)
    cl, job = problem.cluster, problem.job
    lines = [f"plan: {plan.placer} for job {job.name!r} ({job.trainers} trainers, "
             f"{job.num_parts} partitions) on cluster {cl.name!r} ({len(cl.machines)} machines)",
             f"scored by: {_or(pr.scored_by, '?')}, {_or(pr.iterations, '?')} iterations "
             "per epoch"] + list(calibration or []) + planning_lines(pr) + [""]
    rows = [("trainer", "machine", "gpu", "parts", "samplers", "gathers at")]
    shown = plan.trainers if len(plan.trainers) <= 64 else plan.trainers[:32]
    for t in shown:
        gpu = cl.machine(t.machine).gpus[t.device]
        owned = [str(p) if s >= 1 else f"{p} ({100 * s:.0f}%)"
                 for p, s in zip(t.parts, t.seed_shares)]
        parts = ",".join(owned) if len(owned) <= 6 else \
            f"{','.join(owned[:5])},… ({len(owned)})"
        samp = " ".join(f"{m}×{c}" for m, c in t.samplers)
        fetch = "itself" if t.fetch_at == t.machine else f"{t.fetch_at} (relay)"
        rows.append((str(t.id), t.machine, f"{t.device} ({gpu.kind})", parts, samp, fetch))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip())
    if len(shown) < len(plan.trainers):
        lines.append(f"... {len(plan.trainers) - len(shown)} more trainers in the plan file")
    if plan.caches:
        wl = problem.wl
        fb = problem.profile.feature_bytes
        shown_c = [f"{m} {r:,} rows ({r * fb / 1e6:.0f} MB, "
                   f"{wl.cache_share(cl.machine_index(m), r):.0%} of the nodes it does not "
                   "store)" for m, r in sorted(plan.caches.items())[:8]]
        lines.append("feature caches (hottest rows by in-degree, one copy per gatherer): "
                     + "; ".join(shown_c) + (" ..." if len(plan.caches) > 8 else ""))
    lines.append("")
    ep = pr.epoch_time_s
    net = scored_network(pr)
    lines.append("predicted epoch time" + ("" if net is None else
                                           f" (simulated on the {net} network)"))
    base = pr.baselines or ()
    colo_row = pr.baseline("colocation")
    colo = colo_row.epoch_time_s if colo_row is not None else None
    fallback = colo_row is not None and colo_row.colocation_feasible is False
    same = ("colocation's fallback below" if fallback else "colocation's")
    entries = [(plan.placer, ep, "this plan" + (f" (the same placement as {same})"
                                                if pr.same_as_colocation else ""))]
    for row in base:
        if row.error is not None:
            entries.append((row.name, None, f"cannot place: {row.error}"))
            continue
        note = ""
        if row.name == "colocation+cache":
            note = (("colocation's fallback" if fallback else "colocation") + " with caches "
                    "by the same rule (a degree-ordered static cache)")
        elif row.colocation_feasible is False:
            note = FALLBACK_NOTE
        elif row.colocation_feasible:
            note = "feasible: every trainer runs on a store of its partitions"
        entries.append((row.name, row.epoch_time_s, note))
    for name, t, note in entries:
        if t is None:
            lines.append(f"  {name:<16} {'-':>12}  {note}")
            continue
        vs = f"{colo / t:5.2f}x vs colocation" if colo else ""
        lines.append(f"  {name:<16} {_secs(t):>12}  {vs}  {note}".rstrip())
    cached = next((r.epoch_time_s for r in base if r.name == "colocation+cache"
                   and r.epoch_time_s), None)
    if cached and ep and plan.caches:  # every peer at its best: colocation with the caches too
        lines.append(f"  this plan is {cached / ep:.2f}x colocation with the same caches, its "
                     "best configuration here")
    if runtime is not None:
        t = _secs(runtime["epoch_time_s"])
        lines.append(f"  {plan.placer:<16} {t:>12}  {'':20}  this plan on the "
                     f"{runtime['network']} network, as the runtime sends (send windows of "
                     f"{runtime['nic_window_s'] * 1e3:g} ms; `gnnsched simulate` prints this by "
                     f"default; the plans above were scored on the {net} network)")
    lines.extend(steady_line(steady, plan.placer))
    lines.append("")
    lines.extend(bound_report(pr, ep))
    lines.append("")
    lines.append(why(pr, job.prefetch))
    notes = [f"{plan.placer}: {n}" for n in plan.notes[:12]]
    if len(plan.notes) > 12:
        notes.append(f"{plan.placer}: ... {len(plan.notes) - 12} more in the plan file")
    for row in base:
        notes.extend(f"{row.name}: {n}" for n in row.notes or ())
    if notes:
        lines.append("")
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in notes)
    return "\n".join(lines)


def planning_lines(predicted: Predicted) -> list[str]:
    """Where the planning seconds went, and why they passed ``--budget`` when they did: the
    budget bounds the search, but the starts are scored on every draw before it, in full
    simulations a large epoch makes slow."""
    pr = Prediction.of(predicted)
    took, budget = pr.planning_s, pr.budget_s
    if took is None:
        return []
    phases = pr.planning_phases_s or {}
    parts = ", ".join(f"{name} {s:.1f} s" for name, s in phases.items() if s >= 0.05)
    out = [f"planned in {took:.1f} s" + ("" if budget is None else f" with --budget {budget:g} s")
           + (f" ({parts})" if parts else "")]
    if budget is not None and took > 1.2 * budget + 1.0:
        draws, starts, stopped = _search_facts(pr)
        out.append(f"  over the budget: the {starts} starts are each simulated on {draws or 1} "
                   "draw(s) before the search, and simulating this epoch is slow; the budget "
                   "bounds the search, which had "
                   f"{max(0.0, phases.get('search', 0.0)):.1f} s (stopped by: "
                   f"{stopped or '?'})")
    return out


def _search_facts(pr: Prediction) -> tuple[int, int, str]:
    """(draws, starts, why it stopped) of the search: its :class:`SearchRecord`, else what a
    placer recorded under ``search`` in a shape of its own (kept in ``extras``)."""
    if pr.search is not None:
        d = pr.search.draws
        return ((len(d.seeds), len(d.starts)) if d else (0, 0)) + (pr.search.stopped,)
    search = pr.extras.get("search") or {}
    draws = search.get("draws") or {}
    return (len(draws.get("seeds") or []), len(draws.get("starts") or []),
            search.get("stopped") or "")


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where it is not recorded."""
    return default if value is None else value


def bound_report(predicted: Predicted, epoch_s: float) -> list[str]:
    """The two named bounds the plan records (:func:`gnnsched.bounds.bound_lines`, the lines
    ``gnnsched simulate`` prints for the same plan and seed) and this plan against them."""
    from gnnsched.bounds import AnyPlacementBound, PerPlanBound, bound_lines, ratio_line

    pr = Prediction.of(predicted)
    rec = pr.bounds
    if rec is None or not rec.per_plan:  # a plan from a placer run outside `gnnsched plan`
        lb = pr.lower_bound_s
        return [f"lower bound {_secs(lb)} (this plan records no named bounds)"] if lb else []
    per = PerPlanBound.from_dict(rec.per_plan)
    anyd = rec.any_placement
    anyb = AnyPlacementBound.from_dict(anyd) if anyd else None
    return bound_lines(per, anyb, "not computed") + [ratio_line(epoch_s, per, anyb)]


def why(predicted: Predicted, prefetch: int) -> str:
    """The "why" line: the plan's two per-iteration floors (both at most its predicted
    iteration, :func:`gnnsched.placement.search.iteration_floor`) next to that iteration."""
    pr = Prediction.of(predicted)
    per = pr.epoch_time_s / max(_or(pr.iterations, 1), 1)
    fl = pr.floors
    res = fl.bottleneck_iteration_s if fl is not None else 0.0
    chain = fl.chain_iteration_s if fl is not None else None
    kind = "simulated" if str(pr.scored_by or "").startswith("simulator") else "predicted"
    resource = (f"the most loaded resource is {fl.bottleneck if fl is not None else None} "
                f"with {_ms(res)} of work")
    if chain is None:
        return f"why: {resource} per iteration; {kind} iteration {_ms(per)}"
    chained = (f"the longest dependency chain (each mini-batch sampled and gathered before it "
               f"trains, at most {prefetch} ahead, then the barrier) takes {_ms(chain)}")
    first, second = (resource, chained) if res >= chain else (chained, resource)
    return (f"why: {first} per iteration, and {second}; {kind} iteration {_ms(per)} (the "
            "rest is contention and waits that neither floor counts)")


def from_ray(args: argparse.Namespace) -> str:
    """``--from-ray``: the cluster as the Ray cluster reports it (merged with ``--cluster``),
    written where ``gnnsched train --cluster`` will read it; returns that path."""
    from pathlib import Path

    import yaml

    from gnnsched import api

    data, notes = api.ray_cluster(args.from_ray, args.job, args.cluster)
    out = Path(args.cluster_out or Path(args.out).with_suffix(".cluster.yaml"))
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    hosts = ", ".join(f"{m['name']} ({m['cpus']} CPU{'s' * (m['cpus'] != 1)}, "
                      f"{m['memory_gb']:g} GB" + (f", {len(m['gpus'])} GPU"
                                                  + "s" * (len(m["gpus"]) != 1)
                                                  if m.get("gpus") else "") + ")"
                      for m in data["machines"])
    print(f"cluster from Ray at {args.from_ray}: {hosts}; wrote {out}", file=sys.stderr)
    return str(out)


def _phase_printer() -> Callable[[str], None] | None:
    """One line per planning phase on stderr, as train shows its own progress: on a
    terminal only, so pipes and logs get the plan and nothing else."""
    from gnnsched.commands.progress import on_terminal

    if not on_terminal(sys.stderr):
        return None
    return lambda line: print(f"plan: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from gnnsched import api

    if args.from_ray:
        args.cluster = from_ray(args)
    elif args.cluster is None:
        from gnnsched.spec import SpecError

        raise SpecError("--cluster", "", "is required", "a cluster file, or --from-ray ADDR")
    parts = getattr(args, "partitions", None)
    _, job = api.load_pair(args.cluster, args.job)
    profile, found = api.planning_profile(args.cluster, job, args.cost,
                                          calibration_choice(args))
    plan = api.plan(args.cluster, args.job, args.cost, placer=args.placer, seed=args.seed,
                    budget=args.budget, partitions=parts, cache_share=args.cache_share,
                    keep_colocation=args.keep_colocation, calibration=found,
                    progress=_phase_printer())
    plan.save(args.out)
    problem = api.plan_problem(args.cluster, args.job, args.cost, partitions=parts,
                               calibration=found)
    said = calibration_lines(profile, found, args.cluster, args.job, calibration_choice(args))
    if args.plot:
        api.draw_plan(problem, plan, args.plot)
    pr = Prediction.of(plan.prediction)
    recorded = pr.as_legacy_dict()
    runtime = runtime_prediction(problem, plan, args.seed)
    steady = steady_epochs(problem, plan, args.seed)
    if args.json:
        keys = ("placer", "epoch_time_s", "per_plan_bound_s", "any_placement_bound_s",
                "bounds", "lower_bound_s", "baselines", "bottleneck",
                "bottleneck_iteration_s", "chain_iteration_s", "iteration_s", "iterations",
                "speedup_vs_colocation", "scored_by", "planning_s", "budget_s",
                "planning_phases_s")
        out = {k: recorded[k] for k in keys if k in recorded}
        out["network"] = scored_network(pr)
        if runtime is not None:
            out["runtime_network"] = runtime
        out["steady_epoch_time_s"] = steady
        out["calibration"] = None if found is None else {
            "file": str(found.path), "dataset": found.key,
            **{k: getattr(found.box, k) for k in ("train", "sample", "allreduce_overhead_s",
                                                  "wire_overhead", "dilation")}}
        if said[0].startswith("warning"):
            print("gnnsched plan: " + "\n".join(said), file=sys.stderr)
        out.update(out=str(args.out), plot=args.plot, notes=list(plan.notes))
        print(json.dumps(out, default=float))
    else:
        print(table(problem, plan, runtime, said, steady))
        print(f"\nwrote {args.out}" + (f" and {args.plot}" if args.plot else ""))
    return 0
