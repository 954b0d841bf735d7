"""Exploratory search: refine CP-SAT's placements by simulating the online schedule.

The bottleneck model sees per-iteration loads; it misses barrier waits, pipeline fill and the
timing of contention, which only the simulator (running the ``gnnsched`` policy) sees. The
search starts from the best of several good plans (CP-SAT's pool, greedy), proposes local
moves — move a trainer, swap two, change sampler counts or hosts, change where gathering
runs, reassign a part — and accepts them by simulated annealing on the simulated epoch time.

Reproducible: the random stream is seeded and the search is bounded by a number of
*evaluations* (and proposals); the time budget is only a safety cap. Moves whose cost-model
lower bound already exceeds the current plan's score by more than the temperature allows are
skipped unsimulated. It never returns a plan scored worse than its best start.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gnnsched.placement.cpsat import BALANCE, run_cpsat, simulated_lower_bound
from gnnsched.placement.placer import (
    MAX_SAMPLERS,
    SEARCH_ITERATIONS,
    Placer,
    Problem,
    Scorer,
    default_scorer,
    fill_samplers,
    main_store,
    register,
    usage,
)
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import SpecError

MOVES = ("move", "swap", "samplers", "sampler_host", "fetch", "part")


@dataclass
class SearchStats:
    """What the search did: for the plan's `predicted` and the benchmark."""

    start_score: float
    best_score: float
    evaluations: int = 0
    proposals: int = 0
    skipped_by_bound: int = 0
    infeasible: int = 0
    accepted: int = 0
    improved: int = 0
    restarts: int = 0
    wall_s: float = 0.0
    stopped: str = ""
    improving_moves: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


class Evaluator:
    """A scorer with a cache keyed on the placement itself, counting real evaluations."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.cache: dict[tuple, float] = {}
        self.calls = 0

    def __call__(self, plan: Plan) -> float:
        k = plan.key()
        if k not in self.cache:
            self.calls += 1
            self.cache[k] = float(self.scorer(plan))
        return self.cache[k]


class _Moves:
    """Local moves on a plan; each returns a new plan or None (not applicable)."""

    def __init__(self, problem: Problem, rng: np.random.Generator) -> None:
        self.pb, self.rng = problem, rng
        self.idx = problem.cluster.machine_index
        self.devices = [(s.machine, d) for s in problem.slots for d in s.devices]
        seeds = [max(pp.train_seeds, 1) for pp in problem.profile.parts]
        self.seeds = seeds
        self.avg = sum(seeds) / problem.W

    # -------------------------------------------------------------- helpers
    def _balanced(self, parts: Sequence[int]) -> bool:
        if len(parts) == 1:
            return True
        return abs(sum(self.seeds[p] for p in parts) - self.avg) <= BALANCE * self.avg

    def _set(self, plan: Plan, trainers: list[TrainerPlan]) -> Plan:
        return replace(plan, trainers=tuple(sorted(trainers, key=lambda t: t.id)),
                       predicted={})

    def _pick(self, plan: Plan, focus: int | None) -> int:
        """A trainer index, preferring ones that touch machine `focus`."""
        ts = plan.trainers
        if focus is not None and self.rng.random() < 0.7:
            near = [i for i, t in enumerate(ts) if focus in
                    {self.idx(t.machine), self.idx(t.fetch_at)} |
                    {self.idx(m) for m, _ in t.samplers} |
                    set(self.pb.cost(t.parts).feat_from)]
            if near:
                return int(self.rng.choice(near))
        return int(self.rng.integers(len(ts)))

    # -------------------------------------------------------------- moves
    def move(self, plan: Plan, focus: int | None) -> Plan | None:
        """A trainer to a free device; its own-machine samplers follow it."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        used = {(self.idx(x.machine), x.device) for x in plan.trainers}
        free = [dv for dv in self.devices if dv not in used]
        if not free:
            return None
        m, d = free[int(self.rng.integers(len(free)))]
        name = self.pb.names[m]
        samplers = tuple((name if s == t.machine else s, c) for s, c in t.samplers)
        fetch = name if t.fetch_at == t.machine else t.fetch_at
        ts = list(plan.trainers)
        ts[i] = TrainerPlan(t.id, name, d, t.parts, _merge(samplers), fetch)
        return self._set(plan, ts)

    def swap(self, plan: Plan, focus: int | None) -> Plan | None:
        """Two trainers exchange devices (and own-machine samplers / gathering)."""
        if len(plan.trainers) < 2:
            return None
        i = self._pick(plan, focus)
        j = int(self.rng.integers(len(plan.trainers) - 1))
        j += j >= i
        a, b = plan.trainers[i], plan.trainers[j]
        if a.machine == b.machine and a.device == b.device:
            return None

        def moved(t: TrainerPlan, o: TrainerPlan) -> TrainerPlan:
            s = tuple((o.machine if m == t.machine else m, c) for m, c in t.samplers)
            f = o.machine if t.fetch_at == t.machine else t.fetch_at
            return TrainerPlan(t.id, o.machine, o.device, t.parts, _merge(s), f)

        ts = list(plan.trainers)
        ts[i], ts[j] = moved(a, b), moved(b, a)
        return self._set(plan, ts)

    def samplers(self, plan: Plan, focus: int | None) -> Plan | None:
        """One sampler more or fewer for a trainer."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        s = dict(t.samplers)
        host = list(s)[int(self.rng.integers(len(s)))]
        if self.rng.random() < 0.5:
            if t.num_samplers >= MAX_SAMPLERS:
                return None
            s[host] += 1
        else:
            if t.num_samplers <= 1:
                return None
            s[host] -= 1
            if s[host] == 0:
                del s[host]
        ts = list(plan.trainers)
        ts[i] = replace(t, samplers=tuple(sorted(s.items())))
        return self._set(plan, ts)

    def sampler_host(self, plan: Plan, focus: int | None) -> Plan | None:
        """Move some of a trainer's samplers to its own machine, its main store, or anywhere."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        pb = self.pb
        home = pb.names[main_store(pb, t.parts)]
        choices = [m for m in dict.fromkeys([t.machine, home,
                                              pb.names[int(self.rng.integers(pb.M))]])
                   if pb.can_sample[self.idx(m)]]
        tgt = choices[int(self.rng.integers(len(choices)))]
        s = dict(t.samplers)
        src = list(s)[int(self.rng.integers(len(s)))]
        if src == tgt:
            return None
        k = s[src] if self.rng.random() < 0.5 else 1
        s[src] -= k
        if s[src] == 0:
            del s[src]
        s[tgt] = s.get(tgt, 0) + k
        ts = list(plan.trainers)
        ts[i] = replace(t, samplers=tuple(sorted(s.items())))
        return self._set(plan, ts)

    def fetch(self, plan: Plan, focus: int | None) -> Plan | None:
        """Gather at the trainer, at its main store (one pushed message), or at a relay."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        pb = self.pb
        home = pb.names[main_store(pb, t.parts)]
        if t.fetch_at != t.machine:
            tgt = t.machine
        elif self.rng.random() < 0.7:
            tgt = home
        else:
            tgt = pb.names[int(self.rng.integers(pb.M))]
        if tgt == t.fetch_at or (tgt != t.machine and not pb.can_fetch[self.idx(tgt)]):
            return None
        ts = list(plan.trainers)
        ts[i] = replace(t, fetch_at=tgt)
        return self._set(plan, ts)

    def part(self, plan: Plan, focus: int | None) -> Plan | None:
        """Move a partition's seeds to another trainer, or swap two partitions."""
        if len(plan.trainers) < 2:
            return None
        i = self._pick(plan, focus)
        j = int(self.rng.integers(len(plan.trainers) - 1))
        j += j >= i
        a, b = plan.trainers[i], plan.trainers[j]
        pa = a.parts[int(self.rng.integers(len(a.parts)))]
        if len(a.parts) > 1 and self.rng.random() < 0.5:
            na = tuple(p for p in a.parts if p != pa)
            nb = tuple(sorted(b.parts + (pa,)))
        else:
            pbp = b.parts[int(self.rng.integers(len(b.parts)))]
            na = tuple(sorted([p for p in a.parts if p != pa] + [pbp]))
            nb = tuple(sorted([p for p in b.parts if p != pbp] + [pa]))
        if not (self._balanced(na) and self._balanced(nb)):
            return None
        ts = list(plan.trainers)
        ts[i], ts[j] = replace(a, parts=na), replace(b, parts=nb)
        return self._set(plan, ts)


def _merge(samplers: Sequence[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for m, c in samplers:
        out[m] = out.get(m, 0) + c
    return tuple(sorted(out.items()))


def repair(problem: Problem, plan: Plan) -> Plan | None:
    """Shed samplers on over-subscribed machines (keeping one per trainer); None if stuck."""
    u = usage(problem, plan)
    if not u.problems:
        return plan
    idx = problem.cluster.machine_index
    ts = {t.id: dict(t.samplers) for t in plan.trainers}
    for m in range(problem.M):
        mach = problem.cluster.machines[m]
        while u.cores[m] > mach.cpus or u.memory[m] > mach.memory:
            cands = [(sum(s.values()), tid) for tid, s in ts.items()
                     if s.get(mach.name, 0) > 0 and sum(s.values()) > 1]
            if not cands:
                return None
            _, tid = max(cands)
            ts[tid][mach.name] -= 1
            if ts[tid][mach.name] == 0:
                del ts[tid][mach.name]
            u.cores[m] -= 1
            t = next(x for x in plan.trainers if x.id == tid)
            u.memory[m] -= problem.sampler_bytes(problem.cost(t.parts))
    out = tuple(replace(t, samplers=tuple(sorted(ts[t.id].items(), key=lambda kv: idx(kv[0]))))
                for t in plan.trainers)
    fixed = replace(plan, trainers=out)
    return fixed if not usage(problem, fixed).problems else None


def _focus(problem: Problem, plan: Plan) -> int | None:
    """The machine behind the plan's bottleneck resource (moves concentrate there)."""
    _, name = problem.seconds_per_iteration(plan)
    names = set(problem.names)
    for word in name.split():
        if word in names:
            return problem.cluster.machine_index(word)
    if name.startswith("prefetch window of trainer"):
        tid = int(name.split()[4])
        t = next(t for t in plan.trainers if t.id == tid)
        return problem.cluster.machine_index(t.machine)
    if name.startswith("samplers of trainer"):
        tid = int(name.rsplit(" ", 1)[1])
        t = next(t for t in plan.trainers if t.id == tid)
        return problem.cluster.machine_index(t.samplers[0][0])
    return None


def search(problem: Problem, starts: Sequence[Plan], scorer: Scorer, *, seed: int = 0,
           max_evals: int = 200, max_proposals: int | None = None, stall: int = 60,
           time_budget: float = 30.0, t0_frac: float = 0.02,
           evaluator: Evaluator | None = None) -> tuple[Plan, SearchStats]:
    """Simulated annealing over placements from the best start; never worse than it."""
    wall0 = time.perf_counter()
    ev = evaluator or Evaluator(scorer)
    rng = np.random.default_rng(seed)
    moves = _Moves(problem, rng)
    scored = sorted(((ev(p), k, p) for k, p in enumerate(starts)), key=lambda x: x[:2])
    best_s, _, best = scored[0]
    stats = SearchStats(best_s, best_s)
    queue = [p for _, _, p in scored[1:]]
    cur, cur_s = best, best_s
    max_proposals = max_proposals or 20 * max_evals
    since = 0
    calls0 = ev.calls
    weights = np.array([3.0, 2.0, 1.0, 1.0, 1.0, 1.5 if problem.W < problem.P else 0.0])
    weights /= weights.sum()
    focus = _focus(problem, cur)
    while True:
        if ev.calls - calls0 >= max_evals:
            stats.stopped = "evaluations"
            break
        if stats.proposals >= max_proposals:
            stats.stopped = "proposals"
            break
        if time.perf_counter() - wall0 > time_budget:
            stats.stopped = "time"
            break
        if since >= stall:
            if not queue:
                stats.stopped = "stall"
                break
            cur = queue.pop(0)  # restart from the next diverse start
            cur_s = ev(cur)
            focus = _focus(problem, cur)
            stats.restarts += 1
            since = 0
            continue
        stats.proposals += 1
        kind = MOVES[int(rng.choice(len(MOVES), p=weights))]
        cand = getattr(moves, kind)(cur, focus if rng.random() < 0.6 else None)
        if cand is None:
            continue
        if kind in ("move", "swap", "part"):
            cand = fill_samplers(problem, repair(problem, cand) or cand)
        cand = repair(problem, cand)
        if cand is None or usage(problem, cand).problems:
            stats.infeasible += 1
            continue
        progress = (ev.calls - calls0) / max(max_evals, 1)
        temp = t0_frac * stats.start_score * max(1e-3, 1.0 - progress)
        if cand.key() not in ev.cache:
            lb = problem.epoch_bound(cand)
            if lb > cur_s + 3 * temp:
                stats.skipped_by_bound += 1
                since += 1
                continue
        s = ev(cand)
        since += 1
        if s < cur_s or rng.random() < math.exp(-(s - cur_s) / max(temp, 1e-12)):
            stats.accepted += 1
            cur, cur_s = cand, s
            focus = _focus(problem, cur)
        if s < best_s - 1e-12:
            best, best_s = cand, s
            stats.improved += 1
            stats.improving_moves[kind] = stats.improving_moves.get(kind, 0) + 1
            since = 0
    stats.evaluations = ev.calls - calls0
    stats.best_score = best_s
    stats.wall_s = time.perf_counter() - wall0
    return best, stats


# ---------------------------------------------------------------------- the placer


@register("gnnsched")
class GnnschedPlacer(Placer):
    """CP-SAT's bottleneck model, then the exploratory search scored by the simulator."""

    max_evals: int = 150

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        from gnnsched.placement.baselines import Colocation

        t0 = time.perf_counter()
        budget = 30.0 if budget is None else budget
        if self.scorer is not None:
            full, how = self.scorer, "caller's scorer"
            quick = self.search_scorer or full
        else:
            full, how = default_scorer(problem, seed)
            quick = self.search_scorer or default_scorer(problem, seed, SEARCH_ITERATIONS)[0]
        full_ev = full if isinstance(full, Evaluator) else Evaluator(full)
        quick_ev = full_ev if quick is full else Evaluator(quick)
        out = run_cpsat(problem, time_limit=min(20.0, max(0.5, 0.3 * budget)), seed=seed,
                        placer="gnnsched")
        starts = list(out.pool)[:3]  # the pool holds greedy's warm starts too
        for base in out.warm_starts[:1] + [Colocation().place_problem(problem)]:
            base = replace(base, placer="gnnsched", predicted={}, notes=())
            if all(base.key() != p.key() for p in starts):
                starts.append(base)
        left = budget - (time.perf_counter() - t0)
        # keep time to re-score the finalists with the full simulation
        reserve = 0.0 if quick_ev is full_ev else 0.15 * left
        best, stats = search(problem, starts, quick_ev, seed=seed, max_evals=self.max_evals,
                             time_budget=max(0.0, left - reserve), evaluator=quick_ev)
        final = min([best] + starts, key=lambda p: (full_ev(p), p is not best))
        lb = simulated_lower_bound(problem, out, [final] + starts, seed=seed,
                                   time_limit=max(1.0, min(5.0, budget - (time.perf_counter()
                                                                          - t0))))
        self.outcome = out
        it = problem.wl.iterations
        r = out.result
        return replace(final, notes=tuple(out.plan.notes) + tuple(final.notes)).with_prediction(
            epoch_time_s=full_ev(final), scored_by=how,
            lower_bound_s=lb * it, lower_bound_iteration_s=lb,
            lower_bound_scope=out.scope(),
            cpsat={"status": r.status, "objective_iteration_s": r.objective_s,
                   "bound_iteration_s": out.lower_bound_iter_s, "wall_s": r.wall_s,
                   "variables": r.variables, "exact_parts": r.instance.exact_parts,
                   "aggregated": r.instance.aggregated, "cpu_model": r.cpu_model},
            search=stats.to_dict(), planning_s=time.perf_counter() - t0)



# ---------------------------------------------------------------------- plan + compare


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
    Without (a plan scored by the cost model, :func:`~gnnsched.placement.placer.bound_scorer`)
    they are the cost model's own, which its score never undercuts either.
    """
    if simulated:
        from gnnsched.bounds import per_plan_bound

        return _floors(per_plan_bound(problem.wl, plan, seed))
    per, name = problem.seconds_per_iteration(plan)
    return {"bottleneck": name, "bottleneck_iteration_s": per,
            "chain_iteration_s": problem.wl.bound(plan).chain_s / problem.wl.iterations}


def _floors(b: Any) -> dict[str, float | str]:
    """:func:`iteration_floor`'s fields from a :class:`gnnsched.bounds.PerPlanBound`."""
    return {"bottleneck": b.resource, "bottleneck_iteration_s": b.resource_s / b.iterations,
            "chain_iteration_s": b.chain_s / b.iterations}


BASELINES = ("colocation", "greedy", "random")


def plan_and_compare(problem: Problem, placer: str = "gnnsched", *, seed: int = 0,
                     budget: float | None = None, baselines: Sequence[str] = BASELINES,
                     scorer: Scorer | None = None, how: str | None = None,
                     cache_share: float = 0.0) -> Plan:
    """Plan with `placer`, score it and every baseline with one scorer, attach the bound.
    With ``cache_share`` > 0 the plan also gets feature caches sized from that share of
    every gathering host's free memory (:func:`gnnsched.placement.caches.size_caches`);
    the baselines keep none.

    The returned plan's ``predicted`` holds ``epoch_time_s``, ``baselines`` ({name:
    {epoch_time_s, per_plan_bound_s, ...}}), ``bottleneck``, ``speedup_vs_colocation`` and the
    two bounds of :mod:`gnnsched.bounds` on the draws of `seed` (:func:`bound_fields`:
    ``per_plan_bound_s``, ``any_placement_bound_s`` and ``bounds``, which ``gnnsched
    simulate`` prints again); ``lower_bound_s`` is the any-placement bound, as before:
    everything `gnnsched plan` prints.
    """
    from gnnsched.bounds import any_placement_bound, bound_fields, per_plan_bound
    from gnnsched.placement.placer import get_placer

    if scorer is None:
        scorer, how = default_scorer(problem, seed)
    simulated = (how or "").startswith("simulator")
    ev = scorer if isinstance(scorer, Evaluator) else Evaluator(scorer)
    t0 = time.perf_counter()
    chosen = get_placer(placer, scorer=ev)
    plan = chosen.place_problem(problem, seed=seed, budget=budget)
    if cache_share > 0:
        from gnnsched.placement.caches import size_caches

        plan = size_caches(problem, plan, cache_share)
    planning = time.perf_counter() - t0
    over = usage(problem, plan).problems
    if over:  # every built-in placer keeps to the resources; a plug-in may not
        raise SpecError(problem.cluster.source, "machines",
                        f"the {placer} placer's plan does not fit: {over[0]}",
                        "more memory_gb or cores there, or another --placer")
    it = problem.wl.iterations
    pred = dict(plan.predicted)
    outcome = getattr(chosen, "outcome", None)
    if outcome is None:
        outcome = run_cpsat(problem, time_limit=min(10.0, budget or 10.0), seed=seed)
        pred["cpsat"] = {"status": outcome.result.status}
    compared = [plan]
    per_plan = {f"this plan ({placer})": per_plan_bound(problem.wl, plan, seed)}
    base: dict[str, dict] = {}
    for name in baselines:
        if name == placer:
            continue
        t1 = time.perf_counter()
        try:
            bp = get_placer(name).place_problem(problem, seed=seed)
        except Exception as exc:  # a baseline that cannot place is reported, not fatal
            base[name] = {"error": str(exc)}
            continue
        dt = time.perf_counter() - t1
        over = usage(problem, bp).problems
        if over:
            base[name] = {"error": f"its plan does not fit: {over[0]}"}
            continue
        per_plan[name] = pb = per_plan_bound(problem.wl, bp, seed)
        row = {"epoch_time_s": ev(bp), "planning_s": dt, "per_plan_bound_s": pb.epoch_s,
               **(_floors(pb) if simulated else iteration_floor(problem, bp, seed, False))}
        if "colocation_feasible" in bp.predicted:
            row["colocation_feasible"] = bp.predicted["colocation_feasible"]
        if name == "colocation" and _trainer_places(bp) == _trainer_places(plan):
            pred["same_as_colocation"] = True
        if bp.notes:
            row["notes"] = list(bp.notes[:3]) + ([f"... {len(bp.notes) - 3} more like these"]
                                                 if len(bp.notes) > 3 else [])
        base[name] = row
        compared.append(bp)
        if name == "colocation" and cache_share > 0:  # what a DistDGL user would add by
            # hand: colocation with caches sized by the same rule (hottest rows by degree)
            from gnnsched.placement.caches import size_caches

            bc = size_caches(problem, bp, cache_share)
            if bc.caches and not usage(problem, bc).problems:
                per_plan["colocation+cache"] = pc = per_plan_bound(problem.wl, bc, seed)
                base["colocation+cache"] = {
                    "epoch_time_s": ev(bc), "planning_s": dt, "per_plan_bound_s": pc.epoch_s,
                    "caches": dict(bc.caches),
                    **(_floors(pc) if simulated else iteration_floor(problem, bc, seed, False))}
                compared.append(bc)
    lb = simulated_lower_bound(problem, outcome, compared, seed=seed)
    # simulated_lower_bound solves the model on the drawn mini-batches whatever the scorer
    scope = outcome.scope().replace(" (with the drawn mini-batches when simulated)", "")
    if plan.caches:
        scope += "; CP-SAT's model has no feature caches, the plan's own bound charges them"
    mine = next(iter(per_plan.values()))
    anyb = any_placement_bound(lb * it, per_plan, scope=scope,
                               status=str(outcome.result.status))
    pred.update(**bound_fields(mine, anyb), lower_bound_s=anyb.epoch_s,
                lower_bound_iteration_s=anyb.iteration_s, lower_bound_scope=scope)
    epoch = ev(plan)
    floors = _floors(mine) if simulated else iteration_floor(problem, plan, seed, False)
    pred.update(placer=placer, epoch_time_s=epoch, iterations=it, iteration_s=epoch / it,
                **floors, baselines=base,
                scored_by=how or pred.get("scored_by", "caller's scorer"),
                planning_s=pred.get("planning_s", planning))
    colo = base.get("colocation", {}).get("epoch_time_s")
    if colo:
        pred["speedup_vs_colocation"] = colo / epoch
    notes = tuple(plan.notes) + tuple(n for n in problem.notes if n not in plan.notes)
    return replace(plan, predicted=pred, notes=notes)


__all__ = ["BASELINES", "Evaluator", "GnnschedPlacer", "SearchStats", "iteration_floor",
           "plan_and_compare", "repair", "search"]
