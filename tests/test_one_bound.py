"""One lower bound (issue 28, item 4): `gnnsched plan` and `gnnsched simulate` print the same
two named bounds, with the same words and numbers, for the same plan, profile and seed, and
store them under the same keys."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsched.bounds import (
    ANY_PLACEMENT_MEANS,
    ANY_PLACEMENT_NAME,
    PER_PLAN_MEANS,
    PER_PLAN_NAME,
    AnyPlacementBound,
    PerPlanBound,
    any_placement_bound,
    bound_lines,
    instance_bound,
    per_plan_bound,
    recorded_bounds,
)
from gnnsched.cli import main
from gnnsched.instance import Instance

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "hetero16"


def _bound_block(text: str) -> list[str]:
    """The lines from the bounds' heading through the any-placement bound's definition."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("lower bounds of the epoch"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == ANY_PLACEMENT_MEANS)
    return lines[start:end + 1]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`gnnsched plan` on hetero16 (synthetic profile), its text and the plan file."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("one_bound") / "plan.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan", "--cluster", str(EX / "cluster.yaml"), "--job",
                   str(EX / "job.yaml"), "--budget", "2", "--seed", "0", "--out", str(out)])
    assert rc == 0
    return {"text": buf.getvalue(), "plan": out}


def _simulate(capsys: pytest.CaptureFixture[str], plan: Path, *extra: str) -> str:
    capsys.readouterr()
    rc = main(["simulate", "--cluster", str(EX / "cluster.yaml"), "--job", str(EX / "job.yaml"),
               "--plan", str(plan), *extra])
    assert rc == 0
    return capsys.readouterr().out


def test_plan_and_simulate_print_the_same_bounds(planned: dict,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The Done-when line: the same plan and seed give identical bound lines, both bounds
    named and defined, whatever the simulated policy or --iterations."""
    mine = _bound_block(planned["text"])
    assert len(mine) == 5
    assert mine[1].lstrip().startswith(PER_PLAN_NAME) and mine[2].strip() == PER_PLAN_MEANS
    assert mine[3].lstrip().startswith(ANY_PLACEMENT_NAME)
    assert "seed 0" in mine[0] and " ms" in mine[1] and " ms" in mine[3]
    for extra in ((), ("--seed", "0", "--policy", "fifo"), ("--iterations", "4")):
        sim = _simulate(capsys, planned["plan"], *extra)
        assert _bound_block(sim) == mine, extra


def test_the_stored_keys_are_the_same(planned: dict, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    pr = json.loads(planned["plan"].read_text())["predicted"]
    out = json.loads(_simulate(capsys, planned["plan"], "--json"))
    for key in ("per_plan_bound_s", "any_placement_bound_s", "bounds"):
        assert out[key] == pr[key], key
    b = pr["bounds"]
    assert b["per_plan"]["name"] == PER_PLAN_NAME and b["per_plan"]["definition"] == PER_PLAN_MEANS
    assert b["any_placement"]["name"] == ANY_PLACEMENT_NAME
    assert b["any_placement"]["definition"] == ANY_PLACEMENT_MEANS
    assert pr["lower_bound_s"] == pr["any_placement_bound_s"]  # the key others read
    assert pr["any_placement_bound_s"] <= pr["per_plan_bound_s"] <= pr["epoch_time_s"]
    assert out["per_plan_bound_s"] <= out["epoch_time_s"]
    for name, row in pr["baselines"].items():  # the bound holds for every plan compared
        assert pr["any_placement_bound_s"] <= row["per_plan_bound_s"] <= row["epoch_time_s"], name


def test_another_seed_says_the_any_placement_bound_is_unknown(
        planned: dict, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _simulate(capsys, planned["plan"], "--seed", "3")
    block = _bound_block(sim)
    assert "seed 3" in block[0]
    assert "not known for seed 3: the plan's is for seed 0" in block[3]
    out = json.loads(_simulate(capsys, planned["plan"], "--seed", "3", "--json"))
    assert out["any_placement_bound_s"] is None and out["bounds"]["any_placement"] is None
    assert out["bounds"]["per_plan"]["seed"] == 3


def _problem():
    from gnnsched.placement import Problem
    from gnnsched.profile import synthetic_profile
    from gnnsched.spec import load_cluster, load_job

    cluster, job = load_cluster(EX / "cluster.yaml"), load_job(EX / "job.yaml")
    prof = synthetic_profile(job.num_parts, seeds_per_part=2000, batch_size=job.batch_size,
                             fanouts=tuple(job.fanouts), seed=1)
    prof.meta = {**(prof.meta or {}), "num_nodes": 200_000}  # so caches have a share
    return Problem(cluster, job, prof)


def test_per_plan_bound_is_the_instance_bound_with_caches() -> None:
    """The per-plan bound is the drawn epoch's instance bound, feature caches charged."""
    from gnnsched.placement import get_placer

    pb = _problem()
    plan = get_placer("greedy").place_problem(pb)
    for p in (plan, replace(plan, caches={t.fetch_at: 100_000 for t in plan.trainers})):
        b = per_plan_bound(pb.wl, p, seed=2)
        assert b.epoch_s == instance_bound(Instance(pb.wl, p, seed=2)).epoch_s
        assert b.epoch_s == max(b.resource_s, b.chain_s, b.flow_s) and b.seed == 2
        assert PerPlanBound.from_dict(b.to_dict()) == b
    plain = per_plan_bound(pb.wl, plan, seed=2)
    cached = per_plan_bound(pb.wl, replace(plan, caches={t.fetch_at: 100_000
                                                         for t in plan.trainers}), seed=2)
    assert cached.epoch_s < plain.epoch_s  # the caches take bytes off the bottleneck


def test_any_placement_bound_is_the_smallest() -> None:
    a = PerPlanBound(2.0, 10, 0, "egress of s0", 2.0, 1.0)
    c = PerPlanBound(1.5, 10, 0, "ingress of g1", 1.0, 1.5)
    anyb = any_placement_bound(1.8, {"this plan": a, "colocation": c}, status="OPTIMAL",
                               scope="every placement")
    assert anyb.epoch_s == 1.5 and anyb.set_by == "the per-plan bound of colocation"
    assert AnyPlacementBound.from_dict(anyb.to_dict()) == anyb
    anyb = any_placement_bound(1.2, {"this plan": a}, status="OPTIMAL", scope="x")
    assert anyb.epoch_s == 1.2 and anyb.set_by == "CP-SAT"
    assert c.binding == "the dependency chain" and a.binding == "egress of s0"
    with pytest.raises(ValueError):
        any_placement_bound(1.0, {"a": a, "b": replace(c, seed=1)})
    # a plan's record is used only for its own draws
    rec = {"bounds": {"seed": 0, "per_plan": a.to_dict(), "any_placement": anyb.to_dict()}}
    assert recorded_bounds(rec, a) == (anyb, "")
    assert recorded_bounds(rec, replace(a, seed=1))[0] is None
    assert "other draws" in recorded_bounds(rec, replace(a, epoch_s=2.5))[1]
    assert recorded_bounds({}, a)[0] is None
    lines = bound_lines(a, None, "not in the plan")
    assert lines[3].endswith("not in the plan") and len(lines) == 5
