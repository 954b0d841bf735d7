"""What runs on a Ray node for gnnsched: the probe task (:func:`node_facts`), the liveness
task (:func:`node_ping`) and the actor that runs one role process (:class:`RoleSupervisor`),
with their Ray remote versions made once (:func:`_remote`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def node_facts(args: dict[str, Any]) -> dict[str, Any]:
    """Run on a node as a Ray task: hostcheck's facts (versions, digest, interface,
    partitions, run directory) plus Ray's version, memory, GPUs and whether the coordinator's
    port answers from there."""
    from gnnsched.runtime.hostcheck import local_facts

    out = local_facts(args)
    try:
        import ray

        out["ray"] = ray.__version__
    except ImportError:  # pragma: no cover - it runs inside Ray
        out["ray"] = None
    with contextlib.suppress(OSError, ValueError):
        out["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    out["gpus"] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        res = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10)
        for line in res.stdout.splitlines() if res.returncode == 0 else []:
            name, _, mib = line.rpartition(",")
            if mib.strip().isdigit():
                out["gpus"].append([name.strip(), int(mib) * 2**20])
    if args.get("work_dir"):
        out["work_dir_ok"] = os.path.isdir(args["work_dir"])
    coord = args.get("coordinator")
    if coord:
        host, _, port = coord.replace("tcp://", "").rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
            out["coordinator_error"] = None
        except OSError as exc:
            out["coordinator_error"] = str(exc)
    return out


def node_ping() -> str:
    """Run on a node as a Ray task: it answers (its node id) while the node is alive."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


class RoleSupervisor:
    """A Ray actor that runs one role process on its node and reports its exit.

    The role is started from a thread of its own that lives exactly as long as the role, so
    ``PR_SET_PDEATHSIG`` (set by the role for its parent thread) fires only when the actor
    dies, never because a pool thread ended."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen | None = None
        self.code: int | None = None
        self.log: str | None = None
        self.ended = threading.Event()

    def start(self, argv: list[str], env: dict[str, str], log: str, cwd: str) -> dict[str, Any]:
        """Start ``python ARGV`` with this node's interpreter; returns its pid and node."""
        import ray

        full = {**os.environ, **env}
        if not full.get("CUDA_VISIBLE_DEVICES"):
            full.pop("CUDA_VISIBLE_DEVICES", None)  # Ray hides GPUs from a 0-GPU actor
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        ready = threading.Event()
        err: list[str] = []

        def run() -> None:
            try:
                with open(log, "ab") as fh:
                    self.popen = subprocess.Popen(
                        [sys.executable, *argv], env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                        stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                err.append(str(exc))
                self.code = 127
                self.ended.set()
                return
            finally:
                ready.set()
            self.code = self.popen.wait()
            self.ended.set()

        threading.Thread(target=run, name="role", daemon=True).start()
        ready.wait()
        if err:
            raise RuntimeError(f"cannot start {sys.executable}: {err[0]}")
        assert self.popen is not None
        return {"pid": self.popen.pid, "node_id": ray.get_runtime_context().get_node_id(),
                "python": sys.executable}

    def wait(self) -> int:
        """Block until the role exits; its exit status (negative: killed by that signal)."""
        self.ended.wait()
        return int(self.code if self.code is not None else 1)

    def signal(self, sig: int) -> None:
        """Signal the role's whole process group (a frozen one also gets SIGCONT)."""
        if self.popen is None or self.ended.is_set():
            return
        for s in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, s)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(Path(self.log or "").read_text(errors="replace")
                             .splitlines()[-lines:])
        except OSError:
            return ""


_REMOTE: dict[str, Any] = {}


def _remote(ray: Any, what: str) -> Any:
    """The Ray remote versions of :class:`RoleSupervisor` and :func:`node_facts`, made once."""
    if what not in _REMOTE:
        _REMOTE["actor"] = ray.remote(num_cpus=0, max_concurrency=4)(RoleSupervisor)
        _REMOTE["facts"] = ray.remote(num_cpus=0, max_retries=0)(node_facts)
        _REMOTE["ping"] = ray.remote(num_cpus=0, max_retries=0)(node_ping)
    return _REMOTE[what]


__all__ = ["RoleSupervisor", "node_facts", "node_ping"]
