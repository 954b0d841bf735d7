"""Scorers: a plan's predicted epoch seconds, by the simulator or by the cost model's bound.

Every placer that compares candidates, and the comparison of a plan with the baselines
(:mod:`.compare`), scores with one of these: :func:`default_scorer` is the simulator running
the ``gnnsched`` policy on the runtime's windowed network when it is installed, else the cost
model's lower bound. :class:`Evaluator` caches a scorer by placement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gnnsched.placement.problem import Problem
from gnnsched.plan import Plan
from gnnsched.workload import NIC_WINDOW_S

if TYPE_CHECKING:
    from gnnsched.placement.budget import Budget

Scorer = Callable[[Plan], float]  # a plan's predicted epoch seconds (lower is better)


def bound_scorer(problem: Problem) -> Scorer:
    """The cost model's lower bound on a plan's epoch time (no simulator needed)."""
    return problem.epoch_bound


def simulator_scorer(problem: Problem, policy: str = "gnnsched", seed: int = 0,
                     iterations: int | None = None, budget: Budget | None = None
                     ) -> Scorer | None:
    """The simulator running `policy`, or None when the simulator is not installed.

    `iterations` below the epoch's simulates that many and extrapolates (for search moves on
    long epochs); None simulates the whole epoch. With a `budget`, a simulation that would run
    past its :attr:`~.budget.Budget.end` is cut there (none starts past it) and the plan gets
    the budget's cheaper score (:meth:`~.budget.Budget.fallback`).
    """
    try:
        from gnnsched import simulator
        from gnnsched.policy import get_policy

        get_policy(policy)
    except (ImportError, ValueError):
        return None
    sim = getattr(simulator, "simulate", None)
    if sim is None:
        return None
    cut_error = getattr(simulator, "SimulationCut", None)
    its = iterations if iterations and iterations < problem.wl.iterations else None
    wl = problem.wl

    def score(plan: Plan) -> float:  # on the runtime's network: its send windows
        if budget is None or cut_error is None:
            return float(sim(wl, plan, policy=policy, seed=seed, iterations=its,
                             validate=False, nic_window_s=NIC_WINDOW_S).epoch_time_s)
        if budget.expired:
            return budget.fallback(wl, plan, seed, None)
        try:
            res = sim(wl, plan, policy=policy, seed=seed, iterations=its, validate=False,
                      nic_window_s=NIC_WINDOW_S, deadline=budget.end)
        except cut_error as cut:
            return budget.fallback(wl, plan, seed, cut)
        budget.ran(res.wall_s)
        if its is None:
            budget.seen(wl, plan, seed, float(res.epoch_time_s))
        return float(res.epoch_time_s)

    return score


SEARCH_ITERATIONS = 48  # search moves simulate at most this many iterations (extrapolated)


def default_scorer(problem: Problem, seed: int = 0, iterations: int | None = None,
                   budget: Budget | None = None) -> tuple[Scorer, str]:
    """Simulator with the gnnsched policy when available (cut at `budget`'s end), else the
    cost model's bound."""
    s = simulator_scorer(problem, "gnnsched", seed, iterations, budget)
    if s is not None:
        return s, "simulator (gnnsched policy, windowed network)"
    return bound_scorer(problem), "cost-model bound (simulator not installed)"


class Evaluator:
    """A scorer with a cache keyed on what a score depends on (:meth:`Plan.score_key`:
    the placement and its caches), counting real evaluations."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.cache: dict[tuple, float] = {}
        self.calls = 0

    def __call__(self, plan: Plan) -> float:
        k = plan.score_key()
        if k not in self.cache:
            self.calls += 1
            self.cache[k] = float(self.scorer(plan))
        return self.cache[k]


__all__ = ["SEARCH_ITERATIONS", "Evaluator", "Scorer", "bound_scorer", "default_scorer",
           "simulator_scorer"]
