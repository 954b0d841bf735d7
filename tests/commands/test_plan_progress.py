"""``gnnsched plan`` shows its phases on a terminal (one line each, with elapsed seconds), as
``train`` shows its progress, and nothing of them in a pipe or a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnsched.cli import main

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "hetero16"


@pytest.mark.parametrize("terminal", [True, False])
def test_plan_shows_its_phases_on_a_terminal_only(tmp_path: Path, terminal: bool,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("gnnsched.commands.progress.on_terminal", lambda f=None: terminal)
    rc = main(["plan", "--cluster", str(EX / "cluster.yaml"), "--job", str(EX / "job.yaml"),
               "--placer", "gnnsched", "--budget", "2", "--out", str(tmp_path / "p.json"),
               "--no-calibration"])
    err = capsys.readouterr().err
    assert rc in (0, None)
    phases = [ln for ln in err.splitlines() if ln.startswith("plan: [")]
    if not terminal:
        assert phases == []
        return
    said = " ".join(phases)
    for phase in ("planning:", "starts:", "race:", "search:", "placed:", "baselines:"):
        assert phase in said, (phase, err)
    assert all(" s] " in ln for ln in phases)
