"""What `gnnsched plan` tells a user holds: its floors never exceed its prediction, a store
that cannot hold its partitions is refused, and colocation is called infeasible only where
it is (issue 25, items 6 and 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnsched.placement import Problem, get_placer
from gnnsched.placement.placer import simulator_scorer
from gnnsched.placement.search import iteration_floor, plan_and_compare
from gnnsched.profile import synthetic_profile
from gnnsched.spec import SpecError, job_from_dict, load_cluster

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "gnnsched" / "evaluation" / "shapes"


def _shape_problem(shape: str, trainers: int, seeds_per_part: int) -> Problem:
    """A bundled cluster shape with a small synthetic job: few iterations per epoch, so the
    simulator's drawn mini-batches stray from the profile's means."""
    cluster = load_cluster(SHAPES / f"{shape}.yaml")
    job = job_from_dict({"dataset": "synthetic", "num_parts": 4, "trainers": trainers,
                         "batch_size": 16, "fanouts": [5, 10], "prefetch": 2})
    prof = synthetic_profile(4, seeds_per_part=seeds_per_part, batch_size=16, fanouts=(5, 10),
                             feature_dim=512, seed=seeds_per_part, skew=0.5)
    return Problem(cluster, job, prof)


CASES = [(s, w, spp) for s in ("plentiful", "gpuless", "hetero", "mixedgen") for w in (2, 4)
         for spp in (40, 200) if not (s == "gpuless" and w == 4)]


# ---------------------------------------------------------------------- item 9: floors


def test_floors_never_exceed_the_simulated_iteration() -> None:
    """Over every baseline and random plans on the bundled shapes and two simulator seeds,
    the most loaded resource and the dependency chain `plan` prints are at most the simulated
    time per iteration; the mean-cost floor `plan` used to print was not (the bug)."""
    checked = above = 0
    for shape, trainers, spp in CASES:
        pb = _shape_problem(shape, trainers, spp)
        plans = []
        for name in ("colocation", "greedy"):
            try:
                plans.append(get_placer(name).place_problem(pb))
            except SpecError:
                pass
        plans += [get_placer("random").place_problem(pb, seed=s) for s in range(3)]
        K = pb.wl.iterations
        for seed in (0, 1):
            sim = simulator_scorer(pb, seed=seed)
            for plan in plans:
                per = sim(plan) / K
                floor = iteration_floor(pb, plan, seed)
                assert floor["bottleneck_iteration_s"] <= per * (1 + 1e-9), (shape, plan)
                assert floor["chain_iteration_s"] <= per * (1 + 1e-9), (shape, plan)
                above += pb.seconds_per_iteration(plan)[0] > per * (1 + 1e-9)
                checked += 1
    assert checked > 50
    assert above > 0  # the mean-cost floor alone would have contradicted the simulation


@pytest.mark.parametrize("placer", ["gnnsched", "greedy", "colocation", "random"])
def test_plan_prints_floors_below_its_prediction(placer: str) -> None:
    """What plan_and_compare records for the plan and every baseline: floors <= iteration."""
    for shape, trainers in (("plentiful", 4), ("hetero", 2)):
        pb = _shape_problem(shape, trainers, 40)
        plan = plan_and_compare(pb, placer, seed=0, budget=2.0)
        pr = plan.predicted
        per = pr["epoch_time_s"] / pr["iterations"]
        assert pr["iteration_s"] == pytest.approx(per)
        assert 0 < pr["bottleneck_iteration_s"] <= per * (1 + 1e-9)
        assert 0 < pr["chain_iteration_s"] <= per * (1 + 1e-9)
        for name, row in pr["baselines"].items():
            if "error" in row:
                continue
            base_per = row["epoch_time_s"] / pr["iterations"]
            assert row["bottleneck_iteration_s"] <= base_per * (1 + 1e-9), name
            assert row["chain_iteration_s"] <= base_per * (1 + 1e-9), name


def test_why_line_orders_the_floors() -> None:
    from gnnsched.commands.plan import why

    pr = {"epoch_time_s": 1.0, "iterations": 10, "bottleneck": "ingress of h3",
          "bottleneck_iteration_s": 0.05, "chain_iteration_s": 0.08,
          "scored_by": "simulator (gnnsched policy)"}
    line = why(pr, 2)
    assert line.startswith("why: the longest dependency chain")
    assert "80.0 ms" in line and "50.0 ms" in line and "simulated iteration 100.0 ms" in line
    pr["chain_iteration_s"] = 0.01
    assert why(pr, 2).startswith("why: the most loaded resource is ingress of h3 with 50.0 ms")
