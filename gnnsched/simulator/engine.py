"""The simulator's event engine: one epoch of a drawn :class:`Instance` under a policy.

:func:`simulate` draws the instance from a plan and runs it; :func:`run` runs the event loop
of :class:`_Epoch` (one handler per event: sampling on cores, transfers on the network model
of :mod:`.network` or :mod:`.window`, training, the all-reduce barrier); :class:`SimResult`
is what it reports, with the instance's lower bound
(:func:`gnnsched.bounds.instance_bound`) and the critical path (:func:`critical_path`).
The semantics are in the package's docstring (:mod:`gnnsched.simulator`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from gnnsched.bounds import instance_bound
from gnnsched.instance import Instance, workload_for
from gnnsched.plan import Plan
from gnnsched.policy import (
    BatchInfo,
    BatchKey,
    Policy,
    Transfer,
    choose_sampling,
    get_policy,
)
from gnnsched.profile import CostProfile
from gnnsched.simulator.network import _FairNet, _Flow, _PriorityNet
from gnnsched.simulator.window import _WindowNet
from gnnsched.spec import ClusterSpec, JobSpec
from gnnsched.workload import (
    NIC_CHUNK_S,
    NIC_FIFO_BYTES,
    NIC_WINDOW_S,
    PEER_WINDOW_S,
    Workload,
)

KINDS = ("struct", "block", "feat", "relay")
_STRUCT, _BLOCK, _FEAT, _RELAY = range(4)
_CPU_DONE, _FLOW_DONE, _ARRIVE, _TRAIN_DONE, _AR_DONE, _RELEASE, _HOPS = range(7)


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
    """One simulated epoch: what plans are compared by, and what the reports show."""

    policy: str
    epoch_time_s: float  # end of the last all-reduce (extrapolated if fewer iterations ran)
    iteration_time_s: float  # steady state: mean barrier-to-barrier time after warm-up
    iterations: int  # iterations simulated
    # the per-plan bound's definition (bounds.instance_bound) on the iterations simulated,
    # scaled if extrapolated; `gnnsched simulate` reports bounds.per_plan_bound instead,
    # on the whole epoch, as `gnnsched plan` does
    lower_bound_s: float
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


class SimulationCut(RuntimeError):
    """A simulation stopped before its last iteration: its ``deadline`` (a
    :func:`time.perf_counter` instant) passed, or it ran more than ``max_events`` events.

    It keeps what it had simulated: the barriers of the ``done`` iterations of ``K``
    simulated (``full`` in the epoch), so a caller can extrapolate the epoch from them
    (:meth:`estimate`) or fall back to a cheaper score. The engine looks every
    :data:`CHECK_EVERY` steps of its loop, so a cut comes at most that many steps late.
    """

    def __init__(self, why: str, done: int, K: int, full: int, barriers: list[float],
                 events: int, wall_s: float, prefetch: int) -> None:
        super().__init__(f"simulation cut short ({why}) after {done} of {K} iterations, "
                         f"{events} events in {wall_s:.2f} s")
        self.why, self.done, self.K, self.full = why, done, K, full
        self.barriers, self.events, self.wall_s, self.prefetch = barriers, events, wall_s, \
            prefetch

    def estimate(self, min_done: int = 2) -> float | None:
        """The epoch extrapolated from the iterations done, as a shortened simulation's is
        (steady iterations after the warm-up, times the epoch's); None below `min_done`."""
        n = self.done
        if n < max(1, min_done):
            return None
        b = self.barriers[:n]
        warm = min(n - 1, max(1, self.prefetch + 1, n // 10))
        it = (b[-1] - b[warm - 1]) / (n - warm) if n - warm >= 1 and n > 1 else b[-1] / n
        return float(b[-1] + (self.full - n) * it)


CHECK_EVERY = 512  # steps of the event loop between two looks at the deadline / event cap


# ------------------------------------------------------------------------------ simulator


def simulate(cluster: ClusterSpec | Workload, job: JobSpec | Plan | None = None,
             plan: Plan | None = None, profile: CostProfile | None = None,
             policy: str | Policy = "gnnsched", *, seed: int = 0,
             iterations: int | None = None, record: bool = False,
             validate: bool = True, nic_window_s: float | None = None,
             nic_chunk_s: float | None = None, deadline: float | None = None,
             max_events: int | None = None,
             nic_fifo_bytes: float | None = NIC_FIFO_BYTES) -> SimResult:
    """Simulate one epoch of `plan`.

    Call as ``simulate(cluster, job, plan, profile, policy)`` or
    ``simulate(workload, plan, policy=...)``. `iterations` < the epoch's simulates that many
    and extrapolates the epoch from the steady-state iteration time. `validate` checks the
    plan against the cluster and job (SpecError naming the trainer and field).
    `nic_window_s`: None, every NIC serves its queue as the policy says (the planning
    model); seconds, one connection per (sender, receiver), each handed its next transfer
    while less than its share of that much egress is queued in it, as the runtime's stores do
    (:class:`_WindowNet`; what predicting a real run needs). `nic_chunk_s`: the window
    model's piece, in seconds of the sender's egress (None: the runtime's
    :data:`~gnnsched.workload.NIC_CHUNK_S`); what-if studies of smaller windows need smaller
    pieces too (``bench/bench_scale256_gap.py``). `deadline` (a :func:`time.perf_counter`
    instant) and `max_events` cut a simulation that would run past them: it raises
    :class:`SimulationCut` with the iterations it had done (what a planner on a budget
    falls back from). `nic_fifo_bytes` (the window model only): what one connection parks in
    a FIFO NIC queue, which every remote hop's request and answer wait behind
    (:meth:`_Epoch.hop_wait`); None or 0: no such wait.
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
        wl = workload_for(cluster, job, profile)
    if plan is None:
        raise TypeError("simulate needs a plan")
    if validate:
        plan.validate(wl.cluster, wl.job)
    inst = Instance(wl, plan, seed=seed, iterations=iterations, nic_window_s=nic_window_s,
                    nic_chunk_s=nic_chunk_s, nic_fifo_bytes=nic_fifo_bytes)
    return run(inst, policy, record=record, deadline=deadline, max_events=max_events)


def run(inst: Instance, policy: str | Policy = "gnnsched", *, record: bool = False,
        prefetch: int | None = None, deadline: float | None = None,
        max_events: int | None = None) -> SimResult:
    """Run the event loop on a drawn instance (`deadline`, `max_events`: see
    :func:`simulate`)."""
    wall0 = time.perf_counter()
    pol = get_policy(policy)
    pol.reset(inst.context(prefetch or inst.workload.job.prefetch))
    ep = _Epoch(inst, pol, record)
    if deadline is not None or max_events is not None:
        ep.limit(wall0, deadline, max_events)
    ep.loop()
    if ep.nbar < inst.K:
        raise RuntimeError(f"simulation stalled at iteration {ep.nbar} of {inst.K} "
                           "(a transfer with no bandwidth?)")
    wall = time.perf_counter() - wall0
    return _result(inst, pol, ep.pf, np.array(ep.barrier), ep.times(), ep.spans, ep.nevents,
                   wall, ep.bytes_out, ep.bytes_in, ep.cpu_busy)


def _network(inst: Instance, pol: Policy, caps: list[float], schedule: Any,
             rec_flow: Any) -> Any:
    """The NIC model the policy's sharing and the instance's window ask for."""
    priority = pol.sharing in ("priority", "classes")
    if pol.sharing not in ("priority", "fair", "classes"):
        raise ValueError(f"policy {pol.name!r}: sharing must be 'fair' or 'priority'")
    if inst.nic_window_s is not None:
        # nic_window_s is a sender's window in all; each receiver's stream gets the
        # runtime's per-receiver share of it (PEER_WINDOW_S of NIC_WINDOW_S)
        return _WindowNet(caps, schedule, rec_flow, inst.nic_window_s, inst.M, priority,
                          inst.nic_window_s * PEER_WINDOW_S / NIC_WINDOW_S,
                          piece_s=inst.nic_chunk_s or NIC_CHUNK_S, levels=pol.wire_levels,
                          fifo_bytes=inst.nic_fifo_bytes)
    return (_PriorityNet if pol.sharing == "priority" else _FairNet)(caps, schedule, rec_flow)


class _Epoch:
    """One epoch's state and its event handlers: the event loop of :func:`run`.

    The loop is the planner's inner loop, so handlers bind what they use to locals; every
    handler keeps the original loop's order of heap pushes and float operations, so that
    the same instance gives bit-identical epochs.
    """

    def __init__(self, inst: Instance, pol: Policy, record: bool) -> None:
        W, K, M = inst.W, inst.K, inst.M
        self.inst, self.pol, self.W, self.K, self.M = inst, pol, W, K, M
        self.pf = [pol.prefetch(w) for w in range(W)]
        self.names = inst.names
        self.caps = inst.egress + inst.ingress
        self.egress = inst.egress
        self.fifo = inst.nic_fifo_bytes is not None
        self.heap: list[tuple] = []
        self.counter = itertools.count()
        self.spans: list[Span] | None = [] if record else None
        self.priority = pol.sharing in ("priority", "classes")
        self.net = _network(inst, pol, self.caps, self.schedule,
                            self.rec_flow if record else None)
        self.T, self.F = inst.T, inst.F
        self.sample_s, self.train_s, self.block, self.feat = (
            inst.sample_s, inst.train_s, inst.block, inst.feat)
        self.struct, self.feat_total = inst.struct, inst.feat_total
        self.grad, self.release = inst.grad_rate, inst.release
        self.cores_free = list(inst.cores)
        self.sampler_on: list[list[tuple[int, int]]] = [[] for _ in range(M)]  # S->[(w, j)]
        self.slot_free: list[list[int]] = []
        self.slot_machine: list[list[int]] = []
        for w in range(W):
            self.slot_free.append([c for _, c in inst.samplers[w]])
            self.slot_machine.append([m for m, _ in inst.samplers[w]])
            for j, (m, _) in enumerate(inst.samplers[w]):
                self.sampler_on[m].append((w, j))
        self.next_disp = [0] * W
        self.next_train = [0] * W
        self.ready_since = [0.0] * W
        self.busy = [False] * W
        nan = math.nan
        (self.t_sample, self.t_cpu, self.t_sampled, self.t_block, self.t_featF, self.t_feat,
         self.t_start, self.t_end) = ([[nan] * K for _ in range(W)] for _ in range(8))
        self.where = [[-1] * K for _ in range(W)]
        self.pend_struct = [[0] * K for _ in range(W)]
        self.pend_feat = [[0] * K for _ in range(W)]
        self.trained = [0] * K
        self.ar_start = [0.0] * K
        self.barrier = [nan] * K
        self.nbar = 0
        self.passed = [0] * W  # barriers each trainer has left (later than nbar with skew)
        self.fids = itertools.count()
        self.bytes_out = [0.0] * M
        self.bytes_in = [0.0] * M
        self.cpu_busy = [0.0] * M
        self.nevents = 0
        self.limits: tuple[float, float | None, int | None] | None = None

    def limit(self, wall0: float, deadline: float | None, max_events: int | None) -> None:
        """Cut the loop past `deadline` or `max_events` (:class:`SimulationCut`)."""
        self.limits = (wall0, deadline, max_events)

    def check(self, nevents: int) -> None:
        """Raise :class:`SimulationCut` if a limit of :meth:`limit` has passed."""
        assert self.limits is not None
        wall0, deadline, cap = self.limits
        t = time.perf_counter()
        why = "deadline" if deadline is not None and t > deadline else \
            "event cap" if cap is not None and nevents > cap else ""
        if why:
            raise SimulationCut(why, self.nbar, self.K, self.inst.full_iterations,
                                [float(b) for b in self.barrier[:self.nbar]], nevents,
                                t - wall0, max(self.pf))

    def schedule(self, t: float, obj: Any) -> None:
        """A network completion (the models' ``schedule`` callback)."""
        heapq.heappush(self.heap, (t, next(self.counter), _FLOW_DONE, obj, obj.ver))

    def rec_flow(self, f: _Flow, t0: float, t1: float, rate: float) -> None:
        """A flow's busy interval on both of its NICs (the models' ``record`` callback)."""
        st, names, spans = KINDS[f.kind], self.names, self.spans
        assert spans is not None
        spans.append(Span(f"egress:{names[f.src]}", t0, t1, st, f.w, f.k, rate))
        spans.append(Span(f"ingress:{names[f.dst]}", t0, t1, st, f.w, f.k, rate))

    def flow(self, kind: int, w: int, k: int, src: int, dst: int, nbytes: float,
             now: float) -> None:
        fid = next(self.fids)
        f = _Flow(fid, src, dst, self.M, nbytes, kind, w, k)
        tr = Transfer(BatchKey(w, k), KINDS[kind], src, dst, nbytes, now, fid)
        f.tr = tr
        if self.priority:
            f.skey = tuple(self.pol.priority(tr)) + (fid,)
        self.bytes_out[src] += nbytes
        self.bytes_in[dst] += nbytes
        self.net.add(f, now)

    def dispatch(self, S: int, now: float) -> None:
        """Start batches on the free cores of machine `S`, as the policy picks them."""
        cores_free = self.cores_free
        if cores_free[S] <= 0:  # the common case: bind nothing more
            return
        next_disp, slot_free, next_train = self.next_disp, self.slot_free, self.next_train
        pf, ready_since, K, on = self.pf, self.ready_since, self.K, self.sampler_on[S]
        while cores_free[S] > 0:
            cands = []
            slot: dict[int, int] = {}  # trainer -> its first idle sampler slot here
            for w, j in on:
                nd = next_disp[w]
                if slot_free[w][j] > 0 and nd < K and nd < next_train[w] + pf[w]:
                    cands.append((ready_since[w], w))
                    if j < slot.get(w, j + 1):
                        slot[w] = j
            if not cands:
                return
            w = choose_sampling(cands, next_disp, self.pol, now)  # the runtime's rule too
            j = slot[w]
            k = next_disp[w]
            next_disp[w] = k + 1
            ready_since[w] = now
            slot_free[w][j] -= 1
            cores_free[S] -= 1
            self.t_sample[w][k] = now
            self.where[w][k] = j
            heapq.heappush(self.heap, (now + self.sample_s[w][k], next(self.counter),
                                       _CPU_DONE, w, k))

    def sampled(self, w: int, k: int, S: int, j: int, now: float) -> None:
        """Batch (w, k) sampled on `S`: send its block and features, free its sampler."""
        self.t_sampled[w][k] = now
        self.slot_free[w][j] += 1
        block, feat = self.block[w][k], self.feat[w][k]
        self.pol.on_sampled(BatchKey(w, k), BatchInfo(self.feat_total[w][k], block,
                                                      self.train_s[w][k], feat, S), now)
        Tw, Fw = self.T[w], self.F[w]
        if S != Tw and block > 0:
            self.flow(_BLOCK, w, k, S, Tw, block, now)
        else:
            self.t_block[w][k] = now
        n = 0
        for m, b in feat:
            if m != Fw and b > 0:
                self.flow(_FEAT, w, k, m, Fw, b, now)
                n += 1
        self.pend_feat[w][k] = n
        if n == 0:
            self.feat_at_fetch(w, k, now)
        self.dispatch(S, now)
        self.try_train(w, now)

    def feat_at_fetch(self, w: int, k: int, now: float) -> None:
        self.t_featF[w][k] = now
        F, T, total = self.F[w], self.T[w], self.feat_total[w][k]
        if F != T and total > 0:
            self.flow(_RELAY, w, k, F, T, total, now)
        else:
            self.t_feat[w][k] = now

    def try_train(self, w: int, now: float) -> None:
        k = self.next_train[w]
        if k >= self.K or self.busy[w] or self.passed[w] < k:
            return
        tb, tf = self.t_block[w][k], self.t_feat[w][k]
        if tb != tb or tf != tf:  # NaN: not yet
            return
        self.busy[w] = True
        self.next_train[w] = k + 1
        self.t_start[w][k] = now
        heapq.heappush(self.heap, (now + self.train_s[w][k], next(self.counter), _TRAIN_DONE,
                                   w, k))
        if self.next_disp[w] == k + self.pf[w]:  # the window just opened
            self.ready_since[w] = now
        for m, _ in self.inst.samplers[w]:
            self.dispatch(m, now)

    def barrier_done(self, k: int, now: float) -> None:
        self.barrier[k] = now
        self.nbar = k + 1
        self.pol.on_barrier(k, now)
        release = self.release
        for w in range(self.W):
            if release is not None and release[w][k] > 0:
                heapq.heappush(self.heap, (now + release[w][k], next(self.counter), _RELEASE,
                                           w, k))
            else:
                self.passed[w] = k + 1
                self.try_train(w, now)

    def arrived(self, f: _Flow, now: float) -> None:
        """A transfer's last byte arrived (after the latency)."""
        self.pol.on_transfer_done(f.tr, now)
        w, k, kind = f.w, f.k, f.kind
        if kind == _FEAT:
            self.pend_feat[w][k] -= 1
            if self.pend_feat[w][k] == 0:
                self.feat_at_fetch(w, k, now)
                self.try_train(w, now)
        elif kind == _BLOCK:
            self.t_block[w][k] = now
            self.try_train(w, now)
        elif kind == _RELAY:
            self.t_feat[w][k] = now
            self.try_train(w, now)
        else:
            self.pend_struct[w][k] -= 1
            if self.pend_struct[w][k] == 0:
                j = self.where[w][k]
                self.sampled(w, k, self.slot_machine[w][j], j, now)

    def cpu_done(self, w: int, k: int, now: float) -> None:
        """Batch (w, k)'s sampling left its core: fetch its remote hops, or it is sampled."""
        j = self.where[w][k]
        S = self.slot_machine[w][j]
        self.cores_free[S] += 1
        self.t_cpu[w][k] = now
        self.cpu_busy[S] += self.sample_s[w][k]
        if self.spans is not None:
            self.spans.append(Span(f"cpu:{self.names[S]}", self.t_sample[w][k], now, "sample",
                                   w, k))
        remote = [m for m, nb in self.struct[w][k] if m != S and nb > 0]
        self.pend_struct[w][k] = len(remote)
        if not remote:
            self.sampled(w, k, S, j, now)
            return
        wait = self.hop_wait(w, k, S, remote) if self.fifo else 0.0
        if wait > 0:
            heapq.heappush(self.heap, (now + wait, next(self.counter), _HOPS, w, k))
        else:
            self.send_hops(w, k, S, now)
        self.dispatch(S, now)

    def hop_wait(self, w: int, k: int, S: int, remote: list[int]) -> float:
        """How long batch (w, k)'s remote hops wait beyond their answers' bytes: every layer
        whose frontier has nodes on a store is one round trip to it (all stores' requests in
        flight at once), and on FIFO NICs its request waits behind the bytes queued at the
        sampler's NIC and its answer behind those at the store's (:meth:`_WindowNet.backlog`,
        taken when the batch's CPU work ends). A store of the seeds' partitions is asked in
        every layer, the others from the second on."""
        net, eg, L, lat = self.net, self.egress, self.inst.layers, self.inst.latency
        mine = net.backlog(S) / eg[S]
        seeds_at = self.inst.seed_at[w][k]
        wait = 0.0
        for m in remote:
            r = L if m in seeds_at else max(1, L - 1)
            wait = max(wait, r * (mine + net.backlog(m) / eg[m]) + (2 * r - 1) * lat)
        return wait

    def send_hops(self, w: int, k: int, S: int, now: float) -> None:
        """Batch (w, k)'s remote hops' answers leave their stores for its sampler on `S`."""
        for m, nb in self.struct[w][k]:
            if m != S and nb > 0:
                self.flow(_STRUCT, w, k, m, S, nb, now)

    def train_done(self, w: int, k: int, now: float) -> None:
        """Batch (w, k) trained; the last of iteration k starts its all-reduce."""
        self.busy[w] = False
        self.t_end[w][k] = now
        if self.spans is not None:
            self.spans.append(Span(f"gpu:{self.names[self.T[w]]}/{self.inst.dev[w]}",
                                   self.t_start[w][k], now, "train", w, k))
        self.pol.on_trained(BatchKey(w, k), now)
        self.trained[k] += 1
        if self.trained[k] == self.W:
            A = self.inst.allreduce_s
            if A > 0:
                self.ar_start[k] = now
                net, caps, M = self.net, self.caps, self.M
                for m, g in self.grad.items():
                    net.set_cap(m, caps[m] - g)
                    net.set_cap(M + m, caps[M + m] - g)
                heapq.heappush(self.heap, (now + A, next(self.counter), _AR_DONE, k, 0))
            else:
                self.barrier_done(k, now)

    def allreduce_done(self, k: int, now: float) -> None:
        """Iteration k's all-reduce ended: the NICs get their gradient rate back."""
        net, caps, M, A, spans = self.net, self.caps, self.M, self.inst.allreduce_s, self.spans
        names, start = self.names, self.ar_start[k]
        for m, g in self.grad.items():
            net.set_cap(m, caps[m])
            net.set_cap(M + m, caps[M + m])
            self.bytes_out[m] += g * A
            self.bytes_in[m] += g * A
            if spans is not None:
                spans.append(Span(f"egress:{names[m]}", start, now, "allreduce", -1, k, g))
                spans.append(Span(f"ingress:{names[m]}", start, now, "allreduce", -1, k, g))
        if spans is not None:
            for w in range(self.W):
                spans.append(Span(f"gpu:{names[self.T[w]]}/{self.inst.dev[w]}", start, now,
                                  "allreduce", w, k))
        self.barrier_done(k, now)

    def loop(self) -> None:
        """Pop events until none is left; the instant's rates are committed once, after its
        last event."""
        for S in range(self.M):
            if self.sampler_on[S]:
                self.dispatch(S, 0.0)
        heap, net, counter, latency = self.heap, self.net, self.counter, self.inst.latency
        hpush, hpop = heapq.heappush, heapq.heappop
        nevents = 0
        now = 0.0
        limited = self.limits is not None
        tick = CHECK_EVERY
        while heap:
            if limited:
                tick -= 1
                if not tick:
                    tick = CHECK_EVERY
                    self.check(nevents)
            t, _, code, a, b = hpop(heap)
            if code == _FLOW_DONE:
                f = net.done(a, b, t)
                if f is None:  # invalidated, or a piece of a transfer that goes on
                    # the instant's changes still need their rates (a stale completion at
                    # the same time as the event that made them must not postpone them)
                    if net.dirty and (not heap or heap[0][0] > t):
                        net.commit(t)
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
                self.arrived(a, now)
            elif code == _CPU_DONE:
                self.cpu_done(a, b, now)
            elif code == _TRAIN_DONE:
                self.train_done(a, b, now)
            elif code == _RELEASE:
                self.passed[a] = b + 1
                self.try_train(a, now)
            elif code == _AR_DONE:
                self.allreduce_done(a, now)
            elif code == _HOPS:
                self.send_hops(a, b, self.slot_machine[a][self.where[a][b]], now)
            if net.dirty and (not heap or heap[0][0] > now):
                net.commit(now)
        self.nevents = nevents

    def times(self) -> dict[str, np.ndarray]:
        """Per batch [W, K]: when each step of every mini-batch happened."""
        return {n: np.array(v) for n, v in (
            ("sample_start", self.t_sample), ("cpu_end", self.t_cpu),
            ("sampled", self.t_sampled), ("block", self.t_block),
            ("feat_at_fetch", self.t_featF), ("ready_feat", self.t_feat),
            ("train_start", self.t_start), ("train_end", self.t_end))}


# ------------------------------------------------------------------------------ results


def _result(inst: Instance, pol: Policy, pf: list[int], barrier: np.ndarray,
            times: dict[str, np.ndarray], spans: list[Span] | None, nevents: int, wall: float,
            bytes_out: list[float], bytes_in: list[float], cpu_busy: list[float]) -> SimResult:
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
    # scaled up, fill and drain would count once per simulated stretch: scale the steady part
    lower = max(bound.iteration_s * K, bound.chain_s) * inst.full_iterations / K \
        if extrapolated else bound.epoch_s
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


__all__ = ["CHECK_EVERY", "KINDS", "Segment", "SimResult", "SimulationCut", "Span",
           "critical_path", "run", "simulate"]
