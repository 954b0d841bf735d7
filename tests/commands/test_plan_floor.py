"""One memory floor in ``plan`` too (issue 51 item 2, the CLI side): a store host is refused
below its store's floor (fork server + store + 2 x its partition files, gnnsched.memory)
before planning, and a plan whose roles a host cannot hold is refused after; the number is the
one ``cluster up`` and ``train`` refuse by (``runtime.coordinator.startup.host_floors``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from gnnsched import api
from gnnsched.cli import main
from gnnsched.evaluation.config import load_shape
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import synthetic_profile
from gnnsched.spec import SpecError, cluster_from_dict, job_from_dict

JOB = {"dataset": "synthetic", "num_parts": 4, "trainers": 2, "batch_size": 16,
       "fanouts": [5, 10], "prefetch": 2}
PARTS = [29e6 / 4] * 4  # the issue's 29 MB of partitions


def _with_memory(gb: float, host: int = 0) -> object:
    data = load_shape("gpuless").to_dict()
    data["machines"][host]["memory_gb"] = gb
    data["machines"][host].pop("memory", None)
    return cluster_from_dict(data, source="lab.yaml")


def test_a_store_at_its_floor_passes_and_one_byte_below_is_refused() -> None:
    floors = api.plan_floors(_with_memory(16), None, PARTS)
    f = floors["store0"]
    assert set(floors) == {"store0", "store1"} and f.roles == {"store": 1}
    at = math.ceil(f.total) / 1e9
    api.check_floors(_with_memory(at), api.plan_floors(_with_memory(at), None, PARTS), "", "x")
    below = (math.ceil(f.total) - 1) / 1e9
    cl = _with_memory(below)
    with pytest.raises(SpecError, match=r"lab\.yaml: machines\[0\]\.memory_gb: store0 has "
                       r"memory_gb: .*below the 415 MB a store needs \(fork server 336 MB \+ "
                       r"store 50 MB \+ partitions 29 MB \(2 x their files") as info:
        api.check_floors(cl, api.plan_floors(cl, None, PARTS), "", "a store needs")
    assert "memory_gb: 0.42 or more on store0" in str(info.value)


def test_plan_refuses_the_issues_store_of_0_03_gb(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """`memory_gb: 0.03` for 29 MB of partitions planned before and was OOM-killed at 0.07:
    now `plan` names the floor (as `cluster up` would) before it plans."""
    data = load_shape("gpuless").to_dict()
    data["machines"][0]["memory_gb"] = 0.03
    cluster, job, cost = tmp_path / "c.yaml", tmp_path / "j.yaml", tmp_path / "cost.json"
    cluster.write_text(yaml.safe_dump(data))
    job.write_text(yaml.safe_dump(JOB))
    synthetic_profile(4, seeds_per_part=60, batch_size=16, fanouts=(5, 10), feature_dim=256,
                      seed=2).save(cost)
    assert main(["plan", "--cluster", str(cluster), "--job", str(job), "--cost", str(cost),
                 "--budget", "1", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "store0 has memory_gb: 0.03 (30 MB), below the" in err
    assert "a store holding these partitions needs (fork server 336 MB + store 50 MB" in err
    assert "or more on store0" in err and not (tmp_path / "p.json").exists()
    data["machines"][0]["memory_gb"] = 16
    cluster.write_text(yaml.safe_dump(data))
    assert main(["plan", "--cluster", str(cluster), "--job", str(job), "--cost", str(cost),
                 "--budget", "1", "--out", str(tmp_path / "p.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epoch_time_s"] > 0


def test_plan_floors_are_the_runtimes() -> None:
    """A plan's floors are the ones ``train`` checks: the same roles per host (a store per
    host with partitions, trainers, samplers, a relay) and the same bytes."""
    from gnnsched.runtime.coordinator.startup import host_floors

    cluster = _with_memory(16)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 2),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1), ("gpu1", 1)), "gpu1")),
        caches={"store0": 100, "gpu1": 50})
    specs = [("store", m.name, m.name) for m in cluster.machines if m.partitions]
    specs += [("trainer", str(w), t.machine) for w, t in enumerate(plan.trainers)]
    specs += [("sampler", f"{m}{i}", m) for t in plan.trainers for m, c in t.samplers
              for i in range(c)]
    specs += [("fetcher", "store0", "store0")]
    ours = api.plan_floors(cluster, plan, PARTS, 512.0, 10_000)
    theirs = host_floors(cluster, plan, specs, PARTS, 512.0, 10_000)
    assert {k: v.total for k, v in ours.items()} == {k: v.total for k, v in theirs.items()}
    assert ours["store0"].roles == {"store": 1, "sampler": 2, "fetcher": 1}
    assert job_from_dict(JOB).num_parts == len(PARTS)
