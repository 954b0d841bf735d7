"""A role's process as a launcher sees it: what to start (:class:`RoleLaunch`), the started
process (:class:`Process`; :class:`ForkedProcess` when a fork server forked it) and the
launcher's end of a fork server (:class:`Zygote`; the server itself is
:mod:`gnnsched.runtime.zygote`).

Every launcher (:mod:`.launcher`) hands these out, so the coordinator polls, signals and
waits for a role the same way wherever it runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnsched.runtime.procs import Child, end_piped


class LaunchError(RuntimeError):
    """A process could not be started where the plan puts it (host down or unreachable)."""


@dataclass
class RoleLaunch:
    """One role process to start: what it is, where, and where its log goes."""

    role: str  # store | sampler | fetcher | trainer
    id: str
    machine: str
    coordinator: str  # endpoint the role connects to
    log: Path
    threads: int = 1
    orphan_timeout: float = 30.0
    start_timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    gen: int = 0  # restart generation: the role's identity is NAME/GEN
    heartbeat_s: float = 1.0
    curve_keys: str | None = None  # folder with the cluster's CURVE key pair
    device: int | None = None  # a trainer's device on its machine (its control group)

    @property
    def name(self) -> str:
        return f"{self.role}:{self.id}"

    @property
    def ident(self) -> str:
        return f"{self.name}/{self.gen}"


class Process(Child):
    """A started role: poll / signal / wait its whole process group (:class:`Child`)."""

    def __init__(self, launch: RoleLaunch, popen: subprocess.Popen) -> None:
        super().__init__(launch.name, popen, launch.log)
        self.launch = launch


class Zygote:
    """One fork server (:mod:`gnnsched.runtime.zygote`) and the JSON-lines pipe to it."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        import json

        self._json = json
        log.parent.mkdir(parents=True, exist_ok=True)
        self._err = open(log, "ab")
        self.popen = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._err,
                                      start_new_session=True)
        self.log = log
        self.buf = b""
        self.exits: dict[int, int] = {}
        self.replies: dict[int, dict[str, Any]] = {}
        self.ids = 0
        self.ready = False

    def _read(self, timeout: float) -> None:
        """Wait up to ``timeout`` for output, then process everything available."""
        import select

        out = self.popen.stdout
        assert out is not None
        wait = timeout
        while select.select([out], [], [], wait)[0]:
            data = os.read(out.fileno(), 1 << 16)
            if not data:
                return
            self.buf += data
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = self._json.loads(line)
                except ValueError:
                    msg = None
                if not isinstance(msg, dict) or "op" not in msg:
                    continue  # not the protocol (a remote login script's output): skip it
                if msg["op"] == "exit":
                    self.exits[int(msg["pid"])] = int(msg["code"])
                elif msg["op"] == "ready":
                    self.ready = True
                else:
                    self.replies[msg.get("id") if msg.get("id") is not None else -1] = msg
            wait = 0.0

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_ready(self, timeout: float) -> None:
        """Block until its imports are done (it says ``ready``)."""
        end = time.monotonic() + timeout
        while not self.ready:
            if not self.alive():
                raise LaunchError(f"fork server exited with code {self.popen.poll()}; "
                                  f"see {self.log}")
            if time.monotonic() > end:
                raise LaunchError(f"fork server not ready within {timeout:.0f} s; "
                                  f"see {self.log}")
            self._read(0.2)

    def spawn(self, argv: list[str], env: dict[str, str], log: Path,
              timeout: float = 300.0, await_cgroup: dict[str, Any] | None = None) -> int:
        """Fork a role; returns its pid (waits for the zygote's imports the first time).
        ``await_cgroup`` (``{"marker", "count"}``): the child waits until the launcher has
        moved it into its control group (:func:`gnnsched.runtime.zygote.await_cgroup`)."""
        self.ids += 1
        rid = self.ids
        req = {"op": "spawn", "id": rid, "argv": argv, "env": env, "log": str(log)}
        if await_cgroup:
            req["await_cgroup"] = await_cgroup
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write((self._json.dumps(req) + "\n").encode())
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise LaunchError(f"fork server died ({exc}); see {self.log}") from None
        end = time.monotonic() + timeout
        while rid not in self.replies and -1 not in self.replies:
            if not self.alive():
                raise LaunchError(f"fork server exited with code {self.popen.poll()}; "
                                  f"see {self.log}")
            if time.monotonic() > end:
                raise LaunchError(f"fork server did not answer within {timeout:.0f} s")
            self._read(0.2)
        msg = self.replies.pop(rid, None) or self.replies.pop(-1)
        if msg["op"] != "spawned":
            raise LaunchError(f"fork server could not start the process: {msg.get('error')}")
        return int(msg["pid"])

    def poll(self) -> None:
        if self.popen.stdout is not None and not self.popen.stdout.closed:
            self._read(0.0)

    def hang_up(self) -> None:
        """Close its stdin: it kills its children and exits (:meth:`close` waits for it)."""
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        except OSError:
            pass

    def close(self, grace: float = 5.0) -> None:
        """Close its stdin (it kills its children and exits), then make sure it is gone."""
        end_piped(self.popen, grace)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._err.close()


class ForkedProcess(Process):
    """A role forked by a :class:`Zygote`: its exit status comes from the zygote's reports
    (it is the zygote's child); when the zygote itself is gone, from the pid's existence."""

    def __init__(self, launch: RoleLaunch, pid: int, zygote: Zygote) -> None:
        self.launch, self.name, self.log = launch, launch.name, launch.log
        self._pid, self.zygote = pid, zygote
        self.code: int | None = None

    @property
    def pid(self) -> int:
        return self._pid

    def poll(self) -> int | None:
        if self.code is None:
            self.zygote.poll()
            if self._pid in self.zygote.exits:
                self.code = self.zygote.exits.pop(self._pid)
            elif not self.zygote.alive():
                try:
                    os.kill(self._pid, 0)
                except ProcessLookupError:
                    self.code = -int(signal.SIGKILL)  # died with its fork server
                except PermissionError:
                    pass
        return self.code

    def wait(self, timeout: float) -> int | None:
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= end:
                return None
            time.sleep(0.02)
        return self.code


__all__ = ["ForkedProcess", "LaunchError", "Process", "RoleLaunch", "Zygote"]
