"""Stragglers are noticed from a trainer's own steps, and a recovered one is not punished."""

from __future__ import annotations

import pytest

from gnnsched.runtime.coordinator.straggler import SKIP, WARM, WINDOW, StragglerWatch


def _feed(watch: StragglerWatch, trainer: int, times: list[float]) -> list:
    return [c for t in times if (c := watch.step(trainer, t)) is not None]


def test_a_slowed_trainer_is_marked_once_and_recovers() -> None:
    w = StragglerWatch()
    assert _feed(w, 0, [1.0] * SKIP + [0.10] * WARM) == []  # warm-up outliers ignored
    assert _feed(w, 1, [0.40] * (SKIP + WARM)) == []  # a slower device is not a straggler
    got = _feed(w, 0, [0.35] * (WINDOW + 4))  # 3.5x its own baseline
    assert len(got) == 1 and got[0][0] == "slow" and got[0][1] == pytest.approx(3.5)
    assert _feed(w, 1, [0.40] * 10) == []
    back = _feed(w, 0, [0.11] * (WINDOW + 2))
    assert len(back) == 1 and back[0][0] == "back" and back[0][1] == pytest.approx(1.1)
    # judged afresh: one slow step after recovering is not a straggler
    assert _feed(w, 0, [0.5] + [0.10] * WINDOW) == []
    assert _feed(w, 2, [0.10] * (SKIP + WARM) + [0.0] * 5) == []  # no compute: not judged
