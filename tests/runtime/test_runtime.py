"""The runtime for real: Cora, 4 METIS partitions, examples/lab4 (4 hosts), 2 trainers.

End to end on local processes: the run completes; its test accuracy is within one point of
single-process training with the same seeds and hyper-parameters (it is in fact identical:
the runtime is deterministic); every mini-batch of every epoch is trained exactly once; no
process outlives the run after success, a killed role, or Ctrl-C. Plus the pure pieces:
schedule, block compaction, launcher command lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from procs import survivors

from gnnsched.commands.train import train
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.runtime.coordinator import RunError, RuntimeOptions, Schedule
from gnnsched.runtime.launcher import LocalLauncher, RoleLaunch, SshLauncher
from gnnsched.runtime.sampler import compact
from gnnsched.spec import SpecError, cluster_from_dict, load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
FAST = RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10)


def _plan(cluster) -> Plan:
    """Trainer 0 gathers through a relay on store0; trainer 1 pulls from the stores itself."""
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


@pytest.fixture(scope="module")
def lab4(tmp_path_factory):
    from gnnsched.datasets import load_dataset, partition_graph

    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    parts = tmp_path_factory.mktemp("cora4")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    return cluster, job, _plan(cluster), parts


def _children() -> list[str]:
    return survivors({p.pid for p in psutil.Process().children(recursive=True)})


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _assert_every_batch_once(recs: list[dict], epochs: int, trainers: int, K: int) -> None:
    """Every trainer trained each of its K mini-batches of every epoch exactly once."""
    batches = Counter((r["epoch"], r["trainer"], r["index"]) for r in recs
                      if r["type"] == "batch" and r["phase"] == "train")
    assert set(batches) == {(e, w, k) for e in range(epochs) for w in range(trainers)
                            for k in range(K)}
    assert set(batches.values()) == {1}


@pytest.mark.slow
def test_lab4_trains_like_the_reference(lab4, tmp_path: Path) -> None:
    from gnnsched.runtime.reference import reference_train

    cluster, job, plan, parts = lab4
    res = train(cluster, job, plan, policy="gnnsched", out_dir=tmp_path / "run",
                partitions=parts, options=replace(FAST, trace=True))
    assert not _children(), "a role process outlived the run"
    ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
    assert res.test_accuracy >= 0.75
    assert abs(res.test_accuracy - ref.test_accuracy) <= 0.01, (res.test_accuracy, ref)
    assert res.val_accuracy == pytest.approx(ref.val_accuracy, abs=0.01)
    # every mini-batch of every epoch trained exactly once, every seed once per epoch
    recs = _records(tmp_path / "run")
    _assert_every_batch_once(recs, job.epochs, 2, res.iterations_per_epoch)
    # --trace: every trained mini-batch was dispatched, then sampled, then trained; each
    # transfer between two machines was acknowledged after it was queued
    at = {(r["type"], r["trainer"], r["seq"]): r for r in recs
          if r["type"] in ("dispatch", "sampled", "batch")}
    for (kind, w, seq), r in at.items():
        if kind == "batch":
            assert at[("dispatch", w, seq)]["t"] <= at[("sampled", w, seq)]["t"] <= r["time"]
    moves = [r for r in recs if r["type"] == "transfer"]
    assert moves and {r["kind"] for r in moves} <= {"struct", "block", "feat", "relay"}
    assert all(r["src"] != r["dst"] and r["bytes"] >= 0 and r["done"] >= r["queued"]
               for r in moves)
    # the samplers (on the stores) push every training step's blocks to their trainer, and
    # trainer 0's relay on store0 its features: one record each, with the message's bytes
    for kind, src in (("block", {0: "store0", 1: "store1"}), ("relay", {0: "store0"})):
        got = {(r["trainer"], r["seq"]): r for r in moves if r["kind"] == kind}
        want = {(w, s) for (t, w, s) in at if t == "batch" and w in src}
        assert set(got) >= want, (kind, sorted(want - set(got))[:5])
        assert all(r["src"] == src[r["trainer"]] and r["dst"] == plan.trainers[
            r["trainer"]].machine and r["bytes"] > 0 for r in got.values())
    from gnnsched.trace import summarize

    timeline = summarize(recs)
    assert timeline["transfers"]["feat"]["seconds"]["p50"] > 0
    assert list(timeline["transfers"]) == ["struct", "block", "feat", "relay"]
    assert set(timeline["senders"]["store0"]["kinds"]) >= {"block", "feat", "relay"}
    assert timeline["pipeline"]["dispatch_to_train"]["n"] == timeline["batches"] > 0
    epochs = [r for r in recs if r["type"] == "epoch"]
    assert len(epochs) == job.epochs
    assert all(e["seeds"] == e["unique_seeds"] == e["train_nodes"] == 140 for e in epochs)
    # measurements a user sees
    assert res.epoch_time_s > 0 and len(res.epochs) == job.epochs
    assert set(res.stages) == {"0", "1"} and all(
        v >= 0 for st in res.stages.values() for v in st.values())
    assert res.bytes_sent > res.network_bytes > 0
    assert res.bytes_by_process["store:store0"] > 0 and res.bytes_by_process["fetcher:store0"] > 0
    import torch

    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)
    assert ckpt["epoch"] == job.epochs - 1 and "model" in ckpt and "optimizer" in ckpt
    assert not list((tmp_path / "run" / "checkpoints").glob(".*tmp*"))


@pytest.mark.slow
def test_dead_role_fails_the_run_and_nothing_is_left(lab4, tmp_path: Path) -> None:
    cluster, job, plan, parts = lab4
    job = replace(job, epochs=3)
    killed: list[int] = []

    def progress(kind: str, **kw) -> None:
        if kind == "batch" and kw["epoch"] == 1 and kw["done"] == 2 and not killed:
            table = json.loads((tmp_path / "run" / "logs" / "processes.json").read_text())
            psutil.Process(table["sampler:1"]["pid"]).kill()
            killed.append(table["sampler:1"]["pid"])

    with pytest.raises(RunError, match=r"sampler:1 on machine store1 .*exited with code -9"):
        train(cluster, job, plan, policy="fifo", out_dir=tmp_path / "run", partitions=parts,
              options=replace(FAST, recover=False), progress=progress)
    assert killed
    assert not _children(), "a role process outlived the failed run"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_every_process(lab4, tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C and ``kill`` (SIGTERM) stop a run the same way: every process it started is
    gone, and the exit code says which signal it was."""
    cluster, job, plan, parts = lab4
    plan.save(tmp_path / "plan.json")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "gnnsched", "train", "--cluster", str(LAB4 / "cluster.yaml"),
           "--job", str(LAB4 / "job.yaml"), "--plan", str(tmp_path / "plan.json"),
           "--partitions", str(parts), "--out", str(run_dir), "--epochs", "50"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            metrics = run_dir / "metrics.jsonl"
            if metrics.exists() and '"type":"batch"' in metrics.read_text():
                break
            time.sleep(0.2)
        else:
            pytest.fail("training did not start")
        seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    tail = out[-3000:]
    assert proc.returncode == 128 + sig, tail
    assert ("interrupted" if sig == signal.SIGINT else "stopped by SIGTERM") in out, tail
    assert len(seen) >= 7, (seen, tail)
    alive = survivors(seen)
    assert not alive, f"processes left after Ctrl-C: {alive}\n{tail}"


def _emulated_lab4(base, tag: str):
    """lab4's cluster under a name of this test process's own (its own namespaces), hosts
    auto-addressed (never colliding with a running lab4); skips where netns cannot run."""
    from gnnsched.runtime import netns

    why = netns.unavailable_reason()
    if why is not None:
        pytest.skip(f"emulated cluster unavailable: {why}")
    d = base.to_dict()
    d["name"] = f"{tag}{os.getpid() % 100000}"
    for m in d["machines"]:
        m.pop("address", None)
    return cluster_from_dict(d, "<test>")


@pytest.mark.slow
@pytest.mark.netns
def test_lab4_on_an_emulated_cluster_with_shaped_nics(lab4, tmp_path: Path) -> None:
    """The same job through the netns launcher: each host's roles in its own namespace behind a
    100 Mbit/s tbf-shaped NIC. It trains like the reference, every batch once, nothing is left
    (processes, namespaces), and a bulk transfer on a shaped link runs at the shaped rate."""
    from gnnsched.runtime import netns
    from gnnsched.runtime.reference import reference_train

    base, job, _, parts = lab4
    job = replace(job, epochs=3)
    cluster = _emulated_lab4(base, "e2e")
    plan = _plan(cluster)
    net = netns.EmulatedCluster(cluster).up()
    try:
        res = train(cluster, job, plan, policy="gnnsched", launcher="netns",
                    out_dir=tmp_path / "run", partitions=parts, options=FAST)
        assert res.launcher == "netns"
        assert not _children(), "a role process outlived the run"
        ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
        assert abs(res.test_accuracy - ref.test_accuracy) <= 0.01, (res.test_accuracy, ref)
        _assert_every_batch_once(_records(tmp_path / "run"), job.epochs, 2,
                                 res.iterations_per_epoch)
        # the traffic really crossed the hosts' shaped NICs: every store sent megabytes
        for host in ("store0", "store1"):
            dev = subprocess.run(net.exec_prefix(host) + ["cat", "/proc/net/dev"],
                                 capture_output=True, text=True, check=True).stdout
            row = next(ln for ln in dev.splitlines() if ln.strip().startswith(netns.HOST_IF))
            assert int(row.split(":", 1)[1].split()[8]) > 1e6, (host, row)
        assert res.network_bytes > 0
        # a shaped link carries the shaped rate (goodput ~0.95 of the tbf rate on a quiet box,
        # `bench/bench_netns.py`; the margin is for a loaded one, unshaped would be ~100x)
        rate = net.measure_rate("store0", "gpu0", nbytes=int(100e6 / 8 * 1.5))
        assert 0.85 <= rate["ratio"] <= 1.1, rate
    finally:
        net.down()
    left = [n for n in netns.list_namespaces() if n in net.namespaces]
    assert left == [] and not net.state_file.exists()


@pytest.mark.slow
@pytest.mark.netns
def test_lab4_with_the_urgent_band(lab4, tmp_path: Path) -> None:
    """The urgent band end to end (NICs with TOS bands, ``urgent_band``): every store binds
    its second socket, every client connects it, the coordinator grants it per receiver, and
    the run trains like the reference, every batch once, with graph data on both bands."""
    from gnnsched.runtime import netns
    from gnnsched.runtime.reference import reference_train

    base, job, _, parts = lab4
    job = replace(job, epochs=2)
    cluster = _emulated_lab4(base, "urg")
    plan = _plan(cluster)
    net = netns.EmulatedCluster(cluster, bands=True).up()
    try:
        if net.queues != "tos bands":
            pytest.skip(f"this kernel cannot band NIC queues: {net.queues}")
        res = train(cluster, job, plan, policy="gnnsched", launcher="netns",
                    out_dir=tmp_path / "run", partitions=parts,
                    options=replace(FAST, urgent_band=True))
        ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
        assert abs(res.test_accuracy - ref.test_accuracy) <= 0.01, (res.test_accuracy, ref)
        _assert_every_batch_once(_records(tmp_path / "run"), job.epochs, 2,
                                 res.iterations_per_epoch)
        stores = {n: p for n, p in res.processes.items() if n.startswith("store")}
        assert stores and all(p.get("urgent_bytes", 0) > 0 for p in stores.values()), stores
        assert not _children(), "a role process outlived the run"
    finally:
        net.down()
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []


# ---------------------------------------------------------------------- pure pieces


def test_schedule_covers_every_seed_once_per_epoch() -> None:
    job = replace(load_job(LAB4 / "job.yaml"), epochs=3, batch_size=4, eval_every=2)
    counts = [{"train": n, "val": 10, "test": 5} for n in (7, 9, 3, 11)]
    ids = [np.arange(100 * p, 100 * p + c["train"]) for p, c in enumerate(counts)]
    nodes = {p: {"train": (ids[p], ids[p] % 7),
                 "val": (np.arange(10) + 1000 + 10 * p, np.zeros(10, np.int64)),
                 "test": (np.arange(5) + 2000 + 10 * p, np.zeros(5, np.int64))}
             for p in range(4)}
    sched = Schedule(job, [[0, 1], [2, 3]], counts, eval_batch_size=8)
    sched.set_nodes(nodes)
    assert sched.K == 4  # ceil(30 seeds / (2 trainers * 4))
    phases = Counter((it.epoch, it.phase) for it in sched.items)
    # validation after every 2nd epoch and the last; test once, at the end; 20 val nodes
    # per trainer in batches of <= 8 -> 3 steps, equally many for every trainer
    assert phases == {(0, 0): 4, (1, 0): 4, (1, 1): 3, (2, 0): 4, (2, 1): 3, (2, 2): 2}
    assert [it.seq for it in sched.items] == list(range(len(sched.items)))
    for e in range(3):
        train_items = [it for it in sched.items if it.epoch == e and it.phase == 0]
        for w, parts in enumerate([[0, 1], [2, 3]]):
            got = np.concatenate([sched.batch(w, it)[0] for it in train_items])
            want = np.concatenate([ids[p] for p in parts])
            assert sorted(got.tolist()) == sorted(want.tolist())  # each seed once per epoch
    first = [sched.batch(1, it)[0].tolist() for it in sched.items[:4]]
    again = Schedule(job, [[0, 1], [2, 3]], counts, eval_batch_size=8)
    again.set_nodes(nodes)
    assert first == [again.batch(1, it)[0].tolist() for it in again.items[:4]]  # seeded
    second = [sched.batch(1, it)[0].tolist() for it in sched.items[4:8]]
    assert first != second  # reshuffled every epoch


def test_compact_matches_dgl_to_block() -> None:
    import torch

    from gnnsched.compat import dgl

    rng = np.random.default_rng(0)
    dst_nodes = np.array([40, 7, 13], dtype=np.int64)
    dst = rng.choice(dst_nodes, 30)
    src = rng.integers(0, 60, 30)
    src_nodes, s, d = compact(dst_nodes, src, dst)
    assert src_nodes[:3].tolist() == dst_nodes.tolist()
    assert sorted(zip(src_nodes[s].tolist(), dst_nodes[d].tolist())) == sorted(
        zip(src.tolist(), dst.tolist()))
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=61)
    blk = dgl.to_block(g, torch.from_numpy(dst_nodes))
    assert sorted(blk.srcdata[dgl.NID].tolist()) == sorted(src_nodes.tolist())
    assert blk.num_edges() == len(s)


def test_launcher_command_lines(tmp_path: Path) -> None:
    cluster = cluster_from_dict({"machines": [
        {"name": "a", "cpus": 4, "memory_gb": 8, "nic_gbps": 1, "partitions": [0],
         "ssh": "me@host-a", "address": "10.0.0.1"},
        {"name": "b", "cpus": 4, "memory_gb": 8, "nic_gbps": 1, "gpus": 1,
         "ssh": "me@host-b"}]})
    launch = RoleLaunch("trainer", "0", "b", "tcp://10.0.0.9:5555", tmp_path / "t.log",
                        threads=2)
    ssh = SshLauncher(cluster, coordinator_address="10.0.0.9", remote_python="/opt/py",
                      remote_dir="/work dir")
    cmd = ssh.command(launch)
    assert cmd[:1] == ["ssh"] and "-tt" in cmd and cmd[-2] == "me@host-b"
    remote = cmd[-1]
    assert remote.startswith("cd '/work dir' && exec env ")
    assert "OMP_NUM_THREADS=2" in remote and "/opt/py -m gnnsched.runtime.role trainer" in remote
    assert "--host host-b" in remote and "--coordinator tcp://10.0.0.9:5555" in remote
    assert ssh.host_of("a") == "10.0.0.1" and ssh.coordinator_host() == "10.0.0.9"
    local = LocalLauncher(cluster)
    argv = local.command(launch)
    assert argv[1:5] == ["-m", "gnnsched.runtime.role", "trainer", "--id"]
    assert local.role_env(launch)["GLOO_SOCKET_IFNAME"] == "lo"
    with pytest.raises(SpecError, match="neither ssh nor address"):
        SshLauncher(cluster_from_dict({"machines": [
            {"name": "a", "cpus": 1, "memory_gb": 1, "nic_gbps": 1, "partitions": [0]}]}))


def test_netns_launcher_says_what_is_missing() -> None:
    from gnnsched.runtime.launcher import get_launcher
    from gnnsched.runtime.netns import NetnsError

    cluster = load_cluster(LAB4 / "cluster.yaml")
    with pytest.raises((NetnsError, SpecError), match="root|cluster up"):
        get_launcher("netns", cluster)


def test_slow_device_emulation_stretches_compute() -> None:
    """A GPU with speed 0.5 on a CPU box: each step's compute time is doubled by a sleep, by
    the compute's CPU seconds, or on the scale model by its wall time (the quota dilates it)."""
    from gnnsched.runtime.trainer import Trainer

    t = Trainer.__new__(Trainer)  # no sockets: only the timing rule
    t.emulate, t.speed, t.wall_clock = True, 0.5, False

    def stretched(t1: float, cpu1: float) -> float:
        t0 = time.monotonic()
        t.stretch(t1, cpu1)
        return time.monotonic() - t0

    busy = time.process_time()
    while time.process_time() - busy < 0.05:  # 50 ms of CPU
        pass
    assert 0.045 <= stretched(time.monotonic(), busy) < 0.5
    # wall clock: 50 ms ago, with no CPU spent since (a sleep is what a throttled quota does)
    t.wall_clock = True
    assert 0.045 <= stretched(time.monotonic() - 0.05, time.process_time()) < 0.5
    t.wall_clock = False
    assert stretched(time.monotonic() - 0.05, time.process_time()) < 0.01  # no CPU: no sleep
    t.speed = 2.0  # faster than the reference cannot be emulated: no sleep
    assert stretched(time.monotonic() - 0.05, busy) < 0.01
    t.emulate, t.speed = False, 0.5
    assert stretched(time.monotonic() - 0.05, busy) < 0.01


def test_relay_holds_pushes_into_an_all_reducing_machine() -> None:
    """Gradients first at relays too: while trainer 0's machine all-reduces step 5, a relay
    pushes it nothing of later steps (step 5 and earlier still flow); on release the held
    mini-batches go out oldest first. Another machine's trainer is never held."""
    from gnnsched.runtime.fetcher import Fetcher
    from gnnsched.runtime.store import Holds

    f = Fetcher.__new__(Fetcher)  # no sockets: only the hold rule
    f.trainer_machine, f.held, f.deferred = {0: 2, 1: 3}, Holds(), []
    sent: list[tuple[int, int]] = []
    f._push = lambda trainer, seq, feats, took: sent.append((trainer, seq))  # type: ignore
    x = np.zeros((1, 1), dtype=np.float32)
    f.on_control({"op": "hold", "machine": 2, "seq": 5, "on": True})
    for trainer, seq in ((0, 7), (0, 5), (1, 9), (0, 6)):
        f.deliver(trainer, seq, x, 0.0)
    assert sent == [(0, 5), (1, 9)]
    f.on_control({"op": "hold", "machine": 2, "seq": 5, "on": False})
    assert sent == [(0, 5), (1, 9), (0, 6), (0, 7)] and f.deferred == []
    # a timed hold lets go by itself once its time (the gradients' on the wire) is up
    f.on_control({"op": "hold", "machine": 2, "seq": 7, "on": True, "for_s": 0.05})
    f.deliver(0, 8, x, 0.0)
    f.expire_holds()
    assert sent[-1] == (0, 7) and len(f.deferred) == 1
    time.sleep(0.06)
    f.expire_holds()
    assert sent[-1] == (0, 8) and f.deferred == [] and f.held == {}


def test_gradient_hold_starts_at_the_barrier_and_spares_fast_ingress() -> None:
    """The coordinator holds store traffic into all-reducing machines only once every trainer
    entered the all-reduce (gradients on the wire), and only from stores that would share a
    NIC with the gradients: a store on a machine that all-reduces itself, or one whose egress
    plus the ring's rate exceeds the receiver's ingress. A slow store feeding a fast NIC is
    never held (held, it would idle while its trainer starves)."""
    from collections import defaultdict
    from types import SimpleNamespace

    from gnnsched.runtime.coordinator import PolicyDriver, _Role
    from gnnsched.runtime.transport import ctrl_body

    cl = cluster_from_dict({"name": "h", "machines": [
        {"name": "s0", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.05, "partitions": [0, 2]},
        {"name": "s1", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.1, "partitions": [1, 3],
         "gpus": [{"kind": "t4", "speed": 1.0, "memory_gb": 16}]},
        {"name": "g0", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.2,
         "gpus": [{"kind": "t4", "speed": 1.0, "memory_gb": 16}]}]})
    c = PolicyDriver.__new__(PolicyDriver)
    # trainer 0 on g0, trainer 1 on s1
    c.state = SimpleNamespace(cluster=cl, net=cl, T=[2, 1], W=2)  # type: ignore[assignment]
    c.stores, c.fetchers = {0: "store:s0", 1: "store:s1"}, ["fetcher:x"]
    c.table = SimpleNamespace(  # type: ignore[assignment]
        roles={"fetcher:x": SimpleNamespace(launch=SimpleNamespace(machine="s0"))})
    c.reducing, c.entered, c.holding = defaultdict(int), defaultdict(int), set()
    c.grad_bytes = defaultdict(int)
    c.contending = c._contending()
    sent: list[tuple[str, int, bool]] = []
    bodies: list[dict[str, Any]] = []

    def send(peer: str, msg: Any) -> None:
        body = ctrl_body(msg)
        sent.append((peer, body["machine"], body["on"]))
        bodies.append(body)

    c.send = send  # type: ignore[method-assign]
    role = _Role.__new__(_Role)
    c._on_allreduce("trainer:0", role, {"trainer": 0, "seq": 4, "on": True, "bytes": 625_000})
    assert sent == []  # trainer 1 has not reached the barrier: nothing on the wire yet
    c._on_allreduce("trainer:1", role, {"trainer": 1, "seq": 4, "on": True, "bytes": 625_000})
    # into g0 (200 Mbit): s1 all-reduces itself; s0's store and relay (50) + ring (100) fit
    # g0's ingress. Into s1 (100 Mbit): s0's traffic would share it with the gradients.
    assert sorted(sent) == [("fetcher:x", 1, True), ("store:s0", 1, True),
                            ("store:s1", 2, True)]
    # held for the gradients' time on the wire: 625 kB at the ring's 100 Mbit/s = 50 ms
    assert all(b["for_s"] == pytest.approx(0.05) for b in bodies)
    sent.clear()
    c._on_allreduce("trainer:0", role, {"trainer": 0, "seq": 4, "on": False})
    assert sent == [("store:s1", 2, False)]
    c._on_allreduce("trainer:1", role, {"trainer": 1, "seq": 4, "on": False})
    assert sorted(sent[1:]) == [("fetcher:x", 1, False), ("store:s0", 1, False)]
    assert not c.holding


def test_shaped_links_chunk_each_store_by_its_own_nic() -> None:
    """On shaped links a store's chunk is ~8 ms of its *own* egress (a fast store is not cut
    into the slowest NIC's tiny chunks, each costing a message and an ack), clamped to
    16..256 KiB, and its send windows hold several of its chunks; loopback keeps 256 KiB and
    an explicit ``chunk_bytes`` applies to every store."""
    from types import SimpleNamespace

    from gnnsched.runtime.coordinator.startup import nic_sizes
    from gnnsched.runtime.store import CHUNK_BYTES

    cl = cluster_from_dict({"name": "h", "machines": [
        {"name": "s0", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.01, "partitions": [0]},
        {"name": "s1", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.1, "partitions": [1]},
        {"name": "s2", "cpus": 2, "memory_gb": 8, "nic_gbps": 10.0, "partitions": [2]},
        {"name": "g0", "cpus": 2, "memory_gb": 8, "nic_gbps": 0.2,
         "gpus": [{"kind": "t4", "speed": 1.0, "memory_gb": 16}]}]})

    def sizes(launcher: str, **opts: Any) -> dict[str, Any]:
        return nic_sizes(RuntimeOptions(**opts), cl, cl, SimpleNamespace(name=launcher))

    out = sizes("netns")
    chunks = out["nic_chunk_bytes"]
    assert chunks == {"s0": 16 << 10, "s1": 100_000, "s2": CHUNK_BYTES}  # 10 / 100 Mbit/s, 10G
    assert "g0" not in chunks  # no partitions: it serves nothing
    for name, (window, peer) in out["nic_windows"].items():
        assert window >= 4 * chunks[name] and peer >= 2 * chunks[name]
    assert sizes("local")["chunk_bytes"] == CHUNK_BYTES
    assert "nic_chunk_bytes" not in sizes("local")
    assert sizes("netns", chunk_bytes=32 << 10)["nic_chunk_bytes"] == {}
    # an explicit window stays a floor on every store
    assert all(w >= 8 << 20 for w, _ in sizes("netns", window_bytes=8 << 20)["nic_windows"]
               .values())
    # the scale model (NICs / D): the real cluster's bytes per chunk and window, so a window
    # is 150 ms of the cluster the model stands for; the NIC rate each store measures its
    # acknowledgements against (work conservation) is the model's own, D times slower
    dilated = nic_sizes(RuntimeOptions(), cl, cl.dilated(6.0), SimpleNamespace(name="netns"))
    assert dilated.pop("nic_rates") == pytest.approx({k: v / 6 for k, v in
                                                      out.pop("nic_rates").items()})
    assert dilated == out
    assert "nic_rates" not in sizes("local")


@pytest.mark.slow
@pytest.mark.netns
def test_lab4_trains_over_lossy_jittery_links(lab4, tmp_path: Path) -> None:
    """Grey links (issue 57): every host's NIC drops 2% of its packets (the cluster file's
    ``loss_pct``: netem where the kernel has it, with a 2 ms delay varied by 2 ms, else a bpf
    filter on the NIC). TCP retransmits under ZeroMQ; the run trains like the reference,
    every batch once, and no heartbeat flaps into a recovery."""
    from gnnsched.runtime import netns
    from gnnsched.runtime.reference import reference_train

    base, job, _, parts = lab4
    job = replace(job, epochs=2)
    d = _emulated_lab4(base, "loss").to_dict()
    d["loss_pct"] = 2
    if netns.qdisc_available("netem"):
        d.update(jitter_ms=2, latency_ms=2)
    cluster = cluster_from_dict(d, "<test>")
    assert cluster.loss == pytest.approx(0.02)
    plan = _plan(cluster)
    net = netns.EmulatedCluster(cluster).up()
    try:
        def shown(*what: str) -> str:
            return subprocess.run(net.exec_prefix("store0") + ["tc", *what, "show", "dev",
                                  netns.HOST_IF, *(["egress"] if what == ("filter",) else [])],
                                  capture_output=True, text=True).stdout

        if net.drops == "netem":  # the kernel drops them, not the runtime
            assert "loss 2%" in shown("qdisc"), shown("qdisc")
        else:
            assert net.drops == "bpf" and "drop" in shown("filter"), shown("filter")
        before = _dropped(net)
        res = train(cluster, job, plan, policy="gnnsched", launcher="netns",
                    out_dir=tmp_path / "run", partitions=parts, options=FAST)
        recs = _records(tmp_path / "run")
        assert not [r for r in recs if r.get("type") == "recovery"], "a heartbeat flapped"
        retrans = _dropped(net) - before
        assert retrans > 0, "no packet was lost: the link was not lossy"
        ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
        assert res.test_accuracy == pytest.approx(ref.test_accuracy, abs=1e-9)
        _assert_every_batch_once(recs, job.epochs, 2, res.iterations_per_epoch)
        assert not _children(), "a role process outlived the run"
    finally:
        net.down()
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []


def _dropped(net) -> int:
    """TCP segments retransmitted on every host of ``net`` so far (``/proc/net/snmp``)."""
    total = 0
    for host in net.hosts:
        snmp = subprocess.run(net.exec_prefix(host) + ["cat", "/proc/net/snmp"],
                              capture_output=True, text=True, check=True).stdout
        rows = [ln.split() for ln in snmp.splitlines() if ln.startswith("Tcp:")]
        total += int(rows[1][rows[0].index("RetransSegs")])
    return total


@pytest.mark.slow
@pytest.mark.netns
def test_a_machine_cut_off_and_back_rejoins(lab4, tmp_path: Path) -> None:
    """A grey fault (issue 57): trainer 1's host is cut off the network for 3 s mid-epoch
    (its switch port down; its processes alive), shorter than the heartbeat timeout. TCP
    retransmits once the port is up; nothing is declared dead, so no second copy of any role
    starts; the run trains like the reference, every batch once, a few seconds later."""
    from gnnsched import api
    from gnnsched.runtime import netns
    from gnnsched.runtime.reference import reference_train

    base, job, _, parts = lab4
    job = replace(job, epochs=2)
    cluster = _emulated_lab4(base, "cut")
    plan = _plan(cluster)
    net = netns.EmulatedCluster(cluster).up()
    try:
        faults = api.parse_faults(["machine:gpu1:8:CUT:3"])
        res = train(cluster, job, plan, policy="gnnsched", launcher="netns",
                    out_dir=tmp_path / "run", partitions=parts,
                    options=replace(FAST, faults=faults, dead_after_s=10.0))
        recs = _records(tmp_path / "run")
        cut = [r for r in recs if r.get("type") == "fault"]
        assert len(cut) == 1 and cut[0]["signal"] == "CUT" and cut[0]["seconds"] == 3.0
        assert not [r for r in recs if r.get("type") == "recovery"], "declared dead"
        at = next(r["epoch"] for r in recs if r.get("type") == "batch" and r["seq"] == 8)
        took = {r["epoch"]: r["epoch_time_s"] for r in recs if r.get("type") == "epoch"}
        assert took[at] >= 2.5, took  # the cut really stalled the step it fell in
        ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
        assert res.test_accuracy == pytest.approx(ref.test_accuracy, abs=1e-9)
        _assert_every_batch_once(recs, job.epochs, 2, res.iterations_per_epoch)
        assert net.ping("gpu0", "gpu1") is not None, "the port was left down"
        assert not _children(), "a role process outlived the run"
    finally:
        net.down()
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []


@pytest.mark.slow
@pytest.mark.netns
def test_a_slowed_host_slows_its_trainer_for_a_while(lab4, tmp_path: Path) -> None:
    """A grey fault (issue 57) on the scale model: trainer 1's host keeps an eighth of its
    CPU for 10 s (its control groups' quotas, each divided by 8 and given back, checked on
    the files); nothing is declared dead and the run trains like the reference. (How much
    its steps slow is not asserted: 1.2-1.5x on lab4, the fetch dominating them.)"""
    from gnnsched import api
    from gnnsched.runtime import cgroups, netns
    from gnnsched.runtime.reference import reference_train

    why = cgroups.unavailable_reason()
    if why is not None:
        pytest.skip(f"no control groups here: {why}")
    base, job, _, parts = lab4
    job = replace(job, epochs=4)
    cluster = _emulated_lab4(base, "slow")
    plan = _plan(cluster)
    net = netns.EmulatedCluster(cluster, cgroups=True).up()
    try:
        groups = net.groups
        host = groups._dir("cpu", groups.host_group("gpu1"))
        planned = {g: groups._read_quota(g) for g in cgroups._tree(host)}
        groups.throttle("gpu1", 8)  # every quota of the host / 8, children within parents
        cut = {g: groups._read_quota(g) for g in planned}
        assert all(cut[g] == max(cgroups.MIN_QUOTA_US, round(q / 8))
                   for g, q in planned.items() if q is not None), (planned, cut)
        groups.throttle("gpu1", 1.0)
        assert {g: groups._read_quota(g) for g in planned} == planned
        res = train(cluster, job, plan, policy="gnnsched", launcher="netns",
                    out_dir=tmp_path / "run", partitions=parts,
                    options=replace(FAST, faults=api.parse_faults(["machine:gpu1:10:SLOW:10"])))
        recs = _records(tmp_path / "run")
        assert [r["signal"] for r in recs if r.get("type") == "fault"] == ["SLOW"]
        assert {g: groups._read_quota(g) for g in planned} == planned  # given back
        # the watch marks only the slowed trainer, if any (on lab4 its steps slow 1.2-1.5x:
        # the fetch dominates them, under the watch's 2x; see docs/robustness.md)
        assert {r["trainer"] for r in recs if r.get("type") == "straggler"} <= {1}
        assert not [r for r in recs if r.get("type") == "recovery"]
        ref = reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])
        assert res.test_accuracy == pytest.approx(ref.test_accuracy, abs=1e-9)
    finally:
        net.down()
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []
