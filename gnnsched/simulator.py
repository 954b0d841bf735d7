"""Discrete-event simulation of synchronous mini-batch GNN training under a placement.

Semantics (the costs themselves come from :class:`gnnsched.workload.Workload`):

* Every trainer runs ``K`` iterations; its mini-batch ``k`` is drawn (seeded) from the profiled
  samples of its partitions, in proportion to their training seeds (:class:`Instance`). The
  draws are keyed by the seed and the trainer's parts (:meth:`Workload.draws`), so a trainer's
  mini-batches do not change with its number in the plan or where it runs.
* **Sampling**: a sampler process of the trainer takes a CPU core of its machine for
  ``sample_s``, then waits (process held, core released) for the sampled edges of its remote
  hops, one transfer from every other store that owns a frontier. A machine never runs more
  sampling tasks than it has cores; a trainer never more than it has sampler processes there.
  A trainer's batches are dispatched in iteration order; batch ``k`` may start once batch
  ``k - prefetch`` started training (bounded buffer).
* **Transfers** after sampling: the block sampler -> trainer, features store -> ``fetch_at``
  for every store with input nodes, then — when ``fetch_at`` is not the trainer's machine —
  one relay ``fetch_at`` -> trainer. Same-machine transfers are free; each network transfer
  is delayed by the cluster's one-way latency after its last byte.
* **NICs**: a transfer uses its sender's egress and its receiver's ingress; its rate is limited
  by both. ``fair`` policies share them max-min fairly; ``priority`` policies serve flows in
  the policy's order, each taking what is left of min(egress, ingress) — work-conserving;
  ``classes`` is strict priority between classes and max-min fair within one. With
  ``nic_window_s`` the NICs are the gnnsched runtime's instead: a sender hands transfers to
  its kernel, in the policy's order, while less than that many seconds of its egress are
  queued there, and the kernel sends them over one TCP connection per receiver, in that
  order, connections sharing the NICs fairly (:class:`_WindowNet`).
* **Training**: ``train_s / speed`` on the trainer's device once the block and the features
  arrived and the previous iteration's all-reduce finished. When every trainer finished
  batch ``k``, a ring all-reduce of ``Workload.allreduce_s`` runs; during it each trainer
  machine's NIC carries its gradient bytes at a reserved rate (ahead of all other traffic), so
  NIC loads match the lower bound's. A profile calibrated from a run may say trainers leave
  it apart (``barrier_skew_s``): each trainer's next step then waits its own draw of that.

Speed: rates are recomputed only around the NICs whose flow set changed. Priority mode keeps,
per NIC direction, only the most urgent flow of each (sender, receiver) pair (the only one that
can hold bandwidth) and re-walks flows in priority order from the change point, stopping where
nothing can change. Fair mode groups flows by pair (they share one rate) and repairs resource
"levels" locally until they are a fixed point, which is exactly the max-min fair allocation
(progressive filling of everything is the fallback). Completions sit in one heap with lazy
invalidation; events at the same instant are coalesced before rates are recomputed;
``record=False`` skips the timeline. Measured: 64 trainers x 500 iterations (256,500 events)
in ~10 CPU-seconds with either policy, ~25k events/s (``bench/bench_scheduler.py``).
Placement search can pass ``iterations`` to simulate fewer and extrapolate the epoch.

Output: :class:`SimResult` — epoch and steady-state iteration time, the instance's lower bound,
per-batch timestamps, per-resource utilisation, per-trainer stage times, the critical path and,
with ``record=True``, the timeline as :class:`Span` rows.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from bisect import bisect_left, bisect_right, insort
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from gnnsched.plan import Plan
from gnnsched.policy import BatchInfo, BatchKey, Policy, PolicyContext, Transfer, get_policy
from gnnsched.profile import EDGE_BYTES, CostProfile
from gnnsched.spec import ClusterSpec, JobSpec, SpecError
from gnnsched.workload import Workload

KINDS = ("struct", "block", "feat", "relay")
_STRUCT, _BLOCK, _FEAT, _RELAY = range(4)
_CPU_DONE, _FLOW_DONE, _ARRIVE, _TRAIN_DONE, _AR_DONE, _RELEASE = range(6)


class Span(NamedTuple):
    """One busy interval of a resource. ``rate``: bytes/s on NICs, 1 on cores and devices."""

    resource: str  # "cpu:M", "egress:M", "ingress:M", "gpu:M/D"
    start: float
    end: float
    stage: str  # sample | struct | block | feat | relay | train | allreduce
    trainer: int  # -1 for the all-reduce on a NIC
    iteration: int
    rate: float = 1.0


class Segment(NamedTuple):
    """A piece of the critical path."""

    stage: str
    trainer: int
    iteration: int
    start: float
    end: float


@dataclass
class SimResult:
    policy: str
    epoch_time_s: float  # end of the last all-reduce (extrapolated if fewer iterations ran)
    iteration_time_s: float  # steady state: mean barrier-to-barrier time after warm-up
    iterations: int  # iterations simulated
    lower_bound_s: float  # bound of the drawn instance (bounds.py), scaled if extrapolated
    barriers: np.ndarray  # [K] end of each iteration's all-reduce
    times: dict[str, np.ndarray]  # per batch [W, K]: sample_start, sampled, ready, train_*
    utilisation: dict[str, float]  # resource -> busy fraction of the epoch
    stages: list[dict[str, float]]  # per trainer: sample, fetch, train, stall, barrier seconds
    critical_path: list[Segment]
    critical_share: dict[str, float]  # stage -> seconds on the critical path
    capacity: dict[str, float]  # resource -> capacity (bytes/s, cores, 1)
    timeline: list[Span] | None = None
    events: int = 0
    wall_s: float = 0.0
    extrapolated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        """End of the last simulated iteration (no extrapolation)."""
        return float(self.barriers[-1])

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    def summary(self) -> dict[str, Any]:
        """JSON-able headline numbers."""
        return {
            "policy": self.policy, "epoch_time_s": self.epoch_time_s,
            "iteration_time_s": self.iteration_time_s, "iterations": self.iterations,
            "lower_bound_s": self.lower_bound_s,
            "ratio_to_bound": self.epoch_time_s / self.lower_bound_s
            if self.lower_bound_s > 0 else None,
            "extrapolated": self.extrapolated,
            "critical_share": self.critical_share,
            "utilisation_max": max(self.utilisation.values(), default=0.0),
            "events": self.events, "wall_s": self.wall_s, "events_per_s": self.events_per_s,
            **self.meta,
        }


# ------------------------------------------------------------------------------ instance


class _Tables:
    """Per (partition, sample): feature and sampled-edge bytes by store machine."""

    def __init__(self, wl: Workload) -> None:
        prof, store = wl.profile, wl.store
        fb = prof.feature_bytes
        self.feat: list[list[tuple[tuple[int, float], ...]]] = []
        self.struct: list[list[tuple[tuple[int, float], ...]]] = []
        for pp in prof.parts:
            fl, sl = [], []
            for ids, cnt, eids, ecnt in zip(pp.input_parts, pp.input_nodes, pp.edge_parts,
                                            pp.edge_counts):
                fl.append(_by_machine(store, ids, cnt, fb))
                sl.append(_by_machine(store, eids, ecnt, EDGE_BYTES))
            self.feat.append(fl)
            self.struct.append(sl)


def _by_machine(store: np.ndarray, ids: np.ndarray, cnt: np.ndarray, unit: float
                ) -> tuple[tuple[int, float], ...]:
    out: dict[int, float] = {}
    for p, c in zip(ids.tolist(), cnt.tolist()):
        if c > 0:
            m = int(store[p])
            out[m] = out.get(m, 0.0) + c * unit
    return tuple(sorted(out.items()))


_CACHE: list[tuple[Any, ...]] = []  # small LRU: (cluster, job, profile, workload, tables)


def workload_for(cluster: ClusterSpec, job: JobSpec, profile: CostProfile) -> Workload:
    """A (cached) Workload: placement search simulates many plans of one problem."""
    return _cached(cluster, job, profile)[0]


def _cached(cluster: ClusterSpec, job: JobSpec, profile: CostProfile) -> tuple[Workload, _Tables]:
    for entry in _CACHE:
        if entry[0] is cluster and entry[1] is job and entry[2] is profile:
            return entry[3], entry[4]
    if profile.num_parts != cluster.num_parts:
        raise SpecError("cost profile", "num_parts",
                        f"profile has {profile.num_parts} partitions but cluster "
                        f"{cluster.source} stores {cluster.num_parts}",
                        "a profile measured for this job's partitions")
    wl = Workload(cluster, job, profile)
    tab = _Tables(wl)
    _CACHE.insert(0, (cluster, job, profile, wl, tab))
    del _CACHE[4:]
    return wl, tab


def _tables(wl: Workload) -> _Tables:
    for entry in _CACHE:
        if entry[3] is wl:
            return entry[4]
    tab = _Tables(wl)
    _CACHE.insert(0, (wl.cluster, wl.job, wl.profile, wl, tab))
    del _CACHE[4:]
    return tab


class Instance:
    """A plan with every mini-batch drawn: what the simulator runs and CP-SAT solves exactly.

    Trainer ``w`` is ``plan.trainers[w]``; all arrays are ``[W][K]`` nested lists for speed.
    """

    def __init__(self, workload: Workload, plan: Plan, *, seed: int = 0,
                 iterations: int | None = None, nic_window_s: float | None = None) -> None:
        wl, cl = workload, workload.cluster
        self.workload, self.plan, self.seed = wl, plan, seed
        if nic_window_s is not None and not nic_window_s > 0:
            raise ValueError(f"nic_window_s must be > 0 seconds or None, got {nic_window_s!r}")
        self.nic_window_s = nic_window_s
        self.M = wl.M
        self.W = len(plan.trainers)
        self.K = K = int(iterations or wl.iterations)
        self.full_iterations = wl.iterations
        idx = cl.machine_index
        self.T = [idx(t.machine) for t in plan.trainers]
        self.dev = [t.device for t in plan.trainers]
        self.F = [idx(t.fetch_at) for t in plan.trainers]
        self.speed = [wl.speed(t) for t in plan.trainers]
        self.samplers: list[list[tuple[int, int]]] = []
        for t in plan.trainers:
            merged: dict[int, int] = {}
            for m, c in t.samplers:
                merged[idx(m)] = merged.get(idx(m), 0) + int(c)
            self.samplers.append(sorted(merged.items()))
        self.egress = [float(x) for x in wl.egress_bw]
        self.ingress = [float(x) for x in wl.ingress_bw]
        self.cores = [int(x) for x in wl.cores]
        self.latency = float(cl.latency)
        self.names = list(wl.names)
        tab = _tables(wl)
        prof = wl.profile
        self.sample_s: list[list[float]] = []
        self.train_s: list[list[float]] = []  # on the trainer's device
        self.block: list[list[float]] = []
        self.feat: list[list[tuple[tuple[int, float], ...]]] = []
        self.struct: list[list[tuple[tuple[int, float], ...]]] = []
        self.feat_total: list[list[float]] = []
        for w, t in enumerate(plan.trainers):
            ss, ts, bl, fe, st, ft = [], [], [], [], [], []
            for q, i in wl.draws(t.parts, seed, K):
                pp = prof.part(q)
                ss.append(float(pp.sample_s[i]))
                ts.append(float(pp.train_s[i]) / self.speed[w])
                bl.append(float(pp.edges[i]) * EDGE_BYTES)
                fe.append(tab.feat[q][i])
                st.append(tab.struct[q][i])
                ft.append(sum(b for _, b in tab.feat[q][i]))
            self.sample_s.append(ss)
            self.train_s.append(ts)
            self.block.append(bl)
            self.feat.append(fe)
            self.struct.append(st)
            self.feat_total.append(ft)
        self.allreduce_s = float(wl.allreduce_s(plan))
        # when each trainer leaves all-reduce k after the first one: a measured row per
        # iteration (profile.barrier_skew_s), trainer for trainer when the run had W trainers
        self.release: list[list[float]] | None = None
        rows = [r for r in prof.barrier_skew_s if r]
        if rows and self.W > 1 and max(max(r) for r in rows) > 0:
            rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0xBA55])
            self.release = [[0.0] * K for _ in range(self.W)]
            for k in range(K):
                row = rows[int(rng.integers(len(rows)))]
                vals = row if len(row) == self.W else rng.choice(row, size=self.W).tolist()
                for w in range(self.W):
                    self.release[w][k] = float(vals[w])
        ar_bytes = float(wl.allreduce_bytes(plan))
        self.grad_rate: dict[int, float] = {}  # trainer machine -> reserved bytes/s
        if self.allreduce_s > 0 and ar_bytes > 0:
            for m in set(self.T):
                n = self.T.count(m)
                self.grad_rate[m] = min(n * ar_bytes / self.allreduce_s,
                                        self.egress[m], self.ingress[m])
        self.ar_bytes = ar_bytes
        # expected costs (what a policy may know before anything is sampled)
        self.exp_sample, self.exp_train, self.exp_fetch, self.buffer = [], [], [], []
        for w, t in enumerate(plan.trainers):
            c = wl.trainer_cost(t.parts)
            self.exp_sample.append(c.sample_s)
            self.exp_train.append(c.train_s / self.speed[w])
            self.exp_fetch.append(self._fetch_alone(w, c.feat_from, c.feat_bytes))
            n_on = self.T.count(self.T[w])
            mem = cl.machines[self.T[w]].memory / 2 / n_on  # half the host's memory buffers
            per = max(c.feat_bytes + c.block_bytes, 1.0)
            self.buffer.append(max(1, int(mem // per)))

    def _fetch_alone(self, w: int, feat_from: Any, total: float) -> float:
        F, T = self.F[w], self.T[w]
        items = feat_from.items() if isinstance(feat_from, dict) else feat_from
        t = 0.0
        for m, b in items:
            if m != F:
                t = max(t, b / min(self.egress[m], self.ingress[F]))
        if F != T:
            t += total / min(self.egress[F], self.ingress[T])
        return t

    def rate(self, src: int, dst: int) -> float:
        """Full rate of a transfer alone on the network."""
        return min(self.egress[src], self.ingress[dst])

    def context(self, prefetch: int) -> PolicyContext:
        return PolicyContext(
            trainers=self.W, iterations=self.K, prefetch=prefetch,
            train_s=list(self.exp_train), fetch_s=list(self.exp_fetch),
            sample_s=list(self.exp_sample), egress=list(self.egress),
            ingress=list(self.ingress), trainer_machine=list(self.T),
            fetch_machine=list(self.F), buffer_batches=list(self.buffer))

    def prefetch_depths(self, prefetch: int | None = None) -> list[int]:
        """Per trainer depth the base policy allows (what the CP-SAT model assumes)."""
        pol = Policy()
        pol.reset(self.context(prefetch or self.workload.job.prefetch))
        return [pol.prefetch(w) for w in range(self.W)]


# ------------------------------------------------------------------------------ network


class _Flow:
    __slots__ = ("fid", "s", "d", "skey", "rem", "rate", "t0", "ver", "kind", "w", "k", "tr",
                 "nbytes", "tag", "t_arr", "src", "dst", "seen")

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
        self.tr: Transfer | None = None
        self.tag = 0.0
        self.seen = -1


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
    __slots__ = ("s", "d", "n", "wt", "V", "t0", "rate", "heap", "ver", "tchg", "key", "cls",
                 "tail")

    def __init__(self, s: int, d: int, now: float, cls: Any = 0) -> None:
        self.s, self.d, self.cls = s, d, cls
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
        self.groups: dict[tuple[int, int], _Group] = {}
        self.on: list[dict[tuple, _Group]] = [{} for _ in range(R)]  # resource -> its groups
        self.level = [math.inf] * R
        self.touched: set[int] = set()  # resources whose groups or capacity changed
        self.resched: set[tuple[int, int]] = set()
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
        key = (cls, f.s, f.d)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = _Group(f.s, f.d, now, cls)
            self.on[f.s][key] = g
            self.on[f.d][key] = g
            if cls != 0:
                self.classes = True
        else:
            self._settle(g, now)
        if self.connections:  # one byte stream per pair: first come, first served
            f.tag = g.tail = max(g.V, g.tail) + f.nbytes
        else:
            f.tag = g.V + f.nbytes
        f.t_arr = now
        heapq.heappush(g.heap, (f.tag, f.fid, f))
        g.n += 1
        g.wt = 1 if self.connections else g.n
        self.resched.add(key)
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
        key = (g.cls, g.s, g.d)
        if g.n == 0:
            del self.groups[key]
            del self.on[g.s][key]
            del self.on[g.d][key]
            self.resched.discard(key)
            g.rate = 0.0
        else:
            self.resched.add(key)
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
            if not changed_rate and (g.cls, g.s, g.d) not in resched:
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


class _WindowNet:
    """NICs the way the gnnsched runtime drives them. A sender hands whole transfers to its
    kernel, in the policy's order (priority key, else arrival), while less than ``window_s``
    of its egress is queued there. The kernel holds one byte stream (a TCP connection) per
    receiver: a stream sends what it was handed in that order, and streams share the NICs
    max-min fairly, one share each however much they hold (:class:`_FairNet` with
    ``connections``).

    A store's window (``runtime.coordinator.NIC_WINDOW_S``) has to cover acknowledgement
    round trips through busy processes, so it holds every transfer of a short queue: the
    policy's order then reaches the wire only within one receiver's stream and for what waits
    behind a full window.
    """

    def __init__(self, cap: list[float], schedule: Any, record: Any, window_s: float,
                 M: int, ordered: bool) -> None:
        self.inner = _FairNet(cap, schedule, record, connections=True)
        self.window = [c * window_s for c in cap[:M]]  # bytes, per sender
        self.ordered = ordered  # policy keys (priority) or arrival order (fair sharing)
        self.waiting: list[list[tuple]] = [[] for _ in range(M)]
        self.queued = [0.0] * M  # bytes of admitted, unfinished transfers

    def add(self, f: _Flow, now: float) -> None:
        heapq.heappush(self.waiting[f.s], (f.skey if self.ordered else (f.fid,), f.fid, f))
        self._admit(f.s, now)

    def _admit(self, s: int, now: float) -> None:
        q = self.waiting[s]
        while q and self.queued[s] < self.window[s]:
            f = heapq.heappop(q)[-1]
            f.skey = ()  # one class: the streams share fairly
            self.queued[s] += f.nbytes
            self.inner.add(f, now)

    def done(self, g: _Group, ver: int, now: float) -> _Flow | None:
        f = self.inner.done(g, ver, now)
        if f is not None:
            self.queued[f.s] = max(0.0, self.queued[f.s] - f.nbytes)
            self._admit(f.s, now)
        return f

    def set_cap(self, r: int, c: float) -> None:
        self.inner.set_cap(r, c)

    @property
    def dirty(self) -> bool:
        return self.inner.dirty

    def commit(self, now: float) -> None:
        self.inner.commit(now)


# ------------------------------------------------------------------------------ simulator


def simulate(cluster: ClusterSpec | Workload, job: JobSpec | Plan | None = None,
             plan: Plan | None = None, profile: CostProfile | None = None,
             policy: str | Policy = "gnnsched", *, seed: int = 0,
             iterations: int | None = None, record: bool = False,
             validate: bool = True, nic_window_s: float | None = None) -> SimResult:
    """Simulate one epoch of `plan`.

    Call as ``simulate(cluster, job, plan, profile, policy)`` or
    ``simulate(workload, plan, policy=...)``. `iterations` < the epoch's simulates that many
    and extrapolates the epoch from the steady-state iteration time. `validate` checks the
    plan against the cluster and job (SpecError naming the trainer and field).
    `nic_window_s`: None, every NIC serves its queue as the policy says (the planning
    model); seconds, senders hand transfers to their kernel while less than that much egress
    is queued there, one connection per receiver, as the gnnsched runtime's stores do
    (:class:`_WindowNet`; what predicting a real run needs).
    """
    if isinstance(cluster, Workload):
        wl = cluster
        if plan is None and isinstance(job, Plan):
            plan = job
    else:
        if job is None or profile is None or not isinstance(job, JobSpec):
            raise TypeError("simulate(cluster, job, plan, profile, policy) or "
                            "simulate(workload, plan)")
        if validate:
            profile.check_job(job)
        wl = _cached(cluster, job, profile)[0]
    if plan is None:
        raise TypeError("simulate needs a plan")
    if validate:
        plan.validate(wl.cluster, wl.job)
    inst = Instance(wl, plan, seed=seed, iterations=iterations, nic_window_s=nic_window_s)
    return run(inst, policy, record=record)


def run(inst: Instance, policy: str | Policy = "gnnsched", *, record: bool = False,
        prefetch: int | None = None) -> SimResult:
    """Run the event loop on a drawn instance."""
    wall0 = time.perf_counter()
    pol = get_policy(policy)
    pol.reset(inst.context(prefetch or inst.workload.job.prefetch))
    W, K, M = inst.W, inst.K, inst.M
    pf = [pol.prefetch(w) for w in range(W)]
    names = inst.names
    caps = inst.egress + inst.ingress
    heap: list[tuple] = []
    counter = itertools.count()
    hpush, hpop = heapq.heappush, heapq.heappop
    spans: list[Span] | None = [] if record else None

    def schedule(t: float, obj: Any) -> None:
        hpush(heap, (t, next(counter), _FLOW_DONE, obj, obj.ver))

    rec_flow = None
    if spans is not None:
        def rec_flow(f: _Flow, t0: float, t1: float, rate: float) -> None:
            st = KINDS[f.kind]
            spans.append(Span(f"egress:{names[f.src]}", t0, t1, st, f.w, f.k, rate))
            spans.append(Span(f"ingress:{names[f.dst]}", t0, t1, st, f.w, f.k, rate))

    priority = pol.sharing in ("priority", "classes")
    if pol.sharing not in ("priority", "fair", "classes"):
        raise ValueError(f"policy {pol.name!r}: sharing must be 'fair' or 'priority'")
    net: Any
    if inst.nic_window_s is not None:
        net = _WindowNet(caps, schedule, rec_flow, inst.nic_window_s, M, priority)
    else:
        net = (_PriorityNet if pol.sharing == "priority" else _FairNet)(caps, schedule,
                                                                        rec_flow)
    latency = inst.latency
    T, F = inst.T, inst.F
    sample_s, train_s, block, feat, struct, feat_total = (
        inst.sample_s, inst.train_s, inst.block, inst.feat, inst.struct, inst.feat_total)
    A = inst.allreduce_s
    grad = inst.grad_rate

    # state
    cores_free = list(inst.cores)
    sampler_on: list[list[tuple[int, int]]] = [[] for _ in range(M)]  # S -> [(w, slot idx)]
    slot_free: list[list[int]] = []
    slot_machine: list[list[int]] = []
    for w in range(W):
        slot_free.append([c for _, c in inst.samplers[w]])
        slot_machine.append([m for m, _ in inst.samplers[w]])
        for j, (m, _) in enumerate(inst.samplers[w]):
            sampler_on[m].append((w, j))
    next_disp = [0] * W
    next_train = [0] * W
    ready_since = [0.0] * W
    busy = [False] * W
    nan = math.nan
    t_sample = [[nan] * K for _ in range(W)]
    t_cpu = [[nan] * K for _ in range(W)]
    t_sampled = [[nan] * K for _ in range(W)]
    t_block = [[nan] * K for _ in range(W)]
    t_featF = [[nan] * K for _ in range(W)]
    t_feat = [[nan] * K for _ in range(W)]
    t_start = [[nan] * K for _ in range(W)]
    t_end = [[nan] * K for _ in range(W)]
    where = [[-1] * K for _ in range(W)]
    pend_struct = [[0] * K for _ in range(W)]
    pend_feat = [[0] * K for _ in range(W)]
    trained = [0] * K
    ar_start = [0.0] * K
    barrier = [nan] * K
    nbar = [0]
    passed = [0] * W  # barriers each trainer has left (later than nbar with barrier skew)
    release = inst.release
    fids = itertools.count()
    bytes_out = [0.0] * M
    bytes_in = [0.0] * M
    cpu_busy = [0.0] * M
    nevents = 0

    def flow(kind: int, w: int, k: int, src: int, dst: int, nbytes: float, now: float) -> None:
        fid = next(fids)
        f = _Flow(fid, src, dst, M, nbytes, kind, w, k)
        tr = Transfer(BatchKey(w, k), KINDS[kind], src, dst, nbytes, now, fid)
        f.tr = tr
        if priority:
            f.skey = tuple(pol.priority(tr)) + (fid,)
        bytes_out[src] += nbytes
        bytes_in[dst] += nbytes
        net.add(f, now)

    def dispatch(S: int, now: float) -> None:
        while cores_free[S] > 0:
            cands = []
            for w, j in sampler_on[S]:
                nd = next_disp[w]
                if slot_free[w][j] > 0 and nd < K and nd < next_train[w] + pf[w]:
                    cands.append((ready_since[w], w, j))
            if not cands:
                return
            if len(cands) == 1:
                _, w, j = cands[0]
            else:
                cands.sort()
                keys = [BatchKey(w, next_disp[w]) for _, w, _ in cands]
                b = pol.pick_batch(keys, now)
                _, w, j = cands[keys.index(b)]
            k = next_disp[w]
            next_disp[w] = k + 1
            ready_since[w] = now
            slot_free[w][j] -= 1
            cores_free[S] -= 1
            t_sample[w][k] = now
            where[w][k] = j
            hpush(heap, (now + sample_s[w][k], next(counter), _CPU_DONE, w, k))

    def sampled(w: int, k: int, S: int, j: int, now: float) -> None:
        t_sampled[w][k] = now
        slot_free[w][j] += 1
        ft = feat_total[w][k]
        pol.on_sampled(BatchKey(w, k), BatchInfo(ft, block[w][k], train_s[w][k], feat[w][k], S),
                       now)
        Tw, Fw = T[w], F[w]
        if S != Tw and block[w][k] > 0:
            flow(_BLOCK, w, k, S, Tw, block[w][k], now)
        else:
            t_block[w][k] = now
        n = 0
        for m, b in feat[w][k]:
            if m != Fw and b > 0:
                flow(_FEAT, w, k, m, Fw, b, now)
                n += 1
        pend_feat[w][k] = n
        if n == 0:
            feat_at_fetch(w, k, now)
        dispatch(S, now)
        try_train(w, now)

    def feat_at_fetch(w: int, k: int, now: float) -> None:
        t_featF[w][k] = now
        if F[w] != T[w] and feat_total[w][k] > 0:
            flow(_RELAY, w, k, F[w], T[w], feat_total[w][k], now)
        else:
            t_feat[w][k] = now

    def try_train(w: int, now: float) -> None:
        k = next_train[w]
        if k >= K or busy[w] or passed[w] < k:
            return
        if t_block[w][k] != t_block[w][k] or t_feat[w][k] != t_feat[w][k]:  # NaN: not yet
            return
        busy[w] = True
        next_train[w] = k + 1
        t_start[w][k] = now
        hpush(heap, (now + train_s[w][k], next(counter), _TRAIN_DONE, w, k))
        if next_disp[w] == k + pf[w]:  # the window just opened
            ready_since[w] = now
        for m, _ in inst.samplers[w]:
            dispatch(m, now)

    def barrier_done(k: int, now: float) -> None:
        barrier[k] = now
        nbar[0] = k + 1
        pol.on_barrier(k, now)
        for w in range(W):
            if release is not None and release[w][k] > 0:
                hpush(heap, (now + release[w][k], next(counter), _RELEASE, w, k))
            else:
                passed[w] = k + 1
                try_train(w, now)

    for S in range(M):
        if sampler_on[S]:
            dispatch(S, 0.0)

    now = 0.0
    while heap:
        t, _, code, a, b = hpop(heap)
        if code == _FLOW_DONE:
            f = net.done(a, b, t)
            if f is None:
                continue
            now = t
            nevents += 1
            if latency > 0:
                hpush(heap, (t + latency, next(counter), _ARRIVE, f, 0))
            else:
                code, a = _ARRIVE, f
        else:
            now = t
            nevents += 1
        if code == _ARRIVE:
            f = a
            pol.on_transfer_done(f.tr, now)
            w, k, kind = f.w, f.k, f.kind
            if kind == _FEAT:
                pend_feat[w][k] -= 1
                if pend_feat[w][k] == 0:
                    feat_at_fetch(w, k, now)
                    try_train(w, now)
            elif kind == _BLOCK:
                t_block[w][k] = now
                try_train(w, now)
            elif kind == _RELAY:
                t_feat[w][k] = now
                try_train(w, now)
            else:
                pend_struct[w][k] -= 1
                if pend_struct[w][k] == 0:
                    j = where[w][k]
                    sampled(w, k, slot_machine[w][j], j, now)
        elif code == _CPU_DONE:
            w, k = a, b
            j = where[w][k]
            S = slot_machine[w][j]
            cores_free[S] += 1
            t_cpu[w][k] = now
            cpu_busy[S] += sample_s[w][k]
            if spans is not None:
                spans.append(Span(f"cpu:{names[S]}", t_sample[w][k], now, "sample", w, k))
            n = 0
            for m, nb in struct[w][k]:
                if m != S and nb > 0:
                    flow(_STRUCT, w, k, m, S, nb, now)
                    n += 1
            pend_struct[w][k] = n
            if n == 0:
                sampled(w, k, S, j, now)
            else:
                dispatch(S, now)
        elif code == _TRAIN_DONE:
            w, k = a, b
            busy[w] = False
            t_end[w][k] = now
            if spans is not None:
                spans.append(Span(f"gpu:{names[T[w]]}/{inst.dev[w]}", t_start[w][k], now,
                                  "train", w, k))
            pol.on_trained(BatchKey(w, k), now)
            trained[k] += 1
            if trained[k] == W:
                if A > 0:
                    ar_start[k] = now
                    for m, g in grad.items():
                        net.set_cap(m, caps[m] - g)
                        net.set_cap(M + m, caps[M + m] - g)
                    hpush(heap, (now + A, next(counter), _AR_DONE, k, 0))
                else:
                    barrier_done(k, now)
        elif code == _RELEASE:
            w, k = a, b
            passed[w] = k + 1
            try_train(w, now)
        elif code == _AR_DONE:
            k = a
            for m, g in grad.items():
                net.set_cap(m, caps[m])
                net.set_cap(M + m, caps[M + m])
                bytes_out[m] += g * A
                bytes_in[m] += g * A
                if spans is not None:
                    spans.append(Span(f"egress:{names[m]}", ar_start[k], now, "allreduce", -1,
                                      k, g))
                    spans.append(Span(f"ingress:{names[m]}", ar_start[k], now, "allreduce",
                                      -1, k, g))
            if spans is not None:
                for w in range(W):
                    spans.append(Span(f"gpu:{names[T[w]]}/{inst.dev[w]}", ar_start[k], now,
                                      "allreduce", w, k))
            barrier_done(k, now)
        if net.dirty and (not heap or heap[0][0] > now):
            net.commit(now)

    if nbar[0] < K:
        raise RuntimeError(f"simulation stalled at iteration {nbar[0]} of {K} "
                           "(a transfer with no bandwidth?)")
    wall = time.perf_counter() - wall0
    times = {n: np.array(v) for n, v in (
        ("sample_start", t_sample), ("cpu_end", t_cpu), ("sampled", t_sampled),
        ("block", t_block), ("feat_at_fetch", t_featF), ("ready_feat", t_feat),
        ("train_start", t_start), ("train_end", t_end))}
    return _result(inst, pol, pf, np.array(barrier), times, spans, nevents, wall,
                   bytes_out, bytes_in, cpu_busy)


# ------------------------------------------------------------------------------ results


def _result(inst: Instance, pol: Policy, pf: list[int], barrier: np.ndarray,
            times: dict[str, np.ndarray], spans: list[Span] | None, nevents: int, wall: float,
            bytes_out: list[float], bytes_in: list[float], cpu_busy: list[float]) -> SimResult:
    from gnnsched.bounds import instance_bound

    W, K, M = inst.W, inst.K, inst.M
    makespan = float(barrier[-1])
    warm = min(K - 1, max(1, max(pf) + 1, K // 10))
    if K - warm >= 1 and K > 1:
        it = float((barrier[-1] - barrier[warm - 1]) / (K - warm))
    else:
        it = makespan / K
    extrapolated = K < inst.full_iterations
    epoch = makespan + (inst.full_iterations - K) * it if extrapolated else makespan
    left = _left(inst, barrier)  # [W][K]: when each trainer left each all-reduce
    prev = np.concatenate([np.zeros((W, 1)), left[:, :-1]], axis=1)
    ts, te = times["train_start"], times["train_end"]
    ready = np.maximum(times["block"], times["ready_feat"])
    stages = []
    for w in range(W):
        stages.append({
            "sample": float(np.sum(times["sampled"][w] - times["sample_start"][w])),
            "fetch": float(np.sum(ready[w] - times["sampled"][w])),
            "train": float(np.sum(te[w] - ts[w])),
            "stall": float(np.sum(ts[w] - prev[w])),
            "barrier": float(np.sum(left[w] - te[w])),
        })
    names = inst.names
    util: dict[str, float] = {}
    cap: dict[str, float] = {}
    span = max(makespan, 1e-300)
    for m in range(M):
        cap[f"egress:{names[m]}"] = inst.egress[m]
        cap[f"ingress:{names[m]}"] = inst.ingress[m]
        cap[f"cpu:{names[m]}"] = float(inst.cores[m])
        if bytes_out[m] > 0:
            util[f"egress:{names[m]}"] = bytes_out[m] / inst.egress[m] / span
        if bytes_in[m] > 0:
            util[f"ingress:{names[m]}"] = bytes_in[m] / inst.ingress[m] / span
        if cpu_busy[m] > 0:
            util[f"cpu:{names[m]}"] = cpu_busy[m] / inst.cores[m] / span
    for w in range(W):
        key = f"gpu:{names[inst.T[w]]}/{inst.dev[w]}"
        cap[key] = 1.0
        util[key] = float(np.sum(te[w] - ts[w])) / span
    path = critical_path(inst, barrier, times, pf)
    share: dict[str, float] = {}
    for s in path:
        share[s.stage] = share.get(s.stage, 0.0) + (s.end - s.start)
    bound = instance_bound(inst)
    lower = bound.epoch_s * (inst.full_iterations / K if extrapolated else 1.0)
    return SimResult(pol.name, epoch, it, K, lower, barrier, times, util, stages, path,
                     share, cap, spans, nevents, wall, extrapolated,
                     {"bottleneck": bound.bottleneck, "sharing": pol.sharing,
                      "prefetch": max(pf), "nic_window_s": inst.nic_window_s})


def _left(inst: Instance, barrier: np.ndarray) -> np.ndarray:
    """[W][K] seconds at which each trainer left each all-reduce (``Instance.release``); the
    last one ends the run, so every trainer's stages add up to the makespan."""
    out = np.tile(np.asarray(barrier, dtype=float), (inst.W, 1))
    if inst.release is not None:
        out[:, :-1] += np.asarray(inst.release, dtype=float)[:, :out.shape[1] - 1]
    return out


def critical_path(inst: Instance, barrier: np.ndarray, times: dict[str, np.ndarray],
                  pf: list[int]) -> list[Segment]:
    """Walk back from the last barrier along whatever each step waited for."""
    eps = 1e-9 * max(float(barrier[-1]), 1e-9)
    A = inst.allreduce_s
    left = _left(inst, barrier)
    ts, te = times["train_start"], times["train_end"]
    out: list[Segment] = []
    k = inst.K - 1
    w = int(np.argmax(te[:, k]))
    if A > 0:
        out.append(Segment("allreduce", -1, k, float(barrier[k] - A), float(barrier[k])))
    with_train = True  # False: we arrived at batch k because its training *started*
    guard = 0
    while guard < 4 * inst.K * inst.W + 8:
        guard += 1
        s0 = float(ts[w, k])
        if with_train:
            out.append(Segment("train", w, k, s0, float(te[w, k])))
        with_train = True
        if k > 0 and s0 <= left[w, k - 1] + eps:
            if left[w, k - 1] > barrier[k - 1] + eps:  # this trainer left the all-reduce late
                out.append(Segment("allreduce", w, k - 1, float(barrier[k - 1]),
                                   float(left[w, k - 1])))
            k -= 1
            w = int(np.argmax(te[:, k]))
            if A > 0:
                out.append(Segment("allreduce", -1, k, float(barrier[k] - A),
                                   float(barrier[k])))
            continue
        sampled = float(times["sampled"][w, k])
        blk, feat = float(times["block"][w, k]), float(times["ready_feat"][w, k])
        if feat >= blk:
            fa = float(times["feat_at_fetch"][w, k])
            if feat > fa:
                out.append(Segment("relay", w, k, fa, feat))
            out.append(Segment("feat", w, k, sampled, fa))
        else:
            out.append(Segment("block", w, k, sampled, blk))
        cpu = float(times["cpu_end"][w, k])
        if sampled > cpu:
            out.append(Segment("struct", w, k, cpu, sampled))
        st = float(times["sample_start"][w, k])
        out.append(Segment("sample", w, k, st, cpu))
        j = k - pf[w]
        opened = float(ts[w, j]) if j >= 0 else 0.0
        if st > opened + eps:
            out.append(Segment("queue", w, k, opened, st))  # waiting for a core or sampler
        if j < 0:
            break
        k, with_train = j, False  # the buffer was full until batch j started training
    out.reverse()
    return out


__all__ = ["Instance", "SimResult", "Span", "Segment", "simulate", "run", "critical_path",
           "workload_for"]
