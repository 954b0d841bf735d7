"""The Ray launcher for real: a local multi-node Ray cluster on this machine.

One raylet per host of examples/lab4 (Cora, 4 METIS partitions, 2 trainers), each carrying its
host's resource ``gnnsched-host:NAME`` (two logical CPUs, 80 MB of object store each: the
box is small). Then:

* the hand plan of tests/runtime/test_runtime.py trains to completion through ``RayLauncher``, every
  role in an actor on the node its host's resource names, with the local launcher's accuracy
  (the runtime is deterministic); afterwards no actor is alive, the placement group is
  removed, ``ray status`` shows no host resource in use and no role process is left;
* ``gnnsched plan --from-ray`` reads the hosts from Ray, and ``gnnsched train --launcher ray``
  trains that plan while the test kills a trainer's actor from outside (``ray.kill``, as an
  operator or a lost node would): the coordinator recovers it and the run completes;
* a bad address, a missing host and a version mismatch each end with one clear error naming
  the host and the fix, before any role starts.

Skipped, with the reason, only where Ray is not installed or a local Ray cluster cannot start.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import ClusterSpec, load_cluster, load_job

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gnnsched[ray]')")

from gnnsched.runtime.ray_launcher import NAMESPACE  # noqa: E402  (after the skip)

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
PY = sys.executable
EPOCHS = 2
OBJECT_STORE = 80 * 2**20
CPUS = 2  # per host, as Ray counts them: 3 hosts must still seat 2 trainers and 2 samplers
pytestmark = pytest.mark.slow


def _plan(cluster: ClusterSpec) -> Plan:
    """Trainer 0 gathers through a relay on store0; trainer 1 pulls from the stores itself."""
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


@dataclass
class RayCluster:
    address: str
    cluster: ClusterSpec
    job: Any
    parts: Path
    dir: Path
    ray_cluster: Any  # ray.cluster_utils.Cluster
    nodes: dict[str, Any]  # host name -> its raylet (ray.cluster_utils)

    def add_host(self, name: str, gpus: int = 0) -> None:
        """(Re)start the raylet of host ``name``."""
        from gnnsched.runtime.ray_launcher import host_resource

        self.nodes[name] = self.ray_cluster.add_node(
            num_cpus=CPUS, num_gpus=gpus, resources={host_resource(name): 1},
            object_store_memory=OBJECT_STORE)
        self.ray_cluster.wait_for_nodes()

    def add_odd_node(self) -> Any:
        """A node ``odd`` whose Python sees gnnsched 9.9.9 (a dist-info ahead of the real
        one on its PYTHONPATH): another gnnsched on a host."""
        from gnnsched.runtime.ray_launcher import host_resource

        fake = self.dir / "fake-site" / "gnnsched-9.9.9.dist-info"
        fake.mkdir(parents=True, exist_ok=True)
        (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: gnnsched\n"
                                       "Version: 9.9.9\n")
        node = self.ray_cluster.add_node(num_cpus=1, resources={host_resource("odd"): 1},
                                         object_store_memory=OBJECT_STORE,
                                         env_vars={"PYTHONPATH": str(fake.parent)})
        self.ray_cluster.wait_for_nodes()
        return node


@pytest.fixture(scope="module")
def rc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ray.cluster_utils import Cluster

    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.runtime.ray_launcher import host_resource

    d = tmp_path_factory.mktemp("ray")
    cluster = load_cluster(LAB4 / "cluster.yaml")
    job = replace(load_job(LAB4 / "job.yaml"), epochs=EPOCHS)
    parts = d / "cora4"
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    nodes = [(m.name, {"num_gpus": len(m.gpus)} if m.gpus else {}) for m in cluster.machines]
    rcl = None
    handles: dict[str, Any] = {}
    try:
        rcl = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=CPUS, resources={host_resource(nodes[0][0]): 1},
            object_store_memory=OBJECT_STORE, include_dashboard=False, **nodes[0][1]))
        for name, extra in nodes[1:]:
            handles[name] = rcl.add_node(num_cpus=CPUS, resources={host_resource(name): 1},
                                         object_store_memory=OBJECT_STORE, **extra)
        rcl.wait_for_nodes()
        ray.init(address=rcl.address, namespace=NAMESPACE, log_to_driver=False)
    except Exception as exc:  # no Ray here (a sandbox without /dev/shm, ports, ...)
        if rcl is not None:
            rcl.shutdown()
        pytest.skip(f"a local Ray cluster cannot start here: {type(exc).__name__}: {exc}")
    try:
        yield RayCluster(rcl.address, cluster, job, parts, d, rcl, handles)
    finally:
        ray.shutdown()
        rcl.shutdown()


def _role_processes(run: Path) -> list[str]:
    """Role processes of the run in ``run`` still alive (anywhere on this box)."""
    left = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "gnnsched.runtime.role" in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            try:
                opened = {f.path for f in p.open_files()}
            except psutil.Error:
                opened = set()
            if any(str(run) in f for f in opened) or str(run) in cmd:
                left.append(f"{p.pid} {cmd[:160]}")
    return left


def _nothing_left(address: str, run: Path, token: str | None = None) -> None:
    """No live actor of ours, every placement group removed, no host resource held (as
    ``ray status`` shows it), no role process."""
    from ray._private import state

    end = time.monotonic() + 20
    while True:
        actors = [a for a in state.actors().values() if a.get("State") != "DEAD"
                  and (token is None or token in str(a.get("Name")))]
        groups = [g for g in ray.util.placement_group_table().values()
                  if g["state"] != "REMOVED"]
        held = {k: v for k, v in ray.cluster_resources().items()
                if k.startswith("gnnsched-host:") and
                ray.available_resources().get(k, 0) < v}
        procs = _role_processes(run)
        if not (actors or groups or held or procs) or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert not actors, actors
    assert not groups, groups
    assert not held, held
    assert not procs, procs
    end = time.monotonic() + 30  # `ray status` reports the autoscaler's view: a moment late
    while True:
        status = subprocess.run([str(Path(PY).with_name("ray")), "status", "--address",
                                 address], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr[-2000:]
        usage = status.stdout.split("Usage:", 1)[-1]
        used = [ln for ln in usage.splitlines() if "gnnsched-host:" in ln
                and not ln.strip().startswith("0.0/")]
        if not used or time.monotonic() > end:
            break
        time.sleep(1.0)
    assert not used, status.stdout


def _records(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def _every_batch_trained(run: Path, once: bool = True, epochs: int = EPOCHS) -> None:
    batches = Counter((r["epoch"], r["trainer"], r["index"]) for r in _records(run)
                      if r["type"] == "batch" and r["phase"] == "train")
    K = max(k for _, _, k in batches) + 1
    assert set(batches) == {(e, w, k) for e in range(epochs) for w in range(2)
                            for k in range(K)}
    if once:
        assert set(batches.values()) == {1}


OPTS: dict[str, Any] = dict(start_timeout=240, request_timeout=60, stop_grace_s=10,
                            checkpoint_every=4, heartbeat_s=0.5, dead_after_s=5.0)


# ---------------------------------------------------------------------- training on Ray


def test_ray_trains_on_the_planned_nodes_and_leaves_nothing(rc: RayCluster, tmp_path: Path
                                                            ) -> None:
    from gnnsched.api import train
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.runtime.ray_launcher import RayLauncher, RayProcess

    plan = _plan(rc.cluster)
    launcher = RayLauncher(rc.cluster, ray_address=rc.address)
    placed: dict[str, tuple[str, str]] = {}

    def watch(kind: str, **kw: Any) -> None:  # mid-run: where every role's actor runs
        if kind == "batch" and not placed:
            for p in launcher.procs:
                assert isinstance(p, RayProcess)
                placed[p.name] = (p.launch.machine, p.node_id)

    t0 = time.monotonic()
    res = train(rc.cluster, rc.job, plan, launcher=launcher, out_dir=tmp_path / "ray",
                partitions=rc.parts, options=RuntimeOptions(**OPTS), progress=watch)
    print(f"ray run {time.monotonic() - t0:.1f} s")
    assert res.launcher == "ray" and not res.recoveries
    log = (tmp_path / "ray" / "logs" / "coordinator.log").read_text()
    assert "(ray launcher" in log
    _every_batch_trained(tmp_path / "ray")
    # every role ran on the node that carries its host's resource
    assert set(placed) == {"store:store0", "store:store1", "sampler:0", "sampler:1",
                           "fetcher:store0", "trainer:0", "trainer:1"}
    for name, (machine, node) in placed.items():
        assert node == launcher.nodes[machine].node_id, (name, machine)
    want = {m: launcher.nodes[m].node_id for m in ("store0", "store1", "gpu0", "gpu1")}
    table = [g for g in ray.util.placement_group_table().values()
             if g["name"].startswith(f"gnnsched/{launcher.token}")]
    assert len(table) == 1
    bundles = table[0]["bundles"]
    assert {next(iter(b))[len("gnnsched-host:"):]: table[0]["bundles_to_node_id"][i]
            for i, b in bundles.items()} == want
    _nothing_left(rc.address, tmp_path / "ray", launcher.token)
    # the same plan on the local launcher: the same accuracy
    local = train(rc.cluster, rc.job, plan, out_dir=tmp_path / "local", partitions=rc.parts,
                  options=RuntimeOptions(**OPTS))
    assert res.test_accuracy == pytest.approx(local.test_accuracy, abs=1e-9)
    assert res.test_accuracy >= 0.7


def _actors(suffix: str) -> list[dict]:
    from ray._private import state

    return [a for a in state.actors().values() if str(a.get("Name", "")).endswith(suffix)]


def test_plan_from_ray_then_train_recovers_a_killed_actor_then_a_lost_node(
        rc: RayCluster, tmp_path: Path) -> None:
    """``plan --from-ray`` (NICs and partitions from the cluster file, the rest from Ray),
    then ``train --launcher ray``. Mid-run the test kills trainer 1's actor by name (from
    outside, as ``ray kill`` or a crash would): gpu1's node still runs tasks, so it restarts
    in place. Once that recovery is over, store1's raylet dies (SIGKILL, with every worker
    on it): its node no longer answers, so the coordinator re-plans on the cluster without
    it (storage: shared) and the run completes."""
    import yaml

    plan_file, cluster_file = tmp_path / "plan.json", tmp_path / "plan.cluster.yaml"
    partial = rc.cluster.to_dict()  # gpu1 is only in Ray
    partial["machines"] = [m for m in partial["machines"] if m["name"] != "gpu1"]
    (tmp_path / "partial.yaml").write_text(yaml.safe_dump(partial, sort_keys=False))
    from gnnsched.profile import synthetic_profile

    synthetic_profile(4, seeds_per_part=35, batch_size=8, fanouts=(10, 25),
                      feature_dim=1433).save(tmp_path / "cost.json")
    out = subprocess.run([PY, "-m", "gnnsched", "plan", "--from-ray", rc.address, "--cluster",
                          str(tmp_path / "partial.yaml"), "--job", str(LAB4 / "job.yaml"),
                          "--partitions", str(rc.parts), "--placer", "greedy",
                          "--cost", str(tmp_path / "cost.json"),
                          "--out", str(plan_file)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    print(out.stderr[-1500:])
    assert f"wrote {cluster_file}" in out.stderr
    got = load_cluster(cluster_file)
    base = {m.name: m for m in rc.cluster.machines}
    assert [m.name for m in got.machines] == ["store0", "store1", "gpu0", "gpu1"]
    for m in got.machines[:3]:
        assert m.cpus == CPUS  # what Ray says, not the file's 4 (stores) or 2
        assert m.memory > 1e9 and m.egress == base[m.name].egress
        assert m.partitions == base[m.name].partitions
        assert [g.kind for g in m.gpus] == [g.kind for g in base[m.name].gpus]
    gpu1 = got.machine("gpu1")  # from Ray alone: its GPU resource, a default NIC
    assert gpu1.cpus == CPUS and len(gpu1.gpus) == 1 and gpu1.egress == 10e9 / 8
    assert "gpu1: NIC 10 Gbit/s assumed" in out.stderr
    # train it on Ray; kill trainer 1's actor from outside once training runs
    run = tmp_path / "run"
    argv = [PY, "-m", "gnnsched", "train", "--cluster", str(cluster_file), "--job",
            str(LAB4 / "job.yaml"), "--plan", str(plan_file), "--partitions", str(rc.parts),
            "--out", str(run), "--epochs", "4", "--launcher", "ray", "--ray-address",
            rc.address, "--json", "--checkpoint-every", "4", "--heartbeat", "0.5",
            "--dead-after", "5"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end and killed is None:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            m = run / "metrics.jsonl"
            if m.exists() and '"type":"batch"' in m.read_text():
                live = [a for a in _actors("/trainer:1/0") if a.get("State") == "ALIVE"]
                assert len(live) == 1, live
                killed = live[0]
                ray.kill(ray.get_actor(killed["Name"], namespace=NAMESPACE), no_restart=True)
            time.sleep(0.05)
        assert killed is not None, "training did not start"
        while time.monotonic() < end:  # the first recovery is over: lose store1's node
            if '"type":"caught_up"' in (run / "metrics.jsonl").read_text():
                break
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        else:
            pytest.fail("no recovery from the killed actor")
        rc.ray_cluster.remove_node(rc.nodes.pop("store1"), allow_graceful=False)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if "store1" not in rc.nodes:
            rc.add_host("store1")  # back for the other tests
    assert proc.returncode == 0, stderr[-3000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    rec = summary["recoveries"]
    assert [(r["role"], r["machine"]) for r in rec][:1] == [("trainer:1", "gpu1")], rec
    assert "SIGKILL" in rec[0]["how"] and not rec[0]["replanned"]
    assert len(rec) == 2 and rec[1]["machine"] == "store1" and rec[1]["replanned"], rec
    log = (run / "logs" / "coordinator.log").read_text()
    assert "machine gpu1 is alive: only a process died, same plan, restarted in place" in log
    assert "machine store1 is unreachable: re-planned on the cluster without it" in log
    _every_batch_trained(run, once=False, epochs=4)
    assert summary["test_accuracy"] >= 0.7
    assert _actors("/trainer:1/1"), "trainer 1 was not restarted in a new actor"
    _nothing_left(rc.address, run)


def test_plan_from_ray_alone(rc: RayCluster, tmp_path: Path) -> None:
    """No cluster file: every host from Ray, a default NIC and the job's partitions spread
    over the hosts (storage: shared), each said in a note."""
    from gnnsched.profile import synthetic_profile

    synthetic_profile(4, seeds_per_part=35, batch_size=8, fanouts=(10, 25),
                      feature_dim=1433).save(tmp_path / "cost.json")
    out = subprocess.run([PY, "-m", "gnnsched", "plan", "--from-ray", rc.address, "--job",
                          str(LAB4 / "job.yaml"), "--cost", str(tmp_path / "cost.json"),
                          "--placer", "greedy", "--out", str(tmp_path / "plan.json"),
                          "--cluster-out", str(tmp_path / "ray.yaml")],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    got = load_cluster(tmp_path / "ray.yaml")
    assert sorted(m.name for m in got.machines) == ["gpu0", "gpu1", "store0", "store1"]
    assert got.storage == "shared" and got.num_parts == 4
    assert all(m.egress == 10e9 / 8 and m.cpus == CPUS for m in got.machines)
    assert sorted(len(m.gpus) for m in got.machines) == [0, 0, 1, 1]
    assert "partitions 0..3 spread over 4 host(s)" in out.stderr
    assert "NIC 10 Gbit/s assumed" in out.stderr


# ---------------------------------------------------------------------- clear errors first


def _train_error(rc: RayCluster, tmp_path: Path, cluster: Path, plan: Path,
                 address: str, *extra: str) -> str:
    run = tmp_path / "run"
    res = subprocess.run([PY, "-m", "gnnsched", "train", "--cluster", str(cluster), "--job",
                          str(LAB4 / "job.yaml"), "--plan", str(plan), "--partitions",
                          str(rc.parts), "--out", str(run), "--launcher", "ray",
                          "--ray-address", address, *extra], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # Ray puts the driver's folder on the
    # nodes' sys.path: the checkout's own gnnsched.egg-info would hide the odd node's Python
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("gnnsched train: error:")]
    assert len(lines) == 1, res.stderr[-3000:]
    assert not list((run / "logs").glob("trainer-*.log")), "a role started"
    print(lines[0])
    return lines[0]


def _renamed(rc: RayCluster, tmp_path: Path, old: str, new: str) -> tuple[Path, Path]:
    """lab4 with machine ``old`` called ``new``, and the hand plan on it."""
    import yaml

    data = rc.cluster.to_dict()
    for m in data["machines"]:
        if m["name"] == old:
            m["name"] = new
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    cluster = load_cluster(f)
    ts = [t if t.machine != old else replace(t, machine=new) for t in _plan(cluster).trainers]
    ts = [replace(t, fetch_at=new if t.fetch_at == old else t.fetch_at) for t in ts]
    plan = Plan("hand", cluster.name, cluster.fingerprint(), tuple(ts))
    plan.save(tmp_path / "plan.json")
    return f, tmp_path / "plan.json"


def test_bad_address(rc: RayCluster, tmp_path: Path) -> None:
    _plan(rc.cluster).save(tmp_path / "plan.json")
    err = _train_error(rc, tmp_path, LAB4 / "cluster.yaml", tmp_path / "plan.json",
                       "127.0.0.1:1")
    assert "no Ray cluster at 127.0.0.1:1" in err and "ray start --head" in err, err


def test_missing_host(rc: RayCluster, tmp_path: Path) -> None:
    cluster, plan = _renamed(rc, tmp_path, "gpu1", "gpu9")
    err = _train_error(rc, tmp_path, cluster, plan, rc.address)
    assert "gpu9 (gnnsched-host:gpu9)" in err and "ray start --address" in err, err
    assert "gpu0" not in err.split("hosts found:")[0], err


def test_missing_work_dir(rc: RayCluster, tmp_path: Path) -> None:
    _plan(rc.cluster).save(tmp_path / "plan.json")
    err = _train_error(rc, tmp_path, LAB4 / "cluster.yaml", tmp_path / "plan.json",
                       rc.address, "--remote-dir", "/nonexistent/gnnsched")
    assert "(4 problems)" in err, err
    for host in ("store0", "store1", "gpu0", "gpu1"):
        assert f"{host} (Ray node" in err, err
    assert "the working directory /nonexistent/gnnsched does not exist there" in err, err


def test_version_mismatch(rc: RayCluster, tmp_path: Path) -> None:
    cluster, plan = _renamed(rc, tmp_path, "gpu1", "odd")
    node = rc.add_odd_node()
    try:
        err = _train_error(rc, tmp_path, cluster, plan, rc.address)
    finally:
        rc.ray_cluster.remove_node(node)
    assert "1 problem)" in err and "odd (Ray node" in err, err
    assert "gnnsched 9.9.9" in err and "fix: install the same versions" in err, err


def test_ray_version_mismatch_is_said_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray refuses a driver of another Ray or Python version: the error says what to do."""
    from gnnsched.runtime.launcher import LaunchError
    from gnnsched.runtime.ray_launcher import connect

    def refuse(**kw: Any) -> None:
        raise RuntimeError("Version mismatch: The cluster was started with:\n Ray: 2.59.0\n"
                           " Python: 3.11.4\nThis process was started with: Ray 2.60.0")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(LaunchError, match=r"another Ray or Python version.*Ray: 2\.59\.0.*"
                                          r"install the cluster's Ray version here"):
        connect("auto")


def test_ray_is_imported_only_when_used() -> None:
    code = ("import sys; from gnnsched.runtime.launcher import launchers; "
            "import gnnsched.commands.train, gnnsched.commands.plan; "
            "assert 'ray' in launchers() and 'ray' not in sys.modules")
    res = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
