"""Where an emulated cluster is recorded: one state file per cluster (what ``up`` created,
written before it is created, so ``down`` from any process removes exactly that) and the lock
that serialises ``up`` and ``down`` across processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gnnsched.runtime.netns_addresses import _clean


def _state_dir() -> Path:
    env = os.environ.get("GNNSCHED_NETNS_STATE")
    if env:
        return Path(env)
    run = Path("/run")
    if os.access(run, os.W_OK):
        return run / "gnnsched" / "netns"
    return Path("/tmp/gnnsched-netns")


def state_path(cluster: str) -> Path:
    return _state_dir() / f"{_clean(cluster)}.json"


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Serialise up/down across processes (one lock for all clusters: they share the box)."""
    d = _state_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "netns.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_state(cluster: str) -> dict[str, Any] | None:
    try:
        return json.loads(state_path(cluster).read_text())
    except (OSError, ValueError):
        return None


def list_states() -> list[dict[str, Any]]:
    d = _state_dir()
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(p.read_text()))
    return out


def dilation(cluster: str) -> float | None:
    """The dilation factor D of emulated cluster ``cluster`` (its name) as it was brought up:
    every time measured on it is D times the real cluster's (1.0: not a scale model); None when
    it is not up."""
    state = read_state(_clean(cluster))
    if state is None:
        return None
    return float(state.get("dilation") or 1.0)


__all__ = ["dilation", "list_states", "read_state", "state_path"]
