"""Shared fixtures: example paths and a one-thread torch so roles on 2 cores don't fight."""

from __future__ import annotations

import os
from pathlib import Path

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
