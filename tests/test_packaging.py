"""The installed package, not the checkout: a non-editable install works from anywhere, holds
every subpackage and data file it needs, keeps the dependency rule (import-linter's contracts
in pyproject.toml) and never reaches into bench/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install .`` (no dependencies: they are this environment's) into a folder of its
    own, built from a copy of the sources so the checkout gets no build/ folder."""
    base = tmp_path_factory.mktemp("install")
    src, site = base / "src", base / "site"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "build", "*.egg-info", "__pycache__", "docs", "tests"))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--no-build-isolation", "--target", str(site), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return site


def _run(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_installed_package_runs_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    out = _run(installed, tmp_path, sys.executable, "-c",
               "import gnnsched, gnnsched.api, gnnsched.evaluation; print(gnnsched.__file__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(installed)), out.stdout  # not the checkout's
    bench = _run(installed, tmp_path, sys.executable, "-m", "gnnsched", "bench", "--quick",
                 "--help")
    assert bench.returncode == 0, bench.stderr
    assert "--quick" in bench.stdout
    shapes = list((installed / "gnnsched" / "evaluation" / "shapes").glob("*.yaml"))
    assert shapes, "the evaluation's shape files are package data"


def test_import_contracts_hold(installed: Path, tmp_path: Path) -> None:
    """import-linter walks the installed tree, where placement/, runtime/ and datasets/ sit
    inside gnnsched/ as the subpackages they are (the checkout maps them by package-dir)."""
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) \
        or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = _run(installed, tmp_path, lint, str(ROOT / "pyproject.toml"), "--no-cache")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_the_package_never_imports_bench(installed: Path) -> None:
    hits = [str(p.relative_to(installed)) for p in (installed / "gnnsched").rglob("*.py")
            if any(line.lstrip().startswith(("import bench", "from bench"))
                   or "spec_from_file_location" in line
                   for line in p.read_text().splitlines())]
    assert hits == []
