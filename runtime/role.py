"""Entry point and shared plumbing of every role process.

``python -m gnnsched.runtime.role ROLE --id N --machine NAME --host ADDR --coordinator EP``

Life of a role: pin threads; connect a DEALER to the coordinator's ROUTER and say ``hello``;
receive ``config`` (the run's configuration, JSON); ``setup()`` (load data, bind its own sockets
on ``--host`` at ephemeral ports, so no port is ever fixed or shared); send ``ready`` with those
endpoints; receive ``start`` (everyone's endpoints); ``run()``; on ``stop`` send ``stats``
(bytes sent, role counters) and exit 0. Any exception is reported to
the coordinator as ``error`` (with the traceback) before the process exits 1.

Identity. A role connects as ``NAME/GEN`` (``sampler:1/0``): ``--gen`` is the restart
generation the coordinator gives each launch, so after a recovery nothing a dead incarnation
left in a queue can be mistaken for the new one's, and stores see every restarted client as a
new peer.

Heartbeats (failure detection). A heartbeat thread with its own socket (identity
``NAME/GEN/hb``) sends ``hb`` every ``--heartbeat`` seconds carrying what the role is doing
(:attr:`Role.doing`, e.g. ``training step 37 (epoch 4)``); the coordinator answers each one.
Its own thread and socket keep heartbeats independent of how long a step takes, so silence
means the process or its host is gone or frozen, not busy -- stalls are caught by the receive
timeouts instead. The coordinator declares a role dead after ``dead_after_s`` without one and
logs the last thing it said it was doing.

No orphans: the same thread ends the process when its parent dies (Linux
``PR_SET_PDEATHSIG`` plus a parent-pid check for launchers that exec through ``ip netns exec``
or ``ssh``) or when the coordinator has not answered a heartbeat for ``--orphan-timeout``
seconds. SIGINT is ignored (Ctrl-C is the coordinator's to handle: it stops roles in order);
SIGTERM ends it at once, even inside a blocking C call.

CURVE: with ``--curve-keys DIR`` every socket of the role is a CURVE client or server with the
cluster's key pair, and a ZAP handler admits only holders of that pair (see
:mod:`~gnnsched.runtime.transport`).
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

from gnnsched.runtime import ledger
from gnnsched.runtime.transport import (
    CONTROL,
    STATS,
    Channel,
    CurveKeys,
    Kind,
    Message,
    MessageError,
    SocketOptions,
    TransportTimeout,
    bind_random,
    ctrl,
    ctrl_body,
    load_keys,
    make_socket,
    start_authenticator,
)

_BORN = time.monotonic()  # when this module was imported: start-up time in the logs
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
ROLE_MODULES = {
    "store": "gnnsched.runtime.store:Store",
    "sampler": "gnnsched.runtime.sampler:Sampler",
    "fetcher": "gnnsched.runtime.fetcher:Fetcher",
    "trainer": "gnnsched.runtime.trainer:Trainer",
    "infer": "gnnsched.runtime.inference_role:InferRole",  # gnnsched predict
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



def memory_stats() -> dict[str, int]:
    """This process's peak resident memory (``peak_rss_bytes``, the kernel's high-water mark)
    and its proportional share now (``pss_bytes``: pages shared with other processes, such as
    a store's feature table a relay maps, counted once across them)."""
    import resource

    out = {"peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    try:
        import psutil

        out["pss_bytes"] = int(psutil.Process().memory_full_info().pss)
    except Exception:  # noqa: BLE001  (no /proc/PID/smaps: leave it out)
        pass
    return out

class Role:
    """Base of the store / sampler / fetcher / trainer processes."""

    role: ClassVar[str] = "role"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = f"{self.role}:{args.id}"
        self.gen = int(getattr(args, "gen", 0) or 0)
        self.ident = f"{self.name}/{self.gen}"
        self.ctx = zmq.Context(io_threads=1)
        keys_dir = getattr(args, "curve_keys", None)
        self.curve: CurveKeys | None = load_keys(keys_dir) if keys_dir else None
        self.auth = start_authenticator(self.ctx, self.curve) if self.curve else None
        sock = self.socket(zmq.DEALER, CONTROL, identity=self.ident.encode())
        sock.connect(args.coordinator)
        self.control = Channel(sock, f"{self.name} control")
        self.config: dict[str, Any] = {}
        self.peers: dict[str, Any] = {}
        self.stopping = False
        self.last_heard = time.monotonic()
        self.t0 = time.monotonic()
        self.doing = "starting"  # what the heartbeat reports; set by the role as it works

    def socket(self, kind: int, opts: SocketOptions = CONTROL, identity: bytes | None = None,
               server: bool = False) -> zmq.Socket:
        """A socket of this process: CURVE-secured when the cluster requires keys."""
        return make_socket(self.ctx, kind, opts, identity, curve=self.curve, server=server)

    def bind(self, kind: int, opts: SocketOptions) -> tuple[zmq.Socket, str]:
        """A server socket bound to this machine's address only (``--host``)."""
        sock = self.socket(kind, opts, server=True)
        return sock, bind_random(sock, self.args.host)

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
        with ledger.section("other:control"):
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
        """Start the heartbeat thread (also the orphan and parent-death watchdog)."""
        parent = os.getppid()
        period = float(getattr(self.args, "heartbeat", 1.0) or 1.0)
        sock = self.socket(zmq.DEALER, CONTROL, identity=f"{self.ident}/hb".encode())
        sock.connect(self.args.coordinator)
        beat = Channel(sock, f"{self.name} heartbeat")
        heard = [time.monotonic()]

        def watch() -> None:
            ledger.name_thread("other:heartbeat")
            try:
                beat_loop()
            except zmq.ZMQError:  # the process is closing its sockets: nothing to watch
                return

        def beat_loop() -> None:
            nxt = 0.0
            while True:
                now = time.monotonic()
                if now >= nxt:
                    nxt = now + period
                    try:
                        beat.send(ctrl("hb", doing=self.doing, pid=os.getpid()),
                                  flags=zmq.NOBLOCK)
                    except zmq.ZMQError:
                        pass  # queue full: the coordinator is not reading; the timeout decides
                try:
                    while beat.recv_now() is not None:  # the coordinator's answers
                        heard[0] = time.monotonic()
                except (MessageError, zmq.ZMQError):
                    pass
                if sock.poll(int(min(period, 0.5) * 1000), zmq.POLLIN):
                    continue
                if os.getppid() != parent:
                    self.log("parent process died; exiting")
                    os._exit(3)
                silent = time.monotonic() - max(heard[0], self.last_heard)
                if silent > orphan_timeout:
                    self.log(f"coordinator silent for {silent:.0f} s (no answer to heartbeats); "
                             "exiting")
                    os._exit(3)

        threading.Thread(target=watch, name="heartbeat", daemon=True).start()

    def main(self) -> int:
        ledger.start_thread("main")
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
            ledger.begin_run()  # the CPU ledger covers the run, not imports and loading
            if not self.stopping:
                with ledger.section("other:loop"):  # the loops' own code, outside any section
                    self.run()
            books = ledger.report()  # before memory_stats, whose /proc reads are not the run's
            self.event("stats", **STATS.to_dict(), cpu_s=time.process_time(), **self.stats(),
                       **memory_stats(), ledger=books)
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
                if self.auth is not None:
                    self.auth.stop()
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
    p.add_argument("--gen", type=int, default=0, help="restart generation (identity suffix)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between heartbeats")
    p.add_argument("--curve-keys", default=None, help="folder with the cluster's CURVE keys")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pin_threads(args.threads)
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The default action, not a Python handler: it ends the process even while it is blocked
    # in C (a collective waiting for a dead peer), where Python handlers never get to run.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        role = _role_class(args.role)(args)
    except Exception as exc:  # no coordinator link yet: say it on stderr (the role's log)
        print(f"[{args.role}:{args.id}] cannot start: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 2
    return role.main()


if __name__ == "__main__":
    sys.exit(main())
