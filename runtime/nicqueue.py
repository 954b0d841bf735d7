"""The NIC queue: which chunk a store's NIC sends next, and when.

A machine's NIC is the contended resource, and only one queue per NIC can order it, so every
response a :class:`~gnnsched.runtime.store.Store` sends goes through one :class:`NicQueue`.
Priority transmission is real, not a label:

* responses are cut into chunks (:func:`chunked`; ``chunk_bytes``, 256 KiB by default; on
  shaped links ~8 ms of this store's own egress, ``nic_chunk_bytes``);
* a chunk leaves only while the bytes sent but not yet acknowledged by their receiver stay
  under ``window_bytes``, so data waits in *this* queue, not in socket buffers nobody can
  reorder (sockets also get a small ``SNDHWM`` and ``SO_SNDBUF``);
* at most ``SNDHWM`` chunks are unacknowledged per receiver, same-machine ones included, so
  a receiver's pipe is never found full; sends never block: if a pipe is full anyway its
  chunk goes back to the queue *encoded* (a retry does not encode it again) and that
  receiver is skipped until it acknowledges a chunk (or ``RETRY_S``), while the NIC serves
  the others (a blocking send would stall every transfer, sampling answers included, behind
  the slowest receiver; retrying every loop round spun the CPU);
* with ``sharing == "priority"`` the next chunk always comes from the first transfer in the
  policy's order (and with the policy's ``wire_levels`` none of a later iteration while a
  chunk of an earlier one is unacknowledged, unless the NIC idles, nor while its receiver's
  floor is an earlier iteration); with ``"fair"`` active transfers take turns chunk by
  chunk, like TCP flows sharing a link. The coordinator runs the policy: it sends each
  transfer's priority key ahead of time, keyed by (trainer, iteration, kind) -- when it
  dispatches a batch (its sampling requests) and when the batch is sampled (its feature
  transfers, whose sizes are then known) -- and, as a fallback for a request that beats that
  message, per queued transfer. Transfers not ranked yet go after ranked ones, in arrival
  order, so the NIC never idles waiting for a decision.

So a high-priority transfer queued behind a large low-priority one overtakes it after at most
one window of bytes. Gradients come first, as in the cost model (:class:`Holds`).

Its model in the simulator is the windowed network,
:class:`gnnsched.simulator.window._WindowNet`, which admits the same way. This module is pure
bookkeeping: it never touches a socket (the store sends what it picks).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnsched.runtime.transport import Kind, Message, MessageError
from gnnsched.workload import CONSERVE_BELOW, CONSERVE_EVERY

CHUNK_BYTES = 256 << 10
WINDOW_BYTES = 1 << 20  # total bytes in flight from one NIC
PEER_WINDOW_BYTES = 512 << 10  # bytes in flight to one receiver
RETRY_S = 0.02  # a receiver whose pipe was full is retried after this at the latest
URGENT_RETRY_S = 0.5  # a receiver not (yet) on the urgent socket: bulk band until then


@dataclass
class OutTransfer:
    """One queued response: its chunks, who receives it, and what the policy knows of it."""

    tid: int
    peer: bytes
    req: int
    kind: str  # "struct" | "feat" (the policy's Transfer.kind)
    trainer: int
    seq: int
    dst_machine: int
    chunks: list[Any]  # a Message, its Encoded frames once a send was refused, None once sent
    sizes: list[int]
    created: float
    local: bool = False  # same machine: no NIC involved, sent at once
    next_chunk: int = 0
    acked: int = 0

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)

    @property
    def pending(self) -> bool:
        return self.next_chunk < len(self.chunks)


class Holds(dict[int, tuple[int, float]]):
    """Gradients first, the rule stores and relays share: a machine whose trainer all-reduces
    iteration ``k`` gets nothing of later iterations until :meth:`release` or until the hold's
    time (the gradients' time on the wire) is up. Anything of iteration ``k`` or earlier still
    flows -- another trainer may need it to reach the same barrier -- so a hold can never
    deadlock. Maps machine -> (``k``, monotonic end; ``inf``: until released)."""

    def hold(self, machine: int, seq: int, for_s: float | None = None) -> None:
        self[machine] = (seq, time.monotonic() + for_s if for_s is not None else math.inf)

    def release(self, machine: int) -> None:
        self.pop(machine, None)

    def blocks(self, machine: int | None, seq: int, now: float) -> bool:
        """Whether iteration ``seq`` into ``machine`` must wait now (an ended hold is dropped)."""
        h = self.get(machine) if machine is not None else None
        if h is None:
            return False
        if now >= h[1]:  # its time is up: the gradients have left
            del self[machine]
            return False
        return seq > h[0]

    def expire(self, now: float) -> list[int]:
        """Drop the holds whose time is up; returns their machines."""
        done = [m for m, (_, until) in self.items() if now >= until]
        for m in done:
            del self[m]
        return done

    def left(self) -> float | None:
        """Seconds until the next timed hold ends (None: no timed hold)."""
        ends = [until for _, until in self.values() if until < math.inf]
        return max(0.0, min(ends) - time.monotonic()) if ends else None


class NicQueue:
    """Chooses the next chunk a NIC sends.

    ``priority``: the pending transfer with the smallest policy key (keys arrive from the
    coordinator; unranked transfers come after ranked ones, in arrival order) whose receiver
    still has window room -- strict priority that stays work-conserving when the first
    transfer's receiver is the slow side. ``fair``: pending transfers take turns, one chunk each.
    Bytes in flight (sent, not acknowledged) are bounded per receiver (``peer_window``) and in
    total (``window``); same-machine transfers bypass both (they never touch the NIC).
    ``peer_chunks`` bounds the chunks in flight to one receiver, local or remote: set to the
    socket's ``SNDHWM``, a send can never find the receiver's pipe full (every chunk in the
    pipe is unacknowledged), so none is refused and retried.
    :meth:`hold` marks a machine whose trainer is all-reducing (:class:`Holds`: gradients go
    ahead of all other traffic in the cost model).
    ``rate`` (this NIC's bytes per second, on the run's clock) makes the total window
    work-conserving (:data:`gnnsched.workload.CONSERVE_BELOW` says why): when it blocks a
    transfer while less than ``CONSERVE_BELOW`` of the NIC's rate was acknowledged over the
    last ``CONSERVE_EVERY`` of the window's drain time (``window / rate``), and its oldest
    chunk in flight left before that -- the bytes in flight wait at congested receivers, not at
    this NIC -- the best blocked transfer goes past the total window (its receiver's window
    still applies), at most one per that time. When the NIC is the bottleneck nothing changes
    and the policy's order holds. ``levels`` (priority only; the policy's ``wire_levels``):
    a transfer whose key starts with a higher level than a bulk chunk in flight here waits
    as behind a full total window, so the next iteration's bytes do not share this NIC with
    the current one's; and one whose receiver's floor (:meth:`set_floor`: the first key of
    every store's unfinished transfers to it) has a lower level waits while the others go,
    so they do not share the receiver's NIC either (the wire levels of
    :mod:`gnnsched.workload`). The simulator's window model admits the same way
    (:class:`gnnsched.simulator.window._WindowNet`).
    """

    def __init__(self, sharing: str = "fair", window: int = WINDOW_BYTES,
                 peer_window: int | None = None, peer_chunks: int | None = None,
                 urgent: bool = False, rate: float | None = None, levels: bool = False
                 ) -> None:
        if sharing not in ("fair", "priority"):
            raise ValueError(f"sharing must be 'fair' or 'priority', got {sharing!r}")
        self.sharing, self.window = sharing, window
        self.levels = levels and sharing == "priority"
        self.level_bytes: dict[Any, int] = {}  # level -> remote bulk bytes in flight
        self.chunk_level: dict[tuple[bytes, int, int], Any] = {}  # in flight, by chunk
        # the urgent band (priority only): the head transfer's chunks, outside the windows
        # below, within one receiver's window (and ``peer_chunks``) of its own
        self.urgent = urgent and sharing == "priority"
        self.urgent_count = self.urgent_bytes = 0
        self.urgent_off: dict[bytes, float] = {}  # receivers not on the urgent socket: until
        self.bulk_tids: dict[int, int] = {}  # remote transfers' chunks in flight on the bulk band
        # receiver machine -> the first key of all stores' transfers to it (the coordinator's
        # grants): only a transfer at or before it may take the urgent band; None: nothing
        # pending there (so anything may); no entry: not known (the store's own order decides)
        self.floors: dict[int, tuple | None] = {}
        self.peer_window = peer_window or window
        self.active: OrderedDict[int, OutTransfer] = OrderedDict()  # arrival order
        self.keys: dict[int, tuple] = {}
        self.ranks: OrderedDict[tuple[int, int, str], tuple] = OrderedDict()  # pre-ranked
        self.in_flight: dict[tuple[bytes, int, int], tuple[int, int, bool, bool]] = {}
        self.in_flight_bytes = 0
        # work conservation (see above): the NIC's rate, acknowledged bulk bytes over the
        # last `every` seconds, when each bulk chunk in flight left, and the transfers let past
        self.rate = float(rate) if rate else None
        self.every = CONSERVE_EVERY * window / self.rate if self.rate else math.inf
        self.acked: deque[tuple[float, int]] = deque()
        self.acked_bytes = 0
        self.sent_at: dict[tuple[bytes, int, int], float] = {}
        self.past: set[int] = set()
        self.next_past = 0.0
        self.passed = 0  # transfers let past the total window (stats)
        self.peer_bytes: dict[bytes, int] = {}
        self.peer_chunks = peer_chunks
        self.peer_count: dict[bytes, int] = {}  # chunks in flight per receiver
        self.held = Holds()
        self.full: set[bytes] = set()  # receivers whose socket pipe was full this round
        self._rr = 0

    def add(self, t: OutTransfer) -> None:
        """Queue a transfer; it is ranked at once if the policy pre-ranked its batch."""
        self.active[t.tid] = t
        key = self.ranks.get((t.trainer, t.seq, t.kind))
        if key is not None:
            self.keys[t.tid] = key

    def hold(self, machine: int, seq: int, for_s: float | None = None) -> None:
        """Send ``machine`` nothing of iterations after ``seq`` for ``for_s`` seconds (None:
        until released)."""
        self.held.hold(machine, seq, for_s)

    def release(self, machine: int) -> None:
        self.held.release(machine)

    def hold_left(self) -> float | None:
        """Seconds until the next timed hold ends (None: no timed hold)."""
        return self.held.left()

    def set_ranks(self, ranks: dict[tuple[int, int, str], tuple], keep: int = 4096) -> None:
        """Keys for transfers of a batch that are about to be queued (trainer, seq, kind)."""
        self.ranks.update(ranks)
        while len(self.ranks) > keep:
            self.ranks.popitem(last=False)

    def set_keys(self, keys: dict[int, tuple]) -> None:
        """Cached policy priorities (smaller first) for queued transfers."""
        for tid, key in keys.items():
            if tid in self.active:
                self.keys[tid] = key

    @property
    def sendable(self) -> bool:
        return any(t.pending for t in self.active.values())

    def _peer_room(self, t: OutTransfer, size: int) -> bool:
        """Room in ``t``'s receiver's window (and pipe budget)."""
        if self.peer_chunks and self.peer_count.get(t.peer, 0) >= self.peer_chunks:
            return False
        if t.local:
            return True
        held = self.peer_bytes.get(t.peer, 0)
        return not held or held + size <= self.peer_window

    def _room(self, t: OutTransfer, size: int) -> bool:
        if not self._peer_room(t, size):
            return False
        if t.local:
            return True
        return not self.in_flight_bytes or self.in_flight_bytes + size <= self.window or \
            t.tid in self.past

    def _idle(self, now: float) -> bool:
        """The bytes in flight wait at their receivers while this NIC idles: less than
        ``CONSERVE_BELOW`` of its rate acknowledged over the last ``every`` seconds, and its
        oldest bulk chunk in flight handed over longer ago than that."""
        if self.rate is None or now < self.next_past or not self.sent_at:
            return False
        if next(iter(self.sent_at.values())) > now - self.every:
            return False
        while self.acked and self.acked[0][0] < now - self.every:
            self.acked_bytes -= self.acked.popleft()[1]
        return self.acked_bytes < CONSERVE_BELOW * self.rate * self.every

    def _behind(self, t: OutTransfer) -> bool:
        """``levels``: a lower level than ``t``'s has bulk chunks in flight here."""
        if not self.level_bytes or t.tid in self.past:
            return False
        key = self.keys.get(t.tid)
        return key is not None and min(self.level_bytes) < key[0]

    def _floor_held(self, t: OutTransfer) -> bool:
        """``levels``: some store's transfer of a lower level than ``t``'s to the same
        receiver is unfinished (the coordinator's floor for that receiver says so)."""
        if not self.levels:
            return False
        floor = self.floors.get(t.dst_machine)
        key = self.keys.get(t.tid)
        return floor is not None and key is not None and floor[0] < key[0]

    def _order(self, t: OutTransfer) -> tuple:
        """The policy's order: ranked transfers by key, then the rest in arrival order."""
        return (0, self.keys[t.tid], t.tid) if t.tid in self.keys else (1, (), t.tid)

    def _granted(self, t: OutTransfer) -> bool:
        """Whether ``t`` may take the urgent band: no store's transfer to its receiver comes
        before it in the policy's order (as far as the coordinator's last floor says)."""
        if t.dst_machine not in self.floors:
            return True
        floor = self.floors[t.dst_machine]
        key = self.keys.get(t.tid)
        return floor is None or (key is not None and key <= floor)

    def set_floor(self, machine: int, key: tuple | None) -> None:
        self.floors[machine] = key

    def _urgent_room(self, size: int) -> bool:
        if self.peer_chunks and self.urgent_count >= self.peer_chunks:
            return False
        return not self.urgent_bytes or self.urgent_bytes + size <= self.peer_window

    def _pick(self) -> tuple[OutTransfer, bool] | None:
        ready = [t for t in self.active.values() if t.pending]
        for t in ready:  # same machine: at once, unless its receiver's pipe is full
            if t.local and t.peer not in self.full and self._room(t, 0):
                return t, False
        now = time.monotonic()
        ready = [t for t in ready if not t.local and not self.held.blocks(t.dst_machine, t.seq, now)]
        if self.urgent and ready:
            # The first granted transfer (see _granted) goes on the urgent band, past every
            # bulk byte queued at this NIC and at its receiver's. It has a receiver's window
            # of its own, outside the bulk windows, and never spills into the bulk band (its
            # chunks there would wait behind the bulk bytes). A budget of two chunks was
            # tried: a trainer busy all-reducing acknowledges late, and one mixedgen/Cora
            # epoch stalled for over a second. Only when it has something to pass (another
            # transfer pending, or bulk bytes of another in flight): a transfer alone keeps
            # the bulk band, so the band stays free for the next one ranked ahead of it.
            granted = [t for t in ready if self._granted(t)]
            head = min(granted, key=self._order) if granted else None
            alone = head is not None and len(ready) == 1 and \
                all(tid == head.tid for tid in self.bulk_tids)
            if head is not None and not alone and self.urgent_off.get(head.peer, 0.0) <= now:
                if self._urgent_room(head.sizes[head.next_chunk]):
                    return head, True
                ready = [t for t in ready if t is not head]
        open_ = [t for t in ready if t.peer not in self.full and not self._floor_held(t)]
        ready = [t for t in open_ if self._room(t, t.sizes[t.next_chunk])
                 and not self._behind(t)]
        if not ready:
            # only the total window (or a lower level in flight) blocks them, and the NIC
            # idles: let the best one past
            blocked = [t for t in open_ if self._peer_room(t, t.sizes[t.next_chunk])]
            if not blocked or not self._idle(now):
                return None
            t = min(blocked, key=self._order) if self.sharing == "priority" else blocked[0]
            self.past.add(t.tid)
            self.next_past = now + self.every
            self.passed += 1
            return t, False
        if self.sharing == "priority":
            return min(ready, key=self._order), False
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr], False

    def stall(self) -> str:
        """Why no remote chunk leaves now: ``idle`` (none pending), ``held`` (every pending
        one is held for an all-reduce), ``pipe`` (their receivers' socket pipes are full: the
        NIC is busy) or ``window`` (waiting for acknowledgements). The store adds up the
        seconds spent in each (its ``waits_s`` stats): time in ``window`` is a NIC left idle
        by the runtime, which the simulator does not model."""
        ready = [t for t in self.active.values() if t.pending and not t.local]
        if not ready:
            return "idle"
        now = time.monotonic()
        ready = [t for t in ready if not self.held.blocks(t.dst_machine, t.seq, now)]
        if not ready:
            return "held"
        if all(t.peer in self.full for t in ready):
            return "pipe"
        return "window"

    def next_chunk(self) -> tuple[OutTransfer, Any, int, bool] | None:
        """The next (transfer, chunk, bytes, urgent) to send, or None if nothing may go now;
        the chunk is its Message, or its frames if an earlier send of it was refused;
        ``urgent``: it goes on the urgent band's socket."""
        picked = self._pick()
        if picked is None:
            return None
        t, urgent = picked
        i = t.next_chunk
        size = t.sizes[i]
        t.next_chunk += 1
        self.in_flight[(t.peer, t.req, i)] = (t.tid, size, t.local, urgent)
        if urgent:
            self.urgent_count += 1
            self.urgent_bytes += size
        else:
            self.peer_count[t.peer] = self.peer_count.get(t.peer, 0) + 1
            if not t.local:
                self.in_flight_bytes += size
                if self.rate is not None:
                    self.sent_at[(t.peer, t.req, i)] = time.monotonic()
                self.peer_bytes[t.peer] = self.peer_bytes.get(t.peer, 0) + size
                self.bulk_tids[t.tid] = self.bulk_tids.get(t.tid, 0) + 1
                key = self.keys.get(t.tid) if self.levels else None
                if key is not None:
                    self.chunk_level[(t.peer, t.req, i)] = key[0]
                    self.level_bytes[key[0]] = self.level_bytes.get(key[0], 0) + size
        msg = t.chunks[i]
        t.chunks[i] = None  # freed once sent
        assert msg is not None
        return t, msg, size, urgent

    def unsend(self, t: OutTransfer, msg: Any, size: int, unreachable: bool = False) -> None:
        """Take back the chunk :meth:`next_chunk` just returned: its receiver's pipe is full.
        ``msg`` is what goes back in its place (the store keeps the encoded frames, so a retry
        does not encode it again). The receiver is skipped until :meth:`retry` (it
        acknowledged a chunk: its pipe drains) or :meth:`next_round`, so one slow receiver
        never blocks the NIC's other transfers. ``unreachable``: an urgent chunk whose
        receiver has not connected its urgent socket (yet): that receiver's chunks go on the
        bulk band for ``URGENT_RETRY_S``."""
        t.next_chunk -= 1
        i = t.next_chunk
        t.chunks[i] = msg
        *_, urgent = self.in_flight.pop((t.peer, t.req, i))
        self.sent_at.pop((t.peer, t.req, i), None)
        self._unlevel((t.peer, t.req, i), size)
        self._release(t.tid, t.peer, size, t.local, urgent)
        if unreachable:
            self.urgent_off[t.peer] = time.monotonic() + URGENT_RETRY_S
        else:
            self.full.add(t.peer)

    def next_round(self) -> None:
        """Retry every receiver whose pipe was full."""
        self.full.clear()

    def retry(self, peer: bytes) -> None:
        """Retry ``peer`` (it acknowledged a chunk, so its pipe has drained)."""
        self.full.discard(peer)

    def _release(self, tid: int, peer: bytes, size: int, local: bool, urgent: bool) -> None:
        if urgent:
            self.urgent_count -= 1
            self.urgent_bytes -= size
            return
        if not local:
            left = self.bulk_tids.get(tid, 0) - 1
            if left > 0:
                self.bulk_tids[tid] = left
            else:
                self.bulk_tids.pop(tid, None)
        left = self.peer_count.get(peer, 0) - 1
        if left > 0:
            self.peer_count[peer] = left
        else:
            self.peer_count.pop(peer, None)
        if local:
            return
        self.in_flight_bytes -= size
        left = self.peer_bytes.get(peer, 0) - size
        if left > 0:
            self.peer_bytes[peer] = left
        else:
            self.peer_bytes.pop(peer, None)

    def _unlevel(self, chunk: tuple[bytes, int, int], size: int) -> None:
        level = self.chunk_level.pop(chunk, None)
        if level is None:
            return
        left = self.level_bytes[level] - size
        if left > 0:
            self.level_bytes[level] = left
        else:
            del self.level_bytes[level]

    def ack(self, peer: bytes, req: int, chunk: int) -> OutTransfer | None:
        """Record an acknowledged chunk; returns the transfer if that completed it."""
        entry = self.in_flight.pop((peer, req, chunk), None)
        if entry is None:
            raise MessageError(f"ACK for unknown chunk {chunk} of request {req}")
        tid, size, local, urgent = entry
        self._unlevel((peer, req, chunk), size)
        if self.sent_at.pop((peer, req, chunk), None) is not None:
            now = time.monotonic()
            self.acked.append((now, size))
            self.acked_bytes += size
        self._release(tid, peer, size, local, urgent)
        t = self.active[tid]
        t.acked += 1
        if t.acked == len(t.chunks):
            del self.active[tid]
            self.keys.pop(tid, None)
            self.past.discard(tid)
            return t
        return None

    def reset(self) -> None:
        """Forget every transfer, window and hold (recovery: the receivers were restarted)."""
        self.active.clear()
        self.keys.clear()
        self.ranks.clear()
        self.in_flight.clear()
        self.in_flight_bytes = 0
        self.level_bytes.clear()
        self.chunk_level.clear()
        self.sent_at.clear()
        self.past.clear()
        self.peer_bytes.clear()
        self.peer_count.clear()
        self.urgent_count = self.urgent_bytes = 0
        self.urgent_off.clear()
        self.bulk_tids.clear()
        self.floors.clear()
        self.full.clear()
        self.held.clear()

    def drop_peer(self, peer: bytes) -> None:
        for tid in [t.tid for t in self.active.values() if t.peer == peer]:
            del self.active[tid]
            self.keys.pop(tid, None)
            self.past.discard(tid)
        for key in [k for k in self.in_flight if k[0] == peer]:
            tid, size, local, urgent = self.in_flight.pop(key)
            self.sent_at.pop(key, None)
            self._unlevel(key, size)
            self._release(tid, peer, size, local, urgent)
        self.full.discard(peer)


def chunked(kind: Kind, req: int, arrays: dict[str, np.ndarray], row_bytes: int,
            chunk_bytes: int) -> tuple[list[Message], list[int]]:
    """Split row-aligned arrays into messages of about ``chunk_bytes`` (at least one)."""
    total = len(next(iter(arrays.values())))
    rows = max(1, chunk_bytes // max(row_bytes, 1))
    starts = list(range(0, total, rows)) or [0]
    msgs, sizes = [], []
    for i, s in enumerate(starts):
        part = {k: v[s:s + rows] for k, v in arrays.items()}
        msgs.append(Message(kind, {"req": req, "chunk": i, "chunks": len(starts), "start": s,
                                   "total": total}, part))
        sizes.append(max(sum(v.nbytes for v in part.values()), 1))
    return msgs, sizes

__all__ = ["CHUNK_BYTES", "PEER_WINDOW_BYTES", "RETRY_S", "URGENT_RETRY_S", "WINDOW_BYTES",
           "Holds", "NicQueue", "OutTransfer", "chunked"]
