"""Shared by the bad-input tests (tests/commands/test_bad_*.py): lab4's files as editable
copies, Cora's partitions, and the check that no process of ours outlives a case."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_errors import LAB4, hand_plan

from gnnsched.spec import load_cluster


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gnnsched.datasets import load_dataset, partition_graph

    out = tmp_path_factory.mktemp("cora4")
    partition_graph(load_dataset("cora"), 4, out, method="metis", seed=0)
    return out


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """Editable copies of the lab4 cluster and job, and a valid plan for them."""
    cluster = tmp_path / "cluster.yaml"
    job = tmp_path / "job.yaml"
    shutil.copy(LAB4 / "cluster.yaml", cluster)
    shutil.copy(LAB4 / "job.yaml", job)
    spec = load_cluster(cluster)
    plan = tmp_path / "plan.json"
    hand_plan(spec).save(plan)
    return {"cluster": cluster, "job": job, "plan": plan, "dir": tmp_path}


@pytest.fixture()
def nothing_left_behind() -> Any:
    """A case (where used): no process of ours survives it."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    end = time.monotonic() + 10
    while True:
        alive = [p for p in psutil.Process().children(recursive=True)
                 if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert not alive, f"left behind: {[p.cmdline() for p in alive]}"
