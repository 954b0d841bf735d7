"""What `gnnsched plan` tells a user holds: its floors never exceed its prediction, a store
that cannot hold its partitions is refused, and colocation is called infeasible only where
it is (issue 25, items 6 and 9)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gnnsched.placement import Problem, get_placer
from gnnsched.placement.placer import simulator_scorer
from gnnsched.placement.search import iteration_floor, plan_and_compare
from gnnsched.profile import synthetic_profile
from gnnsched.spec import SpecError, cluster_from_dict, job_from_dict, load_cluster

ROOT = Path(__file__).resolve().parents[2]
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
        # every baseline places here (greedy once ran out of cores on hetero and mixedgen
        # with 4 trainers: its samplers took the cores later trainers needed)
        plans = [get_placer(name).place_problem(pb) for name in ("colocation", "greedy")]
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
        pr = plan.prediction
        per = pr.epoch_time_s / pr.iterations
        assert pr.iteration_s == pytest.approx(per)
        assert 0 < pr.floors.bottleneck_iteration_s <= per * (1 + 1e-9)
        assert 0 < pr.floors.chain_iteration_s <= per * (1 + 1e-9)
        for row in pr.baselines:
            name = row.name
            assert row.error is None, (shape, name, row)
            base_per = row.epoch_time_s / pr.iterations
            assert row.floors.bottleneck_iteration_s <= base_per * (1 + 1e-9), name
            assert row.floors.chain_iteration_s <= base_per * (1 + 1e-9), name


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


# ---------------------------------------------------------------------- item 6: memory


@pytest.fixture(scope="module")
def cora2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Cora in 2 METIS parts (about 8 MB of features each), a job that names them and a
    profile (synthetic: it says nothing of partition sizes, so only the files can)."""
    from gnnsched.datasets import load_dataset, partition_graph

    root = tmp_path_factory.mktemp("cora2-plan")
    parts = root / "parts"
    partition_graph(load_dataset("cora"), 2, parts, method="metis", seed=0)
    job = root / "job.yaml"
    job.write_text(f"name: cora2\ndataset: cora\nnum_parts: 2\npartitions: {parts}\n"
                   "trainers: 2\nbatch_size: 8\nfanouts: [10, 25]\nepochs: 1\n")
    cost = root / "cost.json"
    synthetic_profile(2, seeds_per_part=70, batch_size=8, fanouts=(10, 25),
                      feature_dim=1433).save(cost)
    return {"root": root, "parts": parts, "job": job, "cost": cost}


def _cluster(path: Path, store_gb: float) -> Path:
    path.write_text(f"""name: stores-{store_gb}
machines:
  - {{name: store0, cpus: 2, memory_gb: {store_gb}, nic_gbps: 0.1, partitions: [0], roles: [store]}}
  - {{name: store1, cpus: 2, memory_gb: {store_gb}, nic_gbps: 0.1, partitions: [1], roles: [store]}}
  - {{name: gpu0, cpus: 4, memory_gb: 8, nic_gbps: 0.1, gpus: [{{kind: t4, memory_gb: 16}}]}}
  - {{name: gpu1, cpus: 4, memory_gb: 8, nic_gbps: 0.1, gpus: [{{kind: t4, memory_gb: 16}}]}}
""")
    return path


def _plan_cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnsched", "plan", "--budget", "2",
                           *map(str, args)], capture_output=True, text=True, timeout=300)


def test_partition_bytes_are_the_files_a_store_loads(cora2: dict[str, Path]) -> None:
    from gnnsched import api

    sizes = api.partition_bytes(cora2["parts"])
    assert len(sizes) == 2
    for p, b in enumerate(sizes):
        files = (cora2["parts"] / f"part{p}").iterdir()
        assert b == sum(f.stat().st_size for f in files)
        assert b > 1433 * 4 * 1300  # at least the features of its ~1300-1400 nodes


def test_plan_refuses_stores_that_cannot_hold_their_partitions(cora2: dict[str, Path]) -> None:
    """memory_gb: 0.001 on the stores, 8 MB partitions: a clear error, no traceback, no
    plan; with 0.02 it plans, and records where the sizes came from."""
    root = cora2["root"]
    out = root / "tiny-plan.json"
    res = _plan_cli("--cluster", _cluster(root / "tiny.yaml", 0.001), "--job", cora2["job"],
                    "--cost", cora2["cost"], "--out", out)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr
    assert "Traceback" not in err and not out.exists()
    assert "machines[0].memory_gb: store store0 cannot hold its partitions" in err
    assert "partition 0 needs 8." in err and " MB of memory" in err
    assert f"measured on the partition files in {cora2['parts']}" in err
    assert "store0 has memory_gb: 0.001 (1 MB)" in err and "nor can store1" in err
    assert "valid: memory_gb: 0.00" in err and "or more on store0" in err
    assert "more partitions (num_parts:" in err

    res = _plan_cli("--cluster", _cluster(root / "roomy.yaml", 0.5), "--job", cora2["job"],
                    "--cost", cora2["cost"], "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    made = json.loads(out.read_text())["predicted"]["made_for"]
    assert str(cora2["parts"]) in made["part_bytes_from"]


def test_plan_partitions_flag_and_the_profile_estimate(cora2: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A job without `partitions`: --partitions DIR gives the real sizes; without it a
    profile that knows the graph's size gives an estimate, and says so."""
    from gnnsched import api
    from gnnsched.profile import CostProfile

    # an empty cache: partitions an earlier test cached for this job are not its own
    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))

    root = cora2["root"]
    job = root / "job-noparts.yaml"
    job.write_text("\n".join(line for line in cora2["job"].read_text().splitlines()
                             if not line.startswith("partitions:")) + "\n")
    tiny = _cluster(root / "tiny.yaml", 0.001)
    res = _plan_cli("--cluster", tiny, "--job", job, "--cost", cora2["cost"],
                    "--partitions", cora2["parts"], "--out", root / "p.json")
    assert res.returncode == 2 and "measured on the partition files" in res.stderr
    prof = CostProfile.load(cora2["cost"])
    prof.meta.update(num_nodes=2708, num_edges=10556)
    with pytest.raises(SpecError, match=r"store store0 cannot hold .* estimated from the "
                                        r"profile \(2,708 nodes"):
        api.plan_problem(tiny, job, prof, partitions=None)


def test_train_refuses_a_plan_whose_stores_cannot_hold_the_partitions(
        cora2: dict[str, Path]) -> None:
    """A plan written by hand (or before this check) for the tiny cluster: refused before
    anything is launched."""
    from gnnsched import api
    from gnnsched.plan import Plan, TrainerPlan

    cluster = load_cluster(_cluster(cora2["root"] / "tiny.yaml", 0.001))
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0,), (("gpu0", 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (1,), (("gpu1", 1),), "gpu1")))
    with pytest.raises(SpecError, match="store store0 cannot hold its partitions"):
        api.prepare(cluster, cora2["job"], plan, verb="train", need_profile=False,
                    any_job=True)


def test_usage_names_what_fills_a_host(cora2: dict[str, Path]) -> None:
    """The plan-level check (stores plus processes) says what takes the memory."""
    from gnnsched import api
    from gnnsched.placement.placer import usage
    from gnnsched.plan import Plan, TrainerPlan

    cl = cora2["root"] / "small-gpu.yaml"
    cl.write_text(_cluster(cl, 0.02).read_text().replace("memory_gb: 8", "memory_gb: 0.3"))
    pb = api.plan_problem(cl, cora2["job"], cora2["cost"])
    cluster = pb.cluster
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0,), (("gpu0", 2),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (1,), (("gpu1", 1),), "gpu1")))
    probs = usage(pb, plan).problems
    assert probs and probs[0].startswith("gpu0: needs ")
    assert "trainers" in probs[0] and "samplers" in probs[0]
    assert "has memory_gb: 0.3 (300 MB)" in probs[0]


# ---------------------------------------------------------------------- item 9: colocation


@pytest.mark.parametrize("trainers", [2, 4])
def test_colocation_is_feasible_on_the_plentiful_shape(trainers: int) -> None:
    """Every host stores a partition and has a GPU: colocation runs there (DistDGL does, with
    2 trainers on paired stores too), so `plan` must not call it infeasible."""
    from gnnsched.commands.plan import table

    pb = _shape_problem("plentiful", trainers, 200)
    colo = get_placer("colocation").place_problem(pb)
    assert colo.prediction.colocation_feasible is True
    assert not any("infeasible" in n for n in colo.notes)
    for t in colo.trainers:  # on a store of its own partitions
        assert t.machine in {pb.names[pb.store_of[p]] for p in t.parts}
    plan = plan_and_compare(pb, "greedy", seed=0, budget=2.0)
    text = table(pb, plan)
    assert "infeasible" not in text
    assert "feasible: every trainer runs on a store of its partitions" in text


def test_colocation_infeasible_only_where_a_store_cannot_host_its_trainer() -> None:
    """One plentiful host without the memory for a trainer beside its partition: colocation
    is infeasible there, and the note says which store and why (not a generic guess)."""
    from gnnsched.commands.plan import table

    cluster = load_cluster(SHAPES / "plentiful.yaml")
    data = cluster.to_dict()
    data["machines"][0]["memory_gb"] = 0.2  # h0: less than one trainer process needs
    spare = {**data["machines"][3], "name": "g4", "partitions": []}  # a GPU host, no data
    data["machines"].append(spare)
    small = cluster_from_dict(data)
    pb0 = _shape_problem("plentiful", 4, 200)
    pb = Problem(small, pb0.job, pb0.profile)
    colo = get_placer("colocation").place_problem(pb)
    assert colo.prediction.colocation_feasible is False
    (note,) = [n for n in colo.notes if "colocation's fallback" in n]
    assert note.startswith("colocation cannot train partitions 0 on a store of their data: "
                           "store h0 has ")
    assert "of memory left after what it stores and runs, a trainer needs" in note
    assert note.endswith("colocation's fallback runs their trainer on g4")
    text = table(pb, plan_and_compare(pb, "greedy", seed=0, budget=2.0))
    assert "colocation's placement with trainers moved to GPU hosts" in text
    assert "infeasible" not in text  # never beside an epoch

    # with 2 trainers h0 shares its trainer with a neighbouring store, which runs it: that
    # store holds the trainer's data too, so colocation is still feasible
    pb2 = Problem(small, _shape_problem("plentiful", 2, 200).job, pb0.profile)
    colo = get_placer("colocation").place_problem(pb2)
    assert colo.prediction.colocation_feasible is True
    assert 0 in colo.trainers[0].parts and colo.trainers[0].machine != "h0"
    for t in colo.trainers:
        assert t.machine in {pb2.names[pb2.store_of[p]] for p in t.parts}

    data["machines"][0]["memory_gb"] = 8
    data["machines"][1]["gpus"] = [{"kind": "tiny", "speed": 1.0, "memory_gb": 1e-6}]
    pb = Problem(cluster_from_dict(data), pb0.job, pb0.profile)
    colo = get_placer("colocation").place_problem(pb)
    assert colo.prediction.colocation_feasible is False
    assert any("store h1 has no GPU with the" in n and "a trainer needs" in n
               for n in colo.notes)


def test_plan_finds_the_jobs_cached_partitions(cora2: dict[str, Path]) -> None:
    """A job without `partitions` whose dataset was partitioned into the cache (by `gnnsched
    profile` or `train`): plan finds that directory without partitioning anything itself."""
    from gnnsched import api
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.spec import load_job

    job = load_job(cora2["job"])
    job = job_from_dict({k: v for k, v in job.to_dict().items() if k != "partitions"})
    assert api.job_partitions(job) is None or api.job_partitions(job).is_dir()
    made = partitions_for(job, quiet=True)
    assert api.job_partitions(job) == made
    other = job_from_dict({**job.to_dict(), "seed": 12345})
    assert api.job_partitions(other) is None  # another seed: another (absent) partitioning
