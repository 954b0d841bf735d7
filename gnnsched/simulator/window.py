"""The simulator's model of the gnnsched runtime's NICs: send windows over TCP connections.

:class:`_WindowNet` is what ``nic_window_s`` selects (the ``windowed`` network of
:data:`gnnsched.simulator.NETWORKS`): one TCP connection per (sender, receiving process),
connections sharing the NICs fairly (a :class:`~gnnsched.simulator.network._FairNet` with
``connections``); a sender hands over its most urgent transfer whose connection has room under
the runtime's per-receiver and total send windows, or past the total one while the sender's NIC
idles (work conservation); with the policy's ``wire_levels``, none of a higher level while a
lower one's are in flight or unfinished at its receiver. It mirrors
:class:`gnnsched.runtime.store.NicQueue` and has the interface of the other models
(:mod:`.network`).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from gnnsched.simulator.network import _FairNet, _Flow, _Group
from gnnsched.workload import CONSERVE_BELOW, CONSERVE_EVERY, NIC_CHUNK_S

# The process a transfer of each kind (engine.KINDS: struct, block, feat, relay) goes to: the
# sampler (remote-hop answers), the trainer (blocks, relayed features) or the gatherer
# (feature rows). Each process holds its own connection to a sender, as in the runtime.
_RECEIVER = (1, 0, 2, 0)


class _WindowNet:
    """NICs the way the gnnsched runtime drives them. The kernel holds one byte stream (a TCP
    connection) per (sender, receiving process): a stream sends what it was handed in that
    order (a sampler's remote-hop answers never queue behind the rows its machine's gatherer
    receives), and streams share the NICs max-min fairly, one share each however much they
    hold (:class:`_FairNet` with ``connections``). A sender hands over its most urgent waiting
    transfer (policy key, else arrival) whose stream has room: less than ``peer_s`` of the
    sender's egress queued in that stream, and less than ``window_s`` in all its streams.

    These are the runtime's two send windows (:class:`gnnsched.runtime.store.NicQueue`, sized
    by ``NIC_WINDOW_S`` and ``PEER_WINDOW_S``): they have to cover acknowledgement round trips
    through busy processes, so they hold every transfer of a short queue, and the policy's
    order reaches the wire only within one receiver's stream and for what waits behind a full
    window. The runtime counts chunks in flight, so a large transfer holds at most the
    per-receiver window of the total; the model counts each stream's queued bytes up to
    ``peer_s`` towards ``window_s`` the same way, so a congested receiver holds back only its
    own stream while the sender's others keep its egress busy. With ``piece_s`` (the engine
    passes :data:`~gnnsched.workload.NIC_CHUNK_S`) bytes go in pieces of that much of the
    sender's egress, as the runtime's chunks do, the next piece always from the most urgent
    transfer with room: an urgent transfer overtakes a large one after at most one window,
    where whole transfers (``piece_s`` None) made it wait for all of the large one. The total
    window is
    work-conserving (``conserve``, as the runtime's): while a sender's streams carry less than
    :data:`~gnnsched.workload.CONSERVE_BELOW` of its egress (they wait at congested receivers)
    its best waiting transfer whose stream has room goes in past the window, at most one per
    :data:`~gnnsched.workload.CONSERVE_EVERY` of the window's drain time (checked whenever
    rates change). With ``levels`` (an ``ordered`` policy with ``wire_levels``) a transfer
    whose key starts with a higher level than a piece the sender has in its streams waits
    as behind a full window, and one whose receiver has a lower level unfinished from any
    sender (its floor) waits while the sender's others go (the wire levels of
    :mod:`gnnsched.workload`).
    """

    def __init__(self, cap: list[float], schedule: Any, record: Any, window_s: float,
                 M: int, ordered: bool, peer_s: float | None = None,
                 conserve: bool = True, piece_s: float | None = None,
                 levels: bool = False, fifo_bytes: float | None = None) -> None:
        self.inner = _FairNet(cap, schedule, record, connections=True)
        # per sender: bytes in its FIFO NIC queue, each stream's unsent bytes up to
        # ``fifo_bytes`` (what TCP small queues let one connection park there; None: no FIFO)
        self.fifo_cap = fifo_bytes
        self.fifo = [0.0] * M
        self.M = M
        self.every = window_s * CONSERVE_EVERY  # of the total window's drain time
        self.conserve = conserve
        self.next_past = [0.0] * M  # per sender: when it may next let a transfer past
        self.blocked: set[int] = set()  # senders with transfers waiting behind a full window
        self.passed = 0
        self.window = [c * window_s for c in cap[:M]]  # bytes, per sender
        self.peer = [c * (peer_s if peer_s is not None else window_s) for c in cap[:M]]
        # bytes per piece (None: whole transfers), per sender
        self.piece = None if piece_s is None else [c * piece_s for c in cap[:M]]
        self.pids = itertools.count(-1, -1)  # pieces' flow ids (transfers' are >= 0)
        # transfers let past the total window with bytes left, per stream
        self.pastq: dict[tuple[int, int, int], dict[int, tuple]] = {}
        # with pieces the idle check runs once per chunk time at most, as the runtime's does
        # once per chunk it picks (at every rate change: the same passes, many more sums)
        self.check_s = 0.0 if piece_s is None else NIC_CHUNK_S
        self.next_check = [0.0] * M
        self.ordered = ordered  # policy keys (priority) or arrival order (fair sharing)
        self.waiting: list[list[tuple]] = [[] for _ in range(M)]  # per sender, by key
        self.queued: dict[tuple[int, int, int], float] = {}  # stream: bytes admitted, unfinished
        self.held = [0.0] * M  # per sender: sum over its streams of min(queued, peer window)
        self.levels = levels and ordered
        self.by_level: list[dict[Any, float]] = [{} for _ in range(M)]  # sender: level -> bytes
        self.rx: list[dict[Any, int]] = [{} for _ in range(M)]  # receiver: level -> transfers
        # the lowest level of each of those, as a heap with lazy deletion (a level enters it
        # when it enters the dict; one no longer in the dict is dropped when it comes on top):
        # a sender's lowest level in its streams, a receiver's floor, in amortised O(log n)
        self.low: list[list[Any]] = [[] for _ in range(M)]
        self.floor: list[list[Any]] = [[] for _ in range(M)]
        # per receiver: (sender, queue item) of transfers its floor holds, out of the queues
        self.parked: list[list[tuple[int, tuple]]] = [[] for _ in range(M)]
        # per stream: queue items whose next piece did not fit in it, out of their sender's
        # queue until a piece of that stream finishes (nothing else gives a stream room)
        self.full: dict[tuple[int, int, int], list[tuple]] = {}

    def add(self, f: _Flow, now: float) -> None:
        f.conn = _RECEIVER[f.kind]
        if self.levels and f.skey:
            f.lv = f.skey[0]
            r = self.rx[f.dst]
            n = r.get(f.lv, 0)
            if not n:
                heapq.heappush(self.floor[f.dst], f.lv)
            r[f.lv] = n + 1
        heapq.heappush(self.waiting[f.s], (f.skey if self.ordered else (f.fid,), f.fid, f))
        self._admit(f.s, now)

    def _charge(self, s: int, pair: tuple[int, int, int], delta: float, lv: Any = None
                ) -> None:
        before = self.queued.get(pair, 0.0)
        after = max(0.0, before + delta)
        self.queued[pair] = after
        cap = self.peer[s]
        self.held[s] += min(after, cap) - min(before, cap)
        q = self.fifo_cap
        if q:
            self.fifo[s] += min(after, q) - min(before, q)
        if lv is not None:
            mine = self.by_level[s]
            had = mine.get(lv)
            left = (0.0 if had is None else had) + delta
            if left > 1e-9 * abs(delta):
                if had is None:
                    heapq.heappush(self.low[s], lv)
                mine[lv] = left
            elif had is not None:
                del mine[lv]

    def backlog(self, s: int) -> float:
        """Bytes ahead of a new message in sender `s`'s FIFO NIC queue (0 without one)."""
        return self.fifo[s] if self.fifo[s] > 0 else 0.0

    @staticmethod
    def _lowest(heap: list[Any], live: dict[Any, Any]) -> Any:
        """The smallest key of `live` (None: empty), from its lazy heap `heap`."""
        while heap:
            lv = heap[0]
            if lv in live:
                return lv
            heapq.heappop(heap)
        return None

    def _behind(self, f: _Flow) -> bool:
        """Whether `f` waits for a lower level's pieces in its sender's streams."""
        if f.lv is None:
            return False
        lo = self._lowest(self.low[f.s], self.by_level[f.s])
        return lo is not None and lo < f.lv

    def _floor_held(self, f: _Flow) -> bool:
        """Whether a transfer of a lower level than `f`'s, from any sender, is unfinished at
        `f`'s receiver (its floor): `f` waits, and its sender's other transfers may go."""
        return f.lv is not None and self._lowest(self.floor[f.dst], self.rx[f.dst]) < f.lv

    def _admit(self, s: int, now: float, force: bool = False,
               pair: tuple[int, int, int] | None = None) -> bool:
        if self.piece is not None:
            return self._admit_pieces(s, now, force, pair)
        q = self.waiting[s]
        skipped = []
        took = False
        while q and (self.held[s] < self.window[s] or (force and not took)):
            item = heapq.heappop(q)
            f = item[-1]
            pair = (f.s, f.d, f.conn)
            if self._floor_held(f):  # parked until its receiver's floor rises
                self.parked[f.dst].append((s, item))
                continue
            if self.queued.get(pair, 0.0) >= self.peer[s] or \
                    (self._behind(f) and not (force and not took)):
                skipped.append(item)  # its stream is full (or a lower level is in
                continue  # flight): the next transfer may go
            f.skey = ()  # one class: the streams share fairly
            self._charge(s, pair, f.nbytes, f.lv)
            self.inner.add(f, now)
            took = True
        for item in skipped:
            heapq.heappush(q, item)
        if q and self.held[s] >= self.window[s]:
            self.blocked.add(s)
        else:
            self.blocked.discard(s)
        return took

    def _size(self, f: _Flow) -> float:
        p = self.piece[f.s]  # type: ignore[index]
        return f.left if f.left <= p * (1 + 1e-9) else p

    def _stream_room(self, f: _Flow, size: float) -> bool:
        qd = self.queued.get((f.s, f.d, f.conn), 0.0)
        return qd <= 0.0 or qd + size <= self.peer[f.s] * (1 + 1e-9)

    def _hand(self, f: _Flow, size: float, now: float) -> None:
        """One piece of `f` into its stream."""
        p = _Flow(next(self.pids), f.src, f.dst, self.M, size, f.kind, f.w, f.k)
        p.conn, p.parent, p.tr = f.conn, f, f.tr
        f.left -= size
        if f.left <= f.nbytes * 1e-12:
            f.left = 0.0
        f.out += 1
        p.lv = f.lv
        self._charge(f.s, (f.s, f.d, f.conn), size, f.lv)
        self.inner.add(p, now)

    def _feed(self, f: _Flow, now: float) -> bool:
        """Pieces of `f`, let past the total window, while its stream has room."""
        took = False
        while f.left > 0 and self._stream_room(f, size := self._size(f)):
            self._hand(f, size, now)
            took = True
        if f.left <= 0:
            pair = (f.s, f.d, f.conn)
            mine = self.pastq.get(pair)
            if mine is not None:
                mine.pop(f.fid, None)
                if not mine:
                    del self.pastq[pair]
        return took

    def _admit_pieces(self, s: int, now: float, force: bool,
                      pair: tuple[int, int, int] | None = None) -> bool:
        """The runtime's NicQueue chunk by chunk: the next piece always comes from the most
        urgent transfer whose stream has room, within the total window (or past it). `pair`:
        the stream a piece just left (the transfers let past wait only for their stream)."""
        took = False
        if pair is not None and pair in self.pastq:
            for item in sorted(self.pastq[pair].values()):  # by key: the stream's best first
                took = self._feed(item[-1], now) or took
        q = self.waiting[s]
        blocked = False
        while q:
            item = q[0]
            f = item[-1]
            if f.left <= 0 or f.past:
                heapq.heappop(q)  # handed over in full, or fed as its stream drains
                continue
            size = self._size(f)
            if self._floor_held(f):  # parked until its receiver's floor rises
                self.parked[f.dst].append((s, heapq.heappop(q)))
                continue
            if not self._stream_room(f, size):  # its stream is full: the next may go, and
                # this one waits out of the queue until a piece of its stream finishes
                key = (f.s, f.d, f.conn)
                held = self.full.get(key)
                if held is None:
                    self.full[key] = [heapq.heappop(q)]
                else:
                    held.append(heapq.heappop(q))
                continue
            if (self.held[s] > 0 and self.held[s] + size > self.window[s] * (1 + 1e-9)) \
                    or self._behind(f):
                if not force or took:
                    blocked = True
                    break
                # the NIC idles behind the total window: this one goes past it
                f.past = True
                heapq.heappop(q)
                self.pastq.setdefault((f.s, f.d, f.conn), {})[f.fid] = item
                took = self._feed(f, now)
                continue
            self._hand(f, size, now)
            took = True
            if f.left <= 0:
                heapq.heappop(q)
        if blocked:
            self.blocked.add(s)
        else:
            self.blocked.discard(s)
        return took

    def done(self, g: _Group, ver: int, now: float) -> _Flow | None:
        f = self.inner.done(g, ver, now)
        if f is None:
            return None
        key = (f.s, f.d, f.conn)
        self._charge(f.s, key, -f.nbytes, f.lv)
        held = self.full.pop(key, None)
        if held is not None:  # its stream has room again: they queue as they were
            q = self.waiting[f.s]
            for item in held:
                heapq.heappush(q, item)
        if f.parent is not None:  # a piece: its transfer is done with its last piece
            t = f.parent
            t.out -= 1
            fin = t.left <= 0 and t.out == 0
            if fin and t.lv is not None:
                self._finished(t, now)
            self._admit(f.s, now, pair=(f.s, f.d, f.conn))
            return t if fin else None
        if f.lv is not None:
            self._finished(f, now)
        self._admit(f.s, now)
        return f

    def _finished(self, t: _Flow, now: float) -> None:
        """`t` (with a level) is done: where its receiver's floor rises, every sender may
        hand over what that floor held."""
        r = self.rx[t.dst]
        r[t.lv] -= 1
        if r[t.lv]:
            return
        del r[t.lv]
        if r and self._lowest(self.floor[t.dst], r) < t.lv:
            return  # a lower level is still unfinished there: the floor stays
        parked, self.parked[t.dst] = self.parked[t.dst], []
        for s, item in parked:
            heapq.heappush(self.waiting[s], item)
        for s in sorted({s for s, _ in parked}):
            self._admit(s, now)

    def set_cap(self, r: int, c: float) -> None:
        self.inner.set_cap(r, c)

    @property
    def dirty(self) -> bool:
        return self.inner.dirty

    def commit(self, now: float) -> None:
        self.inner.commit(now)
        if not self.conserve:
            return
        inner, nxt, chk = self.inner, self.next_past, self.next_check
        took = False
        for s in sorted(self.blocked):
            if now < nxt[s] or now < chk[s]:
                continue
            chk[s] = now + self.check_s  # the runtime looks when it picks a chunk
            if sum(g.rate * g.wt for g in inner.on[s].values()) >= CONSERVE_BELOW * inner.cap[s]:
                continue
            if self._admit(s, now, force=True):
                nxt[s] = now + self.every
                self.passed += 1
                took = True
        if took:
            inner.commit(now)


__all__ = ["_RECEIVER", "_WindowNet"]
