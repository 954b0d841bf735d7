"""OR-Tools CP-SAT bottleneck model: instance -> model -> solution.

Minimise ``L``, the largest per-iteration load over every resource of
:meth:`gnnsched.workload.Workload.loads` — NIC egress and ingress per machine, device time per
trainer (training plus the all-reduce), sampling time per trainer — over

* which device every trainer uses (GPUs of one kind on one machine form a *slot*),
* which partitions' seeds every trainer owns (a *bundle*: enumerated exactly as set
  partitioning while the subsets are few, fixed by :func:`bundle_parts` beyond that — one
  boolean per subset and device grows as ``2^P``; the search reassigns parts later),
* where a trainer's samplers run (its own machine, or its main store when its own machine is
  short of cores) and how many,

subject to device counts, cores, host memory and roles. Gathering runs at the trainer: with a
relay, every NIC carries at least as many bytes as without one (the relay's egress carries the
whole message), so the model loses nothing by fixing it; the search still tries relays, which
only the simulator can value (fewer, larger messages).

Store locations are fixed, so every transfer's bytes are constants times a few booleans: the
model is linear. Loads are integers in units of ``unit_s`` seconds; every coefficient is
rounded *down*, so the model never overestimates a load and its proven bound is a valid lower
bound on the bottleneck of every placement it can express.

Sampler counts: the model first gives every trainer one sampler and a per-option lower bound
on sampling time (its sampler host's cores all to itself). When spreading the spare cores
afterwards (:func:`fill_samplers`) leaves sampling below ``L``, that relaxation was exact. When
not, the model is solved again with integer sampler counts per (trainer, host) — the exact
CPU model — which is larger, so it is only built when the cores can bind.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import combinations

from ortools.sat.python import cp_model

from gnnsched.placement.placer import (
    MAX_SAMPLERS,
    Placer,
    Problem,
    bundle_parts,
    fill_samplers,
    main_store,
    register,
    transfers,
)
from gnnsched.plan import Plan, TrainerPlan

ENUM_SUBSETS = 256  # enumerate part bundles exactly while there are at most this many
KB = 1024.0


# ---------------------------------------------------------------------- instance


@dataclass(frozen=True)
class Option:
    """One way to run a bundle: its slot (trainer machine + GPU kind) and sampler host."""

    bundle: int
    slot: int
    machine: int
    sampler: int
    device_s: float  # training seconds per mini-batch on this slot's GPU
    sample_lb_s: float  # sampling seconds with every core of the sampler host
    delta: dict[tuple[str, int], float]  # ("e"|"i", machine) -> seconds beyond the base
    host_bytes: float  # on the trainer machine
    sampler_bytes: float  # per sampler process on the sampler host


@dataclass
class Instance:
    """Everything the model needs, in seconds and bytes (floats)."""

    problem: Problem
    bundles: list[tuple[int, ...]]
    exact_parts: bool  # bundles enumerated: the model also chooses the part split
    options: list[Option]
    by_bundle: list[list[int]]
    base: list[dict[tuple[str, int], float]]  # per bundle: NIC seconds whatever the option
    sample_s: list[float]
    ar_s: dict[int, float]  # machine -> all-reduce seconds per trainer hosted there
    ar_nic: dict[int, tuple[float, float]]  # machine -> (egress, ingress) s per trainer there
    latency_s: float
    single_hosts: list[int]  # machines whose GPUs alone could host every trainer

    @property
    def W(self) -> int:
        return self.problem.W


def _subsets(P: int, W: int) -> list[tuple[int, ...]] | None:
    """All part subsets a trainer could own, or None if there are too many to enumerate."""
    if W in (1, P):
        return None
    hi = P - W + 1
    total = sum(math.comb(P, k) for k in range(1, hi + 1))
    if total > ENUM_SUBSETS:
        return None
    return [c for k in range(1, hi + 1) for c in combinations(range(P), k)]


def build_instance(problem: Problem, bundles: list[tuple[int, ...]] | None = None
                   ) -> Instance:
    """Options and constant loads of every bundle (the subsets, or the heuristic groups)."""
    cl = problem.cluster
    eg = [m.egress for m in cl.machines]
    ig = [m.ingress for m in cl.machines]
    exact = False
    if bundles is None:
        subs = _subsets(problem.P, problem.W)
        exact = subs is not None
        bundles = subs if subs is not None else bundle_parts(problem)
    gpus_on: dict[int, int] = {}
    for s in problem.slots:
        gpus_on[s.machine] = gpus_on.get(s.machine, 0) + s.count
    options: list[Option] = []
    by_bundle: list[list[int]] = []
    base: list[dict[tuple[str, int], float]] = []
    sample_s: list[float] = []
    for b, parts in enumerate(bundles):
        c = problem.cost(parts)
        sample_s.append(c.sample_s)
        # base: as if trainer and sampler sat on a machine that stores nothing
        bb: dict[tuple[str, int], float] = {}
        for m, v in list(c.feat_from.items()) + list(c.struct_from.items()):
            bb[("e", m)] = bb.get(("e", m), 0.0) + v / eg[m]
        base.append(bb)
        home = main_store(problem, parts)
        mine: list[int] = []
        for si, slot in enumerate(problem.usable_slots(c)):
            T = slot.machine
            si = problem.slots.index(slot)
            hosts = []
            starved = (problem.cpus[T] - gpus_on[T]) < 2 * gpus_on[T]
            if problem.can_sample[T]:
                hosts.append(T)
            if (starved or not hosts) and home != T and problem.can_sample[home]:
                hosts.append(home)
            if not hosts:
                hosts = [max((m for m in range(problem.M) if problem.can_sample[m]),
                             key=lambda m: (problem.cpus[m], -m))]
            for S in hosts:
                actual: dict[tuple[str, int], float] = {}
                for src, dst, v, _ in transfers(c, T, [(S, 1.0)], T):
                    actual[("e", src)] = actual.get(("e", src), 0.0) + v / eg[src]
                    actual[("i", dst)] = actual.get(("i", dst), 0.0) + v / ig[dst]
                delta = {k: actual.get(k, 0.0) - bb.get(k, 0.0) for k in set(actual) | set(bb)}
                delta = {k: v for k, v in delta.items() if abs(v) > 1e-15}
                cores = int(problem.cpus[S]) - (1 if S == T else 0)
                n = max(1, min(MAX_SAMPLERS, cores))
                mine.append(len(options))
                options.append(Option(b, si, T, S, c.train_s / slot.speed, c.sample_s / n,
                                      delta, problem.trainer_host_bytes(c),
                                      problem.sampler_bytes(c)))
        by_bundle.append(mine)
    W = problem.W
    vol = 2.0 * (W - 1) / W * problem.profile.grad_bytes if W > 1 else 0.0
    ar_s, ar_nic = {}, {}
    for T in gpus_on:
        ar_s[T] = vol / min(eg[T], ig[T])
        ar_nic[T] = (vol / eg[T], vol / ig[T])
    single = [T for T, g in gpus_on.items() if g >= W] if W > 1 else list(gpus_on)
    return Instance(problem, list(bundles), exact, options, by_bundle, base, sample_s,
                    ar_s, ar_nic, 2 * (W - 1) * problem.cluster.latency, single)


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

    def __init__(self, xs: dict[int, cp_model.IntVar], ns: dict[int, cp_model.IntVar],
                 opts: list[Option], unit: float, size: int) -> None:
        super().__init__()
        self.xs, self.ns, self.opts, self.unit, self.size = xs, ns, opts, unit, size
        self.found: list[Solution] = []

    def on_solution_callback(self) -> None:
        choice = {self.opts[o].bundle: o for o, x in self.xs.items() if self.Value(x)}
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
        hit = [o for o in inst.by_bundle[b] if inst.options[o].machine == T
               and inst.options[o].sampler == S
               and t.device in pb.slots[inst.options[o].slot].devices]
        if not hit:
            return None
        choice[b] = hit[0]
        samplers[b] = t.samplers[0][1]
    return Solution(choice, samplers, math.inf)


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

    def q(seconds: float) -> int:
        return int(math.floor(seconds / unit))

    m = cp_model.CpModel()
    L = m.NewIntVar(0, lmax, "L")
    xs = {o: m.NewBoolVar(f"x{o}") for o in range(len(opts))}
    picked: dict[int, cp_model.LinearExpr | int] = {}
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
    # devices per slot, trainers per machine
    on_slot: dict[int, list[int]] = {}
    on_machine: dict[int, list[int]] = {}
    samp_on: dict[int, list[int]] = {}
    for o, op in enumerate(opts):
        on_slot.setdefault(op.slot, []).append(o)
        on_machine.setdefault(op.machine, []).append(o)
        samp_on.setdefault(op.sampler, []).append(o)
    for s, os_ in on_slot.items():
        if len(os_) > pb.slots[s].count:
            m.Add(sum(xs[o] for o in os_) <= pb.slots[s].count)
    trainers_on = {T: sum(xs[o] for o in os_) for T, os_ in on_machine.items()}
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
            m.Add(trainers_on[T] == W).OnlyEnforceIf(y)
            singles.append(y)
        multi = m.NewBoolVar("multi")
        m.Add(sum(singles) + multi == 1)
    ar = m.NewIntVar(0, lmax, "ar")
    ar_count: dict[int, cp_model.LinearExpr] = {}
    if not isinstance(multi, int) or multi:
        for T, coef in inst.ar_s.items():
            if T not in trainers_on:
                continue
            if isinstance(multi, int):
                m.Add(ar >= q(coef) * trainers_on[T])
                ar_count[T] = trainers_on[T]
            else:
                m.Add(ar >= q(coef) * trainers_on[T]).OnlyEnforceIf(multi)
                a = m.NewIntVar(0, W, f"arc{T}")
                m.Add(a == trainers_on[T]).OnlyEnforceIf(multi)
                m.Add(a == 0).OnlyEnforceIf(multi.Not())
                ar_count[T] = a
    lat = q(inst.latency_s) * multi if inst.latency_s else 0
    # sampler counts (exact CPU model): per (bundle, host) integer counts
    ns: dict[int, cp_model.IntVar] = {}
    cnt: dict[int, list[tuple[int, cp_model.IntVar]]] = {}  # host -> [(bundle, count)]
    if cpu_model == "exact":
        for b, os_ in enumerate(inst.by_bundle):
            hosts: dict[int, list[int]] = {}
            for o in os_:
                hosts.setdefault(opts[o].sampler, []).append(o)
            parts = []
            for S, hos in hosts.items():
                cap = min(MAX_SAMPLERS, int(pb.cpus[S]))
                c = m.NewIntVar(0, cap, f"c{b}_{S}")
                u = sum(xs[o] for o in hos)
                m.Add(c <= cap * u)
                m.Add(c >= u)
                parts.append(c)
                cnt.setdefault(S, []).append((b, c))
            n = m.NewIntVar(0, MAX_SAMPLERS, f"n{b}")
            m.Add(n == sum(parts))
            ns[b] = n
            table = [0] + [q(inst.sample_s[b] / k) for k in range(1, MAX_SAMPLERS + 1)]
            z = m.NewIntVar(0, max(table), f"z{b}")
            m.AddElement(n, table, z)
            m.Add(L >= z)
    # cores and memory per machine
    free = pb.free_memory()
    for i in range(pb.M):
        tr = [o for o in on_machine.get(i, [])]
        if cpu_model == "exact":
            samp_terms = [c for _, c in cnt.get(i, [])]
            samp_mem = [int(math.ceil(inst.problem.sampler_bytes(pb.cost(inst.bundles[b])) / KB))
                        * c for b, c in cnt.get(i, [])]
        else:
            samp_terms = [xs[o] for o in samp_on.get(i, [])]
            samp_mem = [int(math.ceil(opts[o].sampler_bytes / KB)) * xs[o]
                        for o in samp_on.get(i, [])]
        if tr or samp_terms:
            m.Add(sum(xs[o] for o in tr) + sum(samp_terms) <= int(pb.cpus[i]))
            m.Add(sum(int(math.ceil(opts[o].host_bytes / KB)) * xs[o] for o in tr)
                  + sum(samp_mem) <= int(math.floor(max(free[i], 0) / KB)))
    # NIC loads
    expr: dict[tuple[str, int], list] = {}
    const: dict[tuple[str, int], float] = {}
    for b, bb in enumerate(inst.base):
        for k, v in bb.items():
            if isinstance(picked[b], int):
                const[k] = const.get(k, 0.0) + v
            else:
                expr.setdefault(k, []).append((picked[b], v))
    coef: dict[tuple[tuple[str, int], int], float] = {}
    for o, op in enumerate(opts):
        for k, v in op.delta.items():
            coef[(k, o)] = coef.get((k, o), 0.0) + v
    for (k, o), v in coef.items():
        expr.setdefault(k, []).append((xs[o], v))
    for T, (ae, ai) in inst.ar_nic.items():
        if T in ar_count:
            expr.setdefault(("e", T), []).append((ar_count[T], ae))
            expr.setdefault(("i", T), []).append((ar_count[T], ai))
    for k in set(expr) | set(const):
        terms = expr.get(k, [])
        m.Add(q(const.get(k, 0.0)) + sum(q(v) * var for var, v in terms) <= L)
    # device time (+ all-reduce) and sampling per bundle
    for _b, os_ in enumerate(inst.by_bundle):
        m.Add(L >= sum(q(opts[o].device_s) * xs[o] for o in os_) + ar + lat)
        if cpu_model != "exact":
            m.Add(L >= sum(q(opts[o].sample_lb_s) * xs[o] for o in os_))
    m.Minimize(L)
    if hint is not None:
        for o, x in xs.items():
            m.AddHint(x, 1 if hint.choice.get(opts[o].bundle) == o else 0)
        for b, n in ns.items():
            if b in hint.choice:
                m.AddHint(n, min(MAX_SAMPLERS, hint.samplers.get(b, 1)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    solver.parameters.log_search_progress = log
    if len(opts) > 4000:  # probing a big assignment model costs more than it proves
        solver.parameters.cp_model_probing_level = 0
    pool = _Pool(xs, ns, opts, unit, pool_size)
    status = solver.Solve(m, pool)
    name = solver.StatusName(status)
    best = pool.found[-1] if pool.found else None
    if best is not None:
        best.objective_s = solver.ObjectiveValue() * unit
    bound = solver.BestObjectiveBound() * unit if best is not None or \
        status == cp_model.OPTIMAL else 0.0
    nvars = len(m.Proto().variables)
    return CpSatResult(inst, name, best, list(pool.found), bound,
                       time.perf_counter() - t0, unit, nvars, cpu_model)


def to_plan(inst: Instance, sol: Solution, placer: str = "cpsat") -> Plan:
    """Turn a model assignment into a plan: devices within slots, then spare cores filled."""
    pb = inst.problem
    free: dict[int, list[int]] = {s: list(pb.slots[s].devices) for s in range(len(pb.slots))}
    trainers = []
    for i, b in enumerate(sorted(sol.choice, key=lambda b: inst.bundles[b])):
        op = inst.options[sol.choice[b]]
        d = free[op.slot].pop(0)
        n = max(1, sol.samplers.get(b, 1))
        trainers.append(TrainerPlan(i, pb.names[op.machine], d, tuple(inst.bundles[b]),
                                    ((pb.names[op.sampler], n),), pb.names[op.machine]))
    return fill_samplers(pb, pb.make_plan(placer, trainers))


# ---------------------------------------------------------------------- the placer


@dataclass
class CpSatOutcome:
    """The model's plan, its pool of good alternatives, and the proven bound."""

    plan: Plan
    pool: list[Plan]
    result: CpSatResult
    lower_bound_iter_s: float  # proven, per iteration


def run_cpsat(problem: Problem, *, time_limit: float = 10.0, seed: int = 0,
              workers: int = 2, placer: str = "cpsat") -> CpSatOutcome:
    """Greedy warm start, relaxed-CPU solve, and the exact CPU model only if cores bind."""
    from gnnsched.placement.baselines import greedy_plan

    t0 = time.perf_counter()
    inst = build_instance(problem)
    start = greedy_plan(problem, bundle_parts(problem), placer=placer)
    upper, _ = problem.seconds_per_iteration(start)
    hint = solution_from_plan(inst, start)
    res = solve(inst, time_limit=time_limit, workers=workers, seed=seed, hint=hint,
                upper_s=upper)
    notes = []
    plans = [to_plan(inst, s, placer) for s in res.pool]
    best_plan = plans[-1] if plans else start
    sampling = max(problem.wl.loads(best_plan).sampler.values())
    if res.best is not None and sampling > res.objective_s + 2 * res.unit_s:
        # spare cores could not bring sampling under L: model the sampler counts exactly
        left = time_limit - (time.perf_counter() - t0)
        hint2 = solution_from_plan(inst, best_plan)
        res2 = solve(inst, time_limit=max(left, 0.5), workers=workers, seed=seed, hint=hint2,
                     upper_s=upper, cpu_model="exact")
        notes.append(f"cores bind: exact sampler-count model ({res2.status})")
        if res2.best is not None:
            res2.bound_s = max(res.bound_s, res2.bound_s)  # both are valid bounds
            plans += [to_plan(inst, s, placer) for s in res2.pool]
            res = res2
    seen: dict[tuple, Plan] = {}
    for p in plans + [start]:
        seen.setdefault(p.key(), p)
    scored = sorted(seen.values(), key=lambda p: problem.seconds_per_iteration(p)[0])
    best = scored[0]
    res.notes.extend(notes)
    return CpSatOutcome(best, scored, res, res.bound_s)


@register("cpsat")
class CpSatPlacer(Placer):
    """The bottleneck model alone (no simulator): CP-SAT's best plan."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        out = run_cpsat(problem, time_limit=budget or 10.0, seed=seed)
        it = problem.wl.iterations
        return out.plan.with_prediction(
            lower_bound_s=out.lower_bound_iter_s * it,
            lower_bound_iteration_s=out.lower_bound_iter_s,
            cpsat={"status": out.result.status, "objective_iteration_s": out.result.objective_s,
                   "bound_iteration_s": out.lower_bound_iter_s, "wall_s": out.result.wall_s,
                   "variables": out.result.variables, "exact_parts": out.result.instance.exact_parts,
                   "cpu_model": out.result.cpu_model})


__all__ = ["CpSatOutcome", "CpSatPlacer", "CpSatResult", "Instance", "Option", "Solution",
           "build_instance", "run_cpsat", "solution_from_plan", "solve", "to_plan"]
