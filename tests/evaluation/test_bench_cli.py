"""`gnnsched bench`'s subcommands: each lists only its own mode's flags, and the old flag
spellings (``--scale``, ``--resimulate``, plain ``gnnsched bench ...``) still run their mode,
with a one-line note on stderr naming the new spelling. Cheap paths only: ``--help`` and
errors raised before anything trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gnnsched.commands import bench
from gnnsched.evaluation.config import LEGACY_FLAGS, legacy_mode, modern_spelling


def _gnnsched(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gnnsched", *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def _flags(help_text: str) -> set[str]:
    return {w.strip("[],") for w in help_text.split() if w.startswith(("--", "[--"))}


@pytest.mark.parametrize("mode", list(bench.MODES))
def test_a_subcommands_help_lists_only_its_own_flags(mode: str) -> None:
    done = _gnnsched("bench", mode, "--help")
    assert done.returncode == 0, done.stderr
    own = set(bench.MODES[mode][2])
    shown = _flags(done.stdout) - {"--help"}
    assert own <= shown, own - shown
    others = set(bench.FLAGS) - own
    assert not shown & others, shown & others
    assert not shown & set(LEGACY_FLAGS)  # no mode flag inside a mode


def test_the_modes_flags_and_help_are_defined_once() -> None:
    for mode, (what, legacy, flags) in bench.MODES.items():
        assert what and mode in bench.DESCRIPTIONS
        assert set(flags) <= set(bench.FLAGS), mode
        assert len(flags) == len(set(flags)), mode
        assert legacy is None or LEGACY_FLAGS[legacy] == mode
        for flag in flags:
            assert bench._help(flag, mode), (mode, flag)
    assert set(bench.HELPS) == set(bench.FLAGS)
    assert _flags(_gnnsched("bench", "eval", "--help").stdout) >= {"--quick", "--targets"}
    assert "--nodes" in _gnnsched("bench", "scale", "--help").stdout
    assert "--nodes" not in _gnnsched("bench", "eval", "--help").stdout


def test_old_spellings_map_to_their_subcommand() -> None:
    assert legacy_mode(["--quick"]) == "eval"
    assert legacy_mode(["--scale", "--quick"]) == "scale"
    assert legacy_mode(["--scale-model", "--resimulate"]) == "resimulate"
    assert legacy_mode(["--calibrate-box", "--scale-model"]) == "calibrate-box"
    assert modern_spelling(["bench", "--scale", "--quick"]) == ["bench", "scale", "--quick"]
    assert modern_spelling(["bench", "--repeats", "3"]) == ["bench", "eval", "--repeats", "3"]
    assert modern_spelling(["bench", "merge", "--out", "x"]) == ["bench", "merge", "--out", "x"]


def test_an_old_spelling_still_runs_its_mode_with_a_note(tmp_path: Path) -> None:
    # --scale: the scale tier's own settings check answers (nothing is trained)
    done = _gnnsched("bench", "--scale", "--quick", "--nodes", "10", "--launcher", "local",
                     cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert "deprecated" in lines[0] and "`gnnsched bench scale --quick --nodes 10" in lines[0]
    assert "gnnsched bench scale: --nodes must be at least 1000" in done.stderr
    # --resimulate: the stored evaluation it re-derives is looked for (and not found)
    done = _gnnsched("bench", "--resimulate", "--out", str(tmp_path / "none"), cwd=tmp_path)
    assert done.returncode != 0
    assert f"`gnnsched bench resimulate --out {tmp_path / 'none'}`" in done.stderr
    assert "gnnsched bench resimulate:" in done.stderr and "not found" in done.stderr
    # the same mode by its subcommand: no note
    done = _gnnsched("bench", "resimulate", "--out", str(tmp_path / "none"), cwd=tmp_path)
    assert "deprecated" not in done.stderr and "not found" in done.stderr
    # plain `gnnsched bench FLAGS` is the evaluation; --help still answers
    done = _gnnsched("bench", "--quick", "--help")
    assert done.returncode == 0 and "--quick" in done.stdout and "eval" in done.stdout
    done = _gnnsched("bench", "--nodes", "5000", "--launcher", "local", cwd=tmp_path)
    assert done.returncode != 0 and "--nodes goes with --scale" in done.stderr
    assert "`gnnsched bench eval --nodes 5000 --launcher local`" in done.stderr


def test_a_bad_targets_file_is_one_line(tmp_path: Path) -> None:
    from gnnsched.evaluation.targets import load_targets

    bad = tmp_path / "t.yaml"
    bad.write_text("evaluation:\n  speedup: 2\n")
    with pytest.raises(SystemExit, match=r"evaluation.speedup: unknown goal \(valid: "):
        load_targets(bad)
    bad.write_text("nope: {}\n")
    with pytest.raises(SystemExit, match="unknown section 'nope'"):
        load_targets(bad)
    bad.write_text("scale:\n  vs_distdgl: fast\n")
    with pytest.raises(SystemExit, match="is not a finite number"):
        load_targets(bad)
    ours = load_targets(Path(__file__).resolve().parents[2] / "bench" / "targets.yaml")
    assert ours.evaluation == {"speedup_vs_distdgl": 1.2, "speedup_vs_colocation_limited": 1.5,
                               "sim_error": 0.1, "accuracy_vs_distdgl": 0.01}
    assert ours.scale["limit_fraction"] == 0.8 and ours.planning["plan_time_s"] == 60.0
    assert load_targets(None).evaluation == {} and load_targets(None).flag() == ""
