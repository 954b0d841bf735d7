"""Exploratory search: refine CP-SAT's placements by simulating the online schedule.

The bottleneck model sees per-iteration loads; it misses barrier waits, pipeline fill and the
timing of contention, which only the simulator (running the ``gnnsched`` policy) sees. The
search starts from several good plans — CP-SAT's plan and pool, greedy's plan of every part
split, colocation, the seed-share model's plans and the even split's placement with its seeds
balanced by simulation, or staggered where several trainers split a partition
(:mod:`.balance`); starts more than ``RACE`` slower on the first draw
are dropped there — proposes local moves (move a trainer, swap two, change sampler counts or
hosts, change where gathering runs, reassign a part or a share of its seeds) and accepts them
by simulated annealing on the simulated epoch time.

**Several draws.** A simulated epoch depends on the mini-batches drawn with a seed, and a plan
tuned to one draw can lose on the next. Every candidate is scored on ``SEARCH_SEEDS`` seeded
draws (:func:`draw_seeds`: the planner's seed first), and annealing follows the mean. A plan
found by the search is kept only when it *wins on every draw*: it is faster than the best
start on that draw (the per-draw minimum over every start: CP-SAT, greedy, colocation). When
no plan does, the placer falls back to the best start: the one whose worst draw is closest to
the best start of that draw (least regret, ties by the mean), not the one fastest on the
planner's own seed alone (:mod:`.draws`). It reports the noise: the spread (max - min) / min
of its plan's epoch over the draws (the prediction's ``noise``), and per draw its epoch and the
best start's (its ``search``).

This module is the placer: its starts, their race and the final choice. The moves are in
:mod:`.moves`, the annealing in :mod:`.annealing`, the comparison with the baselines that every
placer goes through in :mod:`.compare` (its names are re-exported here, where they used to be).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from gnnsched.placement.annealing import KEEP, REHEATS, Outcome, SearchStats, search, search_many
from gnnsched.placement.base import (
    Placer,
    PlanningContext,
    SeedScorer,
    check_margin,
    register,
)
from gnnsched.placement.budget import Budget
from gnnsched.placement.compare import BASELINES, iteration_floor, plan_and_compare
from gnnsched.placement.cpsat import run_cpsat, simulated_lower_bound
from gnnsched.placement.draws import (
    SEARCH_SEEDS,
    SEED_STRIDE,
    SeedEvaluator,
    draw_seeds,
    fallback,
    regret,
    spread,
    wins,
)
from gnnsched.placement.feasibility import usage
from gnnsched.placement.moves import MOVES, repair
from gnnsched.placement.problem import Problem
from gnnsched.placement.scoring import SEARCH_ITERATIONS, Evaluator, Scorer, default_scorer
from gnnsched.plan import Plan
from gnnsched.prediction import Prediction, SearchDraws
from gnnsched.spec import SpecError

RACE = 0.15  # a start this much slower than the best on the first draw is scored on no other
MODEL_S = 1.0  # seconds a start that solves a model or simulates needs, else it is left out
CPSAT_SHARE, STARTS_SHARE = 0.1, 0.2  # of the placer's seconds: CP-SAT's limit, a tuned
# start's (the seed-share model's cap is half: its work is bounded, the cap only a safety)


# ---------------------------------------------------------------------- the placer


def _starts(problem: Problem, out: Any, *, seed: int = 0, budget: float = 2.0,
            score: Scorer | None = None, balance_s: float = 0.0,
            bud: Budget | None = None) -> list[tuple[str, Plan]]:
    """(name, plan) of the starts: CP-SAT's plan and pool, greedy's plan of every part split
    solved, colocation (whole and even), the seed-share model's plan where it is installed
    (``shares``), CP-SAT's plan with the seed split best for it and, given a `score`, the
    even colocation's placement with its seeds balanced by it for up to `balance_s` seconds
    (:func:`~gnnsched.placement.balance.balance_seeds`: ``balanced``)
    — each placement once (a plan found under several names is named by all of them,
    joined by " = "), only plans with every trainer of the job. With `bud`, the starts that
    solve a model or simulate (shares, cpsat+shares, balanced) are left out once less than
    :data:`MODEL_S` seconds are left (the budget's notes say so)."""
    named = _base_starts(problem, out, seed=seed, budget=budget, bud=bud)
    named += _more_starts(problem, out, named, seed=seed, budget=budget, score=score,
                          balance_s=balance_s, bud=bud)
    return _dedupe(problem, named)


def _late(bud: Budget | None, name: str) -> bool:
    """Whether start `name` (a model or simulations) is left out for time (and noted)."""
    if bud is None or bud.left() >= MODEL_S:
        return False
    bud.skipped.append(f"start {name} left out: {bud.left():.1f} s of the placer's time left")
    return True


def _base_starts(problem: Problem, out: Any, *, seed: int, budget: float = 2.0,
                 bud: Budget | None = None) -> list[tuple[str, Plan]]:
    """The starts of :func:`_starts` that need no simulation (CP-SAT's, greedy's,
    colocation's and the seed-share model's: `budget` caps its seconds, and it is left out
    where `bud` has less than :data:`MODEL_S` left), as named (not deduplicated)."""
    from gnnsched.placement.base import placers

    named: list[tuple[str, Plan]] = [("cpsat", out.plan)]
    named += [(f"cpsat pool {k}", p) for k, p in enumerate(list(out.pool)[:3])]
    named += [("greedy" if k == 0 else f"greedy split {k}", p)
              for k, p in enumerate(out.warm_starts)]
    for name in ("colocation", "colocation-even", "shares"):
        if name not in placers() or (name == "shares" and _late(bud, name)):
            continue
        try:
            named.append((name, placers()[name]().place_problem(problem, seed=seed,
                                                                budget=budget)))
        except SpecError:  # it cannot place this job (e.g. colocation: trainers > groups)
            pass
    return named


def _more_starts(problem: Problem, out: Any, named: list[tuple[str, Plan]], *, seed: int,
                 budget: float, score: Scorer | None, balance_s: float,
                 bud: Budget | None) -> list[tuple[str, Plan]]:
    """The starts of :func:`_starts` that tune another: the even colocation's seeds balanced
    or staggered by the simulation (``balanced``, ``staggered``: with a `score`) and CP-SAT's
    plan with the seed split best for it (``cpsat+shares``), each left out where `bud` has
    less than :data:`MODEL_S` seconds left (not deduplicated)."""
    from gnnsched.placement.base import placers

    # the simulation's tuning first: at 256 hosts it finds the best start
    more = _tuned_starts(problem, named, score, balance_s, bud) if score is not None else []
    split_already = {p.key() for name, p in named if name in ("colocation", "colocation-even",
                                                                  "greedy")}
    # CP-SAT's own placement with the seed split best for it (unless the seed-share stage
    # split it already: it splits colocation's and greedy's placements)
    if "shares" in placers() and out.plan.key() not in split_already and \
            not _late(bud, "cpsat+shares"):
        from gnnsched.placement.shares import rebalance

        r = rebalance(problem, out.plan, time_limit=budget, seed=seed)
        if r is not None:
            more.append(("cpsat+shares", r))
    return more


def _tuned_starts(problem: Problem, named: list[tuple[str, Plan]], score: Scorer,
                  balance_s: float, bud: Budget | None) -> list[tuple[str, Plan]]:
    """The starts the scorer tunes: the even colocation's placement with its seeds balanced
    (``balanced``) or staggered (``staggered``)."""
    even = next((p for name, p in named if name == "colocation-even"), None)
    out: list[tuple[str, Plan]] = []
    if even is None:
        return out
    if balance_s > 0 and not _late(bud, "balanced"):
        from gnnsched.placement.balance import balance_seeds

        b = balance_seeds(problem, even, score, budget=balance_s)
        if b is not None:
            out.append(("balanced", b[0]))
    from gnnsched.placement.balance import stagger_seeds

    st = stagger_seeds(problem, even, score)  # only where trainers split a partition
    if st is not None:
        out.append(("staggered", st[0]))
    return out


def _also(named: list[tuple[str, Plan]], raced: dict[str, float],
          found: list[tuple[str, Plan]], known: set[tuple]
          ) -> tuple[list[tuple[str, Plan]], dict[str, float]]:
    """`named` and `raced` with the names of the `found` starts that are known placements
    joined to theirs (" = "), as :func:`_dedupe` names one plan found twice."""
    alias: dict[tuple, list[str]] = {}
    for name, p in found:
        if p.key() in known:
            alias.setdefault(p.key(), []).append(name)
    if not alias:
        return named, raced
    out = [(" = ".join([n] + alias.get(p.key(), [])), p) for n, p in named]
    return out, raced  # a raced-out start keeps its name: only its first-draw score is kept


def _dedupe(problem: Problem, named: list[tuple[str, Plan]],
            known: set[tuple] | None = None) -> list[tuple[str, Plan]]:
    """Each placement once (one under several names is named by all, joined by " = "), none
    of `known`'s keys, only plans with every trainer of the job that fit."""
    seen: dict[tuple, int] = {}  # a plan's key: its index in starts
    starts: list[tuple[str, Plan]] = []
    for name, p in named:
        if known is not None and p.key() in known:
            continue
        if p.key() in seen:  # one plan under two names (CP-SAT's is often colocation's):
            i = seen[p.key()]  # keep both, so the start is found by either
            starts[i] = (f"{starts[i][0]} = {name}", starts[i][1])
            continue
        if len(p.trainers) != problem.W or usage(problem, p).problems:
            continue
        seen[p.key()] = len(starts)
        starts.append((name, replace(p, placer="gnnsched", prediction=None, notes=())))
    return starts


def _affordable(named: list[tuple[str, Plan]], ev: SeedEvaluator, per_sim: float,
                seconds: float, colocation: bool = False
                ) -> tuple[list[tuple[str, Plan]], dict[str, float]]:
    """The starts that can be scored on every other draw in `seconds`, a simulation taking
    `per_sim`: all of them, else the best on the first draw (and colocation's, with
    `colocation`: the margin needs it), and the first-draw scores of the others."""
    if ev.n <= 1 or per_sim <= 0 or seconds == float("inf"):
        return named, {}
    fit = max(1, int(seconds / (per_sim * (ev.n - 1))))
    if fit >= len(named):
        return named, {}
    order = sorted(range(len(named)), key=lambda i: (ev.first(named[i][1]), i))
    if colocation:
        colo = [i for i in order if "colocation" in named[i][0].split(" = ")]
        order = colo[:1] + [i for i in order if i not in colo[:1]]
    keep = sorted(order[:fit])
    return [named[i] for i in keep], {named[i][0]: ev.first(named[i][1]) for i in order[fit:]}


def _race(named: list[tuple[str, Plan]], ev: SeedEvaluator, problem: Problem | None = None,
          bud: Budget | None = None) -> tuple[list[tuple[str, Plan]], dict[str, float]]:
    """The starts worth scoring on every draw, and the others' first-draw scores: a start
    more than ``RACE`` slower than the best on the first draw is dropped there (at 256 hosts
    every draw of a start costs a second), except colocation's, whose margin
    (``keep_colocation``) needs every draw. With a `problem` the starts are simulated in the
    order of the cost model's bound (the most promising first: where the budget runs out,
    the others are the ones scored the cheaper way); with a `bud` a start scored the cheaper
    way is dropped where another was simulated (it is never kept on an estimate)."""
    order = list(range(len(named)))
    if problem is not None:
        order.sort(key=lambda i: (problem.epoch_bound(named[i][1]), i))
    firsts = [0.0] * len(named)
    for i in order:
        firsts[i] = ev.first(named[i][1])
    seed = ev.seeds[0] if ev.seeds else None
    guessed = set() if bud is None else \
        {i for i in order if (named[i][1].key(), seed) in bud.estimated}
    if len(guessed) == len(named):
        guessed = set()  # none simulated: the estimates are all there is
    lead = min(f for i, f in enumerate(firsts) if i not in guessed)
    keep, raced = [], {}
    for i, ((name, p), f) in enumerate(zip(named, firsts)):
        colo = "colocation" in name.split(" = ")
        if (f <= lead * (1 + RACE) and i not in guessed) or colo:
            keep.append((name, p))
        else:
            raced[name] = f
    return keep, raced


@register("gnnsched")
class GnnschedPlacer(Placer):
    """CP-SAT's bottleneck model, then the exploratory search scored by the simulator on
    several seeded draws (see the module's docstring).

    ``seed_scorer(seed, iterations)``: a scorer simulating the draws of `seed` (``iterations``
    None: the whole epoch; else that many, extrapolated). Without it and without a `scorer`
    the simulator with the gnnsched policy is used (:func:`default_scorer`); with a `scorer`
    but no ``seed_scorer`` the caller's scorer is the only draw (its seed is unknown here).

    ``keep_colocation`` (a fraction, default 0): how unsure the scores are. Where the
    colocation placer can place the job (its fallback included, where a store has no GPU:
    the plan the colocation baseline runs), its plan is kept unless the chosen one is
    predicted faster by more than this on every draw. Predictions made before a run are only
    so accurate: two of them each within a of the measured epoch can misjudge a speed-up by
    up to (1 + a) / (1 - a) (:func:`margin_for`), and a plan from a model that unsure could
    lose to colocation.

    ``max_evals``: the search's work, in proposals scored on every draw. The search stops
    there (or on a stall), so that the same inputs give the same plan on any machine; the
    time budget is only a safety cap, and a search it stops depends on the machine's speed.
    """

    max_evals: int = 150
    seeds: int = SEARCH_SEEDS
    keep_colocation: float = 0.0

    def __init__(self, scorer: Scorer | None = None, search_scorer: Scorer | None = None,
                 seed_scorer: SeedScorer | None = None, seeds: int | None = None,
                 keep_colocation: float | None = None, max_evals: int | None = None) -> None:
        super().__init__(scorer, search_scorer)
        self.seed_scorer = seed_scorer
        if max_evals is not None:
            if max_evals < 0:
                raise SpecError("max_evals", "", f"{max_evals!r} is negative",
                                "a count of search evaluations, e.g. 150")
            self.max_evals = int(max_evals)
        if seeds is not None:
            self.seeds = seeds
        if keep_colocation is not None:
            self.keep_colocation = check_margin(keep_colocation)

    def use(self, context: PlanningContext) -> None:
        """The comparison's draws of other seeds (when it scores with the simulator) and its
        margin (when it sets one) replace this placer's own."""
        super().use(context)
        if context.seed_scorer is not None:
            self.seed_scorer = context.seed_scorer
        if context.keep_colocation:
            self.keep_colocation = context.keep_colocation

    def _evaluators(self, problem: Problem, seed: int, bud: Budget
                    ) -> tuple[SeedEvaluator, SeedEvaluator, str]:
        """(full, quick, how): every draw's whole-epoch scorer, and the search's. Every
        scorer keeps to `bud`: the simulator's own are cut at its end, a caller's is not
        started past it (:meth:`~.budget.Budget.guard`)."""
        K = problem.wl.iterations
        # a shortened epoch only where it saves much (else the finalists are simulated twice)
        short = SEARCH_ITERATIONS if SEARCH_ITERATIONS < 0.75 * K else None
        make = self.seed_scorer
        how = "caller's scorer"
        if make is None and self.scorer is None:
            how = default_scorer(problem, seed)[1]
            if how.startswith("simulator"):
                def make(s: int, its: int | None) -> Scorer:
                    return default_scorer(problem, s, its, budget=bud)[0]

        def kept(sc: Scorer, s: int) -> Scorer:
            return bud.guard(sc, problem.wl, s)

        if make is None:  # one draw: the caller's scorer, or the cost-model bound
            full_one = self.scorer or default_scorer(problem, seed)[0]
            full = SeedEvaluator([kept(full_one, seed)], [seed])
            quick = full if self.search_scorer is None or self.search_scorer is full_one \
                else SeedEvaluator([kept(self.search_scorer, seed)], [seed])
            return full, quick, how
        seeds = draw_seeds(seed, self.seeds)
        first_full = self.scorer or make(seed, None)
        full = SeedEvaluator([kept(first_full, seed)]
                             + [kept(make(s, None), s) for s in seeds[1:]], seeds)
        if short is None:
            return full, full, how
        first_quick = self.search_scorer or make(seed, short)
        quick = SeedEvaluator([kept(first_quick, seed)]
                              + [kept(make(s, short), s) for s in seeds[1:]], seeds)
        return full, quick, how

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        """The plan, within `budget` seconds (default 30) and, when the comparison handed
        one (:attr:`PlanningContext.budget`), within the whole planning's deadline: each
        phase gets a share of what is left, and a simulation that would run past it is cut
        (:mod:`.budget`), as the plan's notes say."""
        budget = 30.0 if budget is None else budget
        bud = self.context.budget or Budget(budget, self.context.progress)
        with bud.scope(budget):
            return self._place(problem, seed, budget, bud)

    def _place(self, problem: Problem, seed: int, budget: float, bud: Budget) -> Plan:
        t0 = time.perf_counter()
        full, quick, how = self._evaluators(problem, seed, bud)
        phases: dict[str, float] = {}

        def lap(name: str, detail: str = "") -> None:  # the seconds since the last phase
            phases[name] = time.perf_counter() - t0 - sum(phases.values())
            bud.say(name, f"{detail}{', ' if detail else ''}{phases[name]:.1f} s")

        left = bud.left()
        out = run_cpsat(problem, time_limit=min(20.0, max(0.5, CPSAT_SHARE * min(budget, left))),
                        seed=seed, placer="gnnsched")
        lap("cpsat", f"{out.result.status}, {len(out.pool) + 1} plan(s)")
        # the seed-share model's work is bounded (deterministic effort: the same split as
        # the shares placer's own); its budget is only a safety cap
        left = bud.left()
        share = STARTS_SHARE * min(budget, left)
        with bud.scope(0.5 * left):
            raw = _base_starts(problem, out, seed=seed,
                               budget=max(MODEL_S, 0.5 * min(budget, left)), bud=bud)
        named = _dedupe(problem, raw)
        base_keys = {p.key() for _, p in named}
        if not named:
            raise SpecError(problem.job.source, "trainers", "no placement to start from "
                            f"has the job's {problem.W} trainers", "another placer")
        lap("starts", f"{len(named)} starts")
        sims = quick.simulations
        with bud.scope(0.5 * bud.left()):
            named, raced = _race(named, quick, problem, bud)
        lap("race", f"{len(named)} kept, {len(raced)} raced out on the first draw")
        per_sim = phases["race"] / max(1, quick.simulations - sims)
        # then the starts that solve a model or simulate, with what the race left (those it
        # scores on the first draw are the race's)
        with bud.scope(0.5 * bud.left()):
            found = _more_starts(problem, out, raw, seed=seed, budget=max(MODEL_S, share),
                                 score=quick.first, balance_s=min(share, 0.3 * bud.left()),
                                 bud=bud)
        named, raced = _also(named, raced, found, base_keys)
        extra = _dedupe(problem, found, base_keys)
        if extra:
            named, more = _race(named + extra, quick, problem, bud)
            raced.update(more)
        lap("more starts", f"{len(extra)} new: " + (", ".join(n for n, _ in extra) or "-"))
        per_sim = bud.sim_s() or per_sim
        named, dropped = _affordable(named, quick, per_sim, 0.5 * bud.left(),
                                     self.keep_colocation > 0)
        if dropped:
            raced.update(dropped)
            took = f"a simulation took {per_sim:.1f} s" if bud.sim_s() else \
                "no simulation ran to its end in time"
            bud.skipped.append(f"only the {len(named)} best start(s) on the first draw were "
                               f"scored on every draw ({took}): " + ", ".join(dropped))
        starts = [p for _, p in named]
        with bud.scope(0.6 * bud.left()):
            for p in starts:  # every start on every draw: the search's reference
                quick.vector(p)
        lap("scoring the starts", f"{len(starts)} on {quick.n} draw(s)")
        left = bud.left()
        # keep time to re-score the finalists with the full simulation, and for the bound
        reserve = (0.0 if quick is full else 0.15 * left) + min(2.0, 0.1 * left)
        with bud.scope(max(0.0, left - reserve)), bud.rejecting():
            res = search_many(problem, starts, quick, seed=seed, max_evals=self.max_evals,
                              time_budget=max(0.0, left - reserve))
        phases["search"] = time.perf_counter() - t0 - sum(phases.values())
        bud.say("search", f"{res.stats.evaluations:g} evaluation(s), stopped by "
                f"{res.stats.stopped or '-'}, {phases['search']:.1f} s")
        with bud.scope(max(0.0, bud.left() - min(2.0, 0.1 * left))):
            final, vec, ref, won = _judged(res, starts, full, quick)
            kept = "search" if won else next(name for name, p in named
                                             if p.key() == final.key())
            final, vec, won, kept = self._margin(named, final, vec, won, kept, full)
        lap("final scoring", f"kept {kept}")
        if self.context.budget is None:
            lb = simulated_lower_bound(problem, out, [final] + starts, seed=seed,
                                       time_limit=max(0.5, min(5.0, bud.left() - 0.5)))
            lap("bound")
        else:  # the comparison solves the bound on the draws for every plan it compares
            lb = out.lower_bound_iter_s
        self.outcome = out
        it = problem.wl.iterations
        draws = SearchDraws(
            tuple(full.seeds), tuple(vec), tuple(ref), tuple(b / a for a, b in zip(vec, ref)),
            spread(vec), won, kept, regret(vec, ref), tuple(name for name, _ in named), raced,
            {name: tuple(full.vector(p)) for name, p in named})
        prediction = Prediction(
            epoch_time_s=vec[0], scored_by=how, noise=spread(vec),
            epoch_time_by_seed_s={str(s): v for s, v in zip(full.seeds, vec)},
            lower_bound_s=lb * it, lower_bound_iteration_s=lb, lower_bound_scope=out.scope(),
            cpsat=out.record(), search=replace(res.stats, kept=kept, draws=draws),
            planning_s=time.perf_counter() - t0, budget_s=budget, planning_phases_s=phases)
        notes = tuple(out.plan.notes) + tuple(final.notes)
        if self.context.budget is None:  # else the comparison adds the budget's notes
            notes += bud.notes()
        return replace(final, notes=notes, prediction=prediction)

    def _margin(self, named: list[tuple[str, Plan]], final: Plan, vec: tuple[float, ...],
                won: bool, kept: str, full: SeedEvaluator
                ) -> tuple[Plan, tuple[float, ...], bool, str]:
        """``keep_colocation``: colocation's plan (a start) instead of `final` unless `final`
        is predicted faster by more than the margin on every draw."""
        colo = next((p for name, p in named if "colocation" in name.split(" = ")), None)
        if self.keep_colocation <= 0 or colo is None or colo.key() == final.key():
            return final, vec, won, kept
        cvec = full.vector(colo)
        if all(v * (1 + self.keep_colocation) < c for v, c in zip(vec, cvec)):
            return final, vec, won, kept
        gain = min(c / v for v, c in zip(vec, cvec))
        why = (f"kept the colocation placer's plan: the best other plan is predicted "
               f"{gain:.2f}x faster on its worst draw, not more than 1 + "
               f"{self.keep_colocation:.2f}, the margin for the predictions' error "
               "(keep_colocation)")
        return replace(colo, notes=(why,)), cvec, False, "colocation (margin)"


def _judged(res: Outcome, starts: list[Plan], full: SeedEvaluator, quick: SeedEvaluator
            ) -> tuple[Plan, tuple[float, ...], tuple[float, ...], bool]:
    """(plan, its epoch per draw, the best start's per draw, whether the search's plan won):
    the search's own verdict, or, where it scored shortened epochs, the starts and finalists
    judged again in full."""
    if quick is full:
        return res.plan, res.vector, res.reference, res.won
    svecs = [full.vector(p) for p in starts]
    ref = tuple(min(v[k] for v in svecs) for k in range(full.n))
    cands = [(full.vector(p), p) for _, p in res.finalists]
    good = sorted((c for c in cands if wins(c[0], ref)), key=lambda c: (sum(c[0]), c[1].key()))
    if good:
        return good[0][1], good[0][0], ref, True
    i = fallback(svecs)
    return starts[i], svecs[i], ref, False


def margin_for(accuracy: float) -> float:
    """:attr:`GnnschedPlacer.keep_colocation` for predictions each within ``accuracy`` (a
    fraction) of the measured epoch: (1 + a) / (1 - a) - 1, the most two of them can misjudge
    a speed-up by (0.22 for 10%)."""
    if not 0 <= accuracy < 1:
        raise ValueError(f"accuracy must be a fraction in [0, 1), got {accuracy!r}")
    return (1 + accuracy) / (1 - accuracy) - 1


__all__ = ["BASELINES", "KEEP", "MOVES", "RACE", "REHEATS", "SEARCH_SEEDS", "SEED_STRIDE",
           "Evaluator", "GnnschedPlacer", "Outcome", "SearchStats", "SeedEvaluator", "SeedScorer",
           "draw_seeds", "fallback", "iteration_floor", "margin_for", "plan_and_compare",
           "regret", "repair", "search", "search_many", "spread", "wins"]
