"""The box calibration on a user's path (issue 51 item 1): it lives beside the cluster file
(``CLUSTER.calibration.json``), ``plan`` and ``simulate`` predict with it by default and say
which one they used, or warn that they have none and how far off that was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gnnsched.calibrate import (
    BoxCalibration,
    calibration_path,
    dataset_key,
    find_calibration,
    write_boxes,
)
from gnnsched.cli import main
from gnnsched.evaluation.config import load_shape
from gnnsched.profile import synthetic_profile
from gnnsched.spec import SpecError, job_from_dict

JOB = {"dataset": "synthetic", "num_parts": 4, "trainers": 2, "batch_size": 16,
       "fanouts": [5, 10], "prefetch": 2, "epochs": 2}
BOX = BoxCalibration(train=2.0, sample=6.0, allreduce_overhead_s=0.02, dilation=3.0,
                     epoch_time_s=1.5, meta={"job_key": {"batch_size": 16}},
                     barrier_skew_s=((0.0, 0.004), (0.002, 0.0)), wire_overhead=0.07)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    cluster, job, cost = tmp_path / "lab.yaml", tmp_path / "job.yaml", tmp_path / "cost.json"
    cluster.write_text(yaml.safe_dump(load_shape("gpuless").to_dict()))
    job.write_text(yaml.safe_dump(JOB))
    synthetic_profile(4, seeds_per_part=60, batch_size=16, fanouts=(5, 10), feature_dim=256,
                      seed=2).save(cost)
    return {"cluster": cluster, "job": job, "cost": cost}


def _plan(capsys: pytest.CaptureFixture, files: dict[str, Path], *extra: str) -> tuple[str, dict]:
    out = files["cluster"].parent / "plan.json"
    assert main(["plan", "--cluster", str(files["cluster"]), "--job", str(files["job"]),
                 "--cost", str(files["cost"]), "--budget", "1", "--out", str(out), *extra]) == 0
    return capsys.readouterr().out, json.loads(out.read_text())


def test_the_calibration_lives_beside_the_cluster_file(tmp_path: Path) -> None:
    job = job_from_dict(JOB)
    assert calibration_path(tmp_path / "lab.yaml") == tmp_path / "lab.calibration.json"
    assert dataset_key(job_from_dict({**JOB, "dataset": "/data/coauthor_cs.npz"})) == \
        "coauthor_cs"
    assert find_calibration(tmp_path / "lab.yaml", job) is None  # nothing there: none
    write_boxes(calibration_path(tmp_path / "lab.yaml"), {"made": "today"}, {"cora": BOX})
    assert find_calibration(tmp_path / "lab.yaml", job) is None  # another dataset's
    write_boxes(calibration_path(tmp_path / "lab.yaml"), {"made": "today"},
                {"cora": BOX, "synthetic": BOX})
    found = find_calibration(tmp_path / "lab.yaml", job)
    assert found is not None and found.box == BOX and not found.differs
    assert "training x2.00, sampling x6.00, all-reduce +20.0 ms" in found.line()
    other = find_calibration(tmp_path / "lab.yaml", job_from_dict({**JOB, "batch_size": 32}))
    assert other is not None and other.differs == ("batch_size",)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SpecError, match="bad.json: datasets: not a box calibration"):
        find_calibration(None, job, tmp_path / "bad.json")


def test_plan_and_simulate_predict_with_it_and_say_so(capsys: pytest.CaptureFixture,
                                                     files: dict[str, Path]) -> None:
    bare, _ = _plan(capsys, files)
    assert "warning: no calibration of this box" in bare and "is not there" in bare
    assert "gnnsched cluster calibrate --cluster" in bare
    assert "-12% to +18%" in bare  # how far off the profile alone was on the evaluation
    raw = json.loads((files["cluster"].parent / "plan.json").read_text())
    write_boxes(calibration_path(files["cluster"]), {"made": "today"}, {"synthetic": BOX})
    said, plan = _plan(capsys, files)
    assert f"calibration: {calibration_path(files['cluster'])} (synthetic, made today)" in said
    assert "warning" not in said
    made = plan["predicted"]["made_for"]
    assert made["calibration"] == str(calibration_path(files["cluster"]))
    # slower sampling and training, an all-reduce overhead: every prediction is longer
    assert plan["predicted"]["epoch_time_s"] > 1.05 * raw["predicted"]["epoch_time_s"]
    off, _ = _plan(capsys, files, "--no-calibration")
    assert "warning: no calibration of this box (--no-calibration)" in off
    # simulate finds the plan's calibration, and says so
    argv = ["simulate", "--cluster", str(files["cluster"]), "--job", str(files["job"]),
            "--plan", str(files["cluster"].parent / "plan.json"), "--json"]
    assert main(argv) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["calibration"] == str(calibration_path(files["cluster"]))
    assert main([*argv, "--no-calibration"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["calibration"] is None
    assert "no calibration of this box (--no-calibration)" in cap.err
    assert json.loads(cap.out)["epoch_time_s"] < sim["epoch_time_s"]


def test_a_calibrated_profile_is_not_calibrated_twice(files: dict[str, Path]) -> None:
    """A profile from ``--from-run`` (or one a box calibration was applied to) already holds
    the runtime's costs: ``plan`` does not apply the box's factors on top."""
    from dataclasses import replace

    from gnnsched import api
    from gnnsched.profile import CostProfile

    write_boxes(calibration_path(files["cluster"]), {}, {"synthetic": BOX})
    job = job_from_dict(JOB)
    prof = CostProfile.load(files["cost"])
    once, found = api.planning_profile(files["cluster"], job, prof)
    assert found is not None and once.meta["calibrated"]["by"] == "box"
    assert once.parts[0].train_s[0] == pytest.approx(2.0 * prof.parts[0].train_s[0])
    again, none = api.planning_profile(files["cluster"], job, once)
    assert none is None and again is once
    measured = replace(prof, meta={"calibrated": {"by": "run", "run": "r", "dilation": 4}})
    assert api.planning_profile(files["cluster"], job, measured)[1] is None


def test_calibrate_without_namespaces_says_why(files: dict[str, Path],
                                               capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibration measures the runtime on the emulated cluster's scale model: where no
    namespace can be made it stops at once, says why, and writes nothing."""
    from gnnsched import api

    monkeypatch.setattr(api, "netns_unavailable_reason", lambda: "needs root (try sudo)")
    assert main(["cluster", "calibrate", "--cluster", str(files["cluster"]), "--job",
                 str(files["job"]), "--cost", str(files["cost"])]) == 2
    err = capsys.readouterr().err
    assert "gnnsched cluster calibrate: error: needs root (try sudo)" in err
    assert "on local processes the plan's NICs do not exist" in err
    assert not calibration_path(files["cluster"]).exists()
