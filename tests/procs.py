"""Process checks shared by the end-to-end tests: what outlived a run."""

from __future__ import annotations

import time

import psutil


def survivors(pids: set[int], grace: float = 5.0) -> list[str]:
    """Processes among ``pids`` still running after ``grace`` seconds (cmdlines)."""
    end = time.monotonic() + grace
    while True:
        alive = []
        for pid in pids:
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(p.cmdline()))
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)
