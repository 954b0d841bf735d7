"""One memory floor (issue 51 item 2): a host needs its roles' measured fixed cost plus its
partitions and caches (:mod:`gnnsched.memory`); ``cluster up`` and ``train`` refuse below it
with that number, and accept a host exactly at it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gnnsched import memory
from gnnsched.memory import FORK_SERVER_BYTES, PARTITION_PEAK, ROLE_BYTES, floor, host_floor
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.runtime import cgroups as cg
from gnnsched.runtime.coordinator.startup import check_host_memory, host_floors
from gnnsched.spec import SpecError, cluster_from_dict, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"


def test_the_floor_is_its_parts() -> None:
    f = floor({"store": 1, "sampler": 2}, partition_bytes=29e6, cache=1e6)
    assert f.total == FORK_SERVER_BYTES + ROLE_BYTES["store"] + 2 * ROLE_BYTES["sampler"] \
        + int(PARTITION_PEAK * 29e6) + int(1e6)
    assert f.total == host_floor({"store": 1, "sampler": 2}, 29e6, 1e6)
    said = f.parts()
    assert said.startswith("fork server 336 MB + 2 x sampler 67 MB + store 50 MB")
    assert "partitions 58 MB" in said and "feature caches 1 MB" in said
    assert host_floor({}) == 0  # a host that runs nothing needs nothing
    assert memory.cache_bytes(100, 512.0, 1000, 2) == 2 * (100 * 512 + 4 * 1000)
    assert memory.cache_bytes(0, 512.0, 1000, 2) == 0
    with pytest.raises(ValueError, match="unknown role kind"):
        floor({"server": 1})
    assert memory.gb_up(386e6) == "0.39" and memory.gb_up(380e6) == "0.38"


def _cluster(store_bytes: float, gpu_bytes: float = 8e9, tag: str = "mf") -> Any:
    d = yaml.safe_load((LAB4 / "cluster.yaml").read_text())
    d["name"] = tag
    for m in d["machines"]:
        m.pop("address", None)
        m["memory_gb"] = (store_bytes if m["name"].startswith("store") else gpu_bytes) / 1e9
    return cluster_from_dict(d, "cluster.yaml")


# ---------------------------------------------------------------------- cluster up


def test_cluster_up_accepts_the_floor_and_refuses_just_below() -> None:
    least = memory.machine_floor(("store", "sample", "fetch", "train"), True).total
    assert least == FORK_SERVER_BYTES + ROLE_BYTES["store"]
    gpu_least = memory.machine_floor(("store", "sample", "fetch", "train"), False).total
    assert gpu_least == FORK_SERVER_BYTES + ROLE_BYTES["sampler"]  # the cheapest role
    shares = cg.plan_shares(_cluster(least, gpu_least), 1.0)
    assert shares["store0"].memory == least and shares["gpu0"].memory == gpu_least
    with pytest.raises(cg.CgroupError) as exc:
        cg.plan_shares(_cluster(least - 1), 1.0)
    msg = str(exc.value)
    assert "machines[store0].memory_gb" in msg and f"the {memory.fmt(least)} floor" in msg
    assert "fork server 336 MB + store 50 MB, before its partitions" in msg
    assert f"memory_gb: {memory.gb_up(least)} or more" in msg
    with pytest.raises(cg.CgroupError, match=r"machines\[gpu0\].memory_gb.*x memory scale 0.5"):
        cg.plan_shares(_cluster(8e9, gpu_least), 1.0, memory_scale=0.5)


# ---------------------------------------------------------------------- train


@pytest.fixture(scope="module")
def cora4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gnnsched.datasets import load_dataset, partition_graph

    job = load_job(LAB4 / "job.yaml")
    out = tmp_path_factory.mktemp("cora4-floor")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, out,
                    method=job.part_method, seed=job.seed)
    return out


def _plan(cluster: Any, caches: dict[str, int] | None = None) -> Plan:
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")), caches=caches or {})


def _specs(cluster: Any, plan: Plan) -> list[tuple[str, str, str]]:
    """What the coordinator starts for this plan (RoleTable.role_specs)."""
    specs = [("store", m.name, m.name) for m in cluster.machines if m.partitions]
    specs += [("trainer", str(t.id), t.machine) for t in plan.trainers]
    specs += [("sampler", str(t.id), m) for t in plan.trainers for m, _ in t.samplers]
    specs += [("fetcher", m, m) for m in sorted({t.fetch_at for t in plan.trainers
                                                if t.fetch_at != t.machine})]
    return specs


def test_train_refuses_below_the_floor_and_runs_at_it(cora4: Path) -> None:
    from gnnsched.datasets import open_partitions

    pset = open_partitions(cora4, verify=False)
    cl = _cluster(16e9)
    plan = _plan(cl, caches={"gpu1": 500})
    specs = _specs(cl, plan)
    sizes = pset.part_bytes()
    floors = host_floors(cl, plan, specs, sizes, 4.0 * pset.feature_dim, pset.num_nodes)
    # store0: its store, trainer 0's sampler and relay, partitions 0 and 1
    assert floors["store0"].roles == {"store": 1, "sampler": 1, "fetcher": 1}
    assert floors["store0"].partitions == PARTITION_PEAK * (sizes[0] + sizes[1])
    assert floors["gpu1"].caches == memory.cache_bytes(500, 4.0 * pset.feature_dim,
                                                       pset.num_nodes, 1)
    assert floors["gpu0"].caches == 0  # trainer 0 gathers through its relay: no cache there
    at = floors["store0"].total
    check_host_memory(_cluster(at), plan, specs, pset)  # exactly the floor: accepted
    with pytest.raises(SpecError) as exc:
        check_host_memory(_cluster(at - 1), plan, specs, pset)
    msg = str(exc.value)
    assert "machines[0].memory_gb" in msg and f"below the {memory.fmt(at)}" in msg
    assert "no role was started" in msg and floors["store0"].parts() in msg


def test_gnnsched_train_refuses_before_starting_a_role(cora4: Path, tmp_path: Path) -> None:
    """The CLI: one clear line with the floor, exit 2, nothing started, in seconds."""
    from gnnsched.datasets import open_partitions

    pset = open_partitions(cora4, verify=False)
    good = _cluster(16e9)
    plan = _plan(good)
    need = host_floors(good, plan, _specs(good, plan), pset.part_bytes(),
                       4.0 * pset.feature_dim, pset.num_nodes)["store1"].total
    d = yaml.safe_load((LAB4 / "cluster.yaml").read_text())
    d["name"] = "mf"
    for m in d["machines"]:
        m.pop("address", None)
    d["machines"][1]["memory_gb"] = (need - 1e6) / 1e9  # store1, 1 MB short
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(d))
    cl = cluster_from_dict(d, str(tmp_path / "cluster.yaml"))
    _plan(cl).save(tmp_path / "plan.json")
    res = subprocess.run([sys.executable, "-m", "gnnsched", "train", "--cluster",
                          str(tmp_path / "cluster.yaml"), "--job", str(LAB4 / "job.yaml"),
                          "--plan", str(tmp_path / "plan.json"), "--partitions", str(cora4),
                          "--out", str(tmp_path / "run"), "--epochs", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "machines[1].memory_gb: store1 has memory_gb" in res.stderr, res.stderr
    assert f"below the {memory.fmt(need)} its roles of this plan need" in res.stderr
    assert not list((tmp_path / "run" / "logs").glob("*-*.log"))  # no role's log: none ran


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(240)
def test_hosts_at_their_floor_train_under_the_kernels_limits(cora4: Path,
                                                             tmp_path: Path) -> None:
    """The kernel agrees: every host of an emulated lab4 limited to exactly its floor (cgroup
    memory limits) trains the job without an OOM kill; its peak stays under the floor even
    without the fork server's imports (charged to the launcher's group in the emulation), so
    the roles' fixed costs alone cover what the kernel counts."""
    import os

    from gnnsched.commands.train import train
    from gnnsched.datasets import open_partitions
    from gnnsched.runtime import netns
    from gnnsched.runtime.coordinator import RuntimeOptions

    why = netns.unavailable_reason() or cg.unavailable_reason()
    if why is not None:
        pytest.skip(f"emulated cluster with control groups unavailable: {why}")
    pset = open_partitions(cora4, verify=False)
    base = _cluster(16e9, tag=f"fl{os.getpid() % 100000}")
    plan = _plan(base)
    floors = host_floors(base, plan, _specs(base, plan), pset.part_bytes(),
                         4.0 * pset.feature_dim, pset.num_nodes)
    d = base.to_dict()
    for m in d["machines"]:
        m["memory_gb"] = floors[m["name"]].total / 1e9
    cl = cluster_from_dict(d, "<floor>")
    plan = _plan(cl)
    job = replace(load_job(LAB4 / "job.yaml"), epochs=1)
    net = netns.EmulatedCluster(cl, cgroups=True).up()
    try:
        res = train(cl, job, plan, launcher="netns", out_dir=tmp_path / "run",
                    partitions=cora4, options=RuntimeOptions(start_timeout=240,
                                                             request_timeout=60))
        usage = net.groups.usage if net.groups else None
        assert res.test_accuracy > 0.3
        if usage is not None:
            for m in cl.machines:
                u = usage(m.name)
                assert u["oom_kills"] == 0, (m.name, u)
                assert u["memory_peak"] <= floors[m.name].total - FORK_SERVER_BYTES, \
                    (m.name, u, floors[m.name])
    finally:
        net.down()
