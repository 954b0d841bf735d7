"""The planning budget: one deadline for the whole of ``plan``, and what was done to keep it.

``gnnsched plan --budget S`` bounds the comparison (:func:`~.compare.plan_and_compare`): the
placer, the baselines and the bounds. A :class:`Budget` is that deadline. Every simulation a
scorer runs gets it (:func:`gnnsched.simulator.simulate`'s ``deadline``); one that would run
past it is cut short and the plan is scored the cheaper way instead (:meth:`Budget.fallback`:
the epoch extrapolated from the iterations it had done, else the plan's bound on the same
draws scaled by how far simulated epochs were above their bounds), which the plan's notes
say (:meth:`Budget.notes`). Steps that cannot be cut (placing a baseline, a CP-SAT solve's
set-up) are why the budget holds only within :data:`OVERSHOOT_S` + :data:`OVERSHOOT` x the
budget.

It also carries the progress hook: one line per phase with the seconds since planning began
(:meth:`Budget.say`), for a terminal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

Progress = Callable[[str], None]  # takes one line, e.g. print

# a plan's planning keeps within budget * (1 + OVERSHOOT) + OVERSHOOT_S seconds: what runs
# past the deadline is what cannot be cut (the baselines' placement, CP-SAT's set-up and at
# least a second of solving for the bound, one simulation's last CHECK_EVERY steps)
OVERSHOOT, OVERSHOOT_S = 0.10, 8.0
PLACER_SHARE = 0.7  # of the budget, the placer's; the rest scores the baselines and bounds
MIN_DONE = 2  # iterations a cut simulation needs to be extrapolated (else: the bound)
CALIBRATE = 4  # simulated plans whose epoch / bound ratio scales the bound fallback


@dataclass
class Cut:
    """One simulation cut at the deadline, and how its plan was scored instead."""

    done: int  # iterations it had simulated
    K: int  # of this many
    how: str  # "extrapolated" | "bound"
    score: float


class Budget:
    """The deadline of one planning (``seconds`` None: none) and its progress hook.

    ``deadline`` is a :func:`time.perf_counter` instant, the whole planning's; a step may
    narrow it for a while (:meth:`scope`: the placer's share, a phase's), and :attr:`end` is
    the nearer of the two: what scorers cut their simulations at. :meth:`fallback` scores a
    plan whose simulation was cut; :meth:`notes` says what was cut and what was left out.
    """

    def __init__(self, seconds: float | None = None, progress: Progress | None = None
                 ) -> None:
        self.seconds = None if seconds is None else max(0.0, float(seconds))
        self.progress = progress
        self.t0 = time.perf_counter()
        self.deadline = None if self.seconds is None else self.t0 + self.seconds
        self.step: float | None = None  # a step's own end (scope), inside the deadline
        self.cuts: list[Cut] = []
        self.skipped: list[str] = []  # steps left out for time, in the notes
        self._seen: list[tuple[Any, Any, int, float]] = []  # simulated plans (calibration)
        self._ratio: float | None = None
        self.reject = False  # cut scores are inf (a search's proposals: not kept unseen)
        self.walls: list[float] = []  # seconds of the simulations that ran to their end
        self.estimated: set[Any] = set()  # (plan key, seed): scored the cheaper way

    # ------------------------------------------------------------------ time
    @property
    def end(self) -> float | None:
        """The nearer of the deadline and the current step's end (None: neither)."""
        if self.step is None:
            return self.deadline
        return self.step if self.deadline is None else min(self.step, self.deadline)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self, overall: bool = False) -> float:
        """Seconds to :attr:`end` (`overall`: to the deadline); inf without one, never < 0."""
        end = self.deadline if overall else self.end
        return math.inf if end is None else max(0.0, end - time.perf_counter())

    @property
    def expired(self) -> bool:
        end = self.end
        return end is not None and time.perf_counter() >= end

    @contextmanager
    def scope(self, seconds: float | None) -> Iterator[Budget]:
        """Within the block, :attr:`end` is at most `seconds` from now (None: unchanged)."""
        saved = self.step
        if seconds is not None:
            mine = time.perf_counter() + max(0.0, seconds)
            self.step = mine if saved is None else min(saved, mine)
        try:
            yield self
        finally:
            self.step = saved

    @contextmanager
    def unbounded(self) -> Iterator[Budget]:
        """Within the block nothing is cut: the chosen plan's own score is one simulation
        in full, never an estimate made because the baselines spent the budget."""
        saved = self.deadline, self.step
        self.deadline = self.step = None
        try:
            yield self
        finally:
            self.deadline, self.step = saved

    @contextmanager
    def rejecting(self) -> Iterator[Budget]:
        """Within the block a cut simulation scores inf: a search proposal whose simulation
        ran out of time is rejected, never kept on an estimate."""
        saved, self.reject = self.reject, True
        try:
            yield self
        finally:
            self.reject = saved

    def say(self, phase: str, detail: str = "") -> None:
        """One progress line: the seconds since planning began, the phase, what it did."""
        if self.progress is not None:
            self.progress(f"[{self.elapsed():6.1f} s] {phase}" + (f": {detail}" if detail
                                                                   else ""))

    # ------------------------------------------------------------------ scoring
    def seen(self, wl: Any, plan: Any, seed: int, epoch: float) -> None:
        """A plan simulated in full: it may calibrate the bound fallback."""
        if len(self._seen) < CALIBRATE and self._ratio is None:
            self._seen.append((wl, plan, seed, epoch))

    def ran(self, wall_s: float) -> None:
        """A simulation ran to its end in `wall_s` seconds."""
        self.walls.append(wall_s)

    def sim_s(self) -> float | None:
        """The median seconds of a simulation that ran to its end (None: none did)."""
        w = sorted(self.walls)
        return w[len(w) // 2] if w else None

    def calibration(self) -> float:
        """The largest simulated epoch / per-plan bound of the first plans simulated in full
        (1 without any), fixed at its first use: a plan scored so is not favoured over the
        simulated ones it is compared with."""
        if self._ratio is None:
            from gnnsched.bounds import per_plan_bound

            rs = sorted(e / b for wl, p, s, e in self._seen
                        if (b := per_plan_bound(wl, p, s).epoch_s) > 0)
            self._ratio = max(1.0, rs[-1]) if rs else 1.0
        return self._ratio

    def fallback(self, wl: Any, plan: Any, seed: int, cut: Any | None) -> float:
        """A plan's score when its simulation was cut (`cut`: the
        :class:`~gnnsched.simulator.SimulationCut`; None: not started, the deadline had
        passed): extrapolated from the iterations done (at least :data:`MIN_DONE`), else its
        per-plan bound on the same draws (:func:`gnnsched.bounds.per_plan_bound`: resource
        and chain floors no schedule of it beats) times :meth:`calibration`."""
        K = cut.K if cut is not None else wl.iterations
        done = cut.done if cut is not None else 0
        key = getattr(plan, "key", None)
        if key is not None:
            self.estimated.add((key(), seed))
        if self.reject:
            self.cuts.append(Cut(done, K, "rejected", math.inf))
            return math.inf
        est = cut.estimate(MIN_DONE) if cut is not None else None
        if est is not None:
            self.cuts.append(Cut(done, K, "extrapolated", est))
            return est
        from gnnsched.bounds import per_plan_bound

        score = per_plan_bound(wl, plan, seed).epoch_s * self.calibration()
        self.cuts.append(Cut(done, K, "bound", score))
        return score

    def guard(self, scorer: Callable[[Any], float], wl: Any, seed: int
              ) -> Callable[[Any], float]:
        """`scorer` (one that cannot be cut, e.g. a caller's) not started past :attr:`end`:
        the plan gets :meth:`fallback` instead."""
        def score(plan: Any) -> float:
            if self.expired:
                return self.fallback(wl, plan, seed, None)
            return scorer(plan)

        return score

    def notes(self) -> tuple[str, ...]:
        """What the plan's notes say about the budget: cut simulations and skipped steps."""
        out = []
        if self.cuts:
            ext = [c for c in self.cuts if c.how == "extrapolated"]
            bnd = [c for c in self.cuts if c.how == "bound"]
            rej = [c for c in self.cuts if c.how == "rejected"]
            parts = [f"{len(rej)} search proposal(s) left unscored (rejected)"] if rej else []
            if ext:
                parts.append(f"{len(ext)} scored by extrapolating the iterations they had "
                             f"done ({min(c.done for c in ext)}-{max(c.done for c in ext)} "
                             f"of {max(c.K for c in ext)})")
            if bnd:
                parts.append(f"{len(bnd)} by the plan's bound on the same draws times "
                             f"{self.calibration():.3f} (the largest simulated epoch over its bound)")
            what = "the budget" if self.seconds is None else f"--budget {self.seconds:g} s"
            out.append(f"budget: {len(self.cuts)} simulation(s) would have run past {what} "
                       "and were cut short or not started: " + "; ".join(parts))
        out += [f"budget: {s}" for s in self.skipped]
        return tuple(out)


__all__ = ["CALIBRATE", "MIN_DONE", "OVERSHOOT", "OVERSHOOT_S", "PLACER_SHARE", "Budget",
           "Cut", "Progress"]
