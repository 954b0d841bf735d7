"""Issue 52: the windowed model's work per event does not grow with the transfers queued behind
a full stream (they wait out of their sender's queue until a piece of that stream finishes),
and it hands over the same pieces at the same times as the model before it
(``tests/simulator/old_window.py``).

One sender; receiver 1's ingress is slow, so its stream stays full, and ``T`` transfers to it
come first in the policy's order, ahead of one transfer to each fast receiver. The old model
popped and pushed back all ``T`` at every piece that finished (measured with this scenario:
16 us per event with ``T`` = 256, against 280 us before).
"""

from __future__ import annotations

import heapq
import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import old_window  # noqa: E402

from gnnsched.simulator.network import _Flow  # noqa: E402
from gnnsched.simulator.window import _WindowNet  # noqa: E402


def _run(cls: Any, fast: int, queued: int, events: int) -> tuple[Any, list[tuple]]:
    """The model after `events` piece completions, and every transfer it finished (time,
    id), driven as the engine drives it."""
    M = fast + 2
    cap = [1.25e9] * M + [1.25e9, 2e7] + [1.25e9] * fast  # egress, then ingress: 1 is slow
    heap: list[tuple] = []
    cnt = itertools.count()

    def schedule(t: float, obj: Any) -> None:
        heapq.heappush(heap, (t, next(cnt), obj, obj.ver))

    net = cls(cap, schedule, None, 0.15, M, True, 0.12, piece_s=0.008, levels=True)
    fid = 0
    for dst, n, size in [(1, queued, 1e7)] + [(r, 1, 3e9) for r in range(2, M)]:
        for k in range(n):
            f = _Flow(fid, 0, dst, M, size, 2, dst, k)
            f.skey = (0, 1, 0.0, 0.0, fid)
            net.add(f, 0.0)
            fid += 1
    net.commit(0.0)
    finished = []
    for _ in range(events):
        if not heap:
            break
        t, _, g, ver = heapq.heappop(heap)
        f = net.done(g, ver, t)
        if f is not None:
            finished.append((t, f.fid))
        if net.dirty and (not heap or heap[0][0] > t):
            net.commit(t)
    return net, finished


def test_transfers_behind_a_full_stream_leave_the_queue_and_nothing_changes() -> None:
    new, got = _run(_WindowNet, fast=8, queued=64, events=1000)
    _, ref = _run(old_window._WindowNet, fast=8, queued=64, events=1000)
    assert got == ref and len(got) > 10  # the same transfers finish at the same times
    waiting = [item[-1] for item in new.waiting[0]]
    held = [item[-1] for items in new.full.values() for item in items]
    # the queue the sender scans holds at most the fast receivers' transfers (and one to
    # the slow receiver); the others not in its stream (a window: 15 of them) wait on it
    assert len(waiting) <= 8 + 1 and len(held) >= 64 - len(got) - 16 > 20
    assert all(f.d == new.M + 1 for f in held)
