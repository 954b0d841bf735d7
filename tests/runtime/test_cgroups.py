"""The scale model's control groups: a host's CPU quota and memory limit are real, ``cluster
down`` leaves no group behind, and the netns launcher starts every role inside its host's
groups; the dilation factor's arithmetic (no root needed).

The real-group tests need root, cgroups with the cpu and memory controllers, and ``ip netns``;
they are skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gnnsched.runtime import cgroups as cg
from gnnsched.runtime import netns
from gnnsched.spec import GB, GBIT, cluster_from_dict

REASON = netns.unavailable_reason() or cg.unavailable_reason()
needs_groups = pytest.mark.skipif(REASON is not None,
                                  reason=f"scale model unavailable: {REASON}")
pytestmark = pytest.mark.netns


def _data(tag: str, machines: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A cluster named per test process (parallel runs never share namespaces or groups)."""
    for m in machines:
        m.setdefault("nic_gbps", 0.1)
    machines[0].setdefault("partitions", [0])
    return {"name": f"cg{os.getpid() % 100000}{tag}", "machines": machines, **extra}


def _spec(tag: str, machines: list[dict[str, Any]], **extra: Any):
    return cluster_from_dict(_data(tag, machines, **extra), "<test>")


def _left(name: str) -> list[str]:
    """Every directory of cluster ``name`` still under any cgroup hierarchy."""
    out = []
    for mount in {h.mount for h in cg.discover().values()}:
        out += [str(p) for p in Path(mount).rglob(f"{cg.TOP}/{name}") if p.is_dir()]
    return out


# --------------------------------------------------------------------------------------
# The dilation factor (no root needed)


def test_dilation_fits_the_box_and_slows_nics_and_latency() -> None:
    spec = _spec("d", [{"name": "store", "cpus": 16, "memory_gb": 64},
                       {"name": "gpu", "cpus": 2, "memory_gb": 8,
                        "gpus": [{"speed": 2.0}, {"speed": 0.5}]}], latency_ms=1)
    # a slow device's trainer still gets a whole core for its CPU-side work: max(1, 0.5)
    assert cg.cluster_compute(spec) == 21.0  # 16 + 2 + 2.0 + 1.0
    assert cg.device_quota(0.5) == 1.0 and cg.device_quota(2.0) == 2.0
    assert cg.choose_dilation(spec, cores=2) == pytest.approx(10.5)
    assert cg.choose_dilation(spec, cores=64) == 1.0  # never faster than the real cluster
    ec = netns.EmulatedCluster(spec, cgroups=True, cores=2, gateway=False)
    d = ec.dilation
    assert d == pytest.approx(10.5)
    shares = ec.groups.shares
    assert sum(s.cores for s in shares.values()) == pytest.approx(2.0)  # fills the box
    assert shares["gpu"].cpu_cores == pytest.approx(2 / d)
    assert shares["gpu"].device_cores == pytest.approx((2.0 / d, 1.0 / d))
    assert shares["store"].memory == 64 * GB  # memory is not dilated
    assert ec.host("store").egress == pytest.approx(0.1 * GBIT / d)
    assert ec.latency == pytest.approx(1e-3 * d)
    # the shortest CFS period at which the smallest share (1 / D) is still >= 1 ms
    assert ec.groups.period_us == 10_500
    assert ec.fingerprint != netns.EmulatedCluster(spec, gateway=False).fingerprint
    plain = netns.EmulatedCluster(spec, gateway=False)
    assert plain.dilation == 1.0 and plain.groups is None
    assert plain.host("store").egress == pytest.approx(0.1 * GBIT)
    given = netns.EmulatedCluster(spec, cgroups=True, dilation=20, gateway=False,
                                  memory_scale=0.25)
    assert given.groups.shares["store"].cores == pytest.approx(16 / 20)
    assert given.groups.shares["store"].memory == 16 * GB
    scaled = netns.dilated(spec, 4.0)
    assert scaled.machine("gpu").ingress == pytest.approx(0.1 * GBIT / 4)
    assert scaled.latency == pytest.approx(4e-3) and scaled.machine("gpu").cpus == 2
    with pytest.raises(netns.NetnsError, match="dilation 0.5 out of range"):
        netns.EmulatedCluster(spec, dilation=0.5)


def test_too_little_memory_and_no_root_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec("m", [{"name": "tiny", "cpus": 1, "memory_gb": 1}])
    with pytest.raises(cg.CgroupError, match=r"machines\[tiny\].memory_gb.*--memory-scale"):
        netns.EmulatedCluster(spec, cgroups=True, memory_scale=0.01)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(cg.CgroupError, match="need root.*--no-cgroups"):
        cg.require()


def test_missing_controller_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cg, "_mounts", lambda: [
        ("cgroup", "/sys/fs/cgroup/cpu", "/", {"rw", "cpu"})])
    with pytest.raises(cg.CgroupError, match="memory controller.*--no-cgroups"):
        cg.discover()


def test_v1_and_v2_files_on_a_fake_hierarchy(tmp_path: Path) -> None:
    """What a host's groups hold, written into plain directories: v2 ``cpu.max``,
    ``memory.max`` and the controllers enabled down the tree; v1 CFS quota and period,
    ``cpu.shares`` and both memory limits; usage read back from both."""
    spec = _spec("f", [{"name": "h", "cpus": 2, "memory_gb": 1, "gpus": [{"speed": 0.5}]}])
    shares = cg.plan_shares(spec, 4.0)
    v2 = tmp_path / "v2" / cg.TOP / "c"
    g = cg.ClusterGroups("c", shares, 4.0, dirs={"cpu": str(v2), "memory": str(v2)},
                         version=2)
    g.create()
    # 2 cpus + max(1, 0.5) for the device = 3 cores, / 4
    assert (v2 / "h" / "cpu.max").read_text().split() == ["7500", "10000"]
    assert (v2 / "h" / "cpu" / "cpu.max").read_text().split() == ["5000", "10000"]
    assert (v2 / "h" / "dev0" / "cpu.max").read_text().split() == ["2500", "10000"]
    assert (v2 / "h" / "memory.max").read_text().strip() == str(int(GB))
    for d in (v2.parent, v2, v2 / "h", v2 / "h" / "cpu"):
        assert (d / "cgroup.subtree_control").read_text().strip() == "+cpu +memory", d
    leaf = g.role("h", "sampler-0", threads=4)  # capped at the host's 2 cpus
    assert (v2 / leaf / "cpu.max").read_text().split() == ["5000", "10000"]
    assert g.procs_files(leaf) == [str(v2 / leaf / "cgroup.procs")]
    (v2 / "h" / "cpu.stat").write_text("usage_usec 2500000\nthrottled_usec 10\n")
    (v2 / "h" / "memory.events").write_text("oom 1\noom_kill 1\n")
    (v2 / "h" / "memory.peak").write_text("123\n")
    u = g.usage("h")
    assert (u["cpu_s"], u["oom_kills"], u["memory_peak"]) == (2.5, 1, 123)

    v1 = {c: tmp_path / "v1" / c / cg.TOP / "c" for c in ("cpu", "cpuacct", "memory")}
    for c in ("cpu", "cpuacct", "memory"):
        v1[c].parent.parent.mkdir(parents=True)
    (v1["memory"].parent.parent / "memory.use_hierarchy").write_text("1\n")
    g = cg.ClusterGroups("c", shares, 4.0, dirs={c: str(d) for c, d in v1.items()},
                         version=1)
    g.create()
    cpu = v1["cpu"] / "h"
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "7500"
    assert (cpu / "cpu.cfs_period_us").read_text().strip() == "10000"
    assert (cpu / "cpu.shares").read_text().strip() == str(round(1024 * 3 / 4))
    assert (v1["memory"] / "h" / "memory.limit_in_bytes").read_text().strip() == str(int(GB))
    assert not (v1["cpu"] / "h" / "memory.limit_in_bytes").exists()
    assert not (v1["memory"] / "h" / "cpu.cfs_quota_us").exists()
    (v1["cpuacct"] / "h" / "cpuacct.usage").write_text("3000000000\n")
    for d, n in ((v1["memory"] / "h", 0), (v1["memory"] / "h" / "cpu", 2)):
        (d / "memory.oom_control").write_text(f"oom_kill_disable 0\noom_kill {n}\n")
    u = g.usage("h")
    assert u["cpu_s"] == 3.0 and u["oom_kills"] == 2  # v1: the host's subtree, added up


# --------------------------------------------------------------------------------------
# Real groups


def _run_in(ec: netns.EmulatedCluster, group: str, code: str) -> subprocess.Popen:
    """``python -c code`` inside host ``group``'s namespace and control group."""
    host = group.split("/")[0]
    argv = ec.groups.wrap(ec.exec_prefix(host) + [sys.executable, "-c", code], group)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


BURN = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 2.0: pass\n"


@needs_groups
def test_cpu_quota_holds() -> None:
    """A 1-core host at D = 4 has 0.25 of a core: two processes burning CPU for 2 s use at
    most that together (cpuacct), and a single one no more than its own quota."""
    spec = _spec("c", [{"name": "a", "cpus": 1, "memory_gb": 1}])
    with netns.emulated(spec, gateway=False, cgroups=True, dilation=4.0) as ec:
        g = ec.groups
        assert g.shares["a"].cpu_cores == 0.25
        leaves = [g.role("a", f"burn-{i}") for i in range(2)]
        before = g.usage("a")["cpu_s"]
        t0 = time.monotonic()
        procs = [_run_in(ec, leaf, BURN) for leaf in leaves]
        for p in procs:
            assert p.wait(30) == 0, p.stderr.read() if p.stderr else ""
        wall = time.monotonic() - t0
        used = g.usage("a")["cpu_s"] - before
        each = [g.usage("a", leaf)["cpu_s"] for leaf in leaves]
        throttled = g.usage("a", g.cpu_group("a"))["throttled_s"]
    assert used / wall <= 0.30, (used, wall)  # 0.25 of a core, and some slack
    assert all(e / 2.0 <= 0.30 for e in each), each
    assert used > 0.05 and throttled > 0, (used, throttled)  # it ran, and the quota bit
    assert _left(spec.name) == []


@needs_groups
def test_memory_limit_kills_like_a_real_host() -> None:
    """A process that touches more than its host's memory_gb is killed by the kernel (SIGKILL,
    the group's OOM counter rises), as on a host without swap."""
    from gnnsched.runtime.netns_launcher import NetnsLauncher
    from gnnsched.runtime.role_process import Process, RoleLaunch

    spec = _spec("o", [{"name": "small", "cpus": 1, "memory_gb": 0.4}])  # above its floor
    with netns.emulated(spec, cgroups=True, dilation=1.0) as ec:
        g = ec.groups
        assert g.shares["small"].memory == int(0.4 * GB)
        launcher = NetnsLauncher(spec, fork_server=False)
        leaf = g.role("small", "store-hog")
        ok = _run_in(ec, leaf, "b = bytearray(20 << 20); print(len(b))")
        assert ok.wait(30) == 0  # 20 MB fits
        hog = _run_in(ec, leaf, "b = bytearray(600 << 20)\nprint('survived')")
        code = hog.wait(30)
        out = hog.stdout.read() if hog.stdout else ""
        usage = g.usage("small")
        role = Process(RoleLaunch("store", "hog", "small", "", Path(os.devnull)), hog)
        why = launcher.explain_exit(role)
    assert code == -signal.SIGKILL, (code, out)
    assert why and "killed by the kernel: out of memory" in why, why
    assert "survived" not in out
    assert usage["oom_kills"] >= 1, usage
    assert usage["memory_peak"] <= int(0.4 * GB) + (1 << 20), usage
    assert _left(spec.name) == []


@needs_groups
def test_cluster_up_status_down_leaves_no_group(tmp_path: Path) -> None:
    """`gnnsched cluster up` makes the groups, `status` shows each host's quota, limit and
    usage, `down` kills what still runs in a group and removes every group it made."""
    data = _data("u", [{"name": "store", "cpus": 3, "memory_gb": 0.5},
                       {"name": "gpu", "cpus": 1, "memory_gb": 0.5, "gpus": [{"speed": 1.0}]}])
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    name = data["name"]
    gnn = [sys.executable, "-m", "gnnsched", "cluster"]
    stray = None
    try:
        r = subprocess.run(gnn + ["up", "--cluster", str(path), "--no-gateway", "--cores", "1",
                                  "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        up = json.loads(r.stdout)
        assert up["dilation"] == pytest.approx(5.0) and up["cgroups"]  # 5 cores on 1
        assert netns.dilation(name) == pytest.approx(5.0)
        assert _left(name), "no groups were made"
        r = subprocess.run(gnn + ["status", "--cluster", name, "--json"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        (st,) = json.loads(r.stdout)
        rows = {h["host"]: h for h in st["hosts"]}
        assert st["dilation"] == pytest.approx(5.0)
        assert rows["gpu"]["cpu_quota_cores"] == pytest.approx(0.4)
        assert rows["gpu"]["device_quota_cores"] == [pytest.approx(0.2)]
        assert rows["store"]["memory_limit"] == int(0.5 * GB)
        assert rows["store"]["usage"]["cpu_s"] is not None
        assert rows["store"]["tc_egress_Bps"] == pytest.approx(0.1 * GBIT / 5, rel=0.01)
        text = subprocess.run(gnn + ["status", "--cluster", name], capture_output=True,
                              text=True, timeout=60).stdout
        assert "dilation D = 5" in text and "cpu quota" in text
        # a process left in a host's group (not in its namespace): down must stop it too
        groups = netns.EmulatedCluster.attach(cluster_from_dict(data, str(path))).groups
        stray = subprocess.Popen(groups.wrap(["sleep", "60"], groups.role("store", "stray")))
        r = subprocess.run(gnn + ["down", "--cluster", name], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert "cgroup" in r.stdout
        assert stray.wait(10) != 0
        assert _left(name) == []
        assert netns.dilation(name) is None
    finally:
        if stray is not None and stray.poll() is None:
            stray.kill()
        subprocess.run(gnn + ["down", "--cluster", name], capture_output=True, timeout=60)
    assert _left(name) == []


def _wait_group(groups: cg.ClusterGroups, pid: int, want: str, timeout: float = 10) -> dict:
    end = time.monotonic() + timeout
    while True:
        got = groups.group_of(pid)
        if set(got.values()) == {want} or time.monotonic() > end:
            return got
        time.sleep(0.02)


@needs_groups
def test_netns_launcher_starts_roles_in_their_hosts_groups(tmp_path: Path) -> None:
    """A role forked by a host's fork server runs in its own group under the host's CPU group,
    a trainer in its device's group, the fork server in the host's; without a fork server the
    role is in its group as well."""
    from gnnsched.runtime.netns_launcher import NetnsLauncher
    from gnnsched.runtime.role_process import RoleLaunch

    spec = _spec("l", [{"name": "g", "cpus": 1, "memory_gb": 2, "gpus": [{"speed": 1.0}]}])
    with netns.emulated(spec, cgroups=True, cores=1.0) as ec:
        assert ec.dilation == 2.0
        launcher = NetnsLauncher(spec)
        groups = launcher.groups
        assert groups is not None and launcher.dilation == 2.0 and launcher.cpu_model
        endpoint = f"tcp://{ec.gateway_address}:9"  # nobody answers: roles just wait

        def launch(role: str, rid: str, **kw: Any) -> RoleLaunch:
            return RoleLaunch(role, rid, "g", endpoint, tmp_path / f"{role}-{rid}.log",
                              start_timeout=60, orphan_timeout=60, **kw)

        try:
            sampler = launcher.start(launch("sampler", "0"))
            trainer = launcher.start(launch("trainer", "0", device=0))
            zygote = launcher.zygotes["g"].popen.pid
            for proc, want in ((sampler, "g/cpu/sampler-0"), (trainer, "g/dev0"),
                               (None, "g/cpu/zygote")):
                pid = zygote if proc is None else proc.pid
                got = groups.group_of(pid)
                assert set(got.values()) == {want}, (want, got)
                assert proc is None or proc.poll() is None, proc.log.read_text()
            launcher.fork_server = False
            fresh = launcher.start(launch("fetcher", "g"))
            got = _wait_group(groups, fresh.pid, "g/cpu/fetcher-g")
            assert set(got.values()) == {"g/cpu/fetcher-g"}, got
            # the sampler's group holds a quota of its own: one thread, 1/D of a core
            cpu_dir = Path(groups.dirs["cpu"], "g/cpu/sampler-0")
            quota = int((cpu_dir / "cpu.cfs_quota_us").read_text())
            period = int((cpu_dir / "cpu.cfs_period_us").read_text())
            assert quota / period == pytest.approx(0.5, abs=0.01)
        finally:
            launcher.stop_all(grace=1.0)
    assert _left(spec.name) == []
