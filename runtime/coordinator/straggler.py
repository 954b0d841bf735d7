"""Stragglers: a trainer whose steps have grown slower than its own, noticed from its steps.

Each trainer's compute time per training step (``train_s``: forward, backward, optimizer)
is compared with its own baseline, the median of its first :data:`WARM` steps after
:data:`SKIP` warm-up ones: a host whose CPU is taken by something else, or throttled,
shows here first, while the others only wait at the barrier (which is why a trainer is
judged against itself and not against its peers: uneven devices are planned, not
stragglers). The median of its last :data:`WINDOW` steps above :data:`SLOW` x the baseline
marks it a straggler; back below :data:`BACK` x, it has recovered, and is judged afresh
from then on, never punished for the past. The coordinator says both and records them
(``straggler`` / ``straggler_recovered`` in ``metrics.jsonl``); re-planning around one is
not done yet (a straggler's seeds would have to move mid-epoch).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

SKIP, WARM, WINDOW = 2, 5, 3  # steps: warm-up ignored, baseline, judged window
SLOW, BACK = 2.0, 1.3  # x its baseline: marked slow above SLOW, recovered below BACK


@dataclass
class _Trainer:
    seen: int = 0
    warm: list[float] = field(default_factory=list)
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    baseline: float | None = None
    slow: bool = False


class StragglerWatch:
    """Per trainer, its steps against its own baseline; :meth:`step` says when a trainer
    becomes a straggler or recovers (else None)."""

    def __init__(self) -> None:
        self.trainers: dict[int, _Trainer] = {}

    def step(self, trainer: int, train_s: float) -> tuple[str, float] | None:
        """One training step of ``trainer`` took ``train_s``: ("slow" | "back", its recent
        median over its baseline) when its state changes."""
        t = self.trainers.setdefault(trainer, _Trainer())
        t.seen += 1
        if t.seen <= SKIP or train_s <= 0:
            return None
        if t.baseline is None:
            t.warm.append(train_s)
            if len(t.warm) == WARM:
                t.baseline = statistics.median(t.warm)
            return None
        t.recent.append(train_s)
        if len(t.recent) < WINDOW:
            return None
        ratio = statistics.median(t.recent) / t.baseline
        if not t.slow and ratio > SLOW:
            t.slow = True
            return "slow", ratio
        if t.slow and ratio < BACK:
            t.slow = False
            t.recent.clear()
            return "back", ratio
        return None


__all__ = ["BACK", "SLOW", "StragglerWatch"]
