"""The ssh launcher for real: OpenSSH servers inside the emulated cluster's namespaces.

Each host of examples/lab4 (Cora, 4 METIS partitions, 2 trainers) is a network namespace
running its own ``sshd`` (keys made here: a host key in a known_hosts file, a client key in
authorized_keys; nothing of the user's ~/.ssh is read). ``gnnsched train --launcher ssh``
then trains the hand plan of tests/runtime/test_runtime.py to completion, and:

* its accuracy equals the netns launcher's on the same plan and the single-process reference
  (the runtime is deterministic);
* nothing is left on any host (no process in any namespace but its sshd, no local ssh
  client) after success, after a killed role (recovered, the run completes) and after Ctrl-C;
* a host killed mid-run (its sshd and every process in its namespace) is re-planned around
  (docs/robustness.md), and training completes with the same accuracy;
* a bad address, a missing host, a version mismatch and missing partitions each end with one
  clear error naming the host and the fix, before any role starts (``gnnsched train`` and
  ``gnnsched cluster check``).

Needs root, ``ip netns`` and OpenSSH's server (``apt-get install -y openssh-server``);
skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.runtime import netns
from gnnsched.spec import ClusterSpec, cluster_from_dict, load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
SSHD = "/usr/sbin/sshd"
PY = sys.executable


def _unavailable() -> str | None:
    why = netns.unavailable_reason()
    if why is not None:
        return f"emulated cluster unavailable: {why}"
    if not os.access(SSHD, os.X_OK):
        return f"no OpenSSH server ({SSHD}): apt-get install -y openssh-server"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install -y openssh-client)"
    return None


REASON = _unavailable()
pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def _plan(cluster: ClusterSpec) -> Plan:
    """tests/runtime/test_runtime.py's hand plan: trainer 0 gathers through a relay on store0,
    trainer 1 pulls from the stores itself."""
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


SSHD_CONFIG = """\
ListenAddress {addr}
Port {port}
HostKey {key}
AuthorizedKeysFile {auth}
PidFile {pid}
StrictModes no
UsePAM no
UseDNS no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
X11Forwarding no
PrintMotd no
"""


@dataclass
class SshCluster:
    """The emulated lab4 with an sshd per host, and what a test needs to train on it."""

    net: netns.EmulatedCluster
    cluster: ClusterSpec  # machines with ssh: root@ADDR
    cluster_file: Path
    plan_file: Path
    parts: Path
    dir: Path
    env: dict[str, str]  # GNNSCHED_SSH_OPTIONS: this test's key and known_hosts
    sshd: dict[str, subprocess.Popen]
    job: object
    reference: float  # the single-process reference's test accuracy (2 epochs)

    def addr(self, host: str) -> str:
        return str(self.net.address(host))

    def start_sshd(self, host: str, port: int = 22, wrap: list[str] | None = None,
                   extra: str = "") -> subprocess.Popen:
        """``sshd -D`` inside ``host``'s namespace on ADDR:``port`` (``wrap``: a command
        prefix run inside the namespace first, e.g. a private mount namespace)."""
        d = self.dir
        conf = d / f"sshd-{host}-{port}.conf"
        conf.write_text(SSHD_CONFIG.format(addr=self.addr(host), port=port,
                                           key=d / "host_key", auth=d / "authorized_keys",
                                           pid=d / f"sshd-{host}-{port}.pid") + extra)
        argv = [*self.net.exec_prefix(host), *(wrap or []), SSHD, "-D", "-e", "-f", str(conf)]
        log = open(d / f"sshd-{host}-{port}.log", "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        log.close()
        end = time.monotonic() + 10
        while time.monotonic() < end:
            assert p.poll() is None, (d / f"sshd-{host}-{port}.log").read_text()
            try:
                socket.create_connection((self.addr(host), port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail(f"sshd on {host}:{port} did not start")
        if port == 22:
            self.sshd[host] = p
        return p

    def train_argv(self, run: Path, *extra: str, cluster: Path | None = None,
                   epochs: int = 2) -> list[str]:
        return [PY, "-m", "gnnsched", "train", "--cluster", str(cluster or self.cluster_file),
                "--job", str(LAB4 / "job.yaml"), "--plan", str(self.plan_file),
                "--partitions", str(self.parts), "--out", str(run), "--epochs", str(epochs),
                "--launcher", "ssh", "--remote-python", PY, *extra]

    def leftovers(self, grace: float = 10.0) -> list[str]:
        """Processes left in any host's namespace (but its sshd listener), and local ssh
        clients to any host, after ``grace`` seconds."""
        addrs = {self.addr(h) for h in self.net.hosts}
        end = time.monotonic() + grace
        while True:
            left = []
            for host in self.net.hosts:
                ns = self.net.host(host).ns
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                keep = {self.sshd[host].pid} if host in self.sshd else set()
                for pid in {int(p) for p in pids} - keep:
                    try:
                        proc = psutil.Process(pid)
                        if proc.status() == psutil.STATUS_ZOMBIE:
                            continue
                        cmd = " ".join(proc.cmdline())
                    except psutil.NoSuchProcess:
                        continue
                    if cmd.startswith("sshd: ") and "[listener]" in cmd:
                        continue  # a listener restarted by a test
                    left.append(f"{host}: {pid} {cmd}")
            for proc in psutil.process_iter(["cmdline"]):
                cmd = proc.info["cmdline"] or []
                if cmd[:1] == ["ssh"] and any(f"@{a}" in " ".join(cmd) for a in addrs):
                    left.append(f"local: {proc.pid} {' '.join(cmd)[:200]}")
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ssh_cluster(tmp_path_factory: pytest.TempPathFactory) -> SshCluster:
    import yaml

    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.runtime.reference import reference_train

    d = tmp_path_factory.mktemp("ssh")
    job = replace(load_job(LAB4 / "job.yaml"), epochs=2)
    parts = tmp_path_factory.mktemp("sshparts") / "cora4"
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    base = load_cluster(LAB4 / "cluster.yaml").to_dict()
    base["name"] = f"ssh{os.getpid() % 100000}"  # its own namespaces
    for m in base["machines"]:
        m.pop("address", None)  # auto-addressed: never collides with a running lab4
    net = netns.EmulatedCluster(cluster_from_dict(base, "<test>"), cgroups=False).up()
    sshd: dict[str, subprocess.Popen] = {}
    try:
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                            str(d / name)], check=True)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        hostkey = " ".join((d / "host_key.pub").read_text().split()[:2])
        (d / "known_hosts").write_text("".join(
            f"{net.address(h)} {hostkey}\n[{net.address(h)}]:2222 {hostkey}\n"
            for h in net.hosts))
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        spec = dict(base)
        spec["machines"] = [dict(m, address=str(net.address(m["name"])),
                                 ssh=f"root@{net.address(m['name'])}")
                            for m in base["machines"]]
        (d / "cluster.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        cluster = load_cluster(d / "cluster.yaml")
        _plan(cluster).save(d / "plan.json")
        opts = (f"-F /dev/null -i {d / 'client_key'} -o IdentitiesOnly=yes "
                f"-o UserKnownHostsFile={d / 'known_hosts'} -o StrictHostKeyChecking=yes "
                "-o LogLevel=ERROR")
        ref = reference_train(job, str(parts), [[0, 1], [2, 3]])
        sc = SshCluster(net, cluster, d / "cluster.yaml", d / "plan.json", parts, d,
                        {**os.environ, "GNNSCHED_SSH_OPTIONS": opts}, sshd, job,
                        ref.test_accuracy)
        for host in net.hosts:
            sc.start_sshd(host)
        old = os.environ.get("GNNSCHED_SSH_OPTIONS")
        os.environ["GNNSCHED_SSH_OPTIONS"] = opts  # for the launchers made in this process
        try:
            yield sc
        finally:
            if old is None:
                os.environ.pop("GNNSCHED_SSH_OPTIONS", None)
            else:
                os.environ["GNNSCHED_SSH_OPTIONS"] = old
    finally:
        for p in sshd.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
        net.down()
    left = [n for n in netns.list_namespaces() if n in net.namespaces]
    assert left == [] and not net.state_file.exists()


def _records(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def _every_batch_trained(run: Path, epochs: int, once: bool = True) -> None:
    """Every trainer trained each mini-batch of every epoch (``once``: exactly once; a
    recovered run also records the steps it replayed)."""
    recs = _records(run)
    batches = Counter((r["epoch"], r["trainer"], r["index"]) for r in recs
                      if r["type"] == "batch" and r["phase"] == "train")
    K = max(k for _, _, k in batches) + 1
    assert set(batches) == {(e, w, k) for e in range(epochs) for w in range(2)
                            for k in range(K)}
    if once:
        assert set(batches.values()) == {1}


def _summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _wait_for_training(proc: subprocess.Popen, run: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        m = run / "metrics.jsonl"
        if m.exists() and '"type":"batch"' in m.read_text():
            return
        time.sleep(0.1)
    pytest.fail("training did not start")


# ---------------------------------------------------------------------- training over ssh


@pytest.mark.slow
def test_ssh_trains_like_netns_and_leaves_nothing(ssh_cluster: SshCluster, tmp_path: Path
                                                  ) -> None:
    sc = ssh_cluster
    t0 = time.monotonic()
    res = subprocess.run(sc.train_argv(tmp_path / "run", "--json"), env=sc.env,
                         capture_output=True, text=True, timeout=300)
    print(f"ssh run {time.monotonic() - t0:.1f} s", res.stderr[-2000:])
    assert res.returncode == 0, res.stderr[-3000:]
    got = _summary(res.stdout)
    assert got["launcher"] == "ssh"
    log = (tmp_path / "run" / "logs" / "coordinator.log").read_text()
    assert "(ssh launcher" in log
    # every role ran on its host, through that host's sshd: its fork server's session
    assert {p.name for p in (tmp_path / "run" / "logs").glob("zygote-*.log")} == {
        f"zygote-{h}.log" for h in sc.net.hosts}
    _every_batch_trained(tmp_path / "run", 2)
    assert not sc.leftovers(), "a process outlived the run"
    # the same plan through the netns launcher: the same accuracy, and the reference's
    from gnnsched.api import train
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.runtime.netns_launcher import NetnsLauncher

    t0 = time.monotonic()
    netres = train(sc.cluster, sc.job, _plan(sc.cluster),
                   launcher=NetnsLauncher(sc.cluster, emulated=sc.net),
                   out_dir=tmp_path / "netns", partitions=sc.parts,
                   options=RuntimeOptions(start_timeout=240, request_timeout=60))
    print(f"netns run {time.monotonic() - t0:.1f} s")
    assert got["test_accuracy"] == pytest.approx(netres.test_accuracy, abs=1e-9)
    assert got["test_accuracy"] == pytest.approx(sc.reference, abs=1e-9)
    assert not sc.leftovers()


@pytest.mark.slow
def test_ssh_recovers_a_killed_role_then_a_killed_host(ssh_cluster: SshCluster,
                                                       tmp_path: Path) -> None:
    """First ``--kill-at trainer:1:3``: SIGKILL to the trainer on its host (over ssh); gpu1
    still answers, so it restarts in place from the last checkpoint. Then store1 dies: its
    sshd and every process in its namespace, SIGKILL. The coordinator sees its roles gone and
    ssh to it refused, so it re-plans on the cluster without it (its partitions reload on
    store0 from shared storage). The run completes with the undisturbed accuracy, and nothing
    is left on any host."""
    sc = ssh_cluster
    run = tmp_path / "run"
    proc = subprocess.Popen(sc.train_argv(run, "--json", "--kill-at", "trainer:1:3",
                                          "--checkpoint-every", "2"),
                            env=sc.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ns = sc.net.host("store1").ns
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end:  # the first recovery is over: kill the host
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            m = run / "metrics.jsonl"
            if m.exists() and '"type":"caught_up"' in m.read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("no recovery from the killed trainer")
        os.killpg(sc.sshd["store1"].pid, signal.SIGKILL)
        sc.sshd["store1"].wait(5)
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        sc.start_sshd("store1")  # back for the other tests
    assert proc.returncode == 0, err[-3000:]
    got = _summary(out)
    assert [(r["role"].split(":")[0], r["machine"]) for r in got["recoveries"]][:1] == [
        ("trainer", "gpu1")], got["recoveries"]
    first, second = got["recoveries"][0], got["recoveries"][1]
    assert "-9" in first["how"] and not first["replanned"], first
    assert second["machine"] == "store1" and second["replanned"], second
    log = (run / "logs" / "coordinator.log").read_text()
    assert "machine gpu1 is alive: only a process died, same plan, restarted in place" in log
    assert "machine store1 is unreachable: re-planned on the cluster without it" in log
    _every_batch_trained(run, 2, once=False)
    assert got["test_accuracy"] == pytest.approx(sc.reference, abs=1e-9)
    assert not sc.leftovers(), "a process outlived the recovered run"


@pytest.mark.slow
def test_ssh_ctrl_c_leaves_nothing(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    sc = ssh_cluster
    run = tmp_path / "run"
    proc = subprocess.Popen(sc.train_argv(run, epochs=50), env=sc.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_training(proc, run)
        assert sc.leftovers(grace=0), "no role is running"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted; all processes stopped" in out
    assert not sc.leftovers(), "a process outlived Ctrl-C"


# ---------------------------------------------------------------------- before any role starts


def _fake_versions(sc: SshCluster, host: str) -> Path:
    """A remote Python that is this one, except that on ``host`` the installed torch says
    1.0.0 (a dist-info ahead on its path): a host with another torch."""
    fake = sc.dir / "fake-site"
    (fake / "torch-1.0.0.dist-info").mkdir(parents=True, exist_ok=True)
    (fake / "torch-1.0.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 1.0.0\n")
    py = sc.dir / "python-other-torch"
    py.write_text(f'#!/bin/sh\nif [ "$(ip netns identify)" = "{sc.net.host(host).ns}" ]; '
                  f'then export PYTHONPATH={fake}; fi\nexec {PY} "$@"\n')
    py.chmod(0o755)
    return py


def _hidden_partitions_sshd(sc: SshCluster, host: str) -> subprocess.Popen:
    """A second sshd on ``host`` (port 2222) in a mount namespace where the partition folder
    does not exist: a host the partitions were never copied to."""
    return sc.start_sshd(host, 2222, wrap=["unshare", "-m", "--propagation", "private", "sh",
                                           "-c", f"mount -t tmpfs none {sc.parts.parent} && "
                                           'exec "$@"', "sh"])


def _bad_cluster(sc: SshCluster, **ssh: str) -> Path:
    """The ssh cluster file with some machines' ssh (and address) replaced."""
    import yaml

    d = sc.cluster.to_dict()
    for m in d["machines"]:
        if m["name"] in ssh:
            m["ssh"] = ssh[m["name"]]
            host = ssh[m["name"]].removeprefix("ssh://").split("@")[-1].rsplit(":", 1)[0]
            if host[0].isdigit():
                m["address"] = host
            else:
                m.pop("address", None)
    path = sc.dir / f"bad-{'-'.join(sorted(ssh))}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _nobody(sc: SshCluster) -> str:
    """An address in the cluster's subnet that no host holds."""
    return sc.addr("store0").rsplit(".", 1)[0] + ".200"


def _preflight(sc: SshCluster, cluster_file: Path, **kw) -> str:
    from gnnsched.runtime.role_process import LaunchError
    from gnnsched.runtime.ssh_launcher import SshLauncher

    launcher = SshLauncher(load_cluster(cluster_file), remote_python=kw.pop("python", PY),
                           connect_timeout=3, **kw)
    with pytest.raises(LaunchError) as err:
        launcher.preflight([m.name for m in launcher.cluster.machines], timeout=3)
    text = str(err.value)
    assert "\n" not in text
    print(text)
    return text


def test_preflight_bad_address(ssh_cluster: SshCluster) -> None:
    sc = ssh_cluster
    text = _preflight(sc, _bad_cluster(sc, store0=f"root@{_nobody(sc)}"))
    assert f"store0 (root@{_nobody(sc)}): host unreachable" in text
    assert "fix: check that the host is up" in text and "machines[0].ssh" in text
    assert "store1" not in text and "gpu0" not in text


def test_preflight_missing_host(ssh_cluster: SshCluster) -> None:
    sc = ssh_cluster
    text = _preflight(sc, _bad_cluster(sc, gpu1="root@gpu9.invalid"))
    assert "gpu1 (root@gpu9.invalid): host name does not resolve" in text
    assert "fix: correct machines[3].ssh" in text


def test_preflight_version_mismatch(ssh_cluster: SshCluster) -> None:
    sc = ssh_cluster
    import importlib.metadata as md

    text = _preflight(sc, sc.cluster_file, python=str(_fake_versions(sc, "gpu0")))
    assert f"gpu0 (root@{sc.addr('gpu0')}): torch 1.0.0 in" in text
    assert f"this machine has torch {md.version('torch')}; fix: install torch==" in text
    assert "store0" not in text and "gpu1" not in text


def test_preflight_missing_partitions(ssh_cluster: SshCluster) -> None:
    sc = ssh_cluster
    sshd = _hidden_partitions_sshd(sc, "store1")
    try:
        bad = _bad_cluster(sc, store1=f"ssh://root@{sc.addr('store1')}:2222")
        text = _preflight(sc, bad, partitions=str(sc.parts))
    finally:
        os.killpg(sshd.pid, signal.SIGTERM)
        sshd.wait(10)
    assert f"store1 (ssh://root@{sc.addr('store1')}:2222): partitions missing at " \
           f"{sc.parts}; fix: copy the partition folder to the same path" in text
    assert "store0" not in text and "gpu0" not in text


def test_train_says_every_problem_before_any_role_starts(ssh_cluster: SshCluster,
                                                         tmp_path: Path) -> None:
    """``gnnsched train --launcher ssh`` on a cluster with a bad address (store0), a missing
    host (gpu1), a host with another torch (gpu0) and a host without the partitions (store1):
    one error line, exit 2, and no role was started.

    The partitions are checked once the coordinator tells the launcher which folder the run
    uses (``Launcher.bind_run`` before ``preflight``); until then three problems are found."""
    import inspect

    from gnnsched.runtime.coordinator import Coordinator

    binds = "bind_run" in inspect.getsource(Coordinator.run)
    sc = ssh_cluster
    sshd = _hidden_partitions_sshd(sc, "store1")
    try:
        bad = _bad_cluster(sc, store0=f"root@{_nobody(sc)}", gpu1="root@gpu9.invalid",
                           store1=f"ssh://root@{sc.addr('store1')}:2222")
        _plan(load_cluster(bad)).save(tmp_path / "plan.json")  # a plan for this cluster file
        argv = sc.train_argv(tmp_path / "run", cluster=bad)
        argv[argv.index("--plan") + 1] = str(tmp_path / "plan.json")
        argv[argv.index("--remote-python") + 1] = str(_fake_versions(sc, "gpu0"))
        env = dict(sc.env, GNNSCHED_SSH_OPTIONS=sc.env["GNNSCHED_SSH_OPTIONS"]
                   + " -o ConnectTimeout=3")
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    finally:
        os.killpg(sshd.pid, signal.SIGTERM)
        sshd.wait(10)
    assert res.returncode == 2, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    n = 4 if binds else 3
    assert len(lines) == 1 and lines[0].startswith("gnnsched train: error: host check failed "
                                                   f"before any role started ({n} problems)"), \
        lines
    want = [f"store0 (root@{_nobody(sc)}): host unreachable", "gpu1 (root@gpu9.invalid): "
            "host name does not resolve", f"gpu0 (root@{sc.addr('gpu0')}): torch 1.0.0"]
    if binds:
        want.append(f"store1 (ssh://root@{sc.addr('store1')}:2222): partitions missing at "
                    f"{sc.parts}")
    for what in want:
        assert what in lines[0]
    assert lines[0].count("fix: ") == n
    logs = {p.name for p in (tmp_path / "run" / "logs").iterdir()}
    assert logs == {"coordinator.log"}, logs  # no role, no fork server ever started
    assert not sc.leftovers(grace=0)


def test_cluster_check(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """``gnnsched cluster check``: every host ready (exit 0); then every problem at once, one
    line each naming the host and the fix (exit 2)."""
    sc = ssh_cluster
    base = [PY, "-m", "gnnsched", "cluster", "check", "--remote-python", PY, "--partitions",
            str(sc.parts), "--out", str(tmp_path / "runs")]
    ok = subprocess.run([*base, "--cluster", str(sc.cluster_file)], env=sc.env,
                        capture_output=True, text=True, timeout=60)
    print(ok.stdout)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok: all 4 hosts are ready for gnnsched train --launcher ssh" in ok.stdout
    for h in sc.net.hosts:
        assert re.search(rf"^\s+{h}\s+ok\s", ok.stdout, re.M), ok.stdout
    assert ok.stderr == ""
    sshd = _hidden_partitions_sshd(sc, "store1")
    try:
        bad = _bad_cluster(sc, store0=f"root@{_nobody(sc)}", gpu1="root@gpu9.invalid",
                           store1=f"ssh://root@{sc.addr('store1')}:2222")
        argv = [*base, "--cluster", str(bad), "--timeout", "3"]
        argv[argv.index("--remote-python") + 1] = str(_fake_versions(sc, "gpu0"))
        res = subprocess.run(argv, env=sc.env, capture_output=True, text=True, timeout=60)
    finally:
        os.killpg(sshd.pid, signal.SIGTERM)
        sshd.wait(10)
    print(res.stdout, res.stderr)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("gnnsched cluster check: "
                                                                    "error: ")]
    hosts = [ln.split("error: ", 1)[1].split(" ", 1)[0] for ln in errors]
    assert set(hosts) == {"gpu0", "gpu1", "store0", "store1"}, res.stderr
    assert all("; fix: " in ln for ln in errors)
    assert any("store1" in ln and "partitions missing" in ln for ln in errors)


def test_cluster_check_ports(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """A coordinator address the hosts cannot reach (here: this machine's loopback, which is
    each host's own) is found before a run: every host says it cannot connect to it."""
    sc = ssh_cluster
    res = subprocess.run([PY, "-m", "gnnsched", "cluster", "check", "--cluster",
                          str(sc.cluster_file), "--remote-python", PY, "--out",
                          str(tmp_path / "runs"), "--coordinator-address", "127.0.0.1",
                          "--port", "29999"],
                         env=sc.env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "error: " in ln]
    assert len(errors) == 4, res.stderr
    for h, ln in zip(sc.net.hosts, errors):
        assert ln.startswith(f"gnnsched cluster check: error: {h} (root@{sc.addr(h)}): cannot "
                             "connect to the coordinator at 127.0.0.1:29999 ("), ln
        assert "fix: open TCP ports 20000-60000 (or the --port you pin)" in ln
    assert "ports blocked to coordinator" in res.stdout
