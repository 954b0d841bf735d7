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
from gnnsched.placement.problem import MAX_SAMPLERS

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


Offsets = tuple[float, list[tuple[float, float]]]  # (NIC seconds, per bundle (device, samples))


class _Model:
    """The bottleneck model of one instance, built step by step in the order CP-SAT sees it
    (the order of variables and constraints is part of what makes a solve reproducible)."""

    def __init__(self, inst: AssignmentInstance, upper_s: float | None, cpu_model: str,
                 offsets: Offsets | None) -> None:
        self.inst, self.pb, self.opts, self.offsets = inst, inst.problem, inst.options, offsets
        upper = upper_s if upper_s and upper_s > 0 else 1.0
        self.unit = upper / 1e6  # the warm start sits near 10^6 units: rounding costs < 1e-4
        self.lmax = 4_000_000
        # aggregated: counts per member are not modelled; spare cores fill later
        self.cpu_model = "relaxed" if inst.aggregated else cpu_model
        self.m = m = cp_model.CpModel()
        self.L = m.NewIntVar(0, self.lmax, "L")
        self.xs = [m.NewBoolVar(f"x{o}") for o in range(len(self.opts))]
        self.picked: dict[int, cp_model.IntVar | int] = {}
        # capacity terms per machine and (aggregated) per class
        self.dev: dict[tuple, list] = {}
        self.cores: dict[tuple, list] = {}
        self.mem: dict[tuple, list] = {}
        self.n_ind: dict[int, list] = {}
        self.n_cls: dict[int, list] = {}
        self.ns: dict[int, cp_model.IntVar] = {}  # sampler counts (exact CPU model)

    def q(self, seconds: float) -> int:
        return int(math.floor(seconds / self.unit))

    def build(self) -> None:
        self._bundles()
        self._usage_terms()
        if self.cpu_model == "exact":
            self._sampler_counts()
        self._capacities()
        ar, lat, nic = self._allreduce()
        self._nic_loads(nic)
        self._bundle_loads(ar, lat)
        self.m.Minimize(self.L)

    def _bundles(self) -> None:
        """One option per used bundle; with exact parts, which bundles (every part once)."""
        m, inst, xs = self.m, self.inst, self.xs
        for b, os_ in enumerate(inst.by_bundle):
            if inst.exact_parts:
                pbv = m.NewBoolVar(f"p{b}")
                m.Add(sum(xs[o] for o in os_) == pbv)
                self.picked[b] = pbv
            else:
                m.AddExactlyOne(xs[o] for o in os_)
                self.picked[b] = 1
        if inst.exact_parts:
            for p in range(self.pb.P):
                m.AddExactlyOne(self.picked[b] for b, parts in enumerate(inst.bundles)
                                if p in parts)
            m.Add(sum(self.picked.values()) == inst.W)

    def _mirror(self, kind: str, mach: int) -> tuple[str, int, int] | None:
        """The class aggregate an individual machine's load also counts toward."""
        h = self.inst.host_of[mach]
        if h >= 0 and self.inst.hosts[h].size > 1:
            return (kind.upper(), h, self.inst.hosts[h].size)
        return None

    def _usage_terms(self) -> None:
        """What every option takes: a device, cores and memory, per machine and class."""
        hosts = self.inst.hosts

        def add(d: dict, k: tuple, term: Any) -> None:
            d.setdefault(k, []).append(term)

        dev, cores, mem = self.dev, self.cores, self.mem
        for o, op in enumerate(self.opts):
            h = hosts[op.host]
            x = self.xs[o]
            hb = int(math.ceil(op.host_bytes / KB))
            sb = int(math.ceil(op.sampler_bytes / KB))
            if op.is_class:
                add(dev, ("C", h.id, op.kind), x)
                add(self.n_cls, h.id, x)
                add(cores, ("C", h.id), x)
                add(mem, ("C", h.id), hb * x)
                if op.sampler < 0:
                    add(cores, ("C", h.id), x)
                    add(mem, ("C", h.id), sb * x)
            else:
                T = op.machine
                add(dev, ("m", self.inst.slot_of(T, h, op.kind)), x)
                if h.size > 1:
                    add(dev, ("C", h.id, op.kind), x)
                add(self.n_ind, T, x)
                add(cores, ("m", T), x)
                add(mem, ("m", T), hb * x)
                if h.size > 1:
                    add(cores, ("C", h.id), x)
                    add(mem, ("C", h.id), hb * x)
            if op.sampler >= 0 and self.cpu_model != "exact":
                add(cores, ("m", op.sampler), x)
                add(mem, ("m", op.sampler), sb * x)
                mi = self._mirror("c", op.sampler)
                if mi:
                    add(cores, ("C", mi[1]), x)
                    add(mem, ("C", mi[1]), sb * x)

    def _sampler_counts(self) -> None:
        """The exact CPU model: integer sampler counts per (bundle, host), and the sampling
        time their total allows."""
        m, inst, opts, xs, offsets = self.m, self.inst, self.opts, self.xs, self.offsets
        for b, os_ in enumerate(inst.by_bundle):
            by_host: dict[int, list[int]] = {}
            for o in os_:
                by_host.setdefault(opts[o].sampler, []).append(o)
            counts = []
            for S, hos in by_host.items():
                cap = min(MAX_SAMPLERS, int(self.pb.cpus[S]))
                c = m.NewIntVar(0, cap, f"c{b}_{S}")
                u = sum(xs[o] for o in hos)
                m.Add(c <= cap * u)
                m.Add(c >= u)
                counts.append(c)
                self.cores.setdefault(("m", S), []).append(c)
                sb = int(math.ceil(opts[hos[0]].sampler_bytes / KB))
                self.mem.setdefault(("m", S), []).append(sb * c)
            n = m.NewIntVar(0, MAX_SAMPLERS, f"n{b}")
            m.Add(n == sum(counts))
            self.ns[b] = n
            table = [0] + [self.q(inst.sample_s[b] / k) for k in range(1, MAX_SAMPLERS + 1)]
            z = m.NewIntVar(0, max(table), f"z{b}")
            m.AddElement(n, table, z)
            m.Add(self.L >= z + (self.q(offsets[1][b][1]) * self.picked[b] if offsets else 0))

    def _capacities(self) -> None:
        """Devices per slot (and class), cores and free host memory per machine (and class)."""
        m, pb, hosts = self.m, self.pb, self.inst.hosts
        for k, terms in self.dev.items():
            if k[0] == "m":
                capd = pb.slots[k[1]].count
            else:
                h = hosts[k[1]]
                capd = h.size * pb.slots[self.inst.slot_of(h.machines[0], h, k[2])].count
            if len(terms) > capd:
                m.Add(sum(terms) <= capd)
        for k, terms in self.cores.items():
            if k[0] == "m":
                m.Add(sum(terms) <= int(pb.cpus[k[1]]))
            else:
                h = hosts[k[1]]
                m.Add(sum(terms) <= h.size * int(pb.cpus[h.machines[0]]))
        free = pb.free_memory()
        for k, terms in self.mem.items():
            if k[0] == "m":
                cap = free[k[1]]
            else:
                h = hosts[k[1]]
                cap = sum(free[i] for i in h.machines)
            m.Add(sum(terms) <= int(math.floor(max(cap, 0) / KB)))

    def _allreduce(self) -> tuple[Any, Any, dict[tuple[str, int], list]]:
        """The all-reduce's time (skipped only when every trainer shares one machine), its
        latency, and the NIC terms it adds: (ar, lat, nic)."""
        m, inst, q, W = self.m, self.inst, self.q, self.inst.W
        multi: cp_model.IntVar | int
        if W <= 1:
            multi = 0
        elif not inst.single_hosts:
            multi = 1
        else:
            singles = []
            for T in inst.single_hosts:
                y = m.NewBoolVar(f"single{T}")
                m.Add(sum(self.n_ind.get(T, [])) == W).OnlyEnforceIf(y)
                singles.append(y)
            multi = m.NewBoolVar("multi")
            m.Add(sum(singles) + multi == 1)
        ar = m.NewIntVar(0, self.lmax, "ar")
        eg = [mm.egress for mm in self.pb.cluster.machines]
        ig = [mm.ingress for mm in self.pb.cluster.machines]
        nic: dict[tuple[str, int], list] = {}  # key -> [(var or expr, seconds)]
        if not isinstance(multi, int) or multi:
            for T, terms in self.n_ind.items():
                cnt = sum(terms)
                if isinstance(multi, int):
                    a: Any = cnt
                else:
                    a = m.NewIntVar(0, W, f"arc{T}")
                    m.Add(a == cnt).OnlyEnforceIf(multi)
                    m.Add(a == 0).OnlyEnforceIf(multi.Not())
                bw = min(eg[T], ig[T])
                m.Add(ar >= q(inst.vol / bw) * a)
                nic.setdefault(("e", T), []).append((a, inst.vol / eg[T]))
                nic.setdefault(("i", T), []).append((a, inst.vol / ig[T]))
            for h in inst.hosts:
                if h.size == 1:
                    continue
                rep = h.machines[0]
                cls = sum(self.n_cls.get(h.id, []))
                inds = sum(sum(self.n_ind.get(i, [])) for i in h.machines)
                bw = min(eg[rep], ig[rep])
                m.Add(ar >= q(inst.vol / bw / h.size) * (cls + inds))
                nic.setdefault(("E", h.id), []).append((cls, inst.vol / eg[rep] / h.size))
                nic.setdefault(("I", h.id), []).append((cls, inst.vol / ig[rep] / h.size))
        lat = q(inst.latency_s) * multi if inst.latency_s else 0
        return ar, lat, nic

    def _nic_loads(self, nic: dict[tuple[str, int], list]) -> None:
        """Every NIC's load per machine, and the average over each class, at most ``L``."""
        inst, q = self.inst, self.q
        const: dict[tuple[str, int], float] = {}
        for b, bb in enumerate(inst.base):
            for k, v in bb.items():
                if isinstance(self.picked[b], int):
                    const[k] = const.get(k, 0.0) + v
                else:
                    nic.setdefault(k, []).append((self.picked[b], v))
        for o, op in enumerate(self.opts):
            for k, v in op.terms.items():
                nic.setdefault(k, []).append((self.xs[o], v))
        agg_nic: dict[tuple[str, int], list] = {}
        agg_const: dict[tuple[str, int], float] = {}
        for k, terms in nic.items():
            if k[0] in ("e", "i") and (mi := self._mirror(k[0], k[1])) is not None:
                agg_nic.setdefault((mi[0], mi[1]), []).extend((v_, s / mi[2]) for v_, s in terms)
        for k, v in const.items():
            if k[0] in ("e", "i") and (mi := self._mirror(k[0], k[1])) is not None:
                ak = (mi[0], mi[1])
                agg_const[ak] = agg_const.get(ak, 0.0) + v / mi[2]
        for k, terms in agg_nic.items():
            nic.setdefault(k, []).extend(terms)
        for k, v in agg_const.items():
            const[k] = const.get(k, 0.0) + v
        nic_off = q(self.offsets[0]) if self.offsets else 0
        for k in sorted(set(nic) | set(const)):  # the model's order must not follow hashing
            merged: dict[int, tuple[Any, float]] = {}
            for var, v in nic.get(k, []):
                i = id(var)
                merged[i] = (var, merged[i][1] + v) if i in merged else (var, v)
            self.m.Add(q(const.get(k, 0.0)) + sum(q(v) * var for var, v in merged.values())
                       + nic_off <= self.L)

    def _bundle_loads(self, ar: Any, lat: Any) -> None:
        """Per bundle: device time (+ the all-reduce), the prefetch window, and sampling."""
        m, opts, xs, q, L, offsets = self.m, self.opts, self.xs, self.q, self.L, self.offsets
        for b, os_ in enumerate(self.inst.by_bundle):
            dev_off, samp_off = (q(offsets[1][b][0]), q(offsets[1][b][1])) if offsets else (0, 0)
            m.Add(L >= sum(q(opts[o].device_s) * xs[o] for o in os_) + ar + lat
                  + dev_off * self.picked[b])
            m.Add(L >= sum(q(opts[o].window_s) * xs[o] for o in os_))
            if self.cpu_model != "exact":
                m.Add(L >= sum(q(opts[o].sample_lb_s) * xs[o] for o in os_)
                      + samp_off * self.picked[b])

    def hint(self, hint: Solution) -> None:
        for o, x in enumerate(self.xs):
            self.m.AddHint(x, 1 if hint.choice.get(self.opts[o].bundle) == o else 0)
        for b, n in self.ns.items():
            if b in hint.choice:
                self.m.AddHint(n, min(MAX_SAMPLERS, hint.samplers.get(b, 1)))


def solve(inst: AssignmentInstance, *, time_limit: float = 10.0, workers: int = 2, seed: int = 0,
          hint: Solution | None = None, upper_s: float | None = None, pool_size: int = 6,
          cpu_model: str = "relaxed", log: bool = False,
          offsets: Offsets | None = None) -> CpSatResult:
    """Build and solve the model; `upper_s` (e.g. greedy's load) sets the integer unit.

    `offsets` (bounds only: ``simulated_lower_bound``): seconds per iteration added to every
    NIC's load and, per bundle, to its device's and its samplers' (the pipeline's fill and
    drain, :func:`gnnsched.placement.cpsat.fill_drain_offsets`), each counted only where the
    bundle is used."""
    t0 = time.perf_counter()
    model = _Model(inst, upper_s, cpu_model, offsets)
    model.build()
    if hint is not None:
        model.hint(hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit)
    # Two workers race, so which improving solutions reach the pool (the gnnsched search's
    # starts) depends on the box's load; a small model is proven optimal in well under a
    # second by one worker, whose pool is the same every run: the same inputs and seed then
    # give the same plan. Big models keep the workers (they run against the time limit).
    solver.parameters.num_workers = 1 if len(inst.options) <= ONE_WORKER_OPTIONS else workers
    solver.parameters.random_seed = seed
    solver.parameters.log_search_progress = log
    if len(inst.options) > AGGREGATE_OPTIONS:  # probing a big model costs more than it proves
        solver.parameters.cp_model_probing_level = 0
    unit = model.unit
    pool = _Pool(model.xs, model.ns, inst.options, unit, pool_size)
    status = solver.Solve(model.m, pool)
    name = solver.StatusName(status)
    best = pool.found[-1] if pool.found else None
    if best is not None:
        best.objective_s = solver.ObjectiveValue() * unit
    raw = solver.BestObjectiveBound()
    bound = raw * unit if status != cp_model.INFEASIBLE and math.isfinite(raw) else 0.0
    # both valid; short runs prove little
    bound = max(bound, quick_bound(inst, offsets) * (1 - 1e-9))
    nvars = len(model.m.Proto().variables)
    return CpSatResult(inst, name, best, list(pool.found), max(bound, 0.0),
                       time.perf_counter() - t0, unit, nvars, model.cpu_model)


__all__ = ["ONE_WORKER_OPTIONS", "CpSatResult", "solve"]
