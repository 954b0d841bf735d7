"""OR-Tools CP-SAT bottleneck model: instance -> model -> solution.

Minimise ``L``, the time per iteration that no schedule of the placement can beat: the
largest per-iteration load of :meth:`gnnsched.workload.Workload.loads` (NIC egress and ingress
per machine, device time per trainer with the all-reduce, sampling time per trainer) or, when
longer, a trainer's prefetch window (:meth:`Problem.window_s`: batch ``k + prefetch`` cannot
start before batch ``k`` trains, so sampling + gathering latency over ``prefetch`` bounds an
iteration). The decisions:

* which device every trainer uses (GPUs of one kind on one machine form a *slot*);
* which partitions' seeds every trainer owns (a *bundle*). While the seed-balanced subsets are
  few (``ENUM_SUBSETS``), the model chooses among all of them (set partitioning); one boolean
  per subset and device grows as ``2^P``, so beyond that the split is fixed by
  :func:`bundle_parts` (measured: 48 parts -> 32 trainers already has ~10^13 subsets) and the
  search reassigns parts later;
* where a trainer's samplers run and how many: every machine is a candidate in small models,
  the trainer's own machine, its main store and the roomiest CPU hosts in large ones.

subject to device counts, cores, host memory and roles. Gathering runs at the trainer: with a
relay every NIC carries at least as many bytes and the chain is longer, so fixing it loses
nothing; the search still tries relays, which only the simulator can value.

Store locations are fixed, so every transfer's bytes are constants times a few booleans: the
model is linear. Loads are integers in units of ``unit_s`` seconds; every coefficient is
rounded *down*, so the model never overestimates a load and its proven bound is a valid lower
bound for every placement it can express (with the mean costs of the profile).

Scale: beyond ``AGGREGATE_OPTIONS`` options, machines with identical hardware are merged into
classes (:class:`Host`); a bundle goes to a class unless data it needs is stored on a member,
and the class's *average* NIC load is constrained, which never exceeds its busiest member's —
still a valid bound. :func:`to_plan` spreads class members' trainers largest-first (LPT).
Measured on examples/scale256: 28,672 per-machine options did not leave CP-SAT's presolve in
15 s on 2 cores; the class model (4,690 options) solves to optimality in 1-6 s.

Sampler counts: the model first gives every trainer one sampler and a per-option lower bound
on sampling time (its sampler host's cores all to itself). When spreading the spare cores
afterwards (:func:`fill_samplers`) leaves sampling below ``L``, that relaxation was exact. When
not, the model is solved again with integer sampler counts per (trainer, host) — the exact
CPU model — which is larger, so it is only built when the cores can bind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from gnnsched.placement.placer import (
    MAX_SAMPLERS,
    Placer,
    Problem,
    bundle_parts,
    candidate_splits,
    fill_samplers,
    main_store,
    register,
    split_of,
    transfers,
)
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import EDGE_BYTES
from gnnsched.spec import SpecError

ENUM_SUBSETS = 256  # enumerate part bundles exactly while there are at most this many
BALANCE = 0.5  # a multi-part bundle's seeds stay within 50% of the per-trainer average
EXACT_OPTIONS = 4000  # every machine is a sampler-host candidate while options stay this few
AGGREGATE_OPTIONS = 3000  # beyond this many options, merge identical machines into classes
ONE_WORKER_OPTIONS = 256  # models this small are solved by one worker: the same pool every run
SAMPLER_HOSTS = 2  # aggregated model: sampler hosts besides the trainer's and the main store
KB = 1024.0


# ---------------------------------------------------------------------- instance


@dataclass(frozen=True)
class Host:
    """Where the model puts trainers: one machine, or a class of interchangeable machines.

    Machines with the same cores, memory, NICs, GPUs and roles are interchangeable for every
    bundle that stores nothing on them; at scale the model assigns such bundles to the class
    and constrains the class's *average* load (which never exceeds its most loaded member's,
    so the bound stays valid), then :func:`to_plan` spreads them over the members.
    """

    id: int
    machines: tuple[int, ...]
    kinds: tuple[tuple[float, float], ...]  # (speed, GPU memory) of the slots on each member

    @property
    def size(self) -> int:
        return len(self.machines)


@dataclass(frozen=True)
class Option:
    """One way to run a bundle: a GPU kind on a host, and where its samplers run."""

    bundle: int
    host: int
    kind: int  # index into the host's kinds
    machine: int  # the trainer's machine, or -1 for "some member of the class"
    sampler: int  # the sampler machine, or -1 for "the trainer's machine" (class options)
    device_s: float  # training seconds per mini-batch on this GPU kind
    sample_lb_s: float  # sampling seconds with every core of the sampler host
    window_s: float  # prefetch-window time per iteration (Problem.window_s)
    terms: dict[tuple[str, int], float]  # seconds beyond the bundle's base, see `_key`
    host_bytes: float  # on the trainer machine
    sampler_bytes: float  # per sampler process

    @property
    def is_class(self) -> bool:
        return self.machine < 0


@dataclass
class Instance:
    """Everything the model needs, in seconds and bytes (floats)."""

    problem: Problem
    bundles: list[tuple[int, ...]]
    exact_parts: bool  # bundles enumerated: the model also chooses the part split
    aggregated: bool  # identical machines merged into classes
    hosts: list[Host]
    host_of: list[int]  # machine -> host id (-1: no GPU a trainer may use)
    options: list[Option]
    by_bundle: list[list[int]]
    base: list[dict[tuple[str, int], float]]  # per bundle: store NIC seconds whatever happens
    sample_s: list[float]
    vol: float  # all-reduce bytes through each trainer's NIC per iteration
    latency_s: float
    single_hosts: list[int]  # machines whose GPUs alone could host every trainer

    @property
    def W(self) -> int:
        return self.problem.W

    def slot_of(self, machine: int, host: Host, kind: int) -> int:
        """The problem slot of GPU kind `kind` on member `machine` of `host`."""
        want = host.kinds[kind]
        for i, s in enumerate(self.problem.slots):
            if s.machine == machine and (s.speed, s.gpu_memory) == want:
                return i
        raise KeyError((machine, want))


def _subsets(problem: Problem) -> list[tuple[int, ...]] | None:
    """Part subsets a trainer could own (seed-balanced), or None if too many to enumerate.

    A trainer's seeds stay within ``BALANCE`` of the average (or it owns one part): every
    trainer runs the same number of iterations, so an unbalanced split would skip seeds.
    """
    P, W = problem.P, problem.W
    if W in (1, P) or W > P:
        return None
    hi = P - W + 1
    if sum(math.comb(P, k) for k in range(1, hi + 1)) > ENUM_SUBSETS:
        return None
    seeds = [max(pp.train_seeds, 1) for pp in problem.profile.parts]
    avg = sum(seeds) / W
    out = [c for k in range(1, hi + 1) for c in combinations(range(P), k)
           if k == 1 or abs(sum(seeds[p] for p in c) - avg) <= BALANCE * avg]
    for b in bundle_parts(problem):
        if b not in out:
            out.append(b)
    return out


def _classes(problem: Problem) -> list[tuple[int, ...]]:
    """Machines with GPUs grouped by everything the model can see of them."""
    free = problem.free_memory()
    groups: dict[tuple, list[int]] = {}
    for m in sorted({s.machine for s in problem.slots}):
        mach = problem.cluster.machines[m]
        kinds = tuple((s.speed, s.gpu_memory, s.count) for s in problem.slots if s.machine == m)
        sig = (mach.cpus, round(free[m] / KB), mach.egress, mach.ingress, kinds,
               problem.can_sample[m], problem.can_fetch[m])
        groups.setdefault(sig, []).append(m)
    return [tuple(g) for g in groups.values()]


def build_instance(problem: Problem, bundles: list[tuple[int, ...]] | None = None,
                   aggregate: bool | None = None) -> Instance:
    """Options and constant loads of every bundle (the subsets, or the heuristic groups)."""
    cl = problem.cluster
    eg = [m.egress for m in cl.machines]
    ig = [m.ingress for m in cl.machines]
    exact = False
    if bundles is None:
        subs = _subsets(problem)
        exact = subs is not None
        bundles = subs if subs is not None else bundle_parts(problem)
    gpus_on: dict[int, int] = {}
    for s in problem.slots:
        gpus_on[s.machine] = gpus_on.get(s.machine, 0) + s.count
    W = problem.W
    single = [T for T, g in gpus_on.items() if g >= W] if W > 1 else list(gpus_on)
    samplers_all = [m for m in range(problem.M) if problem.can_sample[m]]
    all_helpers = len(bundles) * len(problem.slots) * len(samplers_all) <= EXACT_OPTIONS
    if aggregate is None:
        aggregate = not exact and not single and \
            len(bundles) * len(problem.slots) * (SAMPLER_HOSTS + 2) > AGGREGATE_OPTIONS
    groups = _classes(problem) if aggregate else [(m,) for m in sorted(gpus_on)]
    hosts: list[Host] = []
    host_of = [-1] * problem.M
    for g in groups:
        kinds = tuple((s.speed, s.gpu_memory) for s in problem.slots if s.machine == g[0])
        for m in g:
            host_of[m] = len(hosts)
        hosts.append(Host(len(hosts), g, kinds))
    options: list[Option] = []
    by_bundle: list[list[int]] = []
    base: list[dict[tuple[str, int], float]] = []
    sample_s: list[float] = []

    def key(kind: str, m: int, h: Host) -> tuple[str, int]:
        return (kind.upper(), h.id) if m < 0 else (kind, m)

    for b, parts in enumerate(bundles):
        c = problem.cost(parts)
        cs = problem.size_cost(parts)  # memory rules use the plan's sizes, never drawn costs
        sample_s.append(c.sample_s)
        bb: dict[tuple[str, int], float] = {}
        for m, v in list(c.feat_from.items()) + list(c.struct_from.items()):
            bb[("e", m)] = bb.get(("e", m), 0.0) + v / eg[m]
        base.append(bb)
        home = main_store(problem, parts)
        local = set(c.feat_from) | set(c.struct_from)
        need = problem.trainer_gpu_bytes(cs)
        # samplers away from the trainer only help when its cores are short, so beyond its
        # own machine the candidates are every host (small models) or the bundle's main
        # store and the roomiest CPU hosts (large ones)
        helpers = samplers_all
        if aggregate or not all_helpers:
            roomy = sorted(helpers, key=lambda m: (-problem.cpus[m], m))[:SAMPLER_HOSTS]
            helpers = [m for m in dict.fromkeys([home] + roomy) if problem.can_sample[m]]
        mine: list[int] = []
        places: list[tuple[Host, int, int]] = []  # (host, kind, machine or -1)
        for h in hosts:
            for j, (_, gmem) in enumerate(h.kinds):
                if gmem < need:
                    continue
                if h.size == 1:
                    places.append((h, j, h.machines[0]))
                else:
                    places.extend((h, j, m) for m in h.machines if m in local)
                    places.append((h, j, -1))
        for h, j, T in places:
            rep = h.machines[0]  # any member: they share NICs, cores and GPUs
            hosts_s: list[int] = [T] if problem.can_sample[rep] else []
            hosts_s += [S for S in helpers if S != T and S not in hosts_s]
            for S in hosts_s:
                actual: dict[tuple[str, int], float] = {}
                for src, dst, v, _ in transfers(c, T, [(S, 1.0)], T):
                    se = eg[src] if src >= 0 else eg[rep] * h.size
                    si = ig[dst] if dst >= 0 else ig[rep] * h.size
                    ke, ki = key("e", src, h), key("i", dst, h)
                    actual[ke] = actual.get(ke, 0.0) + v / se
                    actual[ki] = actual.get(ki, 0.0) + v / si
                terms = {k: actual.get(k, 0.0) - bb.get(k, 0.0)
                         for k in sorted(set(actual) | set(bb))}  # no hash order
                terms = {k: v for k, v in terms.items() if abs(v) > 1e-15}
                cores = int(problem.cpus[rep if S < 0 else S]) - (1 if S == T else 0)
                n = max(1, min(MAX_SAMPLERS, cores))
                mine.append(len(options))
                win = problem.window_s(c, rep if T < 0 else T, [rep if S < 0 else S],
                                       rep if T < 0 else T)
                options.append(Option(b, h.id, j, T, S, c.train_s / h.kinds[j][0],
                                      c.sample_s / n, win, terms, problem.trainer_host_bytes(cs),
                                      problem.sampler_bytes(cs)))
        by_bundle.append(mine)
    vol = 2.0 * (W - 1) / W * problem.profile.grad_bytes if W > 1 else 0.0
    return Instance(problem, list(bundles), exact, aggregate, hosts, host_of, options,
                    by_bundle, base, sample_s, vol,
                    (2 * (W - 1) * problem.cluster.latency + problem.profile.allreduce_overhead_s)
                    if W > 1 else 0.0, single)


# ---------------------------------------------------------------------- solution


@dataclass
class Solution:
    """A model assignment: the option of every used bundle and its sampler count."""

    choice: dict[int, int]  # bundle -> option index
    samplers: dict[int, int]  # bundle -> sampler processes (1 in the relaxed CPU model)
    objective_s: float

    def key(self) -> tuple:
        return tuple(sorted(self.choice.items()))


@dataclass
class CpSatResult:
    """What the solver found, and what it proved."""

    instance: Instance
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


def solution_from_plan(inst: Instance, plan: Plan) -> Solution | None:
    """The model assignment a plan corresponds to (for warm starts), if it has one."""
    pb = inst.problem
    idx = pb.cluster.machine_index
    bundle_of = {tuple(sorted(p)): b for b, p in enumerate(inst.bundles)}
    choice, samplers = {}, {}
    for t in plan.trainers:
        b = bundle_of.get(tuple(sorted(t.parts)))
        if b is None or len(t.samplers) != 1:
            return None
        T, S = idx(t.machine), idx(t.samplers[0][0])
        gpu = pb.cluster.machines[T].gpus[t.device]
        want = (gpu.speed, gpu.memory)
        hit = None
        for o in inst.by_bundle[b]:
            op = inst.options[o]
            h = inst.hosts[op.host]
            if h.kinds[op.kind] != want or T not in h.machines:
                continue
            if op.machine == T and op.sampler == S:
                hit = o
                break
            if op.is_class and (op.sampler == S or (op.sampler < 0 and S == T)) and hit is None:
                hit = o
        if hit is None:
            return None
        choice[b] = hit
        samplers[b] = t.samplers[0][1]
    return Solution(choice, samplers, math.inf)


def quick_bound(inst: Instance) -> float:
    """A weaker bound that needs no solver: every bundle (or part) on its own best option.

    Per bundle, the fastest of its options (device, window, sampling); per machine NIC, each
    bundle's smallest contribution summed — capacities and all-reduce ignored, so it is a
    relaxation of the model. A floor for the solver's bound when time is too short.
    """
    opts = inst.options
    per: list[float] = []
    for os_ in inst.by_bundle:
        per.append(min((max(opts[o].device_s, opts[o].window_s, opts[o].sample_lb_s)
                        for o in os_), default=0.0))
    if inst.exact_parts:
        best = 0.0
        for p in range(inst.problem.P):
            cands = [per[b] for b, parts in enumerate(inst.bundles) if p in parts]
            best = max(best, min(cands, default=0.0))
        return best
    best = max(per, default=0.0)
    nic: dict[tuple[str, int], float] = {}
    for b, os_ in enumerate(inst.by_bundle):
        keys = {k for o in os_ for k in opts[o].terms if k[0] in ("e", "i")} | \
            set(inst.base[b])
        for k in keys:
            v = inst.base[b].get(k, 0.0) + min(opts[o].terms.get(k, 0.0) for o in os_)
            nic[k] = nic.get(k, 0.0) + max(v, 0.0)
    return max([best] + list(nic.values()))


def solve(inst: Instance, *, time_limit: float = 10.0, workers: int = 2, seed: int = 0,
          hint: Solution | None = None, upper_s: float | None = None, pool_size: int = 6,
          cpu_model: str = "relaxed", log: bool = False) -> CpSatResult:
    """Build and solve the model; `upper_s` (e.g. greedy's load) sets the integer unit."""
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
            m.Add(L >= z)
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
    for k in sorted(set(nic) | set(const)):  # the model's order must not follow hashing
        merged: dict[int, tuple[Any, float]] = {}
        for var, v in nic.get(k, []):
            i = id(var)
            merged[i] = (var, merged[i][1] + v) if i in merged else (var, v)
        m.Add(q(const.get(k, 0.0)) + sum(q(v) * var for var, v in merged.values()) <= L)
    # device time (+ all-reduce) and sampling per bundle
    for os_ in inst.by_bundle:
        m.Add(L >= sum(q(opts[o].device_s) * xs[o] for o in os_) + ar + lat)
        m.Add(L >= sum(q(opts[o].window_s) * xs[o] for o in os_))
        if cpu_model != "exact":
            m.Add(L >= sum(q(opts[o].sample_lb_s) * xs[o] for o in os_))
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
    bound = max(bound, quick_bound(inst) * (1 - 1e-9))  # both valid; short runs prove little
    nvars = len(m.Proto().variables)
    return CpSatResult(inst, name, best, list(pool.found), max(bound, 0.0),
                       time.perf_counter() - t0, unit, nvars, cpu_model)


def to_plan(inst: Instance, sol: Solution, placer: str = "cpsat") -> Plan:
    """Turn a model assignment into a plan.

    Individually placed bundles take a GPU of their slot; bundles placed on a class go,
    largest mini-batch first, to the member whose NICs they load least (LPT). Spare cores
    then become samplers (:func:`fill_samplers`).
    """
    pb = inst.problem
    cl = pb.cluster
    eg = np.array([mm.egress for mm in cl.machines])
    ig = np.array([mm.ingress for mm in cl.machines])
    out_s, in_s = np.zeros(pb.M), np.zeros(pb.M)
    free_dev: dict[int, list[int]] = {i: list(s.devices) for i, s in enumerate(pb.slots)}
    cores = pb.cpus.copy()
    memory = pb.free_memory()
    placed: dict[int, tuple[int, int, int]] = {}  # bundle -> (machine, device, sampler)

    def commit(b: int, T: int, slot: int, S: int) -> None:
        op_c = pb.cost(inst.bundles[b])
        d = free_dev[slot].pop(0)
        cores[T] -= 1
        cores[S] -= 1
        memory[T] -= pb.trainer_host_bytes(op_c)
        memory[S] -= pb.sampler_bytes(op_c)
        for src, dst, v, _ in transfers(op_c, T, [(S, 1.0)], T):
            out_s[src] += v / eg[src]
            in_s[dst] += v / ig[dst]
        out_s[T] += inst.vol / eg[T]
        in_s[T] += inst.vol / ig[T]
        placed[b] = (T, d, S)

    later = []
    for b, o in sol.choice.items():
        op = inst.options[o]
        if op.is_class:
            later.append(b)
        else:
            commit(b, op.machine, inst.slot_of(op.machine, inst.hosts[op.host], op.kind),
                   op.sampler)
    later.sort(key=lambda b: (-pb.cost(inst.bundles[b]).feat_bytes, b))
    notes = []
    for b in later:
        op = inst.options[sol.choice[b]]
        h = inst.hosts[op.host]
        c = pb.cost(inst.bundles[b])
        best = None
        members = list(h.machines)
        for T in members + [i for i in range(pb.M) if i not in h.machines]:
            if best is not None and T not in h.machines:
                break
            for si, s in enumerate(pb.slots):
                if s.machine != T or not free_dev[si] or s.gpu_memory < pb.trainer_gpu_bytes(c):
                    continue
                if T in h.machines and (s.speed, s.gpu_memory) != h.kinds[op.kind]:
                    continue
                # the class's sampler host, else (its cores all taken) beside the trainer
                for S in ([T] if op.sampler < 0 else [op.sampler, T]):
                    need_cores = 2 if S == T else 1
                    if cores[T] < need_cores or (S != T and cores[S] < 1):
                        continue
                    if memory[T] >= pb.trainer_host_bytes(c) + (pb.sampler_bytes(c)
                                                                if S == T else 0):
                        break
                else:
                    continue
                add_in = c.feat_bytes / ig[T] + inst.vol / ig[T]
                score = (max(in_s[T] + add_in, out_s[T] + inst.vol / eg[T]), T)
                if best is None or score < best[0]:
                    best = (score, T, si, S)
        if best is None:
            raise SpecError(pb.job.source, "trainers", "no device left while spreading "
                            f"trainers over {pb.names[h.machines[0]]}'s class",
                            "fewer trainers or more GPUs")
        _, T, si, S = best
        if T not in h.machines:
            notes.append(f"trainer of parts {list(inst.bundles[b])} left its class for "
                         f"{pb.names[T]} (no room)")
        commit(b, T, si, S)
    trainers = []
    for i, b in enumerate(sorted(placed, key=lambda b: inst.bundles[b])):
        T, d, S = placed[b]
        n = max(1, sol.samplers.get(b, 1))
        trainers.append(TrainerPlan(i, pb.names[T], d, tuple(inst.bundles[b]),
                                    ((pb.names[S], n),), pb.names[T]))
    return fill_samplers(pb, pb.make_plan(placer, trainers, notes))


# ---------------------------------------------------------------------- the placer


@dataclass
class CpSatOutcome:
    """The model's plan, its pool of good alternatives, and the proven bound."""

    plan: Plan
    pool: list[Plan]
    result: CpSatResult  # of the split whose plan won
    lower_bound_iter_s: float  # proven, per iteration, over every split solved
    exact_parts: bool  # the model chose among all seed-balanced splits
    splits: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)  # fixed splits solved
    bounds: dict[tuple, float] = field(default_factory=dict)  # split -> its bound

    def covers(self, split: tuple[tuple[int, ...], ...]) -> bool:
        """Whether the bound holds for placements with this part split."""
        return split in self.bounds

    only_split: bool = False  # one part per trainer: there is no other split
    warm_starts: list[Plan] = field(default_factory=list)  # greedy's, first split first
    drawn: dict[int, dict] = field(default_factory=dict)  # seed -> split -> (bound, instance)

    def scope(self) -> str:
        if self.only_split:
            s = "every placement"
        elif self.exact_parts:
            s = "every placement with a seed-balanced part split"
        else:
            s = f"placements with the {len(self.bounds)} part splits solved"
        return s + " and every plan compared (with the drawn mini-batches when simulated)"


def _solve_once(problem: Problem, inst: Instance, *, time_limit: float, seed: int,
                workers: int, placer: str) -> tuple[list[Plan], CpSatResult]:
    """One instance: greedy warm start, relaxed CPU model, exact CPU model if cores bind."""
    from gnnsched.placement.baselines import greedy_plan

    t0 = time.perf_counter()
    split = bundle_parts(problem) if inst.exact_parts else inst.bundles
    start = greedy_plan(problem, split, placer=placer)
    upper, _ = problem.seconds_per_iteration(start)
    hint = solution_from_plan(inst, start)
    res = solve(inst, time_limit=time_limit, workers=workers, seed=seed, hint=hint,
                upper_s=upper)
    plans = [to_plan(inst, s, placer) for s in res.pool]
    best_plan = plans[-1] if plans else start
    sampling = max(problem.wl.loads(best_plan).sampler.values())
    if res.best is not None and sampling > res.objective_s + 2 * res.unit_s \
            and not inst.aggregated:
        # spare cores could not bring sampling under L: model the sampler counts exactly
        left = time_limit - (time.perf_counter() - t0)
        hint2 = solution_from_plan(inst, best_plan)
        res2 = solve(inst, time_limit=max(left, 0.5), workers=workers, seed=seed, hint=hint2,
                     upper_s=upper, cpu_model="exact")
        if res2.best is not None:
            res2.bound_s = max(res.bound_s, res2.bound_s)  # both are valid bounds
            plans += [to_plan(inst, s, placer) for s in res2.pool]
            res2.notes.append(f"cores bind: exact sampler-count model ({res2.status})")
            res = res2
    return plans + [start], res


def run_cpsat(problem: Problem, *, time_limit: float = 10.0, seed: int = 0,
              workers: int = 2, placer: str = "cpsat",
              splits: list[list[tuple[int, ...]]] | None = None) -> CpSatOutcome:
    """Solve the model: over all part splits when they are few, else once per candidate
    split (:func:`candidate_splits`); the best plan wins and the bound is the smallest."""
    t0 = time.perf_counter()
    inst = build_instance(problem) if splits is None else None
    if inst is not None and inst.exact_parts:
        todo: list[Instance | list[tuple[int, ...]]] = [inst]
    else:
        todo = list(splits or candidate_splits(problem))
    plans: list[Plan] = []
    warm: list[Plan] = []
    results: list[CpSatResult] = []
    bounds: dict[tuple, float] = {}
    for i, item in enumerate(todo):
        left = time_limit - (time.perf_counter() - t0)
        share = max(0.3, left / (len(todo) - i))
        one = item if isinstance(item, Instance) else (
            inst if inst is not None and not inst.exact_parts and i == 0
            and sorted(inst.bundles) == sorted(item) else build_instance(problem, list(item)))
        ps, res = _solve_once(problem, one, time_limit=share, seed=seed, workers=workers,
                              placer=placer)
        plans += ps
        warm.append(ps[-1])
        results.append(res)
        if not one.exact_parts:
            bounds[tuple(sorted(one.bundles))] = res.bound_s
    seen: dict[tuple, Plan] = {}
    for p in plans:
        seen.setdefault(p.key(), p)
    scored = sorted(seen.values(), key=lambda p: problem.seconds_per_iteration(p)[0])
    best = scored[0]
    exact = isinstance(todo[0], Instance)
    bound = results[0].bound_s if exact else min(bounds.values())
    won = split_of(best)
    res = next((r for r in results if r.instance.exact_parts
                or tuple(sorted(r.instance.bundles)) == won), results[0])
    return CpSatOutcome(best, scored, res, bound, exact, list(bounds), bounds,
                        only_split=problem.W >= problem.P, warm_starts=warm)


def lower_bound(problem: Problem, outcome: CpSatOutcome, plans: list[Plan], *,
                time_limit: float = 5.0, seed: int = 0) -> float:
    """The outcome's bound, made to hold for every plan in `plans` too.

    Each fixed split's CP-SAT bound holds for placements with that split, so a plan whose
    split is not covered and whose own time per iteration is below the bound gets its split
    solved, and the bound becomes the smallest (when the model chose the split itself it
    covers every seed-balanced one already, but not an unbalanced baseline's).
    """
    bound = outcome.lower_bound_iter_s
    for p in plans:
        sp = split_of(p)
        if outcome.covers(sp) or outcome.only_split:
            continue
        if outcome.exact_parts and _balanced(problem, sp):
            continue
        if problem.seconds_per_iteration(p)[0] >= bound:
            continue  # this plan's own load is above the bound already
        one = build_instance(problem, [tuple(b) for b in sp])
        try:
            _, res = _solve_once(problem, one, time_limit=time_limit, seed=seed, workers=2,
                                 placer="bound")
        except SpecError:  # no warm start for this split: its quick bound still holds
            bound = min(bound, quick_bound(one))
            continue
        outcome.bounds[sp] = res.bound_s
        bound = min(bound, res.bound_s)
    outcome.lower_bound_iter_s = bound
    return bound


def plan_floor(problem: Problem, plan: Plan) -> float:
    """Seconds per iteration no schedule of `plan` can beat, under `problem`'s costs.

    Its most loaded resource (:meth:`Workload.loads`) and the prefetch window of every trainer
    that samples on one machine. With a :meth:`Problem.drawn` problem, ``iterations`` times
    this is at most the simulated epoch of `plan` (the window by convexity: the average of the
    drawn batches' sample + gather chains is at least the chain of their average batch).
    """
    v = problem.wl.loads(plan).bottleneck()[1]
    idx = problem.cluster.machine_index
    for t in plan.trainers:
        if len(t.samplers) == 1:
            v = max(v, problem.window_s(problem.cost(t.parts), idx(t.machine),
                                        [idx(t.samplers[0][0])], idx(t.fetch_at)))
    return v


def barrier_chain_bound(problem: Problem, split: Sequence[tuple[int, ...]], seed: int) -> float:
    """Epoch seconds no placement of `split` can beat in simulation: the synchronous chain.

    Every iteration ends with a barrier: ``B_k = max_w end of training of (w, k) + A``, and a
    trainer trains batch ``k`` only after ``B_{k-1}`` and once the batch was sampled and its
    features arrived — and, with prefetch depth ``d``, sampling of batch ``k`` starts only
    once batch ``k - d`` started training. With each drawn batch's chain floored by what no
    placement avoids (its sampling CPU time, then its features from every store but the
    trainer's own machine at the fastest rate any GPU machine could receive them; hops and
    blocks counted as zero; its remote hops' edges to the best sampler host) and its training at the fastest GPU that fits, the recursion
    ``start[w][k] >= max(B_{k-1}, start[w][k-d] + chain[w][k])`` gives ``B_{K-1}``. Unlike the
    per-resource bound it takes the *maximum over trainers in every iteration*. Valid because
    the simulator's depth never exceeds the job's prefetch and the batches depend only on
    (seed, a trainer's parts) (:meth:`Workload.draws`).
    """
    wl = problem.wl
    K = wl.iterations
    base = getattr(problem, "base", problem)
    cl = problem.cluster
    eg, ig = np.asarray(wl.egress_bw, float), np.asarray(wl.ingress_bw, float)
    Ts = sorted({s.machine for s in problem.slots})
    igT = ig[Ts]
    lat = float(cl.latency)
    d = max(1, int(problem.job.prefetch))
    W = len(split)
    gpus_on: dict[int, int] = {}
    for sl in problem.slots:
        gpus_on[sl.machine] = gpus_on.get(sl.machine, 0) + sl.count
    if W <= 1 or max(gpus_on.values()) >= W:
        A = 0.0
    else:  # some two trainers sit on different machines: a ring through the best NICs
        vol = 2.0 * (W - 1) / W * problem.profile.grad_bytes
        A = (vol / float(max(min(eg[m], ig[m]) for m in Ts)) + 2 * (W - 1) * lat
             + problem.profile.allreduce_overhead_s)
    fb = problem.profile.feature_bytes
    store = wl.store
    rate = np.minimum(eg[:, None], igT[None, :])  # [M, T]: store m to a trainer on T
    own = np.zeros((problem.M, len(Ts)), dtype=bool)
    own[Ts, np.arange(len(Ts))] = True  # a trainer's own machine sends it nothing
    Ss = [m for m in range(problem.M) if problem.can_sample[m]]
    igS = ig[Ss]
    srate = np.minimum(eg[:, None], igS[None, :])  # [M, S]: store m to a sampler on S
    sown = np.zeros((problem.M, len(Ss)), dtype=bool)
    sown[Ss, np.arange(len(Ss))] = True
    chain = np.zeros((W, K))
    train = np.zeros((W, K))
    for w, parts in enumerate(split):
        c = base.size_cost(parts)
        need = base.trainer_gpu_bytes(c)
        speed = max((s.speed for s in problem.slots if s.gpu_memory >= need), default=0.0)
        if speed <= 0:
            return 0.0
        for k, (q, i) in enumerate(wl.draws(parts, seed, K)):
            pp = problem.profile.part(q)
            v = np.zeros(problem.M)
            np.add.at(v, store[pp.input_parts[i]], pp.input_nodes[i] * fb)
            per = np.where(own, 0.0, v[:, None] / rate)
            remote = v.sum() - v[Ts]
            fetch = np.maximum(per.max(axis=0), remote / igT) + np.where(remote > 0, lat, 0.0)
            e = np.zeros(problem.M)
            np.add.at(e, store[pp.edge_parts[i]], pp.edge_counts[i] * EDGE_BYTES)
            sper = np.where(sown, 0.0, e[:, None] / srate)
            sremote = e.sum() - e[Ss]
            hops = np.maximum(sper.max(axis=0), sremote / igS) + np.where(sremote > 0, lat, 0.0)
            chain[w, k] = float(pp.sample_s[i]) + float(hops.min()) + float(fetch.min())
            train[w, k] = float(pp.train_s[i]) / speed
    start = np.zeros((W, K))
    B = 0.0
    for k in range(K):
        prev = start[:, k - d] if k >= d else 0.0
        start[:, k] = np.maximum(B, prev + chain[:, k])
        B = float((start[:, k] + train[:, k]).max()) + A
    return B


def simulated_lower_bound(problem: Problem, outcome: CpSatOutcome, plans: list[Plan], *,
                          seed: int = 0, time_limit: float = 10.0) -> float:
    """Seconds per iteration that no simulated epoch (with `seed`) can beat, times K.

    The model is solved again on :meth:`Problem.drawn` — every trainer's cost the average of
    the mini-batches the simulator draws for it, which depend only on its parts and the seed
    — for the splits the outcome covers. Its proven bound is then a bound of the *simulated*
    epoch of every placement in the model's space (device per trainer, one sampler host among
    the candidates, gathering anywhere: a relay only adds bytes and latency), not merely of
    the mean-cost loads, which random draws can undercut. Every plan in `plans` is then
    checked: a plan whose own drawn load is below the bound gets its split solved, and a plan
    outside the model's space (samplers on several hosts, or on a host the model does not
    offer) lowers the bound to its own floor (:func:`plan_floor`), so the bound holds for
    every plan reported beside it.
    """
    t0 = time.perf_counter()
    dp = problem.drawn(seed)
    cache = outcome.drawn.setdefault(seed, {})
    todo: list[Any] = ["exact"] if outcome.exact_parts else list(outcome.bounds)
    refs = list(outcome.pool) + list(outcome.warm_starts)

    def solve_split(key: Any, share: float) -> tuple[float, Instance]:
        if key in cache:
            return cache[key]
        inst = build_instance(dp) if key == "exact" else \
            build_instance(dp, [tuple(b) for b in key])
        ref = [p for p in refs if key == "exact" or split_of(p) == key]
        upper = min((plan_floor(dp, p) for p in ref), default=None)
        hint = next((h for p in ref if (h := solution_from_plan(inst, p)) is not None), None)
        res = solve(inst, time_limit=share, workers=2, seed=seed, hint=hint, upper_s=upper)
        b = res.bound_s
        if outcome.result.cpu_model == "exact" and not inst.aggregated:
            res2 = solve(inst, time_limit=share, workers=2, seed=seed, hint=hint,
                         upper_s=upper, cpu_model="exact")
            b = max(b, res2.bound_s)  # both are valid bounds
        if key != "exact":  # the split is fixed: the barrier chain bounds it too
            b = max(b, barrier_chain_bound(dp, key, seed) / dp.wl.iterations)
        cache[key] = (b, inst)
        return cache[key]

    bound = math.inf
    for i, key in enumerate(todo):
        left = time_limit - (time.perf_counter() - t0)
        bound = min(bound, solve_split(key, max(0.5, left / (len(todo) - i)))[0])
    for p in plans:
        own = plan_floor(dp, p)
        if own >= bound:
            continue  # this plan's own drawn load is above the bound already
        sp = split_of(p)
        key = "exact" if outcome.exact_parts and _balanced(problem, sp) else sp
        b, inst = solve_split(key, max(1.0, min(5.0, time_limit)))
        bound = min(bound, b)
        if any(t.num_samplers > MAX_SAMPLERS for t in p.trainers) or \
                solution_from_plan(inst, p) is None:
            bound = min(bound, own)  # outside the model's space: only its own floor holds
    return bound


def _balanced(problem: Problem, split: tuple[tuple[int, ...], ...]) -> bool:
    subs = _subsets(problem)
    return subs is not None and all(b in subs for b in split)


@register("cpsat")
class CpSatPlacer(Placer):
    """The bottleneck model alone (no simulator): CP-SAT's best plan."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        out = run_cpsat(problem, time_limit=budget or 10.0, seed=seed)
        self.outcome = out
        it = problem.wl.iterations
        return out.plan.with_prediction(
            lower_bound_s=out.lower_bound_iter_s * it,
            lower_bound_iteration_s=out.lower_bound_iter_s, lower_bound_scope=out.scope(),
            cpsat={"status": out.result.status, "objective_iteration_s": out.result.objective_s,
                   "bound_iteration_s": out.lower_bound_iter_s, "wall_s": out.result.wall_s,
                   "variables": out.result.variables, "exact_parts": out.result.instance.exact_parts,
                   "cpu_model": out.result.cpu_model})


__all__ = ["CpSatOutcome", "CpSatPlacer", "CpSatResult", "Instance", "Option", "Solution",
           "barrier_chain_bound", "build_instance", "lower_bound", "plan_floor", "quick_bound", "run_cpsat", "simulated_lower_bound", "solution_from_plan", "solve",
           "to_plan"]
