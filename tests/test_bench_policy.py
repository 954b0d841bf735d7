"""bench/bench_policy.py: bad arguments fail before anything runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_policy.py"


def _script():  # a script of the checkout, not a module of the package
    spec = importlib.util.spec_from_file_location("bench_policy", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_needs_two_known_policies(tmp_path: Path) -> None:
    bench_policy = _script()
    common = ["--work", str(tmp_path), "--out", str(tmp_path / "p.json")]
    with pytest.raises(ValueError, match="unknown policy 'nope'.*known: .*fifo"):
        bench_policy.main(["--policies", "fifo,nope", *common])
    with pytest.raises(SystemExit, match="at least two"):
        bench_policy.main(["--policies", "fifo", *common])
    with pytest.raises(SystemExit, match="--repeats must be >= 1"):
        bench_policy.main(["--repeats", "0", *common])
    assert not (tmp_path / "p.json").exists()
