"""Words that mean one thing (issue 51 item 5): "infeasible" is never printed beside an epoch
time, colocation's fallback is named for what it is, and ``train --json``'s times say
whether they are measured or the real cluster's."""

from __future__ import annotations

import re
from types import SimpleNamespace

from gnnsched.evaluation.config import load_shape
from gnnsched.placement import Problem
from gnnsched.placement.search import plan_and_compare
from gnnsched.profile import synthetic_profile
from gnnsched.spec import job_from_dict

SECONDS = re.compile(r"\d\.\d+ s\b|\d+\.\d+ ms\b")


def _problem(shape: str) -> Problem:
    job = job_from_dict({"dataset": "synthetic", "num_parts": 4, "trainers": 2,
                         "batch_size": 16, "fanouts": [5, 10], "prefetch": 2})
    prof = synthetic_profile(4, seeds_per_part=80, batch_size=16, fanouts=(5, 10),
                             feature_dim=512, seed=1)
    return Problem(load_shape(shape), job, prof)


def test_the_fallback_is_named_and_never_called_infeasible_beside_a_time() -> None:
    """gpuless: the stores have no GPU, so colocation's row is its fallback (trainers moved to
    the GPU hosts), and says so; gnnsched choosing the same placement says it is the
    fallback's."""
    from gnnsched.commands.plan import FALLBACK, table

    pb = _problem("gpuless")
    plan = plan_and_compare(pb, "gnnsched", seed=0, budget=2.0)
    text = table(pb, plan)
    timed = [line for line in text.splitlines() if SECONDS.search(line)]
    assert timed
    for line in timed:
        assert "infeasible" not in line.lower(), line
    (colo,) = [line for line in timed if line.strip().startswith("colocation ")]
    assert FALLBACK in colo
    if plan.prediction.same_as_colocation:
        assert "the same placement as colocation's fallback" in text


def test_feasible_colocation_is_not_called_a_fallback() -> None:
    from gnnsched.commands.plan import FALLBACK, table

    pb = _problem("plentiful")
    text = table(pb, plan_and_compare(pb, "greedy", seed=0, budget=2.0))
    assert FALLBACK not in text and "infeasible" not in text


def test_train_json_says_measured_or_real_cluster() -> None:
    """On a scale model (D = 4) the measured epoch is 4x the real cluster's; both are named
    so, and the old keys stay for one version with the same meanings."""
    from gnnsched.api import summary

    res = SimpleNamespace(
        policy="fifo", placer="colocation", launcher="netns", epoch_time_s=4.0,
        real_epoch_time_s=1.0, dilation=4.0, test_accuracy=0.8, val_accuracy=[0.7],
        metric="accuracy", test_metric=0.8, val_metric=[0.7], majority_rate=0.3,
        bytes_sent=1, network_bytes=1, allreduce_bytes=0, bytes_by_process={}, stages={},
        epochs=[{"epoch_time_s": 4.0}], iterations_per_epoch=9, startup_s=1.0, wall_s=9.0,
        run_dir="runs/x")
    out = summary(res)
    assert out["measured_epoch_time_s"] == 4.0 and out["real_cluster_epoch_time_s"] == 1.0
    assert out["epoch_time_s"] == 4.0 and out["real_epoch_time_s"] == 1.0  # old names
    assert out["dilation"] == 4.0
