"""CP-SAT placement, step 2 — the model: minimise the bottleneck time per iteration.

Minimise ``L``, the time per iteration that no schedule of the placement can beat: the
largest per-iteration load of :meth:`gnnsched.workload.Workload.loads` (NIC egress and ingress
per machine, device time per trainer with the all-reduce, sampling time per trainer) or, when
longer, a trainer's prefetch window (:meth:`Problem.window_s`: batch ``k + prefetch`` cannot
start before batch ``k`` trains, so sampling + gathering latency over ``prefetch`` bounds an
iteration). The decisions:

* which device every trainer uses (GPUs of one kind on one machine form a *slot*) and where
  its samplers run: one :class:`Option` per bundle;
* which bundles are used, when the instance enumerates them: the part split;
* how many samplers each trainer runs (the exact CPU model only, see :mod:`.cpsat`),

subject to device counts, cores, host memory and roles. Gathering runs at the trainer: with a
relay every NIC carries at least as many bytes and the chain is longer, so fixing it loses
nothing; the search still tries relays, which only the simulator can value.

Store locations are fixed, so every transfer's bytes are constants times a few booleans: the
model is linear. Loads are integers in units of ``unit_s`` seconds; every coefficient is
rounded *down*, so the model never overestimates a load and its proven bound is a valid lower
bound for every placement it can express (with the mean costs of the profile).

The model is built and solved by :func:`solve` on an :class:`AssignmentInstance`
(:mod:`.cpsat_instance`); its solutions are :class:`Solution` (:mod:`.cpsat_solution`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from gnnsched.placement.cpsat_instance import (
    AGGREGATE_OPTIONS,
    KB,
    AssignmentInstance,
    Option,
    quick_bound,
)
from gnnsched.placement.cpsat_solution import Solution
from gnnsched.placement.placer import MAX_SAMPLERS

ONE_WORKER_OPTIONS = 256  # models this small are solved by one worker: the same pool every run


@dataclass
class CpSatResult:
    """What the solver found, and what it proved."""

    instance: AssignmentInstance
    status: str
    best: Solution | None
    pool: list[Solution]  # distinct improving solutions, best last
    bound_s: float  # proven lower bound on seconds per iteration (over the model's space)
    wall_s: float
    unit_s: float
    variables: int
    cpu_model: str  # "relaxed" or "exact"
    notes: list[str] = field(default_factory=list)

    @property
    def objective_s(self) -> float:
        return self.best.objective_s if self.best else math.inf

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"


class _Pool(cp_model.CpSolverSolutionCallback):
    """Keeps the last few distinct improving solutions (the search's diverse starts)."""

    def __init__(self, xs: list[cp_model.IntVar], ns: dict[int, cp_model.IntVar],
                 opts: list[Option], unit: float, size: int) -> None:
        super().__init__()
        self.xs, self.ns, self.opts, self.unit, self.size = xs, ns, opts, unit, size
        self.found: list[Solution] = []

    def on_solution_callback(self) -> None:
        choice = {self.opts[o].bundle: o for o, x in enumerate(self.xs) if self.Value(x)}
        samplers = {b: int(self.Value(n)) for b, n in self.ns.items() if b in choice}
        for b in choice:
            samplers.setdefault(b, 1)
        sol = Solution(choice, samplers, self.ObjectiveValue() * self.unit)
        if not self.found or self.found[-1].key() != sol.key():
            self.found.append(sol)
            del self.found[:-self.size]


def solve(inst: AssignmentInstance, *, time_limit: float = 10.0, workers: int = 2, seed: int = 0,
          hint: Solution | None = None, upper_s: float | None = None, pool_size: int = 6,
          cpu_model: str = "relaxed", log: bool = False,
          offsets: tuple[float, list[tuple[float, float]]] | None = None) -> CpSatResult:
    """Build and solve the model; `upper_s` (e.g. greedy's load) sets the integer unit.

    `offsets` (bounds only: ``simulated_lower_bound``): seconds per iteration added to every
    NIC's load and, per bundle, to its device's and its samplers' (the pipeline's fill and
    drain, :func:`gnnsched.placement.cpsat.fill_drain_offsets`), each counted only where the
    bundle is used."""
    t0 = time.perf_counter()
    pb = inst.problem
    opts = inst.options
    upper = upper_s if upper_s and upper_s > 0 else 1.0
    unit = upper / 1e6  # the warm start sits near 10^6 units: rounding costs < 1e-4
    lmax = 4_000_000
    if inst.aggregated:
        cpu_model = "relaxed"  # counts per member are not modelled; spare cores fill later

    def q(seconds: float) -> int:
        return int(math.floor(seconds / unit))

    m = cp_model.CpModel()
    L = m.NewIntVar(0, lmax, "L")
    xs = [m.NewBoolVar(f"x{o}") for o in range(len(opts))]
    picked: dict[int, cp_model.IntVar | int] = {}
    for b, os_ in enumerate(inst.by_bundle):
        if inst.exact_parts:
            pbv = m.NewBoolVar(f"p{b}")
            m.Add(sum(xs[o] for o in os_) == pbv)
            picked[b] = pbv
        else:
            m.AddExactlyOne(xs[o] for o in os_)
            picked[b] = 1
    if inst.exact_parts:
        for p in range(pb.P):
            m.AddExactlyOne(picked[b] for b, parts in enumerate(inst.bundles) if p in parts)
        m.Add(sum(picked.values()) == inst.W)
    hosts = inst.hosts

    def mirror(kind: str, mach: int) -> tuple[str, int, int] | None:
        """The class aggregate an individual machine's load also counts toward."""
        h = inst.host_of[mach]
        if h >= 0 and hosts[h].size > 1:
            return (kind.upper(), h, hosts[h].size)
        return None

    # capacities: devices, cores and memory, per machine and (aggregated) per class
    dev: dict[tuple, list] = {}
    cores: dict[tuple, list] = {}
    mem: dict[tuple, list] = {}
    n_ind: dict[int, list] = {}
    n_cls: dict[int, list] = {}

    def add(d: dict, k: tuple, term: Any) -> None:
        d.setdefault(k, []).append(term)

    for o, op in enumerate(opts):
        h = hosts[op.host]
        x = xs[o]
        hb = int(math.ceil(op.host_bytes / KB))
        sb = int(math.ceil(op.sampler_bytes / KB))
        if op.is_class:
            add(dev, ("C", h.id, op.kind), x)
            add(n_cls, h.id, x)
            add(cores, ("C", h.id), x)
            add(mem, ("C", h.id), hb * x)
            if op.sampler < 0:
                add(cores, ("C", h.id), x)
                add(mem, ("C", h.id), sb * x)
        else:
            T = op.machine
            add(dev, ("m", inst.slot_of(T, h, op.kind)), x)
            if h.size > 1:
                add(dev, ("C", h.id, op.kind), x)
            add(n_ind, T, x)
            add(cores, ("m", T), x)
            add(mem, ("m", T), hb * x)
            if h.size > 1:
                add(cores, ("C", h.id), x)
                add(mem, ("C", h.id), hb * x)
        if op.sampler >= 0 and cpu_model != "exact":
            add(cores, ("m", op.sampler), x)
            add(mem, ("m", op.sampler), sb * x)
            mi = mirror("c", op.sampler)
            if mi:
                add(cores, ("C", mi[1]), x)
                add(mem, ("C", mi[1]), sb * x)
    # sampler counts (exact CPU model): integer counts per (bundle, host)
    ns: dict[int, cp_model.IntVar] = {}
    if cpu_model == "exact":
        for b, os_ in enumerate(inst.by_bundle):
            by_host: dict[int, list[int]] = {}
            for o in os_:
                by_host.setdefault(opts[o].sampler, []).append(o)
            counts = []
            for S, hos in by_host.items():
                cap = min(MAX_SAMPLERS, int(pb.cpus[S]))
                c = m.NewIntVar(0, cap, f"c{b}_{S}")
                u = sum(xs[o] for o in hos)
                m.Add(c <= cap * u)
                m.Add(c >= u)
                counts.append(c)
                add(cores, ("m", S), c)
                sb = int(math.ceil(opts[hos[0]].sampler_bytes / KB))
                add(mem, ("m", S), sb * c)
            n = m.NewIntVar(0, MAX_SAMPLERS, f"n{b}")
            m.Add(n == sum(counts))
            ns[b] = n
            table = [0] + [q(inst.sample_s[b] / k) for k in range(1, MAX_SAMPLERS + 1)]
            z = m.NewIntVar(0, max(table), f"z{b}")
            m.AddElement(n, table, z)
            m.Add(L >= z + (q(offsets[1][b][1]) * picked[b] if offsets else 0))
    free = pb.free_memory()
    for k, terms in dev.items():
        if k[0] == "m":
            capd = pb.slots[k[1]].count
        else:
            h = hosts[k[1]]
            capd = h.size * pb.slots[inst.slot_of(h.machines[0], h, k[2])].count
        if len(terms) > capd:
            m.Add(sum(terms) <= capd)
    for k, terms in cores.items():
        if k[0] == "m":
            m.Add(sum(terms) <= int(pb.cpus[k[1]]))
        else:
            h = hosts[k[1]]
            m.Add(sum(terms) <= h.size * int(pb.cpus[h.machines[0]]))
    for k, terms in mem.items():
        if k[0] == "m":
            cap = free[k[1]]
        else:
            h = hosts[k[1]]
            cap = sum(free[i] for i in h.machines)
        m.Add(sum(terms) <= int(math.floor(max(cap, 0) / KB)))
    # all-reduce: skipped only when every trainer shares one machine
    W = inst.W
    multi: cp_model.IntVar | int
    if W <= 1:
        multi = 0
    elif not inst.single_hosts:
        multi = 1
    else:
        singles = []
        for T in inst.single_hosts:
            y = m.NewBoolVar(f"single{T}")
            m.Add(sum(n_ind.get(T, [])) == W).OnlyEnforceIf(y)
            singles.append(y)
        multi = m.NewBoolVar("multi")
        m.Add(sum(singles) + multi == 1)
    ar = m.NewIntVar(0, lmax, "ar")
    eg = [mm.egress for mm in pb.cluster.machines]
    ig = [mm.ingress for mm in pb.cluster.machines]
    nic: dict[tuple[str, int], list] = {}  # key -> [(var or expr, seconds)]
    const: dict[tuple[str, int], float] = {}
    if not isinstance(multi, int) or multi:
        counts_m: dict[int, Any] = {}
        for T, terms in n_ind.items():
            cnt = sum(terms)
            if isinstance(multi, int):
                counts_m[T] = cnt
            else:
                a = m.NewIntVar(0, W, f"arc{T}")
                m.Add(a == cnt).OnlyEnforceIf(multi)
                m.Add(a == 0).OnlyEnforceIf(multi.Not())
                counts_m[T] = a
            bw = min(eg[T], ig[T])
            m.Add(ar >= q(inst.vol / bw) * counts_m[T])
            nic.setdefault(("e", T), []).append((counts_m[T], inst.vol / eg[T]))
            nic.setdefault(("i", T), []).append((counts_m[T], inst.vol / ig[T]))
        for h in hosts:
            if h.size == 1:
                continue
            rep = h.machines[0]
            cls = sum(n_cls.get(h.id, []))
            inds = sum(sum(n_ind.get(i, [])) for i in h.machines)
            bw = min(eg[rep], ig[rep])
            m.Add(ar >= q(inst.vol / bw / h.size) * (cls + inds))
            nic.setdefault(("E", h.id), []).append((cls, inst.vol / eg[rep] / h.size))
            nic.setdefault(("I", h.id), []).append((cls, inst.vol / ig[rep] / h.size))
    lat = q(inst.latency_s) * multi if inst.latency_s else 0
    # NIC loads: per machine, and the average over each class
    for b, bb in enumerate(inst.base):
        for k, v in bb.items():
            if isinstance(picked[b], int):
                const[k] = const.get(k, 0.0) + v
            else:
                nic.setdefault(k, []).append((picked[b], v))
    for o, op in enumerate(opts):
        for k, v in op.terms.items():
            nic.setdefault(k, []).append((xs[o], v))
    agg_nic: dict[tuple[str, int], list] = {}
    agg_const: dict[tuple[str, int], float] = {}
    for k, terms in nic.items():
        if k[0] in ("e", "i") and (mi := mirror(k[0], k[1])) is not None:
            agg_nic.setdefault((mi[0], mi[1]), []).extend((v_, s / mi[2]) for v_, s in terms)
    for k, v in const.items():
        if k[0] in ("e", "i") and (mi := mirror(k[0], k[1])) is not None:
            ak = (mi[0], mi[1])
            agg_const[ak] = agg_const.get(ak, 0.0) + v / mi[2]
    for k, terms in agg_nic.items():
        nic.setdefault(k, []).extend(terms)
    for k, v in agg_const.items():
        const[k] = const.get(k, 0.0) + v
    nic_off = q(offsets[0]) if offsets else 0
    for k in sorted(set(nic) | set(const)):  # the model's order must not follow hashing
        merged: dict[int, tuple[Any, float]] = {}
        for var, v in nic.get(k, []):
            i = id(var)
            merged[i] = (var, merged[i][1] + v) if i in merged else (var, v)
        m.Add(q(const.get(k, 0.0)) + sum(q(v) * var for var, v in merged.values()) + nic_off
              <= L)
    # device time (+ all-reduce) and sampling per bundle
    for b, os_ in enumerate(inst.by_bundle):
        dev_off, samp_off = (q(offsets[1][b][0]), q(offsets[1][b][1])) if offsets else (0, 0)
        m.Add(L >= sum(q(opts[o].device_s) * xs[o] for o in os_) + ar + lat
              + dev_off * picked[b])
        m.Add(L >= sum(q(opts[o].window_s) * xs[o] for o in os_))
        if cpu_model != "exact":
            m.Add(L >= sum(q(opts[o].sample_lb_s) * xs[o] for o in os_) + samp_off * picked[b])

    m.Minimize(L)
    if hint is not None:
        for o, x in enumerate(xs):
            m.AddHint(x, 1 if hint.choice.get(opts[o].bundle) == o else 0)
        for b, n in ns.items():
            if b in hint.choice:
                m.AddHint(n, min(MAX_SAMPLERS, hint.samplers.get(b, 1)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit)
    # Two workers race, so which improving solutions reach the pool (the gnnsched search's
    # starts) depends on the box's load; a small model is proven optimal in well under a
    # second by one worker, whose pool is the same every run: the same inputs and seed then
    # give the same plan. Big models keep the workers (they run against the time limit).
    solver.parameters.num_workers = 1 if len(opts) <= ONE_WORKER_OPTIONS else workers
    solver.parameters.random_seed = seed
    solver.parameters.log_search_progress = log
    if len(opts) > AGGREGATE_OPTIONS:  # probing a big assignment model costs more than it proves
        solver.parameters.cp_model_probing_level = 0
    pool = _Pool(xs, ns, opts, unit, pool_size)
    status = solver.Solve(m, pool)
    name = solver.StatusName(status)
    best = pool.found[-1] if pool.found else None
    if best is not None:
        best.objective_s = solver.ObjectiveValue() * unit
    raw = solver.BestObjectiveBound()
    bound = raw * unit if status != cp_model.INFEASIBLE and math.isfinite(raw) else 0.0
    # both valid; short runs prove little
    bound = max(bound, quick_bound(inst, offsets) * (1 - 1e-9))
    nvars = len(m.Proto().variables)
    return CpSatResult(inst, name, best, list(pool.found), max(bound, 0.0),
                       time.perf_counter() - t0, unit, nvars, cpu_model)


__all__ = ["ONE_WORKER_OPTIONS", "CpSatResult", "solve"]
