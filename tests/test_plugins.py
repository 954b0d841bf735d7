"""Plug-ins: a researcher's own package adds a placer, a policy and a launcher through entry
points, with no change to gnnsched's files, and the CLI uses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hetero16"

PLUGIN = '''
"""A researcher's plug-ins for gnnsched: one placer, one policy, one launcher."""
from dataclasses import replace

from gnnsched.placement.placer import Placer, get_placer
from gnnsched.policy import Fifo
from gnnsched.registry import CliOption
from gnnsched.runtime.launcher import LocalLauncher


class ReversedGreedy(Placer):
    """Greedy's plan, re-labelled: enough to see the CLI pick the plug-in up."""

    def place_problem(self, problem, *, seed=0, budget=None):
        plan = get_placer("greedy").place_problem(problem, seed=seed, budget=budget)
        return replace(plan, placer="reversed-greedy",
                       notes=(*plan.notes, "placed by the reversed-greedy plug-in"))


class LastFirst(Fifo):
    """fifo with the newest candidate batch first."""

    def pick_batch(self, candidates, now):
        return candidates[-1]


class QuietLocal(LocalLauncher):
    """Local processes, under another name, with a flag of its own (``--quiet-tag``)."""

    cli_options = (CliOption("--quiet-tag", "tag", "a word written beside the run's logs",
                             default="none"),)

    def __init__(self, cluster, python=None, *, tag="none", **kwargs):
        super().__init__(cluster, python, **kwargs)
        self.tag = tag

    def preflight(self, machines, timeout=10.0):
        from pathlib import Path

        Path(self.run_dir, "quiet-tag.txt").write_text(self.tag)
        super().preflight(machines, timeout)
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "gnnsched-myplug"
version = "0.1"

[project.entry-points."gnnsched.placers"]
reversed-greedy = "gnnsched_myplug:ReversedGreedy"

[project.entry-points."gnnsched.policies"]
last-first = "gnnsched_myplug:LastFirst"

[project.entry-points."gnnsched.launchers"]
quiet-local = "gnnsched_myplug:QuietLocal"

[tool.setuptools]
py-modules = ["gnnsched_myplug"]
'''


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in package, installed by pip (entry points and all) into its own folder."""
    base = tmp_path_factory.mktemp("plugin")
    src, site = base / "src", base / "site"
    src.mkdir()
    (src / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (src / "gnnsched_myplug.py").write_text(textwrap.dedent(PLUGIN))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(src)],
                   check=True, capture_output=True, text=True, timeout=300)
    assert list(site.glob("gnnsched_myplug-*.dist-info/entry_points.txt"))
    return site


def _cli(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "gnnsched", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_plan_and_simulate_use_installed_plugins(plugin_site: Path, tmp_path: Path) -> None:
    help_text = _cli(plugin_site, tmp_path, "plan", "--help").stdout
    assert "reversed-greedy" in help_text
    cluster, job = str(EXAMPLE / "cluster.yaml"), str(EXAMPLE / "job.yaml")
    out = _cli(plugin_site, tmp_path, "plan", "--cluster", cluster, "--job", job,
               "--placer", "reversed-greedy", "--budget", "1", "--out", "plan.json", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["placer"] == "reversed-greedy"
    assert "placed by the reversed-greedy plug-in" in plan["notes"]
    sim = _cli(plugin_site, tmp_path, "simulate", "--cluster", cluster, "--job", job,
               "--plan", "plan.json", "--policy", "last-first", "--iterations", "4", "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["policy"] == "last-first"
    # without the plug-in installed, the same names are refused with the valid choices
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    bare = subprocess.run([sys.executable, "-m", "gnnsched", "simulate", "--cluster", cluster,
                           "--job", job, "--plan", "plan.json", "--policy", "last-first"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert bare.returncode == 2 and "invalid choice: 'last-first'" in bare.stderr


def test_train_lists_and_builds_a_plugin_launcher(plugin_site: Path, tmp_path: Path) -> None:
    assert "quiet-local" in _cli(plugin_site, tmp_path, "train", "--help").stdout
    code = ("from gnnsched.runtime.launcher import get_launcher, LocalLauncher\n"
            "from gnnsched.spec import load_cluster\n"
            f"l = get_launcher('quiet-local', load_cluster({str(EXAMPLE / 'cluster.yaml')!r}))\n"
            "assert isinstance(l, LocalLauncher) and type(l).__name__ == 'QuietLocal'\n"
            "print(l.name)")
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "quiet-local"  # the entry point's name, not its parent's


@pytest.mark.slow
def test_train_uses_a_plugin_launcher_with_its_own_flag(plugin_site: Path,
                                                       tmp_path: Path) -> None:
    """The plug-in's flag shows in ``train --help`` and its value reaches the launcher that
    runs the job, with no change to gnnsched's files."""
    lab4 = ROOT / "examples" / "lab4"
    text = _cli(plugin_site, tmp_path, "train", "--help").stdout
    assert "--quiet-tag" in text and "quiet-local launcher: a word written" in text
    cluster, job = str(lab4 / "cluster.yaml"), str(lab4 / "job.yaml")
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import load_cluster

    lab = load_cluster(cluster)
    Plan("hand", lab.name, lab.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1"))).save(tmp_path / "plan.json")
    out = _cli(plugin_site, tmp_path, "train", "--cluster", cluster, "--job", job,
               "--plan", "plan.json", "--launcher", "quiet-local", "--quiet-tag", "hello",
               "--epochs", "1", "--out", "run", "--json")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "run" / "quiet-tag.txt").read_text() == "hello"
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["launcher"] == "quiet-local" and len(res["epoch_times_s"]) == 1


def test_a_broken_plugin_is_reported_not_fatal(tmp_path: Path) -> None:
    """One package whose entry point cannot load leaves the built-ins working."""
    site = tmp_path / "site"
    dist = site / "broken_plug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gnnsched.policies]\nbroken = no_such_module:X\n")
    code = ("from gnnsched.policy import policies\n"
            "print(sorted(policies()))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['fifo', 'gnnsched']"
    assert "plug-in 'broken' (no_such_module:X) in gnnsched.policies failed to load" in out.stderr
