"""The windowed network model as it was before issue 52, kept as the reference that the
faster model is tested against (tests/simulator/test_window_equivalence.py): :class:`_WindowNet` of
``gnnsched/simulator/window.py`` and the :class:`_FairNet` (with :class:`_Group`) of
``gnnsched/simulator/network.py`` at commit 9d5065e, copied verbatim (only the imports
differ). Do not edit: it is what "identical epochs" means.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Any

from gnnsched.simulator.network import _Flow
from gnnsched.workload import CONSERVE_BELOW, CONSERVE_EVERY, NIC_CHUNK_S


class _Group:
    """The flows of one (class, sender, receiver): they share one rate in :class:`_FairNet`."""

    __slots__ = ("s", "d", "n", "wt", "V", "t0", "rate", "heap", "ver", "tchg", "key", "cls",
                 "tail", "conn")

    def __init__(self, s: int, d: int, now: float, cls: Any = 0, conn: int = 0) -> None:
        self.s, self.d, self.cls, self.conn = s, d, cls, conn
        self.n = 0
        self.wt = 0  # shares it takes: its flows (fair), or 1 (connections)
        self.V = 0.0  # bytes served to each flow of the group since it was created
        self.t0 = self.tchg = now
        self.rate = 0.0
        self.heap: list[tuple[float, int, _Flow]] = []
        self.ver = 0
        self.tail = 0.0  # connections: where the last flow queued ends in the stream


class _FairNet:
    """Max-min fair sharing over (sender, receiver) groups, repaired incrementally.

    Flows of one pair are symmetric, so they share one rate: a group serves them like a
    processor-sharing queue (finish tag = group's served bytes at arrival + size).

    Rates come from resource *levels*: a group's rate is min(level of its egress, level of its
    ingress), and a resource's level is the water level that fills its capacity given its
    groups' other levels (infinite if they cannot fill it). Any state where every resource's
    level is its own water level is the max-min fair allocation (each group is then maximal on
    a saturated resource, which characterises it uniquely), so after a change the simulator
    re-levels only the resources around it until nothing moves; if that takes too long it falls
    back to progressive filling of everything. With several priority classes (``"classes"``)
    each class is filled in turn on what the ones before left. With ``connections`` a pair is
    one byte stream instead (a TCP connection): it takes one share however many flows it
    holds, and sends them first come first served (finish tag = the stream's tail + size).
    """

    def __init__(self, cap: list[float], schedule: Any, record: Any,
                 connections: bool = False) -> None:
        self.connections = connections
        self.cap = list(cap)
        R = len(cap)
        self.groups: dict[tuple, _Group] = {}  # (class, sender, receiver, connection)
        self.on: list[dict[tuple, _Group]] = [{} for _ in range(R)]  # resource -> its groups
        self.level = [math.inf] * R
        self.touched: set[int] = set()  # resources whose groups or capacity changed
        self.resched: set[tuple] = set()
        self.dirty = False
        self.schedule, self.record = schedule, record
        self.tol = 1e-12 * max(cap)
        self.classes = False
        self.repairs = self.fills = 0  # how commits were solved (for benchmarks)

    def _settle(self, g: _Group, now: float) -> None:
        g.V += g.rate * (now - g.t0)
        g.t0 = now

    def add(self, f: _Flow, now: float) -> None:
        cls = f.skey[0] if f.skey else 0
        key = (cls, f.s, f.d, f.conn)
        g = self.groups.get(key)
        # a stream that already holds a flow keeps its one share: no level moves, only the
        # group is rescheduled (pieces join busy streams by the hundred thousand)
        same_share = False
        if g is None:
            g = self.groups[key] = _Group(f.s, f.d, now, cls, f.conn)
            self.on[f.s][key] = g
            self.on[f.d][key] = g
            if cls != 0:
                self.classes = True
        else:
            self._settle(g, now)
            same_share = self.connections and g.n > 0
        if self.connections:  # one byte stream per pair: first come, first served
            f.tag = g.tail = max(g.V, g.tail) + f.nbytes
        else:
            f.tag = g.V + f.nbytes
        f.t_arr = now
        heapq.heappush(g.heap, (f.tag, f.fid, f))
        g.n += 1
        g.wt = 1 if self.connections else g.n
        self.resched.add(key)
        if not same_share:
            self.touched.add(f.s)
            self.touched.add(f.d)
        self.dirty = True

    def done(self, g: _Group, ver: int, now: float) -> _Flow | None:
        if g.ver != ver or not g.heap:
            return None
        self._settle(g, now)
        _, _, f = heapq.heappop(g.heap)
        if self.record is not None:
            t = max(g.tchg, f.t_arr)
            if now > t:
                self.record(f, t, now, g.rate)
            if self.connections and g.heap:  # the stream's next flow is served from now on
                nxt = g.heap[0][2]
                nxt.t_arr = max(nxt.t_arr, now)
        f.rem = 0.0
        g.n -= 1
        g.wt = min(g.n, 1) if self.connections else g.n
        g.ver += 1
        key = (g.cls, g.s, g.d, g.conn)
        if g.n == 0:
            del self.groups[key]
            del self.on[g.s][key]
            del self.on[g.d][key]
            self.resched.discard(key)
            g.rate = 0.0
            self.touched.add(g.s)
            self.touched.add(g.d)
        else:
            self.resched.add(key)
            if not self.connections:  # a stream's next flow takes over its share
                self.touched.add(g.s)
                self.touched.add(g.d)
        self.dirty = True
        return f

    def set_cap(self, r: int, c: float) -> None:
        self.cap[r] = max(c, 0.0)
        self.touched.add(r)
        self.dirty = True

    def _water(self, r: int) -> float:
        """Level of r given the levels of its groups' other resources."""
        cap, level = self.cap[r], self.level
        items = []
        cnt = 0
        finite = 0.0
        unbounded = False
        for g in self.on[r].values():
            c = level[g.d if g.s == r else g.s]
            cnt += g.wt
            if c == math.inf:
                unbounded = True
            else:
                finite += c * g.wt
            items.append((c, g.wt))
        if not cnt:
            return math.inf
        if not unbounded and finite <= cap + self.tol:
            return math.inf
        items.sort()
        rem = max(cap, 0.0)
        for c, n in items:
            if c * cnt >= rem:
                break
            rem -= c * n
            cnt -= n
        return rem / cnt

    def _repair(self, changed: set[int]) -> bool:
        """Re-level around the touched resources until a fixed point; False if it gives up."""
        level, tol = self.level, self.tol
        todo = deque(self.touched)
        queued = set(self.touched)
        budget = 64 + 8 * len(queued)
        while todo:
            budget -= 1
            if budget < 0:
                return False
            r = todo.popleft()
            queued.discard(r)
            new = self._water(r)
            old = level[r]
            if new == old or (new != math.inf and old != math.inf and abs(new - old) <= tol):
                continue
            level[r] = new
            changed.add(r)
            for g in self.on[r].values():
                x = g.d if g.s == r else g.s
                if x not in queued:
                    queued.add(x)
                    todo.append(x)
        return True

    @staticmethod
    def _fill(groups: list[_Group], left: list[float], rate: list[float],
              level: list[float] | None = None) -> None:
        """Progressive filling of `groups` on capacities `left` (reduced in place): rate[i] is
        group i's per-flow rate; `level` gets each saturated resource's level. A heap of
        resources by fair share; the smallest saturates and freezes its groups, which never
        lowers another resource's share."""
        cnt: dict[int, float] = {}
        on: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            for r in (g.s, g.d):
                if r in cnt:
                    cnt[r] += g.wt
                    on[r].append(i)
                else:
                    cnt[r] = g.wt
                    on[r] = [i]
        rem = {r: max(left[r], 0.0) for r in cnt}
        ver = dict.fromkeys(cnt, 0)
        H = [(rem[r] / cnt[r], r, 0) for r in cnt]
        heapq.heapify(H)
        frozen = [False] * len(groups)
        push, pop = heapq.heappush, heapq.heappop
        while H:
            lvl, r, v = pop(H)
            if v != ver[r] or cnt[r] <= 0:
                continue
            if level is not None:
                level[r] = lvl
            for i in on[r]:
                if frozen[i]:
                    continue
                frozen[i] = True
                g = groups[i]
                rate[i] = lvl
                used = lvl * g.wt
                for x in (g.s, g.d):
                    rem[x] -= used
                    left[x] -= used
                    cnt[x] -= g.wt
                    ver[x] += 1
                    if x != r and cnt[x] > 0:
                        push(H, (max(rem[x], 0.0) / cnt[x], x, ver[x]))

    def commit(self, now: float) -> None:
        self.dirty = False
        resched = self.resched
        changed: set[int] = set()
        todo: list[tuple[_Group, float]] | None = None
        if not self.classes and self._repair(changed):
            cand = {id(g): g for r in changed for g in self.on[r].values()}
            for key in resched:
                g = self.groups.get(key)
                if g is not None:
                    cand[id(g)] = g
            level = self.level
            todo = [(g, min(level[g.s], level[g.d])) for g in cand.values()]
            if any(x == math.inf for _, x in todo):  # not a fixed point after all
                todo = None
            else:
                self.repairs += 1
        if todo is None:
            self.fills += 1
            groups = list(self.groups.values())
            left = list(self.cap)
            rate = [0.0] * len(groups)
            classes = {g.cls for g in groups}
            if len(classes) <= 1:
                self.level = [math.inf] * len(self.cap)
                self._fill(groups, left, rate, self.level)
            else:  # strict priority between classes, max-min fair within each
                for c in sorted(classes):
                    idx = [i for i, g in enumerate(groups) if g.cls == c]
                    sub = [0.0] * len(idx)
                    self._fill([groups[i] for i in idx], left, sub)
                    for i, v in zip(idx, sub):
                        rate[i] = v
            todo = list(zip(groups, rate))
        self.touched.clear()
        tol = self.tol
        for g, new in todo:
            if new <= tol:
                new = 0.0
            changed_rate = abs(new - g.rate) > tol
            if not changed_rate and (g.cls, g.s, g.d, g.conn) not in resched:
                continue
            self._settle(g, now)
            if changed_rate:
                if self.record is not None and g.rate > 0:
                    for _, _, f in (g.heap[:1] if self.connections else g.heap):
                        t = max(g.tchg, f.t_arr)
                        if now > t:
                            self.record(f, t, now, g.rate)
                g.tchg = now
                g.rate = new
            g.ver += 1
            if g.rate > 0 and g.heap:
                self.schedule(now + max(g.heap[0][0] - g.V, 0.0) / g.rate, g)
        resched.clear()


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
                 levels: bool = False) -> None:
        self.inner = _FairNet(cap, schedule, record, connections=True)
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
        # per receiver: (sender, queue item) of transfers its floor holds, out of the queues
        self.parked: list[list[tuple[int, tuple]]] = [[] for _ in range(M)]

    def add(self, f: _Flow, now: float) -> None:
        f.conn = _RECEIVER[f.kind]
        if self.levels and f.skey:
            f.lv = f.skey[0]
            r = self.rx[f.dst]
            r[f.lv] = r.get(f.lv, 0) + 1
        heapq.heappush(self.waiting[f.s], (f.skey if self.ordered else (f.fid,), f.fid, f))
        self._admit(f.s, now)

    def _charge(self, s: int, pair: tuple[int, int, int], delta: float, lv: Any = None
                ) -> None:
        before = self.queued.get(pair, 0.0)
        after = max(0.0, before + delta)
        self.queued[pair] = after
        cap = self.peer[s]
        self.held[s] += min(after, cap) - min(before, cap)
        if lv is not None:
            mine = self.by_level[s]
            left = mine.get(lv, 0.0) + delta
            if left > 1e-9 * abs(delta):
                mine[lv] = left
            else:
                mine.pop(lv, None)

    def _behind(self, f: _Flow) -> bool:
        """Whether `f` waits for a lower level's pieces in its sender's streams."""
        return f.lv is not None and any(lv < f.lv for lv in self.by_level[f.s])

    def _floor_held(self, f: _Flow) -> bool:
        """Whether a transfer of a lower level than `f`'s, from any sender, is unfinished at
        `f`'s receiver (its floor): `f` waits, and its sender's other transfers may go."""
        return f.lv is not None and min(self.rx[f.dst]) < f.lv

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
        skipped = []
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
            if not self._stream_room(f, size):
                skipped.append(heapq.heappop(q))  # its stream is full: the next may go
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
        for item in skipped:
            heapq.heappush(q, item)
        if blocked:
            self.blocked.add(s)
        else:
            self.blocked.discard(s)
        return took

    def done(self, g: _Group, ver: int, now: float) -> _Flow | None:
        f = self.inner.done(g, ver, now)
        if f is None:
            return None
        self._charge(f.s, (f.s, f.d, f.conn), -f.nbytes, f.lv)
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
        if r and min(r) < t.lv:
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
