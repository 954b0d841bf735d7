"""Issue 52: the faster windowed network model simulates the same epochs as the one before it.

``tests/simulator/old_window.py`` is the model as it was (its :class:`_WindowNet` over its own
:class:`_FairNet`); every case here runs one plan through the engine twice, once with each
model, and compares the epoch, the steady iteration, every barrier and the sums of every
batch's timestamps (:func:`test_simulator_numbers.numbers`) to 1e-9 relative. The shapes are
the examples and the planning benchmark's (its 256-host ones included), with plans of several
placers and the policies that reach the model differently (wire levels, fair connections,
classes).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gnnsched import api
from gnnsched.evaluation import planning
from gnnsched.placement import Problem, get_placer
from gnnsched.simulator import engine, simulate
from gnnsched.workload import NIC_WINDOW_S

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import old_window  # noqa: E402
from test_simulator_numbers import _Classes, numbers  # noqa: E402

ROOT = HERE.parents[1]
STORES256 = ROOT / "bench" / "planning_shapes" / "stores256"


@cache
def _problem(shape: str) -> Problem:
    """A shape's Problem: an example's files, the planning benchmark's stores256 files, or one
    of the benchmark's coded shapes as ``name/size``."""
    if shape in ("hetero16", "scale256-example"):
        ex = ROOT / "examples" / shape.replace("-example", "")
        return api.plan_problem(ex / "cluster.yaml", ex / "job.yaml")
    if shape == "stores256":
        return api.plan_problem(STORES256 / "cluster.yaml", STORES256 / "job.yaml")
    name, size = shape.split("/")
    sh = planning.SHAPES[name]
    return Problem(sh.cluster(), planning.make_job(sh),
                   planning.graph_profile(planning.SIZES[size], sh.num_parts))


@cache
def _plan(shape: str, placer: str) -> Any:
    return get_placer(placer).place_problem(_problem(shape), seed=0, budget=2.0)


class _OldWindowNet(old_window._WindowNet):  # type: ignore[misc]
    """The old model, called as the engine calls the new one (no FIFO queue: None)."""

    def __init__(self, *args: Any, fifo_bytes: float | None = None, **kwargs: Any) -> None:
        assert fifo_bytes is None
        super().__init__(*args, **kwargs)


def _simulate(shape: str, placer: str, policy: str, iterations: int | None,
              old: bool) -> list[float]:
    pol: Any = _Classes() if policy == "classes" else policy
    saved = engine._WindowNet
    if old:
        engine._WindowNet = _OldWindowNet  # type: ignore[misc]
    try:  # both without the FIFO wait of remote hops, which the old model predates
        res = simulate(_problem(shape).wl, _plan(shape, placer), policy=pol, seed=1,
                       iterations=iterations, validate=False, nic_window_s=NIC_WINDOW_S,
                       nic_fifo_bytes=None)
    finally:
        engine._WindowNet = saved  # type: ignore[misc]
    return numbers(res)


CASES = [  # (shape, placer, policy, iterations)
    ("hetero16", "greedy", "gnnsched", None),
    ("hetero16", "random", "fifo", None),
    ("hetero16", "greedy", "classes", 12),
    ("scale256-example", "greedy", "gnnsched", 3),
    ("gpuless/papers", "greedy", "gnnsched", 6),
    ("mixed/products", "cpsat", "gnnsched", 6),
    ("thin/products", "greedy", "fifo", 4),
    ("stores256", "greedy", "gnnsched", None),
]


@pytest.mark.parametrize("shape,placer,policy,iterations", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_same_epochs_as_the_old_model(shape: str, placer: str, policy: str,
                                      iterations: int | None) -> None:
    new = _simulate(shape, placer, policy, iterations, old=False)
    ref = _simulate(shape, placer, policy, iterations, old=True)
    assert new == pytest.approx(ref, rel=1e-9, abs=0.0)
