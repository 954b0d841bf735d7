"""Entry point and shared plumbing of every role process.

``python -m gnnsched.runtime.role ROLE --id N --machine NAME --host ADDR --coordinator EP``

Life of a role: pin threads; connect a DEALER to the coordinator's ROUTER and say ``hello``;
receive ``config`` (the run's configuration, JSON); ``setup()`` (load data, bind its own sockets
on ``--host`` at ephemeral ports, so no port is ever fixed or shared); send ``ready`` with those
endpoints; receive ``start`` (everyone's endpoints); ``run()``; on ``stop`` send ``stats``
(bytes sent, role counters) and exit 0. Any exception is reported to
the coordinator as ``error`` (with the traceback) before the process exits 1.

No orphans: a watchdog thread ends the process when its parent dies (Linux
``PR_SET_PDEATHSIG`` plus a parent-pid check for launchers that exec through ``ip netns exec``
or ``ssh``) or when the coordinator has been silent for ``--orphan-timeout`` seconds (it pings
every second). SIGINT is ignored (Ctrl-C is the coordinator's to handle: it stops roles in
order); SIGTERM ends it at once, even inside a blocking C call. These are also the hooks
heartbeats will use.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, ClassVar

import zmq

from gnnsched.runtime.transport import (
    CONTROL,
    STATS,
    Channel,
    Kind,
    Message,
    MessageError,
    TransportTimeout,
    ctrl,
    ctrl_body,
    make_socket,
)

_BORN = time.monotonic()  # when this module was imported: start-up time in the logs
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
ROLE_MODULES = {
    "store": "gnnsched.runtime.store:Store",
    "sampler": "gnnsched.runtime.sampler:Sampler",
    "fetcher": "gnnsched.runtime.fetcher:Fetcher",
    "trainer": "gnnsched.runtime.trainer:Trainer",
}
PHASES = ("train", "val", "test")


def seed_of(*keys: int) -> int:
    """A deterministic 31-bit seed from integer keys: the same in every process and run."""
    h = hashlib.blake2b(",".join(str(int(k)) for k in keys).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") & 0x7FFFFFFF


def seeds_hash(seeds: Any) -> str:
    """Order-independent digest of a batch's seeds (the exactly-once check)."""
    import numpy as np

    return hashlib.blake2b(np.sort(np.asarray(seeds, dtype=np.int64)).tobytes(),
                           digest_size=8).hexdigest()


def pin_threads(n: int) -> None:
    """Bound intra-op threads so roles sharing a machine do not oversubscribe it."""
    for var in THREAD_ENV:
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(n)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Role:
    """Base of the store / sampler / fetcher / trainer processes."""

    role: ClassVar[str] = "role"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = f"{self.role}:{args.id}"
        self.ctx = zmq.Context(io_threads=1)
        sock = make_socket(self.ctx, zmq.DEALER, CONTROL, identity=self.name.encode())
        sock.connect(args.coordinator)
        self.control = Channel(sock, f"{self.name} control")
        self.config: dict[str, Any] = {}
        self.peers: dict[str, Any] = {}
        self.stopping = False
        self.last_heard = time.monotonic()
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ hooks
    def setup(self) -> None:
        """After ``config``: load data, bind sockets (``self.config`` is set)."""

    def ready_fields(self) -> dict[str, Any]:
        """What the coordinator must know after setup (endpoints)."""
        return {}

    def announce(self) -> None:
        """After setup, before ``ready``: send anything else the coordinator needs (arrays)."""

    def run(self) -> None:
        raise NotImplementedError

    def on_control(self, body: dict[str, Any]) -> None:
        """A role-specific control message (``ping``/``stop`` are handled here)."""
        raise MessageError(f"{self.name}: unexpected control op {body['op']!r}")

    def on_message(self, msg: Message) -> None:
        """A role-specific typed message on the control socket."""
        raise MessageError(f"{self.name}: unexpected {msg.kind.name} from the coordinator")

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Close role sockets (the control socket is closed by the base)."""

    # ------------------------------------------------------------------ plumbing
    def log(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
        print(f"[{stamp} {self.name}] {text}", file=sys.stderr, flush=True)

    def event(self, op: str, **fields: Any) -> None:
        self.control.send(ctrl(op, **fields))

    def dispatch(self, msg: Message) -> None:
        self.last_heard = time.monotonic()
        if msg.kind != Kind.CTRL:
            self.on_message(msg)
            return
        body = ctrl_body(msg, "coordinator")
        op = body["op"]
        if op == "ping":
            return
        if op == "stop":
            self.stopping = True
            return
        self.on_control(body)

    def poll_control(self) -> None:
        """Handle every queued coordinator message (never blocks)."""
        while not self.stopping:
            got = self.control.recv_now()
            if got is None:
                return
            self.dispatch(got[1])

    def wait_for(self, op: str, timeout: float) -> dict[str, Any]:
        """Block (handling pings) until the coordinator sends ``op``; {} if told to stop."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TransportTimeout(f"{self.name}: no {op!r} from the coordinator within "
                                       f"{timeout:.0f} s")
            _, msg = self.control.recv(left)
            self.last_heard = time.monotonic()
            if msg.kind == Kind.CTRL:
                body = ctrl_body(msg, "coordinator")
                if body["op"] == op:
                    return body
                if body["op"] == "stop":
                    self.stopping = True
                    return {}
                if body["op"] == "ping":
                    continue
            self.dispatch(msg)

    def watchdog(self, orphan_timeout: float) -> None:
        parent = os.getppid()

        def watch() -> None:
            while True:
                time.sleep(0.5)
                if os.getppid() != parent:
                    self.log("parent process died; exiting")
                    os._exit(3)
                if time.monotonic() - self.last_heard > orphan_timeout:
                    self.log(f"coordinator silent for {orphan_timeout:.0f} s; exiting")
                    os._exit(3)

        threading.Thread(target=watch, name="watchdog", daemon=True).start()

    def main(self) -> int:
        self.watchdog(self.args.orphan_timeout)
        try:
            self.event("hello", role=self.role, id=self.args.id, machine=self.args.machine,
                       pid=os.getpid())
            self.config = self.wait_for("config", self.args.start_timeout)
            if not self.stopping:
                self.setup()
                self.announce()
                self.event("ready", **self.ready_fields())
                self.log(f"ready {time.monotonic() - _BORN:.2f} s after start")
                self.peers = self.wait_for("start", self.args.start_timeout)
            if not self.stopping:
                self.run()
            self.event("stats", **STATS.to_dict(), **self.stats())
            return 0
        except Exception as exc:  # report, then exit non-zero: the coordinator aborts the run
            tb = traceback.format_exc()
            self.log(tb)
            try:
                self.event("error", error=f"{type(exc).__name__}: {exc}", traceback=tb[-4000:])
            except Exception:
                pass
            return 1
        finally:
            try:
                self.close()
            finally:  # closes any socket a role forgot; lingers so stats/error get out
                self.ctx.destroy(linger=200)


def _role_class(role: str) -> type[Role]:
    import importlib

    mod, cls = ROLE_MODULES[role].split(":")
    return getattr(importlib.import_module(mod), cls)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gnnsched-role", description=__doc__.splitlines()[0])
    p.add_argument("role", choices=sorted(ROLE_MODULES))
    p.add_argument("--id", required=True, help="role instance id (store: machine name)")
    p.add_argument("--machine", required=True, help="machine name in the cluster file")
    p.add_argument("--host", default="127.0.0.1", help="address to bind data sockets on")
    p.add_argument("--coordinator", required=True, help="coordinator endpoint tcp://ADDR:PORT")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads")
    p.add_argument("--orphan-timeout", type=float, default=30.0)
    p.add_argument("--start-timeout", type=float, default=300.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pin_threads(args.threads)
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The default action, not a Python handler: it ends the process even while it is blocked
    # in C (a collective waiting for a dead peer), where Python handlers never get to run.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    role = _role_class(args.role)(args)
    return role.main()


if __name__ == "__main__":
    sys.exit(main())
