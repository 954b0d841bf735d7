"""Fault injection on the local launcher with Cora (examples/lab4, 2 epochs): a run survives a
real SIGKILL of a sampler, a trainer, a store, and a whole machine, mid-epoch.

Each recovered run must finish with the test accuracy of an undisturbed run of the same job
(within 1 point; in fact identical: recovery replays exactly the lost steps from exactly the
model state they first saw), log what died, on which host, doing what, how fast it was
detected and what was re-planned, train no mini-batch of a completed iteration twice in one
model state, and leave no process or listening port behind (every server listened on
127.0.0.1 only). Plus: trainers with very uneven
seed counts run the same number of iterations (no hang at epoch end).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from procs import survivors

from gnnsched.commands.train import train
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.runtime.coordinator import Fault, RunResult, RuntimeOptions
from gnnsched.spec import load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
EPOCHS = 2
FAULT_STEP = 12  # epoch 1 (9 training steps + 1 validation step per epoch), batch 2
OPTS = RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10,
                      checkpoint_every=4, heartbeat_s=0.5, dead_after_s=5.0)


def _plan(cluster: Any) -> Plan:
    """Trainer 0 gathers through a relay on store0; trainer 1 pulls from the stores itself."""
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


@pytest.fixture(scope="module")
def lab4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Plan, Path]:
    from gnnsched.datasets import load_dataset, partition_graph

    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    job = replace(job, epochs=EPOCHS)
    parts = tmp_path_factory.mktemp("cora4")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    return cluster, job, _plan(cluster), parts


class _Ports:
    """Progress callback that records the TCP ports our processes listen on, mid-run."""

    def __init__(self, then: Any = None) -> None:
        self.ports: set[int] = set()
        self.addresses: set[str] = set()
        self.pids: set[int] = set()
        self.then = then

    def __call__(self, kind: str, **kw: Any) -> None:
        if kind == "batch" and kw["epoch"] == 1 and kw["done"] == 1 and not self.ports:
            self.snapshot()
        if self.then is not None:
            self.then(kind, **kw)

    def snapshot(self) -> None:
        kids = psutil.Process().children(recursive=True)
        self.pids |= {p.pid for p in kids}
        for p in [psutil.Process(), *kids]:
            try:
                for c in p.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN:
                        self.ports.add(c.laddr.port)
                        self.addresses.add(c.laddr.ip)
            except psutil.NoSuchProcess:
                pass


@pytest.fixture(scope="module")
def undisturbed(lab4: tuple, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    cluster, job, plan, parts = lab4
    res = train(cluster, job, plan, out_dir=tmp_path_factory.mktemp("calm") / "run",
                partitions=parts, options=OPTS)
    assert not res.recoveries and res.test_accuracy >= 0.7
    return res


def _check_clean(ports: _Ports) -> None:
    """No process of the run left, and every port it listened on is free again."""
    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    assert not survivors(ports.pids | kids), "a process outlived the run"
    assert ports.ports, "no listening port was recorded"
    # servers bind only to the address the launcher gives them: loopback, never 0.0.0.0 / ::
    assert ports.addresses == {"127.0.0.1"}, ports.addresses
    end = time.monotonic() + 10.0
    while True:  # the kernel frees a killed process's sockets as it exits: allow a moment
        held = {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr.port in ports.ports}
        if not held or time.monotonic() > end:
            break
        time.sleep(0.2)
    owners = {port: (pid, " ".join(psutil.Process(pid).cmdline()) if pid and
                     psutil.pid_exists(pid) else "?") for port, pid in held.items()}
    assert not held, f"ports still listening (port: owner): {owners}"
    ours = ports.pids | {os.getpid()}
    for port in ports.ports:
        with socket.socket() as s:  # as any server binds: SO_REUSEADDR, the same address
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # on a shared box another program may have taken it since
                holders = {c.pid for c in psutil.net_connections(kind="tcp")
                           if c.laddr and c.laddr.port == port}
                assert not holders & ours, f"port {port} still held by {holders & ours}"


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _check_recovered(res: RunResult, calm: RunResult, run_dir: Path, role: str,
                     machine: str, replanned: bool) -> dict[str, Any]:
    """Shared checks of a run that recovered from one failure of ``role``."""
    assert abs(res.test_accuracy - calm.test_accuracy) <= 0.01, (res.test_accuracy,
                                                                 calm.test_accuracy)
    assert res.val_accuracy == pytest.approx(calm.val_accuracy, abs=0.01)
    assert len(res.recoveries) == 1, res.recoveries
    rec = res.recoveries[0]
    assert rec["role"] == role and rec["machine"] == machine
    assert "SIGKILL" in rec["how"] and rec["doing"]
    assert rec["replanned"] is replanned
    assert rec["restart_s"] > 0 and rec["lost_s"] >= rec["restart_s"]
    ckpt, start = rec["checkpoint_step"], rec["resume_step"]
    assert ckpt is not None and start == ckpt + 1
    log = (run_dir / "logs" / "coordinator.log").read_text()
    assert f"FAILURE detected: {role} on machine {machine} (pid {rec['pid']}) exited with " \
           f"code -9 (SIGKILL) while" in log, log
    assert f"rolling back to the checkpoint of step {ckpt}" in log
    assert "replaying completed training steps" in log and "time lost to this failure" in log
    # exactly-once per model state: after the rollback only steps after the checkpoint were
    # trained again; before it, each (trainer, step) exactly once; finally, every mini-batch
    # of every epoch exactly once in the surviving timeline
    recs = [r for r in _records(run_dir) if r["type"] == "batch"]
    again = [r for r in recs if r["attempt"] == 1]
    assert again and min(r["seq"] for r in again) == start
    first = Counter((r["trainer"], r["seq"]) for r in recs if r["attempt"] == 0)
    assert set(first.values()) == {1}
    redone = {r["seq"] for r in again} & {s for _, s in first}
    replayed = set(rec["replayed_steps"])
    assert replayed <= redone and all(s >= start for s in redone)
    final = {(r["trainer"], r["seq"]) for r in recs if r["attempt"] == 1 or r["seq"] < start}
    train_items = {(r["trainer"], r["epoch"], r["index"]) for r in recs
                   if r["phase"] == "train" and ((r["trainer"], r["seq"]) in final)}
    K = res.iterations_per_epoch
    assert train_items == {(w, e, k) for w in range(2) for e in range(EPOCHS) for k in range(K)}
    epochs = {r["epoch"]: r for r in _records(run_dir) if r["type"] == "epoch"}  # the last
    assert sorted(epochs) == list(range(EPOCHS)) == [e["epoch"] for e in res.epochs]
    assert all(e["seeds"] == e["unique_seeds"] == e["train_nodes"] == 140
               for e in epochs.values())
    kinds = [r["type"] for r in _records(run_dir)]
    assert "recovery" in kinds and "caught_up" in kinds
    return rec


@pytest.mark.slow
@pytest.mark.parametrize("role,machine", [("trainer:1", "gpu1"), ("store:store1", "store1")])
def test_killed_role_is_recovered(lab4: tuple, undisturbed: RunResult, tmp_path: Path,
                                  role: str, machine: str) -> None:
    """The coordinator's fault hook SIGKILLs the real process when step 12 starts."""
    cluster, job, plan, parts = lab4
    ports = _Ports()
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=replace(OPTS, faults=(Fault(role, FAULT_STEP),)), progress=ports)
    rec = _check_recovered(res, undisturbed, tmp_path / "run", role, machine, False)
    assert rec["detect_s"] is not None and rec["detect_s"] < OPTS.dead_after_s
    assert rec["kept"] == sorted({"store:store0", "store:store1"} - {role})
    assert role in rec["restarted"] and "trainer:0" in rec["restarted"]
    _check_clean(ports)


@pytest.mark.slow
def test_frozen_process_is_found_by_its_silence(lab4: tuple, undisturbed: RunResult,
                                                tmp_path: Path) -> None:
    """SIGSTOP: the process neither exits nor answers; only missing heartbeats tell, within
    ``dead_after_s`` (measured from the last heartbeat), then it is killed and replaced."""
    cluster, job, plan, parts = lab4
    opts = replace(OPTS, dead_after_s=2.0, faults=(Fault("sampler:0", FAULT_STEP, "STOP"),))
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts, options=opts)
    assert abs(res.test_accuracy - undisturbed.test_accuracy) <= 0.01
    (rec,) = res.recoveries
    assert rec["role"] == "sampler:0" and rec["machine"] == "store0"
    assert rec["how"].startswith("sent no heartbeat for") and "dead_after_s=2" in rec["how"]
    assert 2.0 - OPTS.heartbeat_s - 0.2 <= rec["detect_s"] <= 2.0 + 1.5, rec["detect_s"]
    assert rec["last_heard_s"] >= 2.0
    log = (tmp_path / "run" / "logs" / "coordinator.log").read_text()
    assert "FAILURE detected: sampler:0 on machine store0" in log and "while " in log


@pytest.mark.slow
def test_sampler_killed_by_pid_from_outside(lab4: tuple, undisturbed: RunResult,
                                            tmp_path: Path) -> None:
    """SIGKILL by pid from the test (no hook): detected from the exit status, recovered."""
    cluster, job, plan, parts = lab4
    killed: list[int] = []

    def kill(kind: str, **kw: Any) -> None:
        if kind == "batch" and kw["epoch"] == 1 and kw["done"] == 3 and not killed:
            table = json.loads((tmp_path / "run" / "logs" / "processes.json").read_text())
            pid = table["sampler:1"]["pid"]
            assert pid in {p.pid for p in psutil.Process().children(recursive=True)}
            psutil.Process(pid).kill()
            killed.append(pid)

    ports = _Ports(kill)
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=OPTS, progress=ports)
    assert killed
    rec = _check_recovered(res, undisturbed, tmp_path / "run", "sampler:1", "store1", False)
    assert rec["pid"] == killed[0] and rec["detect_s"] is None  # we did not tell it when
    _check_clean(ports)


@pytest.mark.slow
def test_dead_machine_is_replanned_around(lab4: tuple, undisturbed: RunResult,
                                          tmp_path: Path) -> None:
    """All of store0 dies (store, sampler, relay): its partitions move (shared storage), the
    greedy placer re-plans on the 3 machines left, every role restarts, training resumes."""
    cluster, job, plan, parts = lab4
    ports = _Ports()
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=replace(OPTS, faults=(Fault("machine:store0", FAULT_STEP),)),
                progress=ports)
    rec = _check_recovered(res, undisturbed, tmp_path / "run", rec_role(res), "store0", True)
    assert set(rec["moved_partitions"]) == {"0", "1"}
    assert all(src == "store0" and dst != "store0" for src, dst in
               rec["moved_partitions"].values())
    assert rec["kept"] == [] and rec["plan_changes"]
    assert not any(m == "store0" for m in (p["machine"] for p in res.processes.values()))
    log = (tmp_path / "run" / "logs" / "coordinator.log").read_text()
    assert "machine store0 is unreachable: re-planned on the cluster without it" in log
    assert "re-planned with placer 'greedy'" in log
    _check_clean(ports)


def rec_role(res: RunResult) -> str:
    """Which of store0's processes the coordinator noticed first (any is right)."""
    role = res.recoveries[0]["role"]
    assert role in ("store:store0", "sampler:0", "fetcher:store0")
    return role


@pytest.mark.slow
def test_uneven_seed_counts_never_hang(lab4: tuple, tmp_path: Path) -> None:
    """Trainer 0 owns 3 partitions' seeds (~105), trainer 1 one (~35); with 1 seed per batch
    each runs K = 70 iterations, about half of trainer 1's empty: same count, nobody waits."""
    cluster, job, _, parts = lab4
    job = replace(job, epochs=1, batch_size=1)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1, 2), (("store0", 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (3,), (("store1", 1),), "gpu1")))
    t0 = time.monotonic()
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts, options=OPTS)
    assert time.monotonic() - t0 < 180
    assert res.iterations_per_epoch == 70
    recs = [r for r in _records(tmp_path / "run") if r["type"] == "batch"
            and r["phase"] == "train"]
    per = Counter(r["trainer"] for r in recs)
    assert per == {0: 70, 1: 70}
    meta = json.loads((parts / "gnnsched.json").read_text())
    mine = meta["parts"][3]["train"]  # ~35: METIS balances training nodes
    sizes = Counter(r["n"] for r in recs if r["trainer"] == 1)
    assert sizes == {1: mine, 0: 70 - mine}  # its seeds over 70 iterations: half empty
    epoch = next(r for r in _records(tmp_path / "run") if r["type"] == "epoch")
    assert epoch["seeds"] == epoch["unique_seeds"] == epoch["train_nodes"] == 140
    assert res.test_accuracy > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["INT", "KILL"])
def test_ctrl_c_or_coordinator_crash_leaves_nothing(lab4: tuple, tmp_path: Path,
                                                    sig: str) -> None:
    """``gnnsched train`` interrupted (Ctrl-C) or killed outright mid-training: every role
    and the fork server are gone within seconds, and every port they listened on is free."""
    import signal
    import subprocess
    import sys

    cluster, job, plan, parts = lab4
    plan.save(tmp_path / "plan.json")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "gnnsched", "train", "--cluster", str(LAB4 / "cluster.yaml"),
           "--job", str(LAB4 / "job.yaml"), "--plan", str(tmp_path / "plan.json"),
           "--partitions", str(parts), "--out", str(run_dir), "--epochs", "50"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ports = _Ports()
    try:
        deadline = time.monotonic() + 180
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.exists() and '"type":"batch"' in metrics.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "training never began"
            time.sleep(0.2)
        kids = psutil.Process(proc.pid).children(recursive=True)
        ports.pids = {p.pid for p in kids} | {proc.pid}
        for p in [psutil.Process(proc.pid), *kids]:
            for c in p.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN:
                    ports.ports.add(c.laddr.port)
                    ports.addresses.add(c.laddr.ip)
        assert len(kids) >= 8  # 7 roles and the fork server
        proc.send_signal(getattr(signal, f"SIG{sig}"))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == "INT":
        assert proc.returncode == 130 and "interrupted" in out, out[-2000:]
    else:
        assert proc.returncode == -9
    _check_clean(ports)
