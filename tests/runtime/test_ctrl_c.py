"""Ctrl-C on ``gnnsched train`` is over within 5 s, every role stopped, on local processes and on
an emulated cluster (issue 51 item 6: it took 21 s there, four fork servers each finalizing an
interpreter that holds torch and DGL inside a scale model's CPU quota, one after another)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from procs import survivors

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import ClusterSpec, load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
LIMIT_S = 5.0


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gnnsched.datasets import load_dataset, partition_graph

    job = load_job(LAB4 / "job.yaml")
    out = tmp_path_factory.mktemp("cora4-ctrlc")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, out,
                    method=job.part_method, seed=job.seed)
    return out


def _plan(cluster: ClusterSpec, path: Path) -> Path:
    Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1"))).save(path)
    return path


def _interrupt(cluster_file: Path, plan: Path, parts: Path, run: Path,
               *extra: str) -> tuple[float, list[str], str, int]:
    """Start ``gnnsched train``, SIGINT it once the first epoch's first batch is recorded;
    (seconds from the signal to its exit, processes it started still alive, output, code)."""
    cmd = [sys.executable, "-m", "gnnsched", "train", "--cluster", str(cluster_file),
           "--job", str(LAB4 / "job.yaml"), "--plan", str(plan), "--partitions", str(parts),
           "--out", str(run), "--epochs", "50", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
            metrics = run / "metrics.jsonl"
            if metrics.exists() and '"type":"batch"' in metrics.read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("training did not start")
        seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(seen) >= 7, (seen, out[-2000:])  # fork servers and their seven roles
    return took, survivors(seen, grace=0.0), out, proc.returncode


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_ctrl_c_on_local_processes_exits_within_5_s(parts: Path, tmp_path: Path) -> None:
    plan = _plan(load_cluster(LAB4 / "cluster.yaml"), tmp_path / "plan.json")
    took, alive, out, code = _interrupt(LAB4 / "cluster.yaml", plan, parts, tmp_path / "run")
    assert code == 128 + signal.SIGINT and "interrupted" in out, out[-2000:]
    assert not alive, f"processes left after Ctrl-C: {alive}"
    assert took < LIMIT_S, f"Ctrl-C took {took:.1f} s"


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(150)
def test_ctrl_c_on_an_emulated_cluster_exits_within_5_s(parts: Path, tmp_path: Path) -> None:
    from gnnsched.runtime import netns

    why = netns.unavailable_reason()
    if why is not None:
        pytest.skip(f"emulated cluster unavailable: {why}")
    d = yaml.safe_load((LAB4 / "cluster.yaml").read_text())
    d["name"] = f"cc{os.getpid() % 100000}"  # namespaces of this test's own
    for m in d["machines"]:
        m.pop("address", None)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(d))
    cluster = load_cluster(cluster_file)
    plan = _plan(cluster, tmp_path / "plan.json")
    net = netns.EmulatedCluster(cluster).up()
    try:
        took, alive, out, code = _interrupt(cluster_file, plan, parts, tmp_path / "run",
                                            "--launcher", "netns")
        assert code == 128 + signal.SIGINT and "interrupted" in out, out[-2000:]
        assert not alive, f"processes left after Ctrl-C: {alive}"
        assert took < LIMIT_S, f"Ctrl-C took {took:.1f} s"
    finally:
        net.down()
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []
