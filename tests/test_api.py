"""gnnsched.api, the forward path the CLI walks: plan records what it was made with, simulate
finds it again."""

from __future__ import annotations

import argparse
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
    made_for = plan.prediction.made_for
    assert made_for.cost == str(cost) and len(made_for.cost_sha256) == 64
    assert made_for.cluster == str(CLUSTER)
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


def test_the_runtime_entry_points_are_reexported_lazily() -> None:
    """The evaluation reaches the runtime through these alone: each is the runtime's own
    object, loaded on first use (importing the API loads no torch)."""
    import importlib
    import subprocess
    import sys

    for name, (module, attr) in {**api.RUNTIME, **api.PLACEMENT, **api.DATASETS}.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), attr), name
        assert name in api.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        api.nope  # noqa: B018
    code = "import sys, gnnsched.api; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


def test_every_verb_works_through_the_library() -> None:
    """Each verb's work is a public function of the API (the CLI only parses and prints; an
    import-linter contract keeps gnnsched.commands off the runtime, placement and datasets),
    and train and demo share one progress display."""
    import gnnsched.commands.train as train_cmd
    from gnnsched.commands.progress import Progress

    for name in ("partition", "open_job_partitions", "reference", "create_keys", "cluster_up",
                 "cluster_down", "cluster_down_all", "cluster_status", "check_cluster",
                 "ray_cluster", "parse_faults", "launcher_kwargs", "check_placer", "plan",
                 "simulate", "train", "calibrate"):
        assert callable(getattr(api, name)) and name in api.__all__, name
    assert train_cmd._Progress is Progress  # the name it had there still imports
    assert api.cluster_status("no-such-cluster-h50") == []
    with pytest.raises(SpecError, match="--replan-placer: unknown placer 'best'"):
        api.check_placer("best", "--replan-placer")
    opts = api.LAUNCHERS.get("ssh").cli_options
    assert opts and api.launcher_kwargs("ssh", argparse.Namespace()) == {  # flags not given
        o.kwarg: o.default for o in opts}
    given = argparse.Namespace(**{opts[0].dest: "x"})
    assert api.launcher_kwargs("ssh", given)[opts[0].kwarg] == "x"


def test_the_reference_split_follows_the_plan_or_the_seed_counts(tmp_path: Path) -> None:
    """The reference's trainers own the partitions the plan gives them, else contiguous,
    seed-balanced runs of partitions (:func:`gnnsched.api.reference_split`)."""
    from gnnsched.plan import Plan

    job = load_job(ROOT / "examples" / "lab4" / "job.yaml")
    plan = ROOT / "tests" / "data" / "plan_lab4_0d94329.json"
    assert api.reference_split(job, "", plan) == [list(t.parts)
                                                  for t in Plan.load(plan).trainers]
    slices = api.reference_slices(plan)
    assert slices is None or len(slices) == len(Plan.load(plan).trainers)
    assert api.reference_slices(None) is None
    assert api.partition_dir("data/my.npz", 4) == Path("parts") / "my-4"


def test_the_box_limit_probe_times_the_jobs_own_batches(tmp_path: Path) -> None:
    """:func:`gnnsched.api.pipeline_limit` on Cora's partitions: both thread counts timed,
    the limit the higher of the CPU bound and the wall clock, per-stage medians kept."""
    from dataclasses import replace

    from gnnsched.datasets.cache import partitions_for
    from gnnsched.evaluation.config import make_job

    job = replace(make_job("cora", 1), batch_size=16)
    parts = partitions_for(job, quiet=True)
    done = subprocess_limit(job, parts)
    assert set(done["phases"]) == {"1", "2"} and done["timed"] == 2 and done["warm"] == 1
    assert done["seeds_per_s"] == max(done["cpu_bound_seeds_per_s"], done["wall_seeds_per_s"])
    assert done["by"] in ("CPU", "wall") and done["cpu_s_per_seed"] > 0
    one = done["phases"]["1"]
    assert one["sample_by"] in ("DGL", "gnnsched") and len(one["batches"]) == 3
    for n in ("1", "2"):  # both gathers timed, the faster kept
        ph = done["phases"][n]
        assert ph["gather_by"] in ("torch indexing", "np.take into a kept buffer")
        st = ph["stage_s_per_batch"]
        assert st["gather_torch_s"] is not None and st["gather_take_s"] is not None


def subprocess_limit(job: object, parts: Path) -> dict:
    """The probe in a process of its own (it sets torch's and DGL's threads)."""
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from gnnsched import api\n"
            "from gnnsched.spec import job_from_dict\n"
            "a = json.loads(sys.argv[1])\n"
            "out = api.pipeline_limit(job_from_dict(a['job'], 'test'), a['parts'],"
            " [[0, 1], [2, 3]], 2, (1, 2))\n"
            "print(json.dumps(out, default=float))\n")
    arg = json.dumps({"job": job.to_dict(), "parts": str(parts)})  # type: ignore[attr-defined]
    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
