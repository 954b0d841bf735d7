"""The primitives an emulated cluster (:mod:`.netns`) is built from: running ``ip`` and ``tc``,
the arithmetic of a shaped NIC's queue, entering a namespace, a per-namespace sysctl, killing
what runs in a namespace, and the probes (ICMP ping, the bulk-transfer scripts).

Kept apart from :mod:`.netns`, which composes them into the cluster's lifecycle (addresses,
state file, up/down); every public name here is importable from ``gnnsched.runtime.netns``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "gs-"
# TCP small queues: bytes one socket may park in the qdisc (kernel default 4 MiB). Capped per
# host namespace so a bulk flow fits the tbf queue instead of overflowing it into local drops
# and retransmits; 256 KiB still fills a 1 Gbit/s link.
TSQ_BYTES = 256 * 1024
_CLONE_NEWNET = 0x40000000


class NetnsError(RuntimeError):
    """The emulated cluster cannot be built, used or removed; the message says why and the fix."""


# --------------------------------------------------------------------------------------
# Running ip/tc


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode:
        raise NetnsError(f"`{' '.join(argv)}` failed: {r.stderr.strip() or r.returncode}")
    return r


def list_namespaces() -> list[str]:
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def list_root_links() -> list[str]:
    r = _run(["ip", "-o", "link", "show"], check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in r.stdout.splitlines()
            if line.count(":") >= 2]


def _kill_namespace_pids(ns: str, grace: float = 3.0) -> list[int]:
    """Stop what still runs in `ns`: a namespace with a live process outlives `ip netns del`."""
    r = _run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in r.stdout.split() if p.isdigit() and int(p) != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                live.append(pid)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 1.0)
        while live and time.monotonic() < deadline:
            live = [p for p in live if Path(f"/proc/{p}").exists()
                    and "zombie" not in _proc_state(p)]
            time.sleep(0.05)
        pids = live
        if not pids:
            break
    return pids


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


def shape_params(rate: float, mtu: int = 1500,
                 queue_ms: float | None = None) -> tuple[int, int]:
    """(burst, queue limit) in bytes of the tbf that shapes a NIC to `rate` bytes/s: a burst of
    ~4 ms (>= a few frames) and a queue of ~20 ms, at least two sockets' TSQ budget (so one
    bulk flow is never dropped locally; on a slow NIC that is far more than 20 ms). With
    ``queue_ms`` the queue holds that many milliseconds at `rate` (and :func:`tsq_bytes` shrinks
    the sockets' budget to fit it).

    The burst must exceed one frame and one timer tick's worth of tokens, else tbf undershoots;
    it is kept small so a 1-second transfer sees the configured rate, not the burst.
    """
    burst = max(int(rate * 0.004), 4 * (mtu + 14), 16 * 1024)
    if queue_ms is not None:
        return burst, max(int(rate * queue_ms / 1e3), burst + 4 * (mtu + 14))
    return burst, max(int(rate * 0.02), 2 * TSQ_BYTES + burst)


def tsq_bytes(rate: float, mtu: int = 1500, queue_ms: float | None = None) -> int:
    """TCP small queues budget of a host whose NIC sends `rate` bytes/s: ``TSQ_BYTES``, or with
    ``queue_ms`` what lets two sockets share the NIC's queue (at least 4 frames)."""
    if queue_ms is None:
        return TSQ_BYTES
    burst, limit = shape_params(rate, mtu, queue_ms)
    return int(min(TSQ_BYTES, max(4 * (mtu + 14), (limit - burst) // 2)))


def _shape_args(rate: float, mtu: int, queue_ms: float | None = None) -> list[str]:
    """tbf arguments for `rate` bytes/s (:func:`shape_params`)."""
    burst, limit = shape_params(rate, mtu, queue_ms)
    return ["tbf", "rate", f"{int(round(rate * 8))}bit", "burst", str(burst), "limit", str(limit)]


def _sysctl(ns: str, key: str, value: object) -> None:
    """Set a per-namespace sysctl (``/proc/sys/net`` resolves in the opening thread's netns)."""
    with entered(ns):
        Path("/proc/sys", key).write_text(f"{value}\n")


def qdisc_available(kind: str, *args: str) -> bool:
    """Whether the kernel has qdisc `kind` (tried in a throw-away namespace)."""
    probe = f"{PREFIX}probe-q{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
        return not _run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", kind, *args],
                        check=False).returncode
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def _tbf_rate(ns: str, dev: str) -> float | None:
    r = _run(["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev], check=False)
    with contextlib.suppress(ValueError, TypeError):
        for q in json.loads(r.stdout or "[]"):
            if q.get("kind") == "tbf":
                return float(q["options"]["rate"])
    return None


# --------------------------------------------------------------------------------------
# Probes: ping and bulk transfer


@contextlib.contextmanager
def entered(ns: str) -> Iterator[None]:
    """Move the *calling thread* into namespace `ns`; sockets made inside stay there."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    except FileNotFoundError:
        os.close(own)
        raise NetnsError(f"namespace {ns} does not exist (is the cluster up?)") from None
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            raise NetnsError(f"setns({ns}): {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if libc.setns(own, _CLONE_NEWNET) != 0:
                raise NetnsError(f"could not return from {ns}: "
                                 f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(target)
        os.close(own)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(ns: str, address: str, timeout: float = 2.0) -> float | None:
    """One ICMP echo from namespace `ns` to `address` (no `ping` binary needed); RTT or None."""
    ident = (os.getpid() ^ threading.get_native_id()) & 0xFFFF
    with entered(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        payload = struct.pack("!d", time.perf_counter()) + b"gnnsched"
        header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
        packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, 1) + payload
        t0 = time.perf_counter()
        sock.sendto(packet, (address, 0))
        deadline = t0 + timeout
        while (left := deadline - time.perf_counter()) > 0:
            sock.settimeout(left)
            try:
                data, (peer, _) = sock.recvfrom(2048)
            except TimeoutError:
                break
            ihl = (data[0] & 0x0F) * 4
            kind, _, _, rid, _ = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if kind == 0 and rid == ident and peer == address:
                return time.perf_counter() - t0
        return None
    finally:
        sock.close()


# Receiver and sender of `measure_rate`: tiny stdlib-only scripts, run in the hosts' namespaces.
# A small receive buffer bounds how many bytes a briefly descheduled receiver can read "late"
# (which would inflate the rate); a higher priority keeps other load on the box from starving
# the probes. Times are CLOCK_MONOTONIC (time.perf_counter on Linux): comparable across
# processes, so concurrent transfers can be added up.
_RECV = r"""
import json, os, socket, sys, time
addr, timeout, warm = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
try:
    os.nice(-10)
except OSError:
    pass
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
srv.bind((addr, 0)); srv.listen(1); srv.settimeout(timeout)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); conn.settimeout(timeout)
buf = memoryview(bytearray(1 << 20))
total, t_first, t_warm, b_warm, now = 0, None, None, 0, 0.0
while True:
    n = conn.recv_into(buf)
    if not n:
        break
    now = time.perf_counter()
    t_first = t_first or now
    total += n
    if t_warm is None and total >= warm:
        t_warm, b_warm = now, total
t_last = now
t_first, t_warm = t_first or now, t_warm or now
span = max(t_last - t_warm, 1e-9)
print(json.dumps({"bytes": total, "seconds": t_last - t_first, "t_first": t_first,
                  "t_last": t_last,
                  "rate_Bps": (total - b_warm) / span if total > b_warm else 0.0,
                  "raw_rate_Bps": total / max(t_last - t_first, 1e-9)}))
"""

_SEND = r"""
import os, socket, sys
addr, port, nbytes, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
tos = int(sys.argv[5]) if len(sys.argv) > 5 else 0
try:
    os.nice(-10)
except OSError:
    pass
s = socket.socket()
if tos:
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
s.settimeout(timeout)
s.connect((addr, port))
chunk = memoryview(bytes(1 << 20))
left = nbytes
while left > 0:
    k = min(left, len(chunk))
    s.sendall(chunk[:k])
    left -= k
s.shutdown(socket.SHUT_WR)
s.recv(1)
s.close()
"""


__all__ = ["PREFIX", "TSQ_BYTES", "NetnsError", "entered", "list_namespaces", "list_root_links",
           "ping", "qdisc_available", "shape_params", "tsq_bytes"]
