"""Several draws: a plan's score on several seeded draws of the mini-batches.

A simulated epoch depends on the mini-batches drawn with a seed, and a plan tuned to one draw
can lose on the next. The search scores every candidate on ``SEARCH_SEEDS`` seeded draws
(:func:`draw_seeds`: the planner's seed first) with a :class:`SeedEvaluator`; a found plan is
kept only when it :func:`wins` on every draw against the best start of that draw, else the
start of least :func:`regret` is (:func:`fallback`). :func:`spread` is a plan's noise.
"""

from __future__ import annotations

from collections.abc import Sequence

from gnnsched.placement.scoring import Evaluator, Scorer
from gnnsched.plan import Plan

SEARCH_SEEDS = 3  # seeded draws every candidate is scored on
SEED_STRIDE = 1000  # draw k of seed s is s + k * SEED_STRIDE: runs with nearby seeds differ


def draw_seeds(seed: int, n: int = SEARCH_SEEDS) -> tuple[int, ...]:
    """The seeds of the draws a placer with `seed` scores on: `seed` itself first."""
    return tuple(int(seed) + k * SEED_STRIDE for k in range(max(1, n)))


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
        k = plan.score_key()
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


__all__ = ["SEARCH_SEEDS", "SEED_STRIDE", "SeedEvaluator", "draw_seeds", "fallback", "regret",
           "spread", "wins"]
