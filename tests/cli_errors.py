"""Helpers of the bad-input tests (tests/commands/test_bad_*.py): run a command that must fail
with one line, edit a YAML file, lab4's hand plan, and small valid spec dictionaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gnnsched.cli import main as cli_main
from gnnsched.plan import Plan, TrainerPlan

ROOT = Path(__file__).resolve().parents[1]
LAB4 = ROOT / "examples" / "lab4"


def hand_plan(cluster: Any) -> Plan:
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


def edit_yaml(path: Path, fn: Any) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


def train_error(capsys: pytest.CaptureFixture, f: dict[str, Path], *extra: str,
                parts: Path | None = None) -> str:
    """Run ``gnnsched train``; it must fail with exit code 2 and exactly one line."""
    args = ["train", "--cluster", str(f["cluster"]), "--job", str(f["job"]), "--plan",
            str(f["plan"]), "--out", str(f["dir"] / "run"), "--epochs", "1",
            "--request-timeout", "30", *extra]
    if parts is not None and "--partitions" not in extra:
        args += ["--partitions", str(parts)]
    rc = cli_main(args)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()
             and not ln.startswith("gnnsched train: replacing the run in ")]  # --force's note
    assert len(lines) == 1 and lines[0].startswith("gnnsched train: error: "), err
    assert "Traceback" not in err
    return lines[0]


# small valid spec dictionaries (the loaders' fuzzing and the plan-field cases start here)
_CLUSTER = {"name": "c", "storage": "shared", "latency_ms": 1, "curve": False, "machines": [
    {"name": "a", "cpus": 2, "memory_gb": 4, "nic": {"egress_gbps": 1, "ingress_gbps": 2},
     "partitions": [0], "gpus": [{"kind": "t4", "speed": 1, "memory_gb": 16, "count": 1}],
     "roles": ["store", "sample", "fetch", "train"], "address": "10.0.0.1"},
    {"name": "b", "cpus": 2, "memory_gb": 4, "nic_gbps": 1, "partitions": [1], "gpus": 1}]}
_JOB = {"name": "j", "dataset": "cora", "num_parts": 2, "fanouts": [5, 10], "batch_size": 8,
        "epochs": 2, "lr": 0.01, "dropout": 0.5, "trainers": 2, "seed": 0, "prefetch": 2,
        "eval_every": 1, "feature_dim": 16, "synthetic": {"num_nodes": 100}}
_PLAN = {"version": 1, "placer": "hand", "cluster": "c", "cluster_fingerprint": "x",
         "job": "j", "trainers": [{"id": 0, "machine": "a", "device": 0, "parts": [0],
                                   "samplers": [{"machine": "a", "count": 1}],
                                   "fetch_at": "a"}],
         "predicted": {"epoch_time_s": 1.0}, "notes": ["n"],
         "job_key": {"batch_size": 8, "fanouts": [5, 10], "dataset": "cora"}}
