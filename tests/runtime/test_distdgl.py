"""DistDGL peer: trainer placement, the GPU-less infeasible case, and a real run on Cora."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import psutil
import pytest

from gnnsched.runtime.distdgl import (
    DistDGLError,
    infeasible_reason,
    plan_trainers,
    run_distdgl,
)
from gnnsched.spec import GPU, ClusterSpec, JobSpec, Machine

GB = 1e9


def _cluster(*hosts: tuple[str, tuple[int, ...], int]) -> ClusterSpec:
    """Hosts as (name, partitions, number of GPUs)."""
    return ClusterSpec("t", tuple(
        Machine(name, 2, 8 * GB, 1e9, 1e9, tuple(GPU() for _ in range(gpus)), parts)
        for name, parts, gpus in hosts))


def _our_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_plan_trainers_one_per_partition_and_fewer() -> None:
    c = _cluster(("a", (0, 1), 1), ("b", (2, 3), 1))
    slots = plan_trainers(c, 4)
    assert [(s.host, s.home, s.parts) for s in slots] == [
        ("a", 0, [0]), ("a", 1, [1]), ("b", 2, [2]), ("b", 3, [3])]
    # Fewer trainers: DGL's machine ids must be 0..T-1; orphan parts go to the least loaded.
    slots = plan_trainers(c, 2, train_counts=[10, 10, 30, 5])
    assert [s.home for s in slots] == [0, 1]
    assert sorted(p for s in slots for p in s.parts) == [0, 1, 2, 3]
    assert slots[0].parts == [0, 2] and slots[1].parts == [1, 3]
    # A part with no trainer prefers a trainer on its own host.
    c2 = _cluster(("a", (0, 2), 1), ("b", (1, 3), 1))
    assert [s.parts for s in plan_trainers(c2, 2)] == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="trainers"):
        plan_trainers(c, 5)


def test_plan_trainers_takes_a_given_split() -> None:
    """An evaluation trains DistDGL on colocation's split; trainer t must hold partition t."""
    c = _cluster(("a", (0, 1), 1), ("b", (2, 3), 1))
    slots = plan_trainers(c, 2, split=[[0, 3], [2, 1]])
    assert [(s.host, s.home, s.parts) for s in slots] == [("a", 0, [0, 3]), ("a", 1, [1, 2])]
    for bad in ([[0, 1], [2, 3]], [[0, 2], [1]], [[0, 2, 3], [1, 2]], [[0, 1, 2, 3]]):
        with pytest.raises(ValueError, match="split"):
            plan_trainers(c, 2, split=bad)


def test_slower_devices_are_emulated_per_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trainer gets its host's GPUs in turn; the DDP hook stretches only inside a step."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from gnnsched.runtime import distdgl_role

    c = ClusterSpec("t", (
        Machine("old", 2, 8 * GB, 1e9, 1e9, (GPU("k80", 0.25), GPU("t4", 1.0)), (0, 1)),
        Machine("new", 2, 8 * GB, 1e9, 1e9, (GPU("a100", 1.0),), (2, 3))))
    assert [s.speed for s in plan_trainers(c, 4)] == [0.25, 1.0, 1.0, 1.0]
    slept: list[float] = []
    monkeypatch.setattr(distdgl_role.time, "sleep", slept.append)
    monkeypatch.setattr(default_hooks, "allreduce_hook", lambda state, bucket: bucket)
    clock = iter([10.0, 10.2, 10.2, 10.3, 10.3])
    monkeypatch.setattr(distdgl_role.time, "process_time", lambda: next(clock))
    st = distdgl_role._Stretch(0.25)
    assert st.factor == pytest.approx(3.0)
    assert st.hook(None, "zeros") == "zeros" and slept == []  # out of a step (join): no sleep
    st.mark = distdgl_role.time.process_time()  # step starts at 10.0 CPU seconds
    assert st.hook(None, "b0") == "b0"  # 0.2 CPU s of compute before the first bucket
    assert st.hook(None, "b1") == "b1"  # 0.1 s more before the second
    assert slept == pytest.approx([0.6, 0.3])
    assert distdgl_role._Stretch(1.0).factor == 0.0


def test_infeasible_store_host_without_gpu_starts_nothing(tmp_path: Path) -> None:
    c = _cluster(("gpu0", (0,), 1), ("cpuonly", (1,), 0))
    assert "cpuonly" in infeasible_reason(c) and "gpu0" not in infeasible_reason(c)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    res = run_distdgl(c, JobSpec(num_parts=2, trainers=2), tmp_path / "no-partitions-needed",
                      out_dir=tmp_path / "out", timeout_s=5)
    assert not res.feasible
    assert "cpuonly" in res.reason and "no GPU" in res.reason
    assert res.epoch_time_s is None and res.test_accuracy is None
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def cora2() -> Path:
    from gnnsched.datasets.cache import partitions_for

    return partitions_for(JobSpec(dataset="cora", num_parts=2), quiet=True)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_cora_two_partitions_on_loopback(cora2: Path, tmp_path: Path) -> None:
    # h1's GPU is an old one at half speed: its trainer's steps are stretched by the DDP hook
    c = ClusterSpec("t", (Machine("h0", 2, 8 * GB, 1e9, 1e9, (GPU(),), (0,)),
                          Machine("h1", 2, 8 * GB, 1e9, 1e9, (GPU("k80", 0.5),), (1,))))
    job = JobSpec(dataset="cora", num_parts=2, trainers=2, epochs=3, batch_size=32,
                  fanouts=(10, 25), hidden=128, lr=0.01, seed=0, eval_max_nodes=300)
    out = tmp_path / "run"
    res = run_distdgl(c, job, cora2, out_dir=out, timeout_s=120)
    assert res.feasible, res.reason
    assert len(res.epoch_times_s) == 3 and all(t > 0 for t in res.epoch_times_s)
    assert res.epoch_time_s == pytest.approx(statistics.median(res.epoch_times_s[1:]))
    assert res.test_accuracy is not None and res.test_accuracy > 0.6, res.test_accuracy
    assert len(res.val_accuracy) == 3
    assert res.bytes_sent is None  # loopback: not separable per host
    assert [t["home"] for t in res.trainers] == [0, 1]
    assert [t["speed"] for t in res.trainers] == [1.0, 0.5]
    assert sum(t["train_nodes"] for t in res.trainers) == 140  # every Cora seed, once
    # evaluation.max_nodes: 300 of Cora's 1,000 test nodes (each trainer's share, rounded up)
    assert all(300 <= t["test_nodes"] <= 302 for t in res.trainers), res.trainers
    assert [line.split()[0] for line in res.ip_config] == ["127.0.0.1"] * 2
    assert len({line.split()[1] for line in res.ip_config}) == 2  # distinct ports
    # Nothing left behind: no process of this run, no shared-memory segment.
    assert not _our_processes(str(out))
    assert not psutil.Process().children(recursive=True)
    prefixes = json.loads((out / "run.json").read_text())["shm_prefixes"]
    if os.path.isdir("/dev/shm"):
        assert not [f for f in os.listdir("/dev/shm") if f.startswith(tuple(prefixes))]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_timeout_kills_everything(cora2: Path, tmp_path: Path) -> None:
    c = _cluster(("h0", (0,), 1), ("h1", (1,), 1))
    out = tmp_path / "run"
    with pytest.raises(DistDGLError, match="timed out"):
        run_distdgl(c, JobSpec(num_parts=2, trainers=2, epochs=50), cora2, out_dir=out,
                    timeout_s=2)
    assert not _our_processes(str(out))
    assert not psutil.Process().children(recursive=True)
