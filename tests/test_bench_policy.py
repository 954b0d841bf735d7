"""bench/bench_policy.py: bad arguments fail before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_policy  # noqa: E402


def test_needs_two_known_policies(tmp_path: Path) -> None:
    common = ["--work", str(tmp_path), "--out", str(tmp_path / "p.json")]
    with pytest.raises(ValueError, match="unknown policy 'nope'.*known: .*fifo"):
        bench_policy.main(["--policies", "fifo,nope", *common])
    with pytest.raises(SystemExit, match="at least two"):
        bench_policy.main(["--policies", "fifo", *common])
    with pytest.raises(SystemExit, match="--repeats must be >= 1"):
        bench_policy.main(["--repeats", "0", *common])
    assert not (tmp_path / "p.json").exists()
