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
planner's own seed alone. It reports the noise: the spread (max - min) / min of its plan's epoch over the draws
(``predicted["noise"]``), and per draw its epoch and the best start's
(``predicted["search"]``).

Reproducible: the random stream is seeded and the search is bounded by a number of
*evaluations* (a plan scored on every draw; a candidate clearly worse on the first draw is
rejected there, costing a fraction of one) and proposals; the time budget is only a safety
cap. Moves whose cost-model lower bound already exceeds the current plan's score by more than
the temperature allows are skipped unsimulated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
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

MOVES = ("move", "swap", "samplers", "sampler_host", "fetch", "part", "share")
SEARCH_SEEDS = 3  # seeded draws every candidate is scored on
SEED_STRIDE = 1000  # draw k of seed s is s + k * SEED_STRIDE: runs with nearby seeds differ
REHEATS = 2  # restarts from the best plan found, once the starts are used up
RACE = 0.15  # a start this much slower than the best on the first draw is scored on no other
KEEP = 4  # finalists re-scored with the full simulation when the search scores a shorter one
_SHARES = "shares" in {f.name for f in fields(TrainerPlan)}  # seed shares in this model
SeedScorer = Callable[[int, "int | None"], Scorer]  # (seed, iterations or None) -> scorer


def draw_seeds(seed: int, n: int = SEARCH_SEEDS) -> tuple[int, ...]:
    """The seeds of the draws a placer with `seed` scores on: `seed` itself first."""
    return tuple(int(seed) + k * SEED_STRIDE for k in range(max(1, n)))


@dataclass
class SearchStats:
    """What the search did: for the plan's `predicted` and the benchmark."""

    start_score: float  # mean over the draws of the best start (by that mean)
    best_score: float  # mean over the draws of the plan returned
    evaluations: float = 0  # plans scored on every draw (a raced-out candidate: a fraction)
    simulations: int = 0
    proposals: int = 0
    skipped_by_bound: int = 0
    raced_out: int = 0  # rejected after the first draw
    infeasible: int = 0
    accepted: int = 0
    improved: int = 0  # new best mean
    winners: int = 0  # plans that beat the best start on every draw
    restarts: int = 0
    wall_s: float = 0.0
    scoring_s: float = 0.0  # of wall_s: scoring the starts on every draw, before any move
    stopped: str = ""
    improving_moves: dict[str, int] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    kept: str = ""  # "search" (won on every draw) or the start it fell back to

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


class SeedEvaluator:
    """A plan's score on several seeded draws: one cached :class:`Evaluator` per draw.

    ``vector(plan)`` is the score on every draw, ``__call__`` their mean (so it stands in for
    a one-draw scorer), ``first(plan)`` only the first draw (racing). ``calls`` counts plans
    scored on every draw (simulations / draws).
    """

    def __init__(self, scorers: Sequence[Scorer], seeds: Sequence[int] | None = None) -> None:
        self.evs = [s if isinstance(s, Evaluator) else Evaluator(s) for s in scorers]
        self.seeds = list(seeds) if seeds is not None else list(range(len(self.evs)))

    @classmethod
    def of(cls, scorer: Scorer | SeedEvaluator) -> SeedEvaluator:
        return scorer if isinstance(scorer, SeedEvaluator) else cls([scorer])

    @property
    def n(self) -> int:
        return len(self.evs)

    @property
    def simulations(self) -> int:
        return sum(e.calls for e in self.evs)

    @property
    def calls(self) -> float:
        return self.simulations / self.n

    def known(self, plan: Plan) -> bool:
        k = plan.key()
        return all(k in e.cache for e in self.evs)

    def first(self, plan: Plan) -> float:
        return self.evs[0](plan)

    def vector(self, plan: Plan) -> tuple[float, ...]:
        return tuple(e(plan) for e in self.evs)

    def __call__(self, plan: Plan) -> float:
        v = self.vector(plan)
        return sum(v) / len(v)


def spread(v: Sequence[float]) -> float:
    """The noise of one plan over the draws: (max - min) / min of its epochs."""
    return (max(v) - min(v)) / min(v) if v and min(v) > 0 else 0.0


def wins(v: Sequence[float], ref: Sequence[float]) -> bool:
    """Faster than `ref` on every draw."""
    return all(a < b * (1 - 1e-9) for a, b in zip(v, ref))


def regret(v: Sequence[float], ref: Sequence[float]) -> float:
    """How much slower than `ref` on its worst draw: max over draws of v / ref."""
    return max(a / b for a, b in zip(v, ref)) if len(v) else 1.0


def fallback(vectors: Sequence[Sequence[float]]) -> int:
    """Index of the start to keep when nothing wins on every draw: the one least slower than
    the best start on its worst draw (:func:`regret` against the per-draw minimum), ties
    (within 1e-9) by the mean over the draws. A start fastest on one draw only (fitted to
    it) loses to one that is close to the best on every draw."""
    n = len(vectors[0])
    ref = [min(v[k] for v in vectors) for k in range(n)]
    lo = min(regret(v, ref) for v in vectors)
    return min((i for i, v in enumerate(vectors) if regret(v, ref) <= lo * (1 + 1e-9)),
               key=lambda i: (sum(vectors[i]), i))


def _cost(pb: Problem, t: TrainerPlan) -> Any:
    shares = getattr(t, "shares", ())
    return pb.cost(t.parts, shares) if shares else pb.cost(t.parts)


def _owned(t: TrainerPlan) -> dict[int, float]:
    shares = getattr(t, "shares", ()) or (1.0,) * len(t.parts)
    out: dict[int, float] = {}
    for p, s in zip(t.parts, shares):
        out[p] = out.get(p, 0.0) + s
    return out


def _with_owned(t: TrainerPlan, owned: dict[int, float]) -> TrainerPlan:
    parts = tuple(sorted(owned))
    if not _SHARES:
        return replace(t, parts=parts)
    sh = tuple(min(1.0, owned[p]) for p in parts)
    return replace(t, parts=parts, shares=() if all(s >= 1 - 1e-9 for s in sh) else sh)


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
    def _balanced(self, owned: dict[int, float]) -> bool:
        if len(owned) == 1 and next(iter(owned.values())) >= 1 - 1e-9:
            return True
        return abs(sum(self.seeds[p] * s for p, s in owned.items()) - self.avg) \
            <= BALANCE * self.avg

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
                    set(_cost(self.pb, t).feat_from)]
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
        ts[i] = replace(t, machine=name, device=d, samplers=_merge(samplers), fetch_at=fetch)
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
            return replace(t, machine=o.machine, device=o.device, samplers=_merge(s),
                           fetch_at=f)

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
        """Move a partition's seeds (a trainer's whole share of it) to another trainer, or
        swap two partitions' shares."""
        if len(plan.trainers) < 2:
            return None
        i = self._pick(plan, focus)
        j = int(self.rng.integers(len(plan.trainers) - 1))
        j += j >= i
        a, b = plan.trainers[i], plan.trainers[j]
        oa, ob = _owned(a), _owned(b)
        pa = list(oa)[int(self.rng.integers(len(oa)))]
        if len(oa) > 1 and self.rng.random() < 0.5:
            ob[pa] = ob.get(pa, 0.0) + oa.pop(pa)
        else:
            pbp = list(ob)[int(self.rng.integers(len(ob)))]
            if pbp == pa:
                return None
            sa, sb = oa.pop(pa), ob.pop(pbp)
            ob[pa] = ob.get(pa, 0.0) + sa
            oa[pbp] = oa.get(pbp, 0.0) + sb
        if not (self._balanced(oa) and self._balanced(ob)):
            return None
        ts = list(plan.trainers)
        ts[i], ts[j] = _with_owned(a, oa), _with_owned(b, ob)
        return self._set(plan, ts)

    def share(self, plan: Plan, focus: int | None) -> Plan | None:
        """Shift part of one partition's seeds between two trainers that both own some of
        it (seed shares: only where the plan model has them)."""
        if not _SHARES:
            return None
        i = self._pick(plan, focus)
        a = plan.trainers[i]
        oa = _owned(a)
        mates = [j for j, t in enumerate(plan.trainers) if j != i and set(_owned(t)) & set(oa)]
        if not mates:
            return None
        j = mates[int(self.rng.integers(len(mates)))]
        b = plan.trainers[j]
        ob = _owned(b)
        p = sorted(set(oa) & set(ob))[int(self.rng.integers(len(set(oa) & set(ob))))]
        d = oa[p] * float(self.rng.choice([0.1, 0.25, 0.5]))
        if self.rng.random() < 0.5:  # or the other way round
            a, b, oa, ob, i, j = b, a, ob, oa, j, i
            d = oa[p] * float(self.rng.choice([0.1, 0.25, 0.5]))
        oa[p] -= d
        ob[p] += d
        if oa[p] <= 1e-6 or not (self._balanced(oa) and self._balanced(ob)):
            return None
        ts = list(plan.trainers)
        ts[i], ts[j] = _with_owned(a, oa), _with_owned(b, ob)
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
            u.memory[m] -= problem.sampler_bytes(_cost(problem, t))
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


@dataclass
class Outcome:
    """What :func:`search_many` found: the plan to keep and what it was compared with."""

    plan: Plan
    vector: tuple[float, ...]  # its score on every draw
    reference: tuple[float, ...]  # per draw, the best start's score
    won: bool  # found by the search and faster than `reference` on every draw
    start: int  # index of the start kept when not `won` (else -1)
    finalists: list[tuple[tuple[float, ...], Plan]]  # the best plans by mean, best first
    stats: SearchStats


def search_many(problem: Problem, starts: Sequence[Plan], scorer: Scorer | SeedEvaluator, *,
                seed: int = 0, max_evals: int = 200, max_proposals: int | None = None,
                stall: int = 60, time_budget: float = 30.0, t0_frac: float = 0.02,
                keep: int = KEEP) -> Outcome:
    """Simulated annealing over placements on several draws (see the module's docstring).

    `scorer`: a :class:`SeedEvaluator` (every draw) or a one-draw scorer. Every start is
    scored on every draw first; the per-draw minimum is the reference a found plan must beat
    on every draw to be kept, else the best start (:func:`fallback`) is.
    """
    wall0 = time.perf_counter()
    ev = SeedEvaluator.of(scorer)
    n = ev.n
    rng = np.random.default_rng(seed)
    moves = _Moves(problem, rng)
    sims_start = ev.simulations
    vecs = [ev.vector(p) for p in starts]
    scoring_s = time.perf_counter() - wall0
    sims0 = ev.simulations  # the starts' scores do not count against max_evals
    ref = tuple(min(v[k] for v in vecs) for k in range(n))
    order = sorted(range(len(starts)), key=lambda i: (sum(vecs[i]) / n, i))
    cur = starts[order[0]]
    cur_v = vecs[order[0]]
    cur_s = sum(cur_v) / n
    best_s = cur_s
    stats = SearchStats(cur_s, cur_s, seeds=list(getattr(ev, "seeds", [])),
                        scoring_s=scoring_s)
    queue = [starts[i] for i in order[1:]]
    start_keys = {p.key() for p in starts}
    found: dict[tuple, tuple[tuple[float, ...], Plan]] = {}  # non-start plans scored fully
    max_proposals = max_proposals or 20 * max_evals
    since = 0
    budget_sims = max_evals * n
    weights = np.array([3.0, 2.0, 1.0, 1.0, 1.0, 1.5 if problem.W < problem.P else 0.0,
                        1.0 if _SHARES and problem.W > problem.P else 0.0])
    weights /= weights.sum()
    focus = _focus(problem, cur)
    best_p: Plan | None = None  # the best plan found by mean (not a start)
    reheats = 0
    while True:
        if ev.simulations - sims0 >= budget_sims:
            stats.stopped = "evaluations"
            break
        if stats.proposals >= max_proposals:
            stats.stopped = "proposals"
            break
        if time.perf_counter() - wall0 > time_budget:
            stats.stopped = "time"
            break
        if since >= stall:
            if queue:
                cur = queue.pop(0)  # restart from the next diverse start
            elif reheats < REHEATS and best_p is not None and best_p.key() != cur.key():
                cur = best_p  # then from the best plan found, the temperature as it is
                reheats += 1
            else:
                stats.stopped = "stall"
                break
            cur_v = ev.vector(cur)
            cur_s = sum(cur_v) / n
            focus = _focus(problem, cur)
            stats.restarts += 1
            since = 0
            continue
        stats.proposals += 1
        kind = MOVES[int(rng.choice(len(MOVES), p=weights))]
        cand = getattr(moves, kind)(cur, focus if rng.random() < 0.6 else None)
        if cand is None:
            continue
        if kind in ("move", "swap", "part", "share"):
            cand = fill_samplers(problem, repair(problem, cand) or cand)
        cand = repair(problem, cand)
        if cand is None or usage(problem, cand).problems:
            stats.infeasible += 1
            continue
        progress = (ev.simulations - sims0) / max(budget_sims, 1)
        temp = t0_frac * stats.start_score * max(1e-3, 1.0 - progress)
        if not ev.known(cand):
            lb = problem.epoch_bound(cand)
            if lb > cur_s + 3 * temp:
                stats.skipped_by_bound += 1
                since += 1
                continue
            # race: a candidate clearly worse on the first draw is not drawn again
            if n > 1 and ev.first(cand) > cur_v[0] + 3 * temp:
                stats.raced_out += 1
                since += 1
                continue
        v = ev.vector(cand)
        s = sum(v) / n
        since += 1
        if cand.key() not in start_keys:
            found[cand.key()] = (v, cand)
        if s < cur_s or rng.random() < math.exp(-(s - cur_s) / max(temp, 1e-12)):
            stats.accepted += 1
            cur, cur_v, cur_s = cand, v, s
            focus = _focus(problem, cur)
        if s < best_s - 1e-12:
            best_s, best_p = s, cand
            stats.improved += 1
            stats.improving_moves[kind] = stats.improving_moves.get(kind, 0) + 1
            since = 0
    winners = sorted((x for x in found.values() if wins(x[0], ref)),
                     key=lambda x: (sum(x[0]), x[1].key()))
    stats.winners = len(winners)
    ranked = sorted(found.values(), key=lambda x: (sum(x[0]), x[1].key()))
    finalists = list({x[1].key(): x for x in winners[:keep] + ranked[:keep]}.values())
    if winners:
        v, plan = winners[0]
        out = Outcome(plan, v, ref, True, -1, finalists, stats)
        stats.kept = "search"
    else:
        i = fallback(vecs)
        out = Outcome(starts[i], vecs[i], ref, False, i, finalists, stats)
        stats.kept = f"start {i}"
    stats.simulations = ev.simulations - sims_start
    stats.evaluations = (ev.simulations - sims0) / n
    stats.best_score = sum(out.vector) / n
    stats.wall_s = time.perf_counter() - wall0
    return out


def search(problem: Problem, starts: Sequence[Plan], scorer: Scorer | SeedEvaluator, *,
           seed: int = 0, max_evals: int = 200, max_proposals: int | None = None,
           stall: int = 60, time_budget: float = 30.0, t0_frac: float = 0.02,
           evaluator: Evaluator | SeedEvaluator | None = None) -> tuple[Plan, SearchStats]:
    """:func:`search_many`'s plan and stats: never worse than every start on every draw
    unless it is a start itself (the best one, :func:`fallback`)."""
    out = search_many(problem, starts, evaluator or scorer, seed=seed, max_evals=max_evals,
                      max_proposals=max_proposals, stall=stall, time_budget=time_budget,
                      t0_frac=t0_frac)
    return out.plan, out.stats


# ---------------------------------------------------------------------- the placer


def _starts(problem: Problem, out: Any, *, seed: int = 0, budget: float = 2.0,
            score: Scorer | None = None, balance_s: float = 0.0) -> list[tuple[str, Plan]]:
    """(name, plan) of the starts: CP-SAT's plan and pool, greedy's plan of every part split
    solved, colocation (whole and even), the seed-share model's plan where it is installed
    (``shares``), CP-SAT's plan with the seed split best for it and, given a `score`, the
    even colocation's placement with its seeds balanced by it for up to `balance_s` seconds
    (:func:`~gnnsched.placement.balance.balance_seeds`: ``balanced``)
    — each placement once (a plan found under several names is named by all of them,
    joined by " = "), only plans with every trainer of the job."""
    from gnnsched.placement.placer import placers

    named: list[tuple[str, Plan]] = [("cpsat", out.plan)]
    named += [(f"cpsat pool {k}", p) for k, p in enumerate(list(out.pool)[:3])]
    named += [("greedy" if k == 0 else f"greedy split {k}", p)
              for k, p in enumerate(out.warm_starts)]
    for name in ("colocation", "colocation-even", "shares"):
        if name not in placers():
            continue
        try:
            named.append((name, placers()[name]().place_problem(problem, seed=seed,
                                                                budget=budget)))
        except SpecError:  # it cannot place this job (e.g. colocation: trainers > groups)
            pass
    split_already = {p.key() for name, p in named if name in ("colocation", "colocation-even",
                                                                  "greedy")}
    # CP-SAT's own placement with the seed split best for it (unless the seed-share stage
    # split it already: it splits colocation's and greedy's placements)
    if "shares" in placers() and out.plan.key() not in split_already:
        from gnnsched.placement.shares import rebalance

        r = rebalance(problem, out.plan, time_limit=budget, seed=seed)
        if r is not None:
            named.append(("cpsat+shares", r))
    even = next((p for name, p in named if name == "colocation-even"), None)
    if score is not None and even is not None and balance_s > 0:
        from gnnsched.placement.balance import balance_seeds

        b = balance_seeds(problem, even, score, budget=balance_s)
        if b is not None:
            named.append(("balanced", b[0]))
    if score is not None and even is not None:
        from gnnsched.placement.balance import stagger_seeds

        st = stagger_seeds(problem, even, score)  # only where trainers split a partition
        if st is not None:
            named.append(("staggered", st[0]))
    seen: dict[tuple, int] = {}  # a plan's key: its index in starts
    starts: list[tuple[str, Plan]] = []
    for name, p in named:
        if p.key() in seen:  # one plan under two names (CP-SAT's is often colocation's):
            i = seen[p.key()]  # keep both, so the start is found by either
            starts[i] = (f"{starts[i][0]} = {name}", starts[i][1])
            continue
        if len(p.trainers) != problem.W or usage(problem, p).problems:
            continue
        seen[p.key()] = len(starts)
        starts.append((name, replace(p, placer="gnnsched", predicted={}, notes=())))
    return starts


def _race(named: list[tuple[str, Plan]], ev: SeedEvaluator
          ) -> tuple[list[tuple[str, Plan]], dict[str, float]]:
    """The starts worth scoring on every draw, and the others' first-draw scores: a start
    more than ``RACE`` slower than the best on the first draw is dropped there (at 256 hosts
    every draw of a start costs a second), except colocation's, whose margin
    (``keep_colocation``) needs every draw."""
    firsts = [ev.first(p) for _, p in named]
    lead = min(firsts)
    keep, raced = [], {}
    for (name, p), f in zip(named, firsts):
        if f <= lead * (1 + RACE) or "colocation" in name.split(" = "):
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
            if not 0 <= keep_colocation < 10:
                raise SpecError("--keep-colocation", "", f"{keep_colocation!r} is not a "
                                "fraction in [0, 10)", "e.g. 0.22 for predictions within 10%")
            self.keep_colocation = float(keep_colocation)

    def _evaluators(self, problem: Problem, seed: int
                    ) -> tuple[SeedEvaluator, SeedEvaluator, str]:
        """(full, quick, how): every draw's whole-epoch scorer, and the search's."""
        K = problem.wl.iterations
        # a shortened epoch only where it saves much (else the finalists are simulated twice)
        short = SEARCH_ITERATIONS if SEARCH_ITERATIONS < 0.75 * K else None
        make = self.seed_scorer
        how = "caller's scorer"
        if make is None and self.scorer is None:
            how = default_scorer(problem, seed)[1]
            if how.startswith("simulator"):
                def make(s: int, its: int | None) -> Scorer:
                    return default_scorer(problem, s, its)[0]
        if make is None:  # one draw: the caller's scorer, or the cost-model bound
            full_one = self.scorer or default_scorer(problem, seed)[0]
            full = SeedEvaluator([full_one], [seed])
            quick = full if self.search_scorer is None or self.search_scorer is full_one \
                else SeedEvaluator([self.search_scorer], [seed])
            return full, quick, how
        seeds = draw_seeds(seed, self.seeds)
        first_full = self.scorer or make(seed, None)
        full = SeedEvaluator([first_full] + [make(s, None) for s in seeds[1:]], seeds)
        if short is None:
            return full, full, how
        first_quick = self.search_scorer or make(seed, short)
        quick = SeedEvaluator([first_quick] + [make(s, short) for s in seeds[1:]], seeds)
        return full, quick, how

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        t0 = time.perf_counter()
        budget = 30.0 if budget is None else budget
        full, quick, how = self._evaluators(problem, seed)
        out = run_cpsat(problem, time_limit=min(20.0, max(0.5, 0.3 * budget)), seed=seed,
                        placer="gnnsched")
        phases: dict[str, float] = {}

        def lap(name: str) -> None:  # the seconds since the last phase ended
            phases[name] = time.perf_counter() - t0 - sum(phases.values())

        lap("cpsat")
        # the seed-share model's work is bounded (deterministic effort: the same split as
        # the shares placer's own); half the budget is only its safety cap
        named = _starts(problem, out, seed=seed, budget=max(1.0, 0.5 * budget),
                        score=quick.first, balance_s=0.3 * budget)
        if not named:
            raise SpecError(problem.job.source, "trainers", "no placement to start from "
                            f"has the job's {problem.W} trainers", "another placer")
        lap("starts")
        named, raced = _race(named, quick)
        lap("race")
        starts = [p for _, p in named]
        left = budget - (time.perf_counter() - t0)
        # keep time to re-score the finalists with the full simulation
        reserve = 0.0 if quick is full else 0.15 * left
        res = search_many(problem, starts, quick, seed=seed, max_evals=self.max_evals,
                          time_budget=max(0.0, left - reserve))
        stats = res.stats
        phases["scoring the starts"] = stats.scoring_s
        phases["search"] = stats.wall_s - stats.scoring_s
        if quick is full:
            final, vec, ref, won = res.plan, res.vector, res.reference, res.won
        else:  # the search scored shortened epochs: judge the starts and finalists in full
            svecs = [full.vector(p) for p in starts]
            ref = tuple(min(v[k] for v in svecs) for k in range(full.n))
            cands = [(full.vector(p), p) for _, p in res.finalists]
            good = sorted((c for c in cands if wins(c[0], ref)),
                          key=lambda c: (sum(c[0]), c[1].key()))
            won = bool(good)
            if won:
                vec, final = good[0]
            else:
                i = fallback(svecs)
                vec, final = svecs[i], starts[i]
        if won:
            stats.kept = "search"
        else:
            stats.kept = next(name for name, p in named if p.key() == final.key())
        colo = next((p for name, p in named if "colocation" in name.split(" = ")), None)
        if self.keep_colocation > 0 and colo is not None and colo.key() != final.key():
            cvec = full.vector(colo)
            if not all(v * (1 + self.keep_colocation) < c for v, c in zip(vec, cvec)):
                gain = min(c / v for v, c in zip(vec, cvec))
                why = (f"kept the colocation placer's plan: the best other plan is predicted "
                       f"{gain:.2f}x faster on its worst draw, not more than 1 + "
                       f"{self.keep_colocation:.2f}, the margin for the predictions' error "
                       "(keep_colocation)")
                final, vec, won = replace(colo, notes=(why,)), cvec, False
                stats.kept = "colocation (margin)"
        lap("final scoring")
        lb = simulated_lower_bound(problem, out, [final] + starts, seed=seed,
                                   time_limit=max(1.0, min(5.0, budget - (time.perf_counter()
                                                                          - t0))))
        lap("bound")
        self.outcome = out
        it = problem.wl.iterations
        r = out.result
        noise = spread(vec)
        draws = {"seeds": list(full.seeds), "epoch_s": list(vec), "best_start_s": list(ref),
                 "gain": [b / a for a, b in zip(vec, ref)], "noise": noise,
                 "won_on_every_draw": won, "kept": stats.kept,
                 "regret": regret(vec, ref),
                 "starts": [name for name, _ in named], "raced_out_s": raced,
                 "start_epochs_s": {name: list(full.vector(p)) for name, p in named}}
        return replace(final, notes=tuple(out.plan.notes) + tuple(final.notes)).with_prediction(
            epoch_time_s=vec[0], scored_by=how, noise=noise,
            epoch_time_by_seed_s={str(s): v for s, v in zip(full.seeds, vec)},
            lower_bound_s=lb * it, lower_bound_iteration_s=lb,
            lower_bound_scope=out.scope(),
            cpsat={"status": r.status, "objective_iteration_s": r.objective_s,
                   "bound_iteration_s": out.lower_bound_iter_s, "wall_s": r.wall_s,
                   "variables": r.variables, "exact_parts": r.instance.exact_parts,
                   "aggregated": r.instance.aggregated, "cpu_model": r.cpu_model},
            search={**stats.to_dict(), "draws": draws},
            planning_s=time.perf_counter() - t0, budget_s=budget, planning_phases_s=phases)


def margin_for(accuracy: float) -> float:
    """:attr:`GnnschedPlacer.keep_colocation` for predictions each within ``accuracy`` (a
    fraction) of the measured epoch: (1 + a) / (1 - a) - 1, the most two of them can misjudge
    a speed-up by (0.22 for 10%)."""
    if not 0 <= accuracy < 1:
        raise ValueError(f"accuracy must be a fraction in [0, 1), got {accuracy!r}")
    return (1 + accuracy) / (1 - accuracy) - 1


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
                     cache_share: float = 0.0, keep_colocation: float = 0.0) -> Plan:
    """Plan with `placer`, score it and every baseline with one scorer, attach the bound.
    ``keep_colocation``: the gnnsched placer's margin (:class:`GnnschedPlacer`).
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
    from gnnsched.placement.placer import get_placer, placers

    if scorer is None:
        scorer, how = default_scorer(problem, seed)
    simulated = (how or "").startswith("simulator")
    ev = scorer if isinstance(scorer, Evaluator) else Evaluator(scorer)
    t0 = time.perf_counter()
    kw: dict[str, Any] = {"scorer": ev}
    chosen_cls = placers().get(placer)
    if isinstance(chosen_cls, type) and issubclass(chosen_cls, GnnschedPlacer):
        if simulated:  # the scorer is the simulator on the draws of `seed`: add other draws
            kw["seed_scorer"] = lambda s, its: default_scorer(problem, s, its)[0]
        if keep_colocation:
            kw["keep_colocation"] = keep_colocation
    chosen = get_placer(placer, **kw)
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


__all__ = ["BASELINES", "SEARCH_SEEDS", "Evaluator", "GnnschedPlacer", "Outcome", "SearchStats",
           "SeedEvaluator", "draw_seeds", "fallback", "iteration_floor", "margin_for",
           "plan_and_compare", "regret", "repair", "search", "search_many", "spread", "wins"]
