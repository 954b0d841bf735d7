"""Simulated annealing over placements, scored on several draws (:mod:`.draws`).

From the best start (by the mean over the draws), propose local moves (:mod:`.moves`) and
accept them by simulated annealing on the mean simulated epoch; restart from the next start,
then from the best plan found, when the search stalls. Every start is scored on every draw
first; the per-draw minimum is the reference a found plan must beat on every draw to be kept.

Reproducible: the random stream is seeded and the search is bounded by a number of
*evaluations* (a plan scored on every draw; a candidate clearly worse on the first draw is
rejected there, costing a fraction of one) and proposals; the time budget is only a safety
cap. Moves whose cost-model lower bound already exceeds the current plan's score by more than
the temperature allows are skipped unsimulated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gnnsched.placement.draws import SeedEvaluator, fallback, wins
from gnnsched.placement.feasibility import fill_samplers, usage
from gnnsched.placement.moves import _SHARES, MOVES, Moves, bottleneck_machine, repair
from gnnsched.placement.problem import Problem
from gnnsched.placement.scoring import Evaluator, Scorer
from gnnsched.plan import Plan
from gnnsched.prediction import SearchRecord

REHEATS = 2  # restarts from the best plan found, once the starts are used up
KEEP = 4  # finalists re-scored with the full simulation when the search scores a shorter one


SearchStats = SearchRecord  # what the search did (the name it had before the record)
COUNTS = ("proposals", "skipped_by_bound", "raced_out", "infeasible", "accepted", "improved",
          "restarts")  # what a run counts as it goes (SearchRecord's fields of those names)


@dataclass
class Outcome:
    """What :func:`search_many` found: the plan to keep and what it was compared with."""

    plan: Plan
    vector: tuple[float, ...]  # its score on every draw
    reference: tuple[float, ...]  # per draw, the best start's score
    won: bool  # found by the search and faster than `reference` on every draw
    start: int  # index of the start kept when not `won` (else -1)
    finalists: list[tuple[tuple[float, ...], Plan]]  # the best plans by mean, best first
    stats: SearchRecord


class _Annealer:
    """One run of :func:`search_many`: the current plan, the best found, the counts."""

    def __init__(self, problem: Problem, starts: Sequence[Plan], ev: SeedEvaluator, *,
                 seed: int, max_evals: int, max_proposals: int | None, stall: int,
                 time_budget: float, t0_frac: float) -> None:
        self.wall0 = time.perf_counter()
        self.pb, self.ev, self.n = problem, ev, ev.n
        self.rng = np.random.default_rng(seed)
        self.moves = Moves(problem, self.rng)
        self.sims_start = ev.simulations
        self.starts = list(starts)
        self.vecs = [ev.vector(p) for p in starts]
        self.scoring_s = time.perf_counter() - self.wall0
        self.sims0 = ev.simulations  # the starts' scores do not count against max_evals
        n = self.n
        self.ref = tuple(min(v[k] for v in self.vecs) for k in range(n))
        order = sorted(range(len(starts)), key=lambda i: (sum(self.vecs[i]) / n, i))
        self.cur = starts[order[0]]
        self.cur_v = self.vecs[order[0]]
        self.cur_s = sum(self.cur_v) / n
        self.start_score = self.best_s = self.cur_s
        self.queue = [starts[i] for i in order[1:]]
        self.start_keys = {p.key() for p in starts}
        self.found: dict[tuple, tuple[tuple[float, ...], Plan]] = {}  # non-starts, every draw
        self.max_proposals = max_proposals or 20 * max_evals
        self.stall, self.time_budget, self.t0_frac = stall, time_budget, t0_frac
        self.budget_sims = max_evals * n
        self.weights = np.array([3.0, 2.0, 1.0, 1.0, 1.0,
                                 1.5 if problem.W < problem.P else 0.0,
                                 1.0 if _SHARES and problem.W > problem.P else 0.0])
        self.weights /= self.weights.sum()
        self.focus = bottleneck_machine(problem, self.cur)
        self.best_p: Plan | None = None  # the best plan found by mean (not a start)
        self.reheats = self.since = 0
        self.count = dict.fromkeys(COUNTS, 0)
        self.improving: dict[str, int] = {}
        self.stopped = ""

    def run(self) -> None:
        """Propose until the evaluations, the proposals or the time run out, or a stall
        finds no plan left to restart from."""
        while True:
            if self.ev.simulations - self.sims0 >= self.budget_sims:
                self.stopped = "evaluations"
            elif self.count["proposals"] >= self.max_proposals:
                self.stopped = "proposals"
            elif time.perf_counter() - self.wall0 > self.time_budget:
                self.stopped = "time"
            elif self.since >= self.stall:
                if not self._restart():
                    self.stopped = "stall"
            else:
                self._step()
            if self.stopped:
                return

    def _restart(self) -> bool:
        """From the next start, then from the best plan found (the temperature as it is)."""
        if self.queue:
            self.cur = self.queue.pop(0)
        elif self.reheats < REHEATS and self.best_p is not None and \
                self.best_p.key() != self.cur.key():
            self.cur = self.best_p
            self.reheats += 1
        else:
            return False
        self.cur_v = self.ev.vector(self.cur)
        self.cur_s = sum(self.cur_v) / self.n
        self.focus = bottleneck_machine(self.pb, self.cur)
        self.count["restarts"] += 1
        self.since = 0
        return True

    def _step(self) -> None:
        """One proposal: a move, repaired; skipped by its bound or raced out on the first
        draw, else scored on every draw and accepted by the annealing rule."""
        pb, ev, count = self.pb, self.ev, self.count
        count["proposals"] += 1
        kind = MOVES[int(self.rng.choice(len(MOVES), p=self.weights))]
        cand = getattr(self.moves, kind)(self.cur, self.focus if self.rng.random() < 0.6
                                         else None)
        if cand is None:
            return
        if kind in ("move", "swap", "part", "share"):
            cand = fill_samplers(pb, repair(pb, cand) or cand)
        cand = repair(pb, cand)
        if cand is None or usage(pb, cand).problems:
            count["infeasible"] += 1
            return
        progress = (ev.simulations - self.sims0) / max(self.budget_sims, 1)
        temp = self.t0_frac * self.start_score * max(1e-3, 1.0 - progress)
        if not ev.known(cand) and self._pruned(cand, temp):
            self.since += 1
            return
        v = ev.vector(cand)
        s = sum(v) / self.n
        self.since += 1
        if cand.key() not in self.start_keys:
            self.found[cand.key()] = (v, cand)
        if s < self.cur_s or self.rng.random() < math.exp(-(s - self.cur_s) / max(temp, 1e-12)):
            count["accepted"] += 1
            self.cur, self.cur_v, self.cur_s = cand, v, s
            self.focus = bottleneck_machine(pb, cand)
        if s < self.best_s - 1e-12:
            self.best_s, self.best_p = s, cand
            count["improved"] += 1
            self.improving[kind] = self.improving.get(kind, 0) + 1
            self.since = 0

    def _pruned(self, cand: Plan, temp: float) -> bool:
        """Not worth every draw: its cost-model bound is already too slow, or (the race) it
        is clearly worse on the first draw."""
        if self.pb.epoch_bound(cand) > self.cur_s + 3 * temp:
            self.count["skipped_by_bound"] += 1
            return True
        if self.n > 1 and self.ev.first(cand) > self.cur_v[0] + 3 * temp:
            self.count["raced_out"] += 1
            return True
        return False

    def outcome(self, keep: int) -> Outcome:
        """The plan to keep (the best winner on every draw, else :func:`fallback`'s start),
        the finalists and the record of the run."""
        n, ev = self.n, self.ev
        winners = sorted((x for x in self.found.values() if wins(x[0], self.ref)),
                         key=lambda x: (sum(x[0]), x[1].key()))
        ranked = sorted(self.found.values(), key=lambda x: (sum(x[0]), x[1].key()))
        finalists = list({x[1].key(): x for x in winners[:keep] + ranked[:keep]}.values())
        if winners:
            (v, plan), i, kept = winners[0], -1, "search"
        else:
            i = fallback(self.vecs)
            v, plan, kept = self.vecs[i], self.starts[i], f"start {i}"
        stats = SearchRecord(
            self.start_score, sum(v) / n, evaluations=(ev.simulations - self.sims0) / n,
            simulations=ev.simulations - self.sims_start, **self.count, winners=len(winners),
            wall_s=time.perf_counter() - self.wall0, scoring_s=self.scoring_s,
            stopped=self.stopped, improving_moves=dict(self.improving),
            seeds=tuple(getattr(ev, "seeds", [])), kept=kept)
        return Outcome(plan, v, self.ref, bool(winners), i, finalists, stats)


def search_many(problem: Problem, starts: Sequence[Plan], scorer: Scorer | SeedEvaluator, *,
                seed: int = 0, max_evals: int = 200, max_proposals: int | None = None,
                stall: int = 60, time_budget: float = 30.0, t0_frac: float = 0.02,
                keep: int = KEEP) -> Outcome:
    """Simulated annealing over placements on several draws (see the module's docstring).

    `scorer`: a :class:`SeedEvaluator` (every draw) or a one-draw scorer. Every start is
    scored on every draw first; the per-draw minimum is the reference a found plan must beat
    on every draw to be kept, else the best start (:func:`fallback`) is.
    """
    run = _Annealer(problem, starts, SeedEvaluator.of(scorer), seed=seed, max_evals=max_evals,
                    max_proposals=max_proposals, stall=stall, time_budget=time_budget,
                    t0_frac=t0_frac)
    run.run()
    return run.outcome(keep)


def search(problem: Problem, starts: Sequence[Plan], scorer: Scorer | SeedEvaluator, *,
           seed: int = 0, max_evals: int = 200, max_proposals: int | None = None,
           stall: int = 60, time_budget: float = 30.0, t0_frac: float = 0.02,
           evaluator: Evaluator | SeedEvaluator | None = None) -> tuple[Plan, SearchRecord]:
    """:func:`search_many`'s plan and stats: never worse than every start on every draw
    unless it is a start itself (the best one, :func:`fallback`)."""
    out = search_many(problem, starts, evaluator or scorer, seed=seed, max_evals=max_evals,
                      max_proposals=max_proposals, stall=stall, time_budget=time_budget,
                      t0_frac=t0_frac)
    return out.plan, out.stats


__all__ = ["COUNTS", "KEEP", "REHEATS", "Outcome", "SearchStats", "search", "search_many"]
