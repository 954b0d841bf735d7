"""Exact schedules of small instances, for the tests and the scheduler bench: how far each
online policy is from the optimum.

:func:`exact_schedule` is CP-SAT's optimal schedule of a small instance (<= 4 machines,
<= 24 mini-batches); :func:`small_instance` draws the seeded random instances it is run on.
Test-only: they moved here from :mod:`gnnsched.bounds`, which keeps the bounds the product
reports.

The exact model mirrors the simulator step by step (cores, sampler processes, dispatch in
iteration order, the prefetch window, struct -> block / features -> relay -> train, the
barrier with the all-reduce reserving its rate on the trainer machines' NICs, latencies), with
one restriction: every transfer runs at its full rate ``min(egress, ingress)`` from start to end,
without preemption (each NIC direction is a cumulative resource whose capacity is its
bandwidth). Those are the schedules the simulator's ``priority`` sharing realises when the order
leaves each transfer alone on its path. The fluid simulator may also split a NIC or preempt a
transfer, so a policy can land *below* this optimum: by a fraction of a percent with uniform NIC
speeds (where whole transfers at full rate lose little), by up to ~10% with mixed NIC speeds
(where a slow receiver leaves its sender's leftover unused in this model) — so gaps to the
optimum are measured on uniform-speed instances (tests/test_bounds.py). The model's optimum is
above :func:`~gnnsched.bounds.instance_bound` (a constraint states so). Durations are rounded
up to a time unit of ``lower bound / 10000``, so the reported optimum is at most ~0.5% above
the model's. CP-SAT runs with 2 workers and a time limit; ``ExactResult.bound_s`` is its
proven lower bound when it stops early.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gnnsched.bounds import instance_bound
from gnnsched.instance import Instance, workload_for
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import synthetic_profile
from gnnsched.spec import GB, GBIT, GPU, ClusterSpec, JobSpec, Machine


@dataclass
class ExactResult:
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN
    makespan_s: float  # best schedule found (inf if none)
    bound_s: float  # CP-SAT's proven lower bound on the model's optimum
    unit_s: float  # time unit durations were rounded up to
    wall_s: float
    train_start: list[list[float]] | None = None  # [W][K] of the best schedule

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"


MAX_EXACT_MACHINES = 4
MAX_EXACT_BATCHES = 24


def _horizon(inst: Instance, dur: Callable[[float], int], lat: int, A: int) -> int:
    """Every task one after another (worst sampler host): a feasible schedule's length."""
    W, K = inst.W, inst.K
    H = 0
    for w in range(W):
        Tw, Fw = inst.T[w], inst.F[w]
        for k in range(K):
            worst = 0
            for S, _ in inst.samplers[w]:
                x = sum(dur(b / inst.rate(src, S)) + lat
                        for src, b in inst.struct[w][k] if src != S)
                if S != Tw:
                    x += dur(inst.block[w][k] / inst.rate(S, Tw)) + lat
                worst = max(worst, x)
            H += dur(inst.sample_s[w][k]) + worst + dur(inst.train_s[w][k])
            H += sum(dur(b / inst.rate(src, Fw)) + lat for src, b in inst.feat[w][k] if src != Fw)
            if Fw != Tw:
                H += dur(inst.feat_total[w][k] / inst.rate(Fw, Tw)) + lat
    return int((H + K * (A + 1)) * 1.05) + 10


def exact_schedule(inst: Instance, *, time_limit: float = 10.0, workers: int = 2,
                   prefetch: int | None = None, resolution: int = 10000,
                   work_limit: float | None = None) -> ExactResult:
    """Optimal schedule of a small instance with CP-SAT (intervals + cumulative NICs/cores).

    `time_limit` is wall seconds; `work_limit` (CP-SAT's deterministic time) stops at the same
    point however loaded the machine is, which repeatable tests want.
    """
    if inst.M > MAX_EXACT_MACHINES or inst.W * inst.K > MAX_EXACT_BATCHES:
        raise ValueError(f"exact schedules are for <= {MAX_EXACT_MACHINES} machines and <= "
                         f"{MAX_EXACT_BATCHES} mini-batches (got {inst.M} machines, "
                         f"{inst.W * inst.K} mini-batches)")
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    W, K, M = inst.W, inst.K, inst.M
    pf = inst.prefetch_depths(prefetch)
    lb = instance_bound(inst, prefetch).epoch_s
    unit = max(lb, 1e-12) / resolution

    def dur(x: float) -> int:
        return max(0, math.ceil(x / unit - 1e-9))

    lat = dur(inst.latency) if inst.latency > 0 else 0
    bws = [b for b in inst.egress + inst.ingress if b > 0]
    bu = min(bws) / 1000.0
    ecap = [max(1, round(b / bu)) for b in inst.egress]
    icap = [max(1, round(b / bu)) for b in inst.ingress]
    A = dur(inst.allreduce_s) if inst.allreduce_s > 0 else 0

    H = _horizon(inst, dur, lat, A)

    m = cp_model.CpModel()
    egress: list[list[tuple]] = [[] for _ in range(M)]
    ingress: list[list[tuple]] = [[] for _ in range(M)]
    cpu_on: list[list] = [[] for _ in range(M)]
    slots_on = [0] * M
    slot_iv: dict[tuple[int, int], list] = {}

    e_energy = [[0] * K for _ in range(M)]
    i_energy = [[0] * K for _ in range(M)]

    def transfer(src: int, dst: int, nbytes: float, ready, present, k: int) -> tuple:
        d = dur(nbytes / inst.rate(src, dst))
        s = m.NewIntVar(0, H, "")
        if present is None:
            iv = m.NewIntervalVar(s, d, s + d, "")
            m.Add(s >= ready)
        else:
            iv = m.NewOptionalIntervalVar(s, d, s + d, present, "")
            m.Add(s >= ready).OnlyEnforceIf(present)
        dem = min(ecap[src], icap[dst])
        egress[src].append((iv, dem))
        ingress[dst].append((iv, dem))
        if present is None:  # optional transfers may not happen: no energy cut
            e_energy[src][k] += dem * d
            i_energy[dst][k] += dem * d
        return s, d

    train_s: list[list] = [[None] * K for _ in range(W)]
    samp_s: list[list] = [[None] * K for _ in range(W)]
    for w in range(W):
        for S, c in inst.samplers[w]:
            slots_on[S] += c
    for k in range(K):
        for w in range(W):
            Tw, Fw = inst.T[w], inst.F[w]
            s_b = m.NewIntVar(0, H, f"s{w}_{k}")
            samp_s[w][k] = s_b
            sampled = m.NewIntVar(0, H, "")
            block_ok = m.NewIntVar(0, H, "")
            d_cpu = dur(inst.sample_s[w][k])
            m.Add(sampled >= s_b + d_cpu)
            choices = inst.samplers[w]
            lits = [None] if len(choices) == 1 else [m.NewBoolVar("") for _ in choices]
            if len(choices) > 1:
                m.AddExactlyOne(lits)
            for (S, _), x in zip(choices, lits):
                size = m.NewIntVar(0, H, "")
                if x is None:
                    cpu = m.NewIntervalVar(s_b, d_cpu, s_b + d_cpu, "")
                    slot = m.NewIntervalVar(s_b, size, sampled, "")
                else:
                    cpu = m.NewOptionalIntervalVar(s_b, d_cpu, s_b + d_cpu, x, "")
                    slot = m.NewOptionalIntervalVar(s_b, size, sampled, x, "")
                cpu_on[S].append(cpu)
                slot_iv.setdefault((w, S), []).append(slot)
                for src, b in inst.struct[w][k]:
                    if src != S and b > 0:
                        st, d = transfer(src, S, b, s_b + d_cpu, x, k)
                        c = m.Add(sampled >= st + d + lat)
                        if x is not None:
                            c.OnlyEnforceIf(x)
                if S != Tw and inst.block[w][k] > 0:
                    bt, d = transfer(S, Tw, inst.block[w][k], sampled, x, k)
                    c = m.Add(block_ok >= bt + d + lat)
                else:
                    c = m.Add(block_ok >= sampled)
                if x is not None:
                    c.OnlyEnforceIf(x)
            feat_f = m.NewIntVar(0, H, "")
            m.Add(feat_f >= sampled)
            for src, b in inst.feat[w][k]:
                if src != Fw and b > 0:
                    ft, d = transfer(src, Fw, b, sampled, None, k)
                    m.Add(feat_f >= ft + d + lat)
            feat_ok = feat_f
            if Fw != Tw and inst.feat_total[w][k] > 0:
                feat_ok = m.NewIntVar(0, H, "")
                rt, d = transfer(Fw, Tw, inst.feat_total[w][k], feat_f, None, k)
                m.Add(feat_ok >= rt + d + lat)
            tr = m.NewIntVar(0, H, f"t{w}_{k}")
            m.Add(tr >= block_ok)
            m.Add(tr >= feat_ok)
            train_s[w][k] = tr
    barrier = []
    for k in range(K):
        ends = [train_s[w][k] + dur(inst.train_s[w][k]) for w in range(W)]
        last = m.NewIntVar(0, H, f"last{k}")
        m.AddMaxEquality(last, ends)
        B = m.NewIntVar(0, H, f"B{k}")
        m.Add(B == last + A)
        barrier.append(B)
        if A > 0 and inst.grad_rate:
            iv = m.NewIntervalVar(last, A, B, "")
            for mm, g in inst.grad_rate.items():
                egress[mm].append((iv, min(ecap[mm], math.ceil(g / bu))))
                ingress[mm].append((iv, min(icap[mm], math.ceil(g / bu))))
        if k + 1 < K:
            for w in range(W):
                m.Add(train_s[w][k + 1] >= B)
    # Redundant energy cuts (the LP relaxation is weak without them): work of iterations <= k
    # on a NIC ends before B_k minus a training and the all-reduce; work of iterations
    # > k + pf starts after B_k (prefetch window), so it fits between B_k and the end.
    t_min = [min(dur(inst.train_s[w][k]) for w in range(W)) + A for k in range(K)]
    s_min = min(dur(inst.sample_s[w][k]) for w in range(W) for k in range(K))
    for caps, energy in ((ecap, e_energy), (icap, i_energy)):
        for r in range(M):
            per = energy[r]
            if not any(per):
                continue
            acc = 0
            for k in range(K):
                acc += per[k]
                if acc:
                    m.Add(barrier[k] >= s_min + acc // caps[r] + lat + t_min[k])
            after = 0
            for k in range(K - 1, -1, -1):
                j = k - max(pf) - 1  # iterations >= k start sampling after B_j
                after += per[k]
                if j >= 0 and after:
                    m.Add(barrier[-1] >= barrier[j] + s_min + after // caps[r] + lat
                          + t_min[-1])
    for w in range(W):
        for k in range(1, K):
            m.Add(samp_s[w][k] >= samp_s[w][k - 1])
        for k in range(pf[w], K):
            m.Add(samp_s[w][k] >= train_s[w][k - pf[w]])
    for S in range(M):
        if cpu_on[S] and slots_on[S] > inst.cores[S]:
            m.AddCumulative(cpu_on[S], [1] * len(cpu_on[S]), inst.cores[S])
    for w in range(W):
        for S, c in inst.samplers[w]:
            ivs = slot_iv.get((w, S), [])
            if len(ivs) > c:
                if c == 1:
                    m.AddNoOverlap(ivs)
                else:
                    m.AddCumulative(ivs, [1] * len(ivs), c)
    for res, caps in ((egress, ecap), (ingress, icap)):
        for r in range(M):
            items = res[r]
            if len(items) < 2:
                continue
            if all(d >= caps[r] for _, d in items):
                m.AddNoOverlap([iv for iv, _ in items])
            else:
                m.AddCumulative([iv for iv, _ in items], [d for _, d in items], caps[r])
    m.Add(barrier[-1] >= int(lb / unit * (1 - 1e-9)))  # rounding only lengthens schedules
    m.Minimize(barrier[-1])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = time_limit
    if work_limit is not None:
        solver.parameters.max_deterministic_time = work_limit
    solver.parameters.random_seed = 0
    st = solver.Solve(m)
    name = solver.StatusName(st)
    wall = time.perf_counter() - t0
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = [[solver.Value(train_s[w][k]) * unit for k in range(K)] for w in range(W)]
        return ExactResult(name, solver.Value(barrier[-1]) * unit,
                           solver.BestObjectiveBound() * unit, unit, wall, starts)
    return ExactResult(name, math.inf, solver.BestObjectiveBound() * unit, unit, wall)


# ------------------------------------------------------------------------------ instances


def small_instance(seed: int, iterations: int = 3, *, max_trainers: int = 2,
                   uniform_nics: bool = True) -> Instance:
    """A seeded random instance small enough for :func:`exact_schedule`.

    <= 4 machines: 1-2 stores holding 4 partitions, GPU hosts with 1-2 GPUs of mixed speed
    (0.5x-2x), 1-3 cores per host, NICs of 0.2-2 Gbit/s (all alike unless `uniform_nics` is
    False), 1-2 samplers per trainer on its store or its own host, features gathered at the
    trainer or relayed by the store, one-way latency 0 or 1 ms, prefetch 1-2, even or skewed
    partitions, train time 0.1x-4x the sampling time. At most 12 mini-batches.
    """
    rng = np.random.default_rng(seed)
    n_store = int(rng.integers(1, 3))
    n_gpu = int(rng.integers(1, 5 - n_store))
    P = 4
    base = float(rng.choice([0.2, 0.5, 1.0, 2.0]))
    owner = np.sort(rng.integers(0, n_store, P))
    owner[:n_store] = np.arange(n_store)
    ms = []
    for i in range(n_store):
        parts = tuple(int(p) for p in range(P) if owner[p] == i)
        ms.append(Machine(f"s{i}", int(rng.integers(1, 4)), 16 * GB, base * GBIT, base * GBIT,
                          (), parts))
    for i in range(n_gpu):
        bw = base * (1.0 if uniform_nics else float(rng.choice([0.5, 1.0, 2.0])))
        ngpu = int(rng.integers(1, 3))
        ms.append(Machine(f"g{i}", int(rng.integers(1, 3)), 16 * GB, bw * GBIT, bw * GBIT,
                          tuple(GPU("gpu", float(rng.choice([0.5, 1.0, 2.0])))
                                for _ in range(ngpu))))
    cl = ClusterSpec(f"small{seed}", tuple(ms), latency=float(rng.choice([0.0, 0.0, 1e-3])))
    gpus = [(m.name, d) for m in ms for d in range(m.num_gpus)]
    W = int(min(len(gpus), rng.integers(2, max_trainers + 1)))
    pick = rng.permutation(len(gpus))[:W]
    ts = []
    for w in range(W):
        parts = tuple(p for p in range(P) if p % W == w)
        host, dev = gpus[pick[w]]
        store = ms[int(owner[parts[0]])].name
        sampler = store if rng.random() < 0.7 else host
        fetch = host if rng.random() < 0.75 else store
        ts.append(TrainerPlan(w, host, dev, parts, ((sampler, int(rng.integers(1, 3))),), fetch))
    plan = Plan("small", cl.name, cl.fingerprint(), tuple(ts))
    job = JobSpec(num_parts=P, trainers=W, batch_size=256, fanouts=(10, 15),
                  prefetch=int(rng.integers(1, 3)), dataset="synthetic")
    prof = synthetic_profile(P, batch_size=256, fanouts=(10, 15), seeds_per_part=1000,
                             seed=seed, skew=float(rng.choice([0.0, 1.0])),
                             train_s_per_edge=float(rng.choice([1e-7, 1e-6, 4e-6])))
    plan.validate(cl, job)
    return Instance(workload_for(cl, job, prof), plan, seed=seed,
                    iterations=min(iterations, max(1, 12 // W)))


__all__ = ["MAX_EXACT_BATCHES", "MAX_EXACT_MACHINES", "ExactResult", "exact_schedule",
           "small_instance"]
