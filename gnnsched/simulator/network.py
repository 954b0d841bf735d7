"""The simulator's network models: how NICs share their bandwidth among transfers.

A transfer uses its sender's egress and its receiver's ingress; its rate is limited by both.
Resources are numbered egress ``m`` = ``m`` and ingress ``m`` = ``M + m``.

* :class:`_PriorityNet` (``priority`` policies): flows are served in the policy's order, each
  taking what is left of min(egress, ingress) — work-conserving strict priority.
* :class:`_FairNet` (``fair`` and ``classes`` policies): max-min fair sharing; ``classes`` is
  strict priority between classes and max-min fair within one.
* :class:`~gnnsched.simulator.window._WindowNet` (``nic_window_s``, in :mod:`.window`): the
  gnnsched runtime's NICs, one connection per (sender, receiver) behind send windows, over a
  :class:`_FairNet` of connections.

Speed: rates are recomputed only around the NICs whose flow set changed. Priority mode keeps,
per NIC direction, only the most urgent flow of each (sender, receiver) pair (the only one that
can hold bandwidth) and re-walks flows in priority order from the change point, stopping where
nothing can change. Fair mode groups flows by pair (they share one rate) and repairs resource
"levels" locally until they are a fixed point, which is exactly the max-min fair allocation
(progressive filling of everything is the fallback).

Every model has the same interface, driven by :func:`gnnsched.simulator.engine.run`:
``add(flow, now)``, ``done(obj, ver, now)`` (a completion scheduled through ``schedule``;
None when it was invalidated), ``set_cap(resource, bytes_per_s)``, ``dirty`` and
``commit(now)`` (recompute the rates after the events of one instant).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from functools import reduce
from operator import add
from typing import Any

from gnnsched.policy import Transfer


class _Flow:
    """One transfer on the network; slotted because there are hundreds of thousands."""

    __slots__ = ("fid", "s", "d", "skey", "rem", "rate", "t0", "ver", "kind", "w", "k", "tr",
                 "nbytes", "tag", "t_arr", "src", "dst", "seen", "conn", "left", "out", "past",
                 "parent", "lv")

    def __init__(self, fid: int, src: int, dst: int, M: int, nbytes: float, kind: int,
                 w: int, k: int) -> None:
        self.fid, self.src, self.dst = fid, src, dst
        self.s, self.d = src, M + dst
        self.rem = self.nbytes = nbytes
        self.rate = 0.0
        self.t0 = self.t_arr = 0.0
        self.ver = 0
        self.kind, self.w, self.k = kind, w, k
        self.skey: tuple = ()
        self.lv: Any = None  # _WindowNet with levels: its policy level (None: not gated)
        self.tr: Transfer | None = None
        self.tag = 0.0
        self.seen = -1
        self.conn = 0  # which connection of its (sender, receiver) pair (_WindowNet: the
        # receiving process -- sampler, gatherer or trainer -- as in the runtime)
        # _WindowNet with pieces: bytes not yet handed to the stream, pieces in it, whether
        # it goes past the total window; a piece's transfer
        self.left, self.out, self.past = nbytes, 0, False
        self.parent: _Flow | None = None


class _PriorityNet:
    """Strict-priority, work-conserving allocation, recomputed incrementally.

    Only the most urgent flow of a (sender, receiver) pair can hold bandwidth (it takes
    min(egress left, ingress left), exhausting one of the two for every later flow of the pair),
    so each resource (egress m = m, ingress m = M + m) keeps just the pair heads sorted by key,
    and the sorted subset that holds bandwidth. After a change, heads from the change point on
    are revisited in global key order (a heap of per-resource "streams"); a resource stops being
    walked once it is saturated and nothing after it holds bandwidth there, and a head whose
    other resource is already saturated by more urgent flows is settled in O(1).
    """

    def __init__(self, cap: list[float], schedule: Any, record: Any) -> None:
        self.cap = list(cap)
        R = len(cap)
        self.on: list[list[tuple]] = [[] for _ in range(R)]  # pair heads by key
        self.pairs: dict[tuple[int, int], list[tuple]] = {}  # (s, d) -> keys, sorted
        self.serving: list[list[tuple]] = [[] for _ in range(R)]
        self.total = [0.0] * R  # sum of rates of the serving flows
        self.flows: dict[int, _Flow] = {}
        self.changes: dict[int, tuple] = {}
        self.schedule, self.record = schedule, record
        self.tol = 1e-12 * max(cap)
        self.stamp = 0  # commit counter: a flow's `seen` says it was settled in this commit
        self.now = 0.0

    def _mark(self, r: int, sk: tuple) -> None:
        c = self.changes.get(r)
        if c is None or sk < c:
            self.changes[r] = sk

    def _head_in(self, sk: tuple, s: int, d: int) -> None:
        insort(self.on[s], sk)
        insort(self.on[d], sk)
        self._mark(s, sk)
        self._mark(d, sk)

    def _head_out(self, sk: tuple, s: int, d: int) -> None:
        for r in (s, d):
            lst = self.on[r]
            del lst[bisect_left(lst, sk)]
            self._mark(r, sk)

    def add(self, f: _Flow, now: float) -> None:
        f.t0 = now
        self.flows[f.fid] = f
        key = (f.s, f.d)
        lst = self.pairs.get(key)
        if lst is None:
            self.pairs[key] = [f.skey]
            self._head_in(f.skey, f.s, f.d)
            return
        if f.skey < lst[0]:  # the new flow displaces the pair's head
            old = self.flows[lst[0][-1]]
            if old.rate > 0.0:
                self._set_rate(old, 0.0, now)
            self._head_out(old.skey, f.s, f.d)
            self._head_in(f.skey, f.s, f.d)
        insort(lst, f.skey)

    def done(self, f: _Flow, ver: int, now: float) -> _Flow | None:
        if f.ver != ver or f.fid not in self.flows:
            return None
        self._set_rate(f, 0.0, now)
        f.rem = 0.0
        key = (f.s, f.d)
        lst = self.pairs[key]
        i = bisect_left(lst, f.skey)
        del lst[i]
        if i == 0:  # only a head holds bandwidth, so this is always the case
            self._head_out(f.skey, f.s, f.d)
            if lst:
                self._head_in(lst[0], f.s, f.d)
        if not lst:
            del self.pairs[key]
        del self.flows[f.fid]
        return f

    def set_cap(self, r: int, c: float) -> None:
        self.cap[r] = max(c, 0.0)
        self._mark(r, ())

    @property
    def dirty(self) -> bool:
        return bool(self.changes)

    def _prefix(self, r: int, sk: tuple) -> float:
        """Bandwidth of r held by flows more urgent than `sk`."""
        sv = self.serving[r]
        if not sv:
            return 0.0
        if sv[-1] < sk:
            return self.total[r]
        tot = 0.0
        flows = self.flows
        for x in sv:
            if x >= sk:
                break
            tot += flows[x[-1]].rate
        return tot

    def _set_rate(self, f: _Flow, new: float, now: float) -> None:
        old = f.rate
        serving, total = self.serving, self.total
        if old > 0.0:
            dt = now - f.t0
            f.rem -= old * dt
            if self.record is not None and dt > 0:
                self.record(f, f.t0, now, old)
            for r in (f.s, f.d):
                sv = serving[r]
                del sv[bisect_left(sv, f.skey)]
                total[r] = total[r] - old if sv else 0.0
        f.t0 = now
        f.rate = new
        f.ver += 1
        if new > 0.0:
            for r in (f.s, f.d):
                insort(serving[r], f.skey)
                total[r] += new
            self.schedule(now + max(f.rem, 0.0) / new, f)

    def commit(self, now: float) -> None:
        changes, self.changes = self.changes, {}
        on, serving, cap, flows, tol = self.on, self.serving, self.cap, self.flows, self.tol
        total = self.total
        prefix = self._prefix
        self.stamp += 1
        stamp = self.stamp
        R = len(cap)
        H: list[tuple[tuple, int]] = []
        used = [0.0] * R
        at: list[tuple | None] = [None] * R  # the key each resource's stream is at
        pos = [0] * R
        push, pop = heapq.heappush, heapq.heappop

        def stream(r: int, i: int, u: float) -> None:
            used[r] = u
            lst = on[r]
            if i < len(lst):
                at[r] = lst[i]
                pos[r] = i
                push(H, (lst[i], r))
            else:
                at[r] = None

        for r, c in changes.items():
            stream(r, bisect_left(on[r], c), prefix(r, c))
        while H:
            sk, r = pop(H)
            if at[r] is not sk:
                continue
            lst = on[r]
            n = len(lst)
            i = pos[r]
            cr = cap[r]
            while True:  # walk r's stream inline while it stays the most urgent
                f = flows[sk[-1]]
                if f.seen != stamp:
                    s, d = f.s, f.d
                    x = d if s == r else s  # the other resource
                    if f.rate == 0.0 and at[x] is not sk:
                        sv = serving[x]
                        if sv and sv[-1] < sk and total[x] >= cap[x] - tol:
                            x = -1  # saturated by more urgent flows: stays at zero
                    if x >= 0:
                        f.seen = stamp
                        a_s = cap[s] - (used[s] if at[s] is sk else prefix(s, sk))
                        a_d = cap[d] - (used[d] if at[d] is sk else prefix(d, sk))
                        new = a_s if a_s < a_d else a_d
                        if new <= tol:
                            new = 0.0
                        if abs(new - f.rate) > tol:
                            self._set_rate(f, new, now)
                            for y in (s, d):
                                if at[y] is not sk:
                                    stream(y, bisect_right(on[y], sk), prefix(y, sk) + new)
                u = used[r] + f.rate
                used[r] = u
                i += 1
                if i >= n:
                    at[r] = None
                    break
                nxt = lst[i]
                if cr - u <= tol:
                    sv = serving[r]
                    if not sv or sv[-1] < nxt:
                        at[r] = None
                        break
                at[r] = nxt
                pos[r] = i
                if H and H[0][0] <= nxt:
                    push(H, (nxt, r))
                    break
                sk = nxt


class _Group:
    """The flows of one (class, sender, receiver): they share one rate in :class:`_FairNet`."""

    __slots__ = ("s", "d", "n", "wt", "V", "t0", "rate", "heap", "ver", "tchg", "key", "cls",
                 "tail", "conn")

    def __init__(self, s: int, d: int, now: float, cls: Any = 0, conn: int = 0) -> None:
        self.s, self.d, self.cls, self.conn = s, d, cls, conn
        self.key = (cls, s, d, conn)  # its key in _FairNet.groups
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
        key = g.key
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
        if self.connections:
            return self._water_streams(r)
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

    def _water_streams(self, r: int) -> float:
        """:meth:`_water` where every group is one stream (one share each): the same float
        operations in the same order, on a list of levels instead of (level, share) pairs."""
        on = self.on[r]
        if not on:
            return math.inf
        level = self.level
        cs = [level[g.d] if g.s == r else level[g.s] for g in on.values()]
        cap = self.cap[r]
        if math.inf not in cs and reduce(add, cs, 0.0) <= cap + self.tol:
            return math.inf
        cs.sort()
        rem = max(cap, 0.0)
        cnt = len(cs)
        for c in cs:
            if c * cnt >= rem:
                break
            rem -= c
            cnt -= 1
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
            if len(todo) > budget:  # each takes one more of the budget: it would give up
                return False  # later, with the same outcome (the fill replaces every level)
        return True

    @staticmethod
    def _fill(groups: list[_Group], left: list[float], rate: list[float],
              level: list[float] | None = None) -> None:
        """Progressive filling of `groups` on capacities `left` (reduced in place): rate[i] is
        group i's per-flow rate; `level` gets each saturated resource's level. A heap of
        resources by fair share; the smallest saturates and freezes its groups, which never
        lowers another resource's share.

        Per resource, lists indexed by it; a resource a freeze touched is pushed once, with
        its state after the freeze (every earlier entry of it would be stale: the heap's
        order is its entries', so the pops are the same as pushing at every touch)."""
        R = len(left)
        cnt = [0] * R
        on: list[list[int] | None] = [None] * R
        used_r: list[int] = []
        for i, g in enumerate(groups):
            wt = g.wt
            for r in (g.s, g.d):
                lst = on[r]
                if lst is None:
                    on[r] = [i]
                    used_r.append(r)
                    cnt[r] = wt
                else:
                    lst.append(i)
                    cnt[r] += wt
        rem = [0.0] * R
        for r in used_r:
            rem[r] = max(left[r], 0.0)
        ver = [0] * R
        H = [(rem[r] / cnt[r], r, 0) for r in used_r]
        heapq.heapify(H)
        frozen = [False] * len(groups)
        push, pop = heapq.heappush, heapq.heappop
        while H:
            lvl, r, v = pop(H)
            if v != ver[r] or cnt[r] <= 0:
                continue
            if level is not None:
                level[r] = lvl
            others = []
            for i in on[r]:  # type: ignore[union-attr]
                if frozen[i]:
                    continue
                frozen[i] = True
                g = groups[i]
                rate[i] = lvl
                wt = g.wt
                used = lvl * wt
                s, d = g.s, g.d
                rem[s] -= used
                left[s] -= used
                cnt[s] -= wt
                ver[s] += 1
                rem[d] -= used
                left[d] -= used
                cnt[d] -= wt
                ver[d] += 1
                others.append(d if s == r else s)
            for x in set(others):
                if cnt[x] > 0:
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
            if not changed_rate and g.key not in resched:
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


__all__ = ["_FairNet", "_Flow", "_Group", "_PriorityNet"]
