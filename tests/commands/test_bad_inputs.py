"""Bad input gets one clear error naming the item -- never a traceback, never a hang, never
silent corruption -- and leaves no process behind.

Files (cluster, job, plan, cost profile, partitions, keys) go through the real CLI
(``gnnsched train``: exit code 2 and one line ``gnnsched train: error: ...``); the
environment (ports, hosts, addresses) through the runtime's own entry points; plans for
another job and run folders. The wire, the spec loaders' fuzzing, flags and trace records
are in test_bad_messages.py and test_bad_flags.py.
"""

from __future__ import annotations

import copy
import json
import shutil
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
import zmq
from cli_errors import _PLAN, LAB4, ROOT
from cli_errors import edit_yaml as _edit
from cli_errors import hand_plan as _plan
from cli_errors import train_error as _train

from gnnsched.cli import main as cli_main
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.runtime.transport import (
    BULK,
    TransportError,
    bind_random,
    make_socket,
)
from gnnsched.spec import SpecError, job_from_dict, load_cluster, load_job

pytestmark = pytest.mark.usefixtures("nothing_left_behind")


# ---------------------------------------------------------------------- files


def _machine0(key: str, value: Any) -> Any:
    return lambda d: d["machines"][0].__setitem__(key, value)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["machines"][0].__setitem__("cpu", 4),
     r"machines[0].cpu: unknown field"),
    (lambda d: d["machines"][1].__setitem__("name", "store0"),
     "duplicate machine name 'store0'"),
    (lambda d: d["machines"][1].__setitem__("partitions", [0, 2, 3]),
     "partition 0 is also stored on 'store0'"),
    (_machine0("memory_gb", float("nan")), "machines[0].memory_gb: must be a finite number"),
    (_machine0("cpus", 0), "machines[0].cpus: must be >= 1"),
    (_machine0("roles", ["sample"]), "stores partitions but may not run 'store'"),
    (lambda d: d.__setitem__("storage", "cloud"), "storage: unknown value 'cloud'"),
])
def test_bad_cluster_file(capsys: pytest.CaptureFixture, files: dict, edit: Any,
                          needle: str) -> None:
    _edit(files["cluster"], edit)
    line = _train(capsys, files)
    assert str(files["cluster"]) in line and needle in line, line


def test_cluster_file_missing_or_not_yaml(capsys: pytest.CaptureFixture, files: dict) -> None:
    files["cluster"].unlink()
    assert "cluster.yaml: file not found" in _train(capsys, files)
    files["cluster"].write_text("machines: [\n  {name: a,\n")
    assert "not valid YAML" in _train(capsys, files)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d.__setitem__("fanouts", [10, 0]),
     "fanouts[1]: must be a positive integer or -1"),
    (lambda d: d.__setitem__("trainers", 50), "50 trainers but cluster"),
    (lambda d: d.update(num_parts=2), "the cluster stores 4 partitions but job"),
    (lambda d: d.__setitem__("model", "transformer"), "model: unknown value 'transformer'"),
])
def test_bad_job_file(capsys: pytest.CaptureFixture, files: dict, edit: Any,
                      needle: str) -> None:
    _edit(files["job"], edit)
    assert needle in _train(capsys, files)


def test_plan_for_another_cluster(capsys: pytest.CaptureFixture, files: dict) -> None:
    _edit(files["cluster"], _machine0("cpus", 8))  # same name, edited: another fingerprint
    line = _train(capsys, files)
    assert "cluster_fingerprint: plan was made for an edited version of it ('lab4')" in line
    assert "re-run `gnnsched plan`" in line


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["trainers"][0].__setitem__("machine", "gpu9"),
     "trainers[0].machine: machine 'gpu9' is not in cluster 'lab4'"),
    (lambda d: d["trainers"][1].__setitem__("machine", "gpu0"),
     "trainers[1].device: GPU 0 of 'gpu0' is already used by trainer 0"),
    (lambda d: d.__setitem__("trainers", {"0": "gpu0"}), "trainers: must be a list"),
    (lambda d: d["trainers"][0].__setitem__("parts", [0, 1, 2]),
     "partition 2 is also owned by trainer 0"),
    (lambda d: d["trainers"][0].__setitem__("samplers", [{"machine": "store0"}]),
     "trainers[0].samplers[0].count: is missing (required)"),
])
def test_bad_plan_file(capsys: pytest.CaptureFixture, files: dict, edit: Any,
                       needle: str) -> None:
    data = json.loads(files["plan"].read_text())
    edit(data)
    files["plan"].write_text(json.dumps(data))
    assert needle in _train(capsys, files)


def test_plan_not_json(capsys: pytest.CaptureFixture, files: dict) -> None:
    files["plan"].write_text('{"placer": "hand",\n  "trainers": [}')
    assert "plan.json: line 2: not valid JSON" in _train(capsys, files)


def test_bad_cost_profile(capsys: pytest.CaptureFixture, files: dict) -> None:
    cost = files["dir"] / "cost.json"
    cost.write_text(json.dumps({"job_key": 3, "num_parts": 4, "feature_bytes": 1,
                                "grad_bytes": 1, "parts": []}))
    assert "cost.json: job_key: must be a mapping" in _train(capsys, files, "--cost", str(cost))


def test_unknown_policy_and_bad_fault_spec(capsys: pytest.CaptureFixture, files: dict) -> None:
    with pytest.raises(SystemExit) as exc:  # refused by the parser, naming every choice
        cli_main(["train", "--cluster", str(files["cluster"]), "--job", str(files["job"]),
                  "--plan", str(files["plan"]), "--policy", "fastest"])
    assert exc.value.code == 2
    assert "argument --policy: invalid choice: 'fastest' (choose from 'fifo', 'gnnsched'" in \
        capsys.readouterr().err
    assert "--kill-at: cannot parse 'sampler:x'" in _train(capsys, files, "--kill-at",
                                                           "sampler:x")


def test_partitions_missing_or_for_another_job(capsys: pytest.CaptureFixture, files: dict,
                                               tmp_path: Path) -> None:
    from gnnsched.datasets import load_dataset, partition_graph

    line = _train(capsys, files, "--partitions", str(tmp_path / "nowhere"))
    assert "gnnsched.json: not found: not a gnnsched partition directory" in line
    two = tmp_path / "two"
    partition_graph(load_dataset("cora"), 2, two, method="metis", seed=0)
    line = _train(capsys, files, "--partitions", str(two))
    assert "num_parts: the partition directory has 2 parts, cluster" in line


def test_corrupt_shared_partition_file(capsys: pytest.CaptureFixture, files: dict,
                                       parts: Path, tmp_path: Path) -> None:
    """A changed byte in a shared file: caught by its checksum before anything starts."""
    bad = tmp_path / "parts"
    shutil.copytree(parts, bad)
    cfg = bad / "cora.json"
    cfg.write_text(cfg.read_text() + " ")  # still valid JSON, same values: only sha256 knows
    line = _train(capsys, files, "--partitions", str(bad))
    assert "cora.json: sha256: checksum mismatch" in line


def test_missing_part_file(parts: Path, tmp_path: Path) -> None:
    from gnnsched.runtime.store import verify_files

    bad = tmp_path / "parts"
    shutil.copytree(parts, bad)
    (bad / "part2" / "graph.dgl").unlink()
    assert verify_files(str(bad), [0, 1]) > 0  # the other parts are fine
    with pytest.raises(SpecError, match=r"part2/graph.dgl: partition file is missing"):
        verify_files(str(bad), [2])


@pytest.mark.slow
def test_corrupt_part_file_stops_the_run_cleanly(capsys: pytest.CaptureFixture,
                                                 parts: Path, tmp_path: Path) -> None:
    """A flipped byte in one partition's features: the store that loads it refuses it (it
    verifies what it loads), the run stops with one line naming the file, nothing left."""
    bad = tmp_path / "parts"
    shutil.copytree(parts, bad)
    feats = bad / "part1" / "node_feat.dgl"
    blob = bytearray(feats.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    feats.write_bytes(bytes(blob))
    cluster = {"name": "one", "machines": [
        {"name": "s0", "cpus": 4, "memory_gb": 8, "nic_gbps": 1, "partitions": [0, 1, 2, 3]},
        {"name": "g0", "cpus": 2, "memory_gb": 8, "nic_gbps": 1, "gpus": 1}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    job = yaml.safe_load((LAB4 / "job.yaml").read_text())
    job["trainers"] = 1
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    spec = load_cluster(tmp_path / "cluster.yaml")
    Plan("hand", spec.name, spec.fingerprint(), (
        TrainerPlan(0, "g0", 0, (0, 1, 2, 3), (("s0", 1),), "g0"),)).save(tmp_path / "plan.json")
    f = {"cluster": tmp_path / "cluster.yaml", "job": tmp_path / "job.yaml",
         "plan": tmp_path / "plan.json", "dir": tmp_path}
    line = _train(capsys, f, parts=bad)
    assert "store:s0 on machine s0" in line and "part1/node_feat.dgl: sha256: checksum " \
        "mismatch" in line, line
    assert f"(details: {tmp_path / 'run'}/logs/)" in line


def test_curve_without_keys(capsys: pytest.CaptureFixture, files: dict, parts: Path,
                            tmp_path: Path) -> None:
    _edit(files["cluster"], lambda d: d.__setitem__("curve", True))
    Plan.from_dict({**_plan(load_cluster(files["cluster"])).to_dict()}).save(files["plan"])
    assert "keys_dir: is missing: curve: true needs the folder with the cluster's keys" in \
        _train(capsys, files, parts=parts)
    _edit(files["cluster"], lambda d: d.__setitem__("keys_dir", str(tmp_path / "nokeys")))
    _plan(load_cluster(files["cluster"])).save(files["plan"])
    line = _train(capsys, files, parts=parts)
    assert "nokeys/cluster.key_secret: no CURVE secret key" in line
    assert "gnnsched keys --cluster" in line


# ---------------------------------------------------------------------- environment


def test_coordinator_port_in_use(capsys: pytest.CaptureFixture, files: dict,
                                 parts: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = _train(capsys, files, "--port", str(port), parts=parts)
    assert f"coordinator: cannot bind 127.0.0.1:{port}: port {port} is already in use" in line


def test_unreachable_ssh_host(parts: Path, tmp_path: Path) -> None:
    """Nothing listens on port 1: the pre-flight check names the host and ssh's reason."""
    from gnnsched.commands.train import train
    from gnnsched.runtime.coordinator import RunError
    from gnnsched.runtime.launcher import SshLauncher

    data = yaml.safe_load((LAB4 / "cluster.yaml").read_text())
    for m in data["machines"]:
        m["ssh"] = "nobody@127.0.0.1"
        m["address"] = "127.0.0.1"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    cluster = load_cluster(tmp_path / "c.yaml")
    ssh = SshLauncher(cluster, ssh_options=("-o", "BatchMode=yes", "-o",
                                            "StrictHostKeyChecking=no", "-p", "1"))
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"host check failed before any role started .*gpu0 "
                                       r"\(nobody@127.0.0.1\): .*(refused|not found)"):
        train(cluster, LAB4 / "job.yaml", _plan(cluster), launcher=ssh,
              out_dir=tmp_path / "run", partitions=parts)
    assert time.monotonic() - t0 < 60


def test_local_machine_down_at_start(parts: Path, tmp_path: Path) -> None:
    from gnnsched.commands.train import train
    from gnnsched.runtime.coordinator import RunError
    from gnnsched.runtime.launcher import LocalLauncher

    cluster = load_cluster(LAB4 / "cluster.yaml")
    local = LocalLauncher(cluster)
    local.down.add("gpu1")
    with pytest.raises(RunError, match="machine.s. gpu1 cannot be reached by the local "
                                       "launcher"):
        train(cluster, LAB4 / "job.yaml", _plan(cluster), launcher=local,
              out_dir=tmp_path / "run", partitions=parts)


def test_netns_cluster_not_up(capsys: pytest.CaptureFixture, files: dict,
                              parts: Path) -> None:
    line = _train(capsys, files, "--launcher", "netns", parts=parts)
    assert "root" in line or "the emulated cluster is not up" in line, line


@pytest.mark.parametrize("host,needle", [
    ("0.0.0.0", "refusing to bind to '0.0.0.0' (all interfaces)"),
    ("*", "refusing to bind to '*'"),
    ("store0.example", "cannot bind to 'store0.example': not an IP address"),
    ("10.255.255.1", "cannot bind 10.255.255.1: 10.255.255.1 is not an address of this host"),
])
def test_servers_bind_only_to_named_addresses(host: str, needle: str) -> None:
    ctx = zmq.Context()
    try:
        sock = make_socket(ctx, zmq.ROUTER, BULK)
        with pytest.raises(TransportError) as err:
            bind_random(sock, host)
        assert needle in str(err.value)
    finally:
        ctx.destroy(linger=0)


# ---------------------------------------------------------------------- --kill-at


@pytest.mark.parametrize("spec,needle", [
    ("sampler:x", "--kill-at: cannot parse 'sampler:x' (valid: ROLE:ID:STEP"),
    ("trainer:0:1:KILL:9", "--kill-at: cannot parse 'trainer:0:1:KILL:9'"),
    ("worker:0:1", "--kill-at: unknown role 'worker' in 'worker:0:1' (valid: trainer, sampler, "
                   "store, fetcher, machine)"),
    ("sampler:0:soon", "step 'soon' is not a whole number"),
    ("sampler:0:-1", "--kill-at: step must be >= 0, got -1"),
    ("sampler:0:1:HUP", "--kill-at: unknown signal 'HUP' in 'sampler:0:1:HUP' (valid: KILL, "
                        "STOP, TERM, CUT, SLOW)"),
    ("trainer:0:1:CUT:3", "cannot parse 'trainer:0:1:CUT:3': only a machine is cut off"),
    ("machine:gpu0:1:CUT", "cannot parse 'machine:gpu0:1:CUT': only a machine is cut off "
                           "or slowed, for a number of seconds"),
    ("machine:gpu0:1:SLOW:3", "machine:gpu0:1:SLOW slows a machine's CPU down, which the "
                              "local launcher cannot"),
    ("machine:gpu0:1:CUT:0", "CUT seconds must be in (0, 3600], got '0'"),
    ("machine:gpu0:1:CUT:3", "machine:gpu0:1:CUT cuts a machine off its network, which the "
                             "local launcher cannot (valid: --launcher netns"),
    ("trainer:7:3", "--kill-at: no process 'trainer:7' in this plan (step 3) (valid: "
                    "trainer:0, trainer:1)"),
    ("sampler:2:3", "no process 'sampler:2' in this plan (step 3) (valid: sampler:0, "
                    "sampler:1)"),
    ("store:gpu0:1", "no process 'store:gpu0' in this plan (step 1) (valid: store:store0, "
                     "store:store1)"),
    ("machine:gpu9:1", "no process 'machine:gpu9' in this plan (step 1) (valid: "
                       "machine:store0"),
    ("fetcher:store0:1", "(valid: none: this plan runs no fetcher process)"),
])
def test_bad_fault_injection_is_refused_before_launch(capsys: pytest.CaptureFixture,
                                                      files: dict, spec: str,
                                                      needle: str) -> None:
    line = _train(capsys, files, "--kill-at", "sampler:0:1", "--kill-at", spec)
    assert needle in line, line
    assert not (files["dir"] / "run").exists()  # nothing was started


def test_good_fault_specs_parse() -> None:
    from gnnsched.api import parse_faults

    f = parse_faults(["sampler:1:20", "machine:store0:5:stop", "trainer:0:0:SIGTERM",
                      "machine:gpu1:12:cut:2.5"])
    assert [(x.role, x.at_step, x.signal, x.seconds) for x in f] == [
        ("sampler:1", 20, "KILL", 0.0), ("machine:store0", 5, "STOP", 0.0),
        ("trainer:0", 0, "TERM", 0.0), ("machine:gpu1", 12, "CUT", 2.5)]


def test_unknown_replan_placer_is_refused_before_launch(capsys: pytest.CaptureFixture,
                                                        files: dict) -> None:
    line = _train(capsys, files, "--replan-placer", "best")
    assert "--replan-placer: unknown placer 'best' (valid: " in line and "greedy" in line
    assert not (files["dir"] / "run").exists()


def test_dead_after_must_exceed_the_heartbeat(capsys: pytest.CaptureFixture,
                                              files: dict) -> None:
    line = _train(capsys, files, "--heartbeat", "2", "--dead-after", "1")
    assert "--dead-after: 1 s is not more than --heartbeat 2 s" in line
    assert "(valid: more than --heartbeat, e.g. 20)" in line


# ---------------------------------------------------------------------- plan fields


def _plan_error(edit: Any) -> str:
    d = copy.deepcopy(_PLAN)
    edit(d)
    with pytest.raises(SpecError) as exc:
        Plan.from_dict(d, "p.json")
    return str(exc.value)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d.update(version=2), "p.json: version: plan format 2 is not supported "
                                    "(valid: 1"),
    (lambda d: d.update(version="1"), "p.json: version: must be an integer, got '1'"),
    (lambda d: d.update(placer=3), "p.json: placer: must be a non-empty string, got 3"),
    (lambda d: d.update(cluster=None), "p.json: cluster: must be a non-empty string"),
    (lambda d: d.update(cluster_fingerprint=7), "p.json: cluster_fingerprint: must be a string"),
    (lambda d: d.update(job=["j"]), "p.json: job: must be a string"),
    (lambda d: d.update(predicted=[1]), "p.json: predicted: must be a mapping, got a list"),
    (lambda d: d.update(notes="n"), "p.json: notes: must be a list, got a string"),
    (lambda d: d.update(notes=[1]), "p.json: notes[0]: must be a string, got 1"),
    (lambda d: d.update(job_key=[8]), "p.json: job_key: must be a mapping of job fields, got "
                                      "a list"),
    (lambda d: d.update(trainer=[]), "p.json: trainer: unknown field (valid: caches, cluster"),
    (lambda d: d.update(trainers="a"), "p.json: trainers: must be a list of trainer entries"),
    (lambda d: d["trainers"].__setitem__(0, "a"), "p.json: trainers[0]: expected a mapping"),
    (lambda d: d["trainers"][0].update(id=1), "p.json: trainers[0].id: is 1 but the entry is "
                                              "trainers[0] (valid: 0: trainer ids are their "
                                              "positions"),
    (lambda d: d["trainers"][0].update(id=True), "trainers[0].id: must be an integer, got True"),
    (lambda d: d["trainers"][0].update(machine=""), "trainers[0].machine: must be a non-empty "
                                                    "string"),
    (lambda d: d["trainers"][0].update(device=1.0), "trainers[0].device: must be an integer"),
    (lambda d: d["trainers"][0].update(device=-1), "trainers[0].device: must be >= 0, got -1"),
    (lambda d: d["trainers"][0].update(parts=0), "trainers[0].parts: must be a list, got int"),
    (lambda d: d["trainers"][0].update(parts=["0"]), "trainers[0].parts[0]: must be a "
                                                     "partition id, got '0' (valid: an integer "
                                                     "0..1000000)"),
    (lambda d: d["trainers"][0].update(parts=[10**12]), "trainers[0].parts[0]: must be a "
                                                        "partition id"),
    (lambda d: d["trainers"][0]["samplers"][0].update(count=1.5),
     "trainers[0].samplers[0].count: must be an integer, got 1.5"),
    (lambda d: d["trainers"][0]["samplers"][0].update(count=0),
     "trainers[0].samplers[0].count: must be >= 1, got 0"),
    (lambda d: d["trainers"][0]["samplers"][0].update(count=10**9),
     "trainers[0].samplers[0].count: must be <= 100000"),
    (lambda d: d["trainers"][0]["samplers"][0].update(machine=3),
     "trainers[0].samplers[0].machine: must be a non-empty string, got 3"),
    (lambda d: d["trainers"][0]["samplers"][0].update(cores=2),
     "trainers[0].samplers[0].cores: unknown field"),
    (lambda d: d["trainers"][0].update(fetchat="a"), "trainers[0].fetchat: unknown field "
                                                     "(valid: device, fetch_at, id, machine"),
])
def test_plan_fields_are_typed(edit: Any, needle: str) -> None:
    assert needle in _plan_error(edit)


def test_plan_ids_default_to_positions_and_old_plans_load() -> None:
    d = copy.deepcopy(_PLAN)
    d.pop("version")
    d["trainers"][0].pop("id")
    d["trainers"][0].pop("fetch_at")
    plan = Plan.from_dict(d, "p.json")
    assert plan.trainers[0].id == 0 and plan.trainers[0].fetch_at == "a"
    assert Plan.from_dict(plan.to_dict()) == plan


def test_plans_without_a_job_key_fit_any_job(files: dict) -> None:
    """Older plan files and plans built in code record no job: nothing to check, and saving
    them writes no job_key (their files stay as they were)."""
    d = copy.deepcopy(_PLAN)
    d.pop("job_key")
    plan = Plan.from_dict(d, "p.json")
    assert plan.job_key == {} and "job_key" not in plan.to_dict()
    job = load_job(files["job"])
    assert plan.job_differences(job) == []
    plan.check_job(job, "p.json")
    keyed = plan.for_job(job)
    assert Plan.from_dict(json.loads(json.dumps(keyed.to_dict()))) == keyed
    assert keyed.job_key["batch_size"] == 8 and keyed.job_key["fanouts"] == [10, 25]
    assert keyed.job_differences(job) == []


def test_plan_for_another_job_names_what_differs(files: dict) -> None:
    job = load_job(files["job"])
    plan = _plan(load_cluster(files["cluster"])).for_job(job)
    other = replace(job, batch_size=64, fanouts=(5, 5), source="other.yaml")
    assert plan.job_differences(other) == ["batch_size: plan 8, job 64",
                                           "fanouts: plan [10, 25], job [5, 5]"]
    with pytest.raises(SpecError) as exc:
        plan.check_job(other, "p.json")
    assert str(exc.value) == (
        "p.json: job_key: plan was made for a job with other settings than other.yaml "
        "(batch_size: plan 8, job 64; fanouts: plan [10, 25], job [5, 5]) (valid: re-run "
        "`gnnsched plan --job other.yaml`, or pass --any-job to use this plan anyway)")
    # epochs, lr, seed... do not change where tasks run; a moved dataset file keeps its name
    plan.check_job(replace(job, epochs=1, lr=0.1, seed=3), "p.json")
    npz = replace(job, dataset="/a/cora.npz")
    replace(plan, job_key={**plan.job_key, "dataset": "/b/cora.npz"}).check_job(npz)
    # another number of trainers cannot be forced: the plan has no entry for some trainer
    with pytest.raises(SpecError, match=r"trainers: plan 2, job 3\) \(valid: re-run "
                       r"`gnnsched plan --job .*job.yaml`\)$"):
        plan.check_job(replace(job, trainers=3), "p.json")


def test_a_synthetic_graph_is_compared_by_the_graph_it_generates() -> None:
    """Writing out a generator default (or the job's seed) names the same graph; another
    parameter or seed names another one."""
    base = {"dataset": "synthetic", "num_parts": 2, "trainers": 1}
    short = job_from_dict({**base, "synthetic": {"num_nodes": 10000}}, "a.yaml")
    spelt = job_from_dict({**base, "synthetic": {"num_nodes": 10000, "seed": 0,
                                                 "avg_degree": 20}}, "b.yaml")
    plan = Plan("greedy", "c", "", (), job="j").for_job(short)
    assert plan.job_differences(spelt) == []
    sparse = job_from_dict({**base, "synthetic": {"avg_degree": 10}}, "c.yaml")
    assert [d.split(":")[0] for d in plan.job_differences(sparse)] == ["synthetic"]
    assert plan.job_differences(replace(short, seed=1)) != []


def test_train_refuses_a_plan_for_another_job(capsys: pytest.CaptureFixture,
                                              files: dict, tmp_path: Path) -> None:
    _plan(load_cluster(files["cluster"])).for_job(load_job(files["job"])).save(files["plan"])
    _edit(files["job"], lambda d: d.update(batch_size=64))
    line = _train(capsys, files)
    assert f"{files['plan']}: job_key: plan was made for a job with other settings than " \
        f"{files['job']} (batch_size: plan 8, job 64) (valid: re-run `gnnsched plan --job " \
        f"{files['job']}`, or pass --any-job to use this plan anyway)" in line
    # --any-job: one warning, then on to the next check (here: no such partitions)
    rc = cli_main(["train", "--cluster", str(files["cluster"]), "--job", str(files["job"]),
                   "--plan", str(files["plan"]), "--out", str(tmp_path / "run"), "--any-job",
                   "--partitions", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 2, err
    assert err[0] == f"gnnsched train: warning: {files['plan']} was made for a job with other " \
        f"settings than {files['job']} (batch_size: plan 8, job 64); using it anyway (--any-job)"
    assert "not a gnnsched partition directory" in err[1]


def test_simulate_refuses_a_plan_for_another_job(capsys: pytest.CaptureFixture,
                                                 tmp_path: Path) -> None:
    ex = ROOT / "examples" / "hetero16"
    plan, job = tmp_path / "plan.json", tmp_path / "job.yaml"
    assert cli_main(["plan", "--cluster", str(ex / "cluster.yaml"), "--job",
                     str(ex / "job.yaml"), "--placer", "greedy", "--out", str(plan),
                     "--json"]) == 0
    assert json.loads(plan.read_text())["job_key"]["batch_size"] == 512
    shutil.copy(ex / "job.yaml", job)
    _edit(job, lambda d: d.update(batch_size=64))
    capsys.readouterr()
    sim = ["simulate", "--cluster", str(ex / "cluster.yaml"), "--job", str(job), "--plan",
           str(plan), "--iterations", "3", "--json"]
    assert cli_main(sim) == 2
    assert capsys.readouterr().err.strip() == (
        f"gnnsched simulate: error: {plan}: job_key: plan was made for a job with other "
        f"settings than {job} (batch_size: plan 512, job 64) (valid: re-run `gnnsched plan "
        f"--job {job}`, or pass --any-job to use this plan anyway)")
    assert cli_main([*sim, "--any-job"]) == 0
    cap = capsys.readouterr()
    assert "(batch_size: plan 512, job 64); using it anyway (--any-job)" in cap.err
    assert json.loads(cap.out)["epoch_time_s"] > 0


# ---------------------------------------------------------------------- run directories


def _earlier_run(run: Path) -> dict[str, bytes]:
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"type": "batch"}\n' * 472)
    (run / "checkpoints" / "step-40.pt").write_bytes(b"weights")
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in run.rglob("*")
            if p.is_file()}


def test_train_refuses_to_wipe_an_earlier_run(capsys: pytest.CaptureFixture,
                                              files: dict) -> None:
    run = files["dir"] / "run"
    before = _earlier_run(run)
    line = _train(capsys, files)
    assert line == (f"gnnsched train: error: --out: {run} already holds a run (metrics.jsonl "
                    "with 472 lines, checkpoints/ with 1 file); training there would replace "
                    "it (valid: another --out (a new or empty folder), or --force to replace "
                    "that run)")
    after = {p.relative_to(run).as_posix(): p.read_bytes() for p in run.rglob("*")
             if p.is_file()}
    assert after == before  # nothing lost, nothing written


def test_train_force_and_empty_or_failed_run_folders(capsys: pytest.CaptureFixture,
                                                     files: dict, tmp_path: Path) -> None:
    from gnnsched.commands.train import earlier_run

    nowhere = ("--partitions", str(tmp_path / "nowhere"))  # the next check fails, cheaply
    run = files["dir"] / "run"
    run.mkdir()
    assert earlier_run(run, files["plan"]) == []  # an empty folder is fine
    assert "not a gnnsched partition directory" in _train(capsys, files, *nowhere)
    # a run that failed before training: empty metrics, logs, this plan's copy
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "coordinator.log").write_text("port in use\n")
    (run / "metrics.jsonl").write_text("")
    shutil.copy(files["plan"], run / "plan.json")
    assert earlier_run(run, files["plan"]) == []
    other = _plan(load_cluster(files["cluster"])).for_job(load_job(files["job"]))
    other.save(run / "plan.json")  # not the plan about to be trained: it would be lost
    assert earlier_run(run, files["plan"]) == ["a different plan.json"]
    assert "already holds a run (a different plan.json)" in _train(capsys, files)
    _earlier_run(tmp_path / "old")
    files = {**files, "dir": tmp_path / "force"}
    shutil.copytree(tmp_path / "old", tmp_path / "force" / "run")
    (tmp_path / "force" / "run" / "notes.txt").write_text("mine")
    assert "not a gnnsched partition directory" in _train(capsys, files, "--force", *nowhere)
    # --force replaced the earlier run's own files before anything else, and nothing more
    assert earlier_run(tmp_path / "force" / "run", files["plan"]) == []
    assert not (tmp_path / "force" / "run" / "checkpoints").exists()
    assert (tmp_path / "force" / "run" / "notes.txt").read_text() == "mine"


def test_samplers_per_machine_are_capped_by_its_cpus(files: dict) -> None:
    cluster = load_cluster(files["cluster"])
    cpus = cluster.machine("store0").cpus
    ok = replace(_plan(cluster).trainers[0], samplers=(("store0", 8 * cpus),))
    Plan("hand", cluster.name, "", (ok, _plan(cluster).trainers[1])).validate(cluster)
    over = replace(_plan(cluster).trainers[1], samplers=(("store0", 1),))
    with pytest.raises(SpecError) as exc:
        Plan("hand", cluster.name, "", (ok, over)).validate(cluster, source="p.json")
    assert f"p.json: trainers[1].samplers[0].count: {8 * cpus + 1} samplers on 'store0' " \
        f"(cpus: {cpus})" in str(exc.value)
    assert f"(valid: at most 8 x cpus = {8 * cpus} per machine)" in str(exc.value)
