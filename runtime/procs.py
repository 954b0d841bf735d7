"""Child processes that lead their own session: start one with its output in a log file, and
stop a set of them -- SIGTERM, a grace period, SIGKILL, reaped.

One place for what the role launchers (:mod:`.launcher`) and the DistDGL runner
(:mod:`.distdgl`) both do. Every child runs in its own session (process group), so a stop
reaches the whole group (a process and anything it forked), and the terminal's Ctrl-C reaches
only the parent, which then stops its children in order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar


class GroupLeader(Protocol):
    """A child leading its own process group (``pgid == pid``)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float) -> int | None: ...


Leader = TypeVar("Leader", bound=GroupLeader)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends, so a second stop request cannot
    interrupt a teardown half way and leave namespaces or groups behind; the first signal
    that arrived meanwhile is raised again when the block is left. Python runs signal
    handlers in the main thread whichever thread the kernel picked, so swapping the handlers
    holds them in a threaded process too (a thread's signal mask would not)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread
        return
    pending: list[int] = []
    old = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if pending:
            signal.raise_signal(pending[0])


def start_in_session(argv: list[str], env: dict[str, str], log: Path, *,
                     append: bool = True) -> subprocess.Popen:
    """Start ``argv`` in a new session, stdin from /dev/null, stdout and stderr into ``log``
    (appended to, or truncated with ``append=False``); the child keeps its own descriptor."""
    with open(log, "ab" if append else "wb") as fh:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid``; a group that is gone is no error."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_groups(procs: Sequence[Leader], grace: float, *, kill_wait: float = 5.0,
                orphans: bool = False) -> list[Leader]:
    """SIGTERM the groups of live processes (with SIGCONT: a frozen one must get it), wait up
    to ``grace``, SIGKILL the groups still running, wait up to ``kill_wait``. ``orphans``:
    signal the groups of leaders that already exited as well (what they forked may live on).
    Returns the processes that were live at the start."""
    live = [p for p in procs if p.poll() is None]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
        running = [p for p in procs if p.poll() is None]
        for p in procs if orphans else running:
            signal_group(p.pid, sig)
            if sig == signal.SIGTERM:
                signal_group(p.pid, signal.SIGCONT)
        end = time.monotonic() + wait
        for p in running:
            p.wait(max(0.0, end - time.monotonic()))
    return live


def end_piped(popen: subprocess.Popen, grace: float) -> None:
    """End a child that reads commands on its stdin (a fork server, a probe session): close
    its stdin (it exits on end of input), wait ``grace``, then SIGKILL its group and reap it.
    The caller closes its other pipes."""
    try:
        if popen.stdin is not None:
            popen.stdin.close()
    except OSError:
        pass
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(5.0)


class Child:
    """A started child leading its own session: poll, signal, wait, read its log's tail."""

    def __init__(self, name: str, popen: subprocess.Popen, log: Path) -> None:
        self.name, self.popen, self.log = name, popen, log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        """Signal its whole group, unless it already exited."""
        if self.poll() is None:
            signal_group(self.pid, sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


__all__ = ["Child", "GroupLeader", "end_piped", "signal_group", "start_in_session", "stop_groups"]
