"""gnnsched.api, the forward path the CLI walks: plan records what it was made with, simulate
finds it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsched import api
from gnnsched.cli import main as cli_main
from gnnsched.profile import profile_for
from gnnsched.spec import SpecError, load_job

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "hetero16" / "cluster.yaml"
JOB = ROOT / "examples" / "hetero16" / "job.yaml"


@pytest.fixture()
def made(tmp_path: Path) -> dict[str, Path]:
    """A profile file (the job's synthetic one, saved) and a plan made with it."""
    prof = profile_for(load_job(JOB))
    cost = tmp_path / "cost.json"
    prof.save(cost)
    plan = api.plan(CLUSTER, JOB, cost, placer="greedy", seed=0)
    made_for = plan.predicted["made_for"]
    assert made_for["cost"] == str(cost) and len(made_for["cost_sha256"]) == 64
    assert made_for["cluster"] == str(CLUSTER)
    path = tmp_path / "plan.json"
    plan.save(path)
    return {"cost": cost, "plan": path}


def _simulate(capsys: pytest.CaptureFixture, plan: Path, *extra: str) -> tuple[int, str, str]:
    rc = cli_main(["simulate", "--cluster", str(CLUSTER), "--job", str(JOB), "--plan",
                   str(plan), "--iterations", "6", "--json", *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_simulate_needs_no_cost_for_a_plan_made_with_one(
        capsys: pytest.CaptureFixture, made: dict[str, Path]) -> None:
    rc, without, err = _simulate(capsys, made["plan"])
    assert rc == 0, err
    rc, given, err = _simulate(capsys, made["plan"], "--cost", str(made["cost"]))
    assert rc == 0, err
    a, b = json.loads(without), json.loads(given)
    assert a["epoch_time_s"] == b["epoch_time_s"] and a["per_plan_bound_s"] == b["per_plan_bound_s"]
    assert a["bounds"] == b["bounds"] and a["any_placement_bound_s"] is not None


def test_a_changed_or_missing_profile_is_named(made: dict[str, Path]) -> None:
    text = made["cost"].read_text()
    made["cost"].write_text(text.replace("{", "{ ", 1))  # same values, other bytes
    with pytest.raises(SpecError, match="changed since the plan was made"):
        api.simulate(CLUSTER, JOB, made["plan"], iterations=2)
    made["cost"].unlink()
    with pytest.raises(SpecError, match="which is not there"):
        api.simulate(CLUSTER, JOB, made["plan"], iterations=2)
    # naming a profile explicitly still works
    prof = profile_for(load_job(JOB))
    assert api.simulate(CLUSTER, JOB, made["plan"], prof, iterations=2).makespan_s > 0


def test_prepare_loads_and_checks_once(made: dict[str, Path]) -> None:
    inp = api.prepare(CLUSTER, JOB, made["plan"])
    assert inp.profile is not None and inp.plan_source == str(made["plan"])
    res = api.simulate(inp, policy="fifo", iterations=3)
    assert res.policy == "fifo"
    with pytest.raises(TypeError):
        api.simulate(CLUSTER, JOB)
