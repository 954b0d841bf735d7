"""One plan, one prediction (issue 53, item 4): whichever placer's comparison scores a plan,
and whether it is scored as the chosen plan or as a baseline beside another, it gets the same
epoch; a plan with feature caches is never scored as the same plan without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnsched import api
from gnnsched.placement import get_placer
from gnnsched.placement.compare import plan_and_compare
from gnnsched.placement.scoring import Evaluator, default_scorer

HETERO = Path(__file__).resolve().parents[2] / "examples" / "hetero16"
SHARE = 0.5


@pytest.fixture(scope="module")
def problem():
    return api.plan_problem(HETERO / "cluster.yaml", HETERO / "job.yaml")


def test_a_plan_scores_the_same_as_its_own_and_as_a_baseline(problem) -> None:
    colo = plan_and_compare(problem, "colocation", seed=0, cache_share=SHARE)
    greedy = plan_and_compare(problem, "greedy", seed=0, cache_share=SHARE)
    rows = {r.name: r for r in greedy.prediction.baselines}
    assert colo.caches, "hetero16 has room for caches at this share"
    # colocation's plan with caches, scored by itself and beside greedy's plan
    assert rows["colocation+cache"].epoch_time_s == colo.prediction.epoch_time_s
    # ... and not confused with the same placement without them
    assert rows["colocation"].epoch_time_s != colo.prediction.epoch_time_s
    score, _ = default_scorer(problem, 0)
    for plan in (colo, greedy):  # what `plan` printed is what a fresh scorer gives it
        assert plan.prediction.epoch_time_s == score(plan)


def test_the_score_cache_tells_caches_apart(problem) -> None:
    plan = get_placer("colocation").place_problem(problem, seed=0)
    calls: list[int] = []

    def scorer(p) -> float:
        calls.append(1)
        return 1.0 + sum(p.caches.values())

    ev = Evaluator(scorer)
    cached = plan.with_caches({plan.trainers[0].machine: 100})
    assert ev(plan) == 1.0 and ev(cached) == 101.0 and ev(plan) == 1.0
    assert len(calls) == 2 and plan.key() == cached.key() != cached.score_key()
