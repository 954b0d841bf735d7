"""A fork server: imports torch, DGL and the role modules once, then forks each role process.

Why: a role spends seconds importing torch and DGL (2.5 s + 4 s of CPU each), so starting
seven roles on a small box took ~20 s of CPU, and so did every recovery, which restarts five.
Forked from a process that has already imported everything, a role starts in milliseconds;
pages stay shared copy-on-write, so it also saves memory. Forking after import is safe here
because the zygote never runs a parallel region, a CUDA call or a ZeroMQ context: it only
imports (the same rule PyTorch's forked DataLoader workers rely on).

Protocol: JSON lines. The launcher writes ``{"op": "spawn", "id", "argv", "env", "log"}`` to
the zygote's stdin; the zygote answers ``{"op": "spawned", "id", "pid"}`` (or ``error``) and,
when a child ends, ``{"op": "exit", "pid", "code"}`` (negative: killed by that signal) on its
stdout. Each child starts its own session (so the launcher can signal its whole group), sends
its output to its log file, and runs :func:`gnnsched.runtime.role.main`. When stdin closes
(the launcher is done, or died), the zygote kills its children and exits at once (no
interpreter teardown: a Ctrl-C is over in well under a second); it also dies with its parent (``PR_SET_PDEATHSIG``), and its children die with it.

On a scale model (control groups per host, :mod:`gnnsched.runtime.cgroups`) a spawn request
may carry ``"await_cgroup": {"marker", "count", "timeout"}``: the launcher moves the child into
its group as soon as it learns the pid (the zygote runs inside ``ip netns exec``, which hides
``/sys/fs/cgroup``), and the child waits until ``/proc/self/cgroup`` shows it there in
``count`` hierarchies before it runs a line of the role, so every CPU second and byte of the
role is its host's.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any


def preload() -> None:
    """Import everything a role imports (and touch torch's optimizer once: its first use
    imports torch._dynamo, ~2 s)."""
    import torch

    import gnnsched.runtime.fetcher  # noqa: F401
    import gnnsched.runtime.sampler  # noqa: F401
    import gnnsched.runtime.store  # noqa: F401
    import gnnsched.runtime.trainer  # noqa: F401
    from gnnsched.compat import dgl

    dgl.distributed.load_partition  # noqa: B018  (resolves the lazy submodule)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def _say(msg: dict[str, Any]) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())  # one write per line: never interleaved


def await_cgroup(marker: str, count: int, timeout: float = 30.0) -> bool:
    """Wait until ``count`` lines of ``/proc/self/cgroup`` end in ``marker`` (this process has
    been moved into its control group in that many hierarchies); False after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        try:
            with open("/proc/self/cgroup") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return False
        if sum(1 for ln in lines if ln.rstrip("/").endswith(marker)) >= count:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.002)


def _child(argv: list[str], env: dict[str, str], log: str,
           cgroup: dict[str, Any] | None = None) -> None:
    """In the forked child: own session, output to the log, (wait to be moved into its control
    group,) run the role; never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        if cgroup and not await_cgroup(str(cgroup["marker"]), int(cgroup["count"]),
                                       float(cgroup.get("timeout", 30.0))):
            print(f"warning: not moved into control group {cgroup['marker']} within "
                  f"{float(cgroup.get('timeout', 30.0)):g} s; running outside it",
                  file=sys.stderr)
        os.environ.update(env)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from gnnsched.runtime import role

        role._BORN = time.monotonic()
        sys.argv = ["gnnsched-role", *argv]
        code = int(role.main(argv) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> int:
    from gnnsched.runtime.role import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's
    preload()
    _say({"op": "ready", "pid": os.getpid()})
    children: set[int] = set()
    buf = b""
    while True:
        while children:  # reap, and report every exit
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _say({"op": "exit", "pid": pid, "code": code})
        ready, _, _ = select.select([0], [], [], 0.05)
        if not ready:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # the launcher closed the pipe: take everything down with us
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            # at once: finalizing an interpreter that holds torch and DGL takes seconds
            # (over 5 s in a scale model's CPU quota), and there is nothing left to flush
            os._exit(0)
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                req = json.loads(line)
                pid = os.fork()
            except (ValueError, OSError) as exc:
                _say({"op": "error", "id": None, "error": str(exc)})
                continue
            if pid == 0:
                _child(list(req["argv"]), dict(req["env"]), str(req["log"]),
                       req.get("await_cgroup"))
            children.add(pid)
            _say({"op": "spawned", "id": req["id"], "pid": pid})


if __name__ == "__main__":
    sys.exit(main())
