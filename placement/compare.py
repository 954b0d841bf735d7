"""The comparison every placer goes through: place, check, score against the baselines, bound.

``gnnsched plan`` (:func:`gnnsched.api.plan`) runs :func:`plan_and_compare` whatever the
placer: the placer gets the comparison's services (:class:`~.base.PlanningContext`: its
scorer, the draws of other seeds, the colocation margin), its plan is checked against the
resources, it and every baseline are scored with one scorer, and the bound is its own step
(:func:`any_placement`), which reuses the placer's CP-SAT outcome where it left one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gnnsched.placement.base import PlanningContext, get_placer
from gnnsched.placement.budget import PLACER_SHARE, Budget, Progress
from gnnsched.placement.cpsat import CpSatOutcome, run_cpsat, simulated_lower_bound
from gnnsched.placement.feasibility import usage
from gnnsched.placement.problem import Problem
from gnnsched.placement.scoring import Evaluator, Scorer, default_scorer
from gnnsched.plan import Plan
from gnnsched.prediction import BaselineRow, BoundsRecord, CpSatRecord, Floors, Prediction
from gnnsched.spec import SpecError

BASELINES = ("colocation", "greedy", "random")
# of the seconds the placer leaves: the baselines' simulations may take this share, and the
# bound's CP-SAT solves this share of the rest (setting its models up takes about as long)
BASELINE_SHARE, BOUND_SHARE = 0.5, 0.3


def _trainer_places(plan: Plan) -> set[tuple]:
    """Where a plan's trainers run, on which parts, gathering where (samplers aside)."""
    return {(t.machine, t.device, tuple(sorted(t.parts)), t.fetch_at) for t in plan.trainers}


def iteration_floor(problem: Problem, plan: Plan, seed: int = 0, simulated: bool = True
                    ) -> dict[str, float | str]:
    """Why a plan takes the time it does: per-iteration floors of its predicted epoch.

    ``bottleneck`` is the most loaded resource and ``bottleneck_iteration_s`` its work per
    iteration; ``chain_iteration_s`` is the longest dependency chain (every batch sampled and
    gathered before it trains, at most ``prefetch`` batches ahead, and the barrier after every
    iteration) per iteration. With ``simulated`` both are computed on the mini-batches the
    simulator draws with `seed` (:func:`gnnsched.bounds.resource_bound`,
    :func:`gnnsched.bounds.chain_bound`), so neither exceeds the simulated epoch's time per
    iteration; mean costs would not do (a drawn epoch can be lighter than the mean, and a
    trainer sampling on several hosts need not split its batches as its sampler counts do).
    Without (a plan scored by the cost model, :func:`~gnnsched.placement.scoring.bound_scorer`)
    they are the cost model's own, which its score never undercuts either.
    """
    return asdict(floors_of(problem, plan, seed, simulated))


def floors_of(problem: Problem, plan: Plan, seed: int = 0, simulated: bool = True) -> Floors:
    """:func:`iteration_floor` as the prediction records it."""
    if simulated:
        from gnnsched.bounds import per_plan_bound

        return _floors(per_plan_bound(problem.wl, plan, seed))
    per, name = problem.seconds_per_iteration(plan)
    return Floors(name, per, problem.wl.bound(plan).chain_s / problem.wl.iterations)


def _floors(b: Any) -> Floors:
    """:func:`iteration_floor`'s fields from a :class:`gnnsched.bounds.PerPlanBound`."""
    return Floors(b.resource, b.resource_s / b.iterations, b.chain_s / b.iterations)


@dataclass
class Compared:
    """The plans scored beside the chosen one: a row per baseline (or its error), the plans
    themselves and their per-plan bounds (the any-placement bound covers every one)."""

    rows: list[BaselineRow] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    per_plan: dict[str, Any] = field(default_factory=dict)
    same_as_colocation: bool = False


class _Judge:
    """Scores plans the one way the comparison does: the scorer, the per-plan bound on the
    draws of `seed`, and the floors (drawn when the scorer is the simulator)."""

    def __init__(self, problem: Problem, ev: Evaluator, seed: int, simulated: bool) -> None:
        self.problem, self.ev, self.seed, self.simulated = problem, ev, seed, simulated

    def per_plan(self, plan: Plan) -> Any:
        from gnnsched.bounds import per_plan_bound

        return per_plan_bound(self.problem.wl, plan, self.seed)

    def floors(self, plan: Plan, bound: Any) -> Floors:
        return _floors(bound) if self.simulated else \
            floors_of(self.problem, plan, self.seed, False)

    def row(self, name: str, plan: Plan, bound: Any, planning_s: float, **extra: Any
            ) -> BaselineRow:
        """A baseline's row: its epoch, planning seconds, per-plan bound and floors."""
        return BaselineRow(name, self.ev(plan), planning_s, bound.epoch_s,
                           floors=self.floors(plan, bound), **extra)


def _short_notes(notes: Sequence[str]) -> tuple[str, ...] | None:
    if not notes:
        return None
    return tuple(notes[:3]) + ((f"... {len(notes) - 3} more like these",) if len(notes) > 3
                               else ())


def compare_baselines(problem: Problem, plan: Plan, placer: str, names: Sequence[str],
                      judge: _Judge, cache_share: float = 0.0) -> Compared:
    """Every baseline of `names` (but `placer` itself) placed and scored as `plan` is; a
    baseline that cannot place, or whose plan does not fit, is reported, not fatal. With
    ``cache_share`` colocation also runs with caches sized by the same rule (what a DistDGL
    user would add by hand)."""
    out = Compared(plans=[plan], per_plan={f"this plan ({placer})": judge.per_plan(plan)})
    for name in names:
        if name == placer:
            continue
        t1 = time.perf_counter()
        try:
            bp = get_placer(name).place_problem(problem, seed=judge.seed)
        except Exception as exc:  # a baseline that cannot place is reported, not fatal
            out.rows.append(BaselineRow(name, error=str(exc)))
            continue
        dt = time.perf_counter() - t1
        over = usage(problem, bp).problems
        if over:
            out.rows.append(BaselineRow(name, error=f"its plan does not fit: {over[0]}"))
            continue
        out.per_plan[name] = pb = judge.per_plan(bp)
        feasible = bp.prediction.colocation_feasible if bp.prediction is not None else None
        out.rows.append(judge.row(name, bp, pb, dt, colocation_feasible=feasible,
                                  notes=_short_notes(bp.notes)))
        if name == "colocation" and _trainer_places(bp) == _trainer_places(plan):
            out.same_as_colocation = True
        out.plans.append(bp)
        if name == "colocation" and cache_share > 0:
            _with_caches(problem, bp, dt, judge, cache_share, out)
    return out


def _with_caches(problem: Problem, colo: Plan, dt: float, judge: _Judge, cache_share: float,
                 out: Compared) -> None:
    """Colocation with caches sized by the plan's rule (hottest rows by degree), when any fit."""
    from gnnsched.placement.caches import size_caches

    bc = size_caches(problem, colo, cache_share)
    if bc.caches and not usage(problem, bc).problems:
        out.per_plan["colocation+cache"] = pc = judge.per_plan(bc)
        out.rows.append(judge.row("colocation+cache", bc, pc, dt, caches=dict(bc.caches)))
        out.plans.append(bc)


def cpsat_outcome(placer: Any, problem: Problem, *, seed: int = 0,
                  budget: float | None = None) -> tuple[CpSatOutcome, bool]:
    """The CP-SAT outcome the bound starts from: the placer's own where it solved the model
    (``placer.outcome``), else a run here; and whether it was run here."""
    outcome = getattr(placer, "outcome", None)
    if outcome is not None:
        return outcome, False
    return run_cpsat(problem, time_limit=min(10.0, budget or 10.0), seed=seed), True


def any_placement(problem: Problem, plan: Plan, outcome: CpSatOutcome, compared: Compared,
                  seed: int = 0, time_limit: float = 10.0, solve: bool = True
                  ) -> dict[str, Any]:
    """The bound step: CP-SAT's proven bound on the draws of `seed`, lowered to every compared
    plan's own bound, with the chosen plan's per-plan bound (the fields of
    :func:`gnnsched.bounds.bound_fields`) and the ``lower_bound_*`` fields it has always been
    recorded as: the prediction's fields of both. Not `solve` (the budget is spent): the
    smallest per-plan bound of the plans compared, which the scope says."""
    from gnnsched.bounds import any_placement_bound

    it = problem.wl.iterations
    if not solve:
        mine = next(iter(compared.per_plan.values()))
        scope = ("CP-SAT's bound on the drawn mini-batches not solved (the --budget was "
                 "spent): the smallest per-plan bound of the plans compared, a bound of "
                 "those plans only")
        anyb = any_placement_bound(None, compared.per_plan, scope=scope, status="not solved")
        return {"per_plan_bound_s": mine.epoch_s, "any_placement_bound_s": anyb.epoch_s,
                "bounds": BoundsRecord(mine.seed, mine.iterations, mine.to_dict(),
                                       anyb.to_dict()),
                "lower_bound_s": anyb.epoch_s, "lower_bound_iteration_s": anyb.iteration_s,
                "lower_bound_scope": scope}
    lb = simulated_lower_bound(problem, outcome, compared.plans, seed=seed,
                               time_limit=time_limit)
    # simulated_lower_bound solves the model on the drawn mini-batches whatever the scorer
    scope = outcome.scope().replace(" (with the drawn mini-batches when simulated)", "")
    if plan.caches:
        scope += "; CP-SAT's model has no feature caches, the plan's own bound charges them"
    mine = next(iter(compared.per_plan.values()))
    anyb = any_placement_bound(lb * it, compared.per_plan, scope=scope,
                               status=str(outcome.result.status))
    return {"per_plan_bound_s": mine.epoch_s, "any_placement_bound_s": anyb.epoch_s,
            "bounds": BoundsRecord(mine.seed, mine.iterations, mine.to_dict(), anyb.to_dict()),
            "lower_bound_s": anyb.epoch_s, "lower_bound_iteration_s": anyb.iteration_s,
            "lower_bound_scope": scope}


def place(problem: Problem, placer: str, context: PlanningContext, *, seed: int = 0,
          budget: float | None = None, cache_share: float = 0.0) -> tuple[Any, Plan, float]:
    """(the placer, its plan, planning seconds): the placer takes the context, places, and
    the plan gets caches when ``cache_share``; a plan that does not fit is refused (every
    built-in placer keeps to the resources; a plug-in may not)."""
    t0 = time.perf_counter()
    chosen = get_placer(placer)
    chosen.use(context)
    plan = chosen.place_problem(problem, seed=seed, budget=budget)
    if cache_share > 0:
        from gnnsched.placement.caches import size_caches

        plan = size_caches(problem, plan, cache_share)
    planning = time.perf_counter() - t0
    over = usage(problem, plan).problems
    if over:
        raise SpecError(problem.cluster.source, "machines",
                        f"the {placer} placer's plan does not fit: {over[0]}",
                        "more memory_gb or cores there, or another --placer")
    return chosen, plan, planning


def plan_and_compare(problem: Problem, placer: str = "gnnsched", *, seed: int = 0,
                     budget: float | None = None, baselines: Sequence[str] = BASELINES,
                     scorer: Scorer | None = None, how: str | None = None,
                     cache_share: float = 0.0, keep_colocation: float = 0.0,
                     progress: Progress | None = None) -> Plan:
    """Plan with `placer`, score it and every baseline with one scorer, attach the bound.

    Every placer gets the same :class:`~.base.PlanningContext`: the scorer (default: the
    simulator, :func:`default_scorer`), the draws of other seeds when it is the simulator,
    and ``keep_colocation``, the margin a placer that knows colocation keeps it by. With
    ``cache_share`` > 0 the plan also gets feature caches sized from that share of every
    gathering host's free memory (:func:`gnnsched.placement.caches.size_caches`); the
    baselines keep none.

    The returned plan's prediction holds ``epoch_time_s``, ``baselines`` ({name:
    {epoch_time_s, per_plan_bound_s, ...}}), ``bottleneck``, ``speedup_vs_colocation`` and the
    two bounds of :mod:`gnnsched.bounds` on the draws of `seed` (:func:`any_placement`:
    ``per_plan_bound_s``, ``any_placement_bound_s`` and ``bounds``, which ``gnnsched
    simulate`` prints again); ``lower_bound_s`` is the any-placement bound, as before:
    everything `gnnsched plan` prints.

    ``budget`` (seconds) bounds all of it (:mod:`.budget`): the placer gets
    :data:`~.budget.PLACER_SHARE` of it, the baselines and the bound the rest, and the
    simulator's scorers cut a simulation that would run past the deadline (the plan's notes
    say which were and how they were scored instead); it holds within
    :data:`~.budget.OVERSHOOT` x budget + :data:`~.budget.OVERSHOOT_S`. ``progress`` gets
    one line per phase with the seconds since planning began.
    """
    bud = Budget(budget, progress)
    if scorer is None:
        scorer, how = default_scorer(problem, seed, budget=bud)
    simulated = (how or "").startswith("simulator")
    ev = scorer if isinstance(scorer, Evaluator) else Evaluator(scorer)
    context = PlanningContext(
        scorer=ev, scored_by=how or "caller's scorer", keep_colocation=keep_colocation,
        seed_scorer=(lambda s, its: default_scorer(problem, s, its, budget=bud)[0])
        if simulated else None, budget=bud, progress=progress)
    bud.say("planning", f"{placer} for {problem.W} trainers on {len(problem.cluster.machines)} "
            "machines" + ("" if budget is None else f", --budget {budget:g} s"))
    chosen, plan, planning = place(problem, placer, context, seed=seed,
                                   budget=None if budget is None else budget * PLACER_SHARE,
                                   cache_share=cache_share)
    own = plan.prediction or Prediction()
    bud.say("placed", f"{planning:.1f} s")
    t1 = time.perf_counter()
    outcome, ran_here = cpsat_outcome(chosen, problem, seed=seed,
                                      budget=None if budget is None else max(0.5, bud.left()))
    judge = _Judge(problem, ev, seed, simulated)
    with bud.scope(BASELINE_SHARE * bud.left()):  # the rest is the bound's
        compared = compare_baselines(problem, plan, placer, baselines, judge, cache_share)
    t_base = time.perf_counter() - t1
    bud.say("baselines", ", ".join(f"{r.name} {r.epoch_time_s:.3g} s" for r in compared.rows
                                   if r.epoch_time_s is not None) + f"; {t_base:.1f} s")
    solve = not bud.expired
    if not solve:
        bud.skipped.append("the any-placement bound is the smallest per-plan bound of the "
                           "plans compared: no time was left to solve CP-SAT's on the draws")
    bound = any_placement(problem, plan, outcome, compared, seed,
                          time_limit=max(0.5, min(10.0, BOUND_SHARE * bud.left())),
                          solve=solve)
    with bud.unbounded():  # the plan's own score: simulated in full where not yet scored
        epoch = ev(plan)  # (its caches make it another plan than the one the search scored)
    it = problem.wl.iterations
    colo = next((r.epoch_time_s for r in compared.rows if r.name == "colocation"), None)
    prediction = replace(
        own, **bound, placer=placer, epoch_time_s=epoch, iterations=it, iteration_s=epoch / it,
        floors=judge.floors(plan, next(iter(compared.per_plan.values()))),
        baselines=tuple(compared.rows),
        cpsat=CpSatRecord(outcome.result.status) if ran_here else own.cpsat,
        same_as_colocation=True if compared.same_as_colocation else own.same_as_colocation,
        scored_by=how or (own.scored_by if own.scored_by is not None else "caller's scorer"),
        speedup_vs_colocation=colo / epoch if colo else own.speedup_vs_colocation,
        **_seconds(own, bud, planning, t_base, placer, budget))
    bud.say("bound", f"any placement {bound['any_placement_bound_s']:.3g} s; planned in "
            f"{bud.elapsed():.1f} s")
    notes = tuple(plan.notes) + tuple(n for n in problem.notes if n not in plan.notes) + \
        tuple(n for n in bud.notes() if n not in plan.notes)
    return replace(plan, prediction=prediction, notes=notes)


def _seconds(own: Prediction, bud: Budget, placing: float, baselines: float, placer: str,
             budget: float | None) -> dict[str, Any]:
    """The prediction's planning seconds: all of the comparison's (``planning_s``), the
    placer's phases (or its one) then the baselines' and the bound's, and the budget."""
    total = bud.elapsed()
    phases = dict(own.planning_phases_s) if own.planning_phases_s else {placer: placing}
    phases["baselines"] = baselines
    phases["bound"] = phases.get("bound", 0.0) + max(0.0, total - sum(phases.values()))
    return {"planning_s": total, "planning_phases_s": phases,
            "budget_s": budget if budget is not None else own.budget_s}


__all__ = ["BASELINES", "Compared", "any_placement", "compare_baselines", "cpsat_outcome",
           "floors_of", "iteration_floor", "place", "plan_and_compare"]
