"""Shared fixtures: example paths and a one-thread torch so roles on 2 cores don't fight."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SHARED = ROOT.parent / "shared" / "datasets"

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Partition caches of one test session live in one temp dir (shared across tests)."""
    os.environ.setdefault("GNNSCHED_CACHE", str(tmp_path_factory.mktemp("gnnsched-cache")))


@pytest.fixture(scope="module")
def lab4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Path]:
    """examples/lab4 (Cora in 4 METIS parts on 2 stores, 2 GPU hosts), 2 epochs, and a hand
    plan: trainer 0 gathers through a relay on store0, trainer 1 in its own process."""
    from dataclasses import replace

    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import load_cluster, load_job

    lab = EXAMPLES / "lab4"
    cluster, job = load_cluster(lab / "cluster.yaml"), load_job(lab / "job.yaml")
    job = replace(job, epochs=2)
    parts = tmp_path_factory.mktemp("cora4")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    return cluster, job, plan, parts
