"""CP-SAT over seed shares: how much of every partition's training seeds each machine trains.

The bundle model (:mod:`.cpsat_model`) gives every trainer whole partitions, so trainers never
outnumber partitions and a fast GPU gets the same seeds as a slow one. This model makes the
seeds themselves the decision. For a fixed set of trainer devices (:func:`device_sets`):

* **instance** (:class:`ShareInstance`): per partition, the machines that may train its seeds
  (every trainer machine in small clusters; its own store and the fastest others at scale),
  and per unit of its seeds (``1 / UNITS`` of them) the seconds it adds to every resource per
  iteration: device time at the machine's total GPU speed, sampling on its spare cores, and
  the feature and sampled-edge bytes its stores send over both NICs
  (:meth:`gnnsched.workload.Workload.loads`, with a trainer's mini-batch scaled by its seeds);
* **model**: integers ``x[p, m]`` (units of part ``p`` on machine ``m``) summing to ``UNITS``
  per part, every load below ``L`` (plus the ring all-reduce on each trainer machine), every
  trainer with at least one unit, minimise ``L``: linear, so CP-SAT proves its optimum fast;
* **solution** -> :class:`~gnnsched.plan.Plan`: each machine's seeds are cut across its
  trainers in proportion to their GPU speed (:func:`~gnnsched.placement.placer.seed_line`),
  samplers and gathering on the trainer's machine, spare cores to samplers.

Loads are in units of ``unit_s`` and rounded down, so ``L`` is a lower bound on the
per-iteration load of every share split over the same devices and candidate machines (the
mean-cost model; prefetch windows and barriers are the simulator's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from gnnsched.placement.placer import (
    Placer,
    Problem,
    fill_samplers,
    is_feasible,
    register,
    seed_line,
)
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import SpecError

UNITS = 24  # a partition's seeds in this many units (shares are multiples of 1/24)
CANDIDATES = 6  # at scale: machines besides its own store that may train a partition
EXACT_VARS = 6000  # every trainer machine is a candidate while P x machines stays this small
SCALE = 100_000  # the coarsest load is about this many units


@dataclass(frozen=True)
class Device:
    """One GPU a trainer will use."""

    machine: int
    device: int
    speed: float


@dataclass
class ShareInstance:
    """Every (partition, machine) option and the seconds per unit it adds to each load."""

    problem: Problem
    devices: list[Device]
    machines: list[int]  # machines with trainers
    options: list[list[int]]  # per part: candidate machines
    device_s: dict[tuple[int, int], float]  # (p, m) -> GPU seconds per unit at m's speed
    cpu_s: dict[tuple[int, int], float]  # sampling seconds per unit on m's spare cores
    ingress_s: dict[tuple[int, int], float]  # receive seconds per unit at m
    egress_s: dict[tuple[int, int, int], float]  # (p, m, q): send seconds per unit at store q
    allreduce_s: float  # per iteration, on every trainer's device
    ring_in: dict[int, float]  # machine -> all-reduce seconds on its NIC per iteration
    ring_out: dict[int, float]


def build(problem: Problem, devices: Sequence[Device]) -> ShareInstance:
    """The instance for trainers on `devices` (:class:`ShareInstance`)."""
    wl = problem.wl
    K, B = wl.iterations, problem.job.batch_size
    machines = sorted({d.machine for d in devices})
    speed = {m: sum(d.speed for d in devices if d.machine == m) for m in machines}
    ntr = {m: sum(1 for d in devices if d.machine == m) for m in machines}
    spare = {m: max(1, int(problem.cpus[m]) - ntr[m]) for m in machines}
    if len(machines) * problem.P <= EXACT_VARS:
        options = [list(machines) for _ in range(problem.P)]
    else:  # its own store, then the fastest machines, spread over parts
        fast = sorted(machines, key=lambda m: (-speed[m], m))
        options = []
        for p in range(problem.P):
            own = problem.store_of[p]
            pick = [own] if own in speed else []
            k = p * CANDIDATES
            while len(pick) < CANDIDATES + (1 if own in speed else 0):
                m = fast[k % len(fast)]
                if m not in pick:
                    pick.append(m)
                k += 1
                if k > (p + 2) * CANDIDATES + len(fast):
                    break
            options.append(pick)
    eg, ig = wl.egress_bw, wl.ingress_bw
    dev, cpu, ing, egr = {}, {}, {}, {}
    for p in range(problem.P):
        c = wl.parts[p]  # a mini-batch of B seeds of part p
        per = wl.seeds[p] / UNITS / (K * B)  # one unit, as a share of a batch per iteration
        for m in options[p]:
            dev[(p, m)] = per * c.train_s / speed[m]
            cpu[(p, m)] = per * c.sample_s / spare[m]
            into = sum(v for q, v in c.feat_from.items() if q != m) + \
                sum(v for q, v in c.struct_from.items() if q != m)
            ing[(p, m)] = per * into / ig[m]
            for q in set(c.feat_from) | set(c.struct_from):
                if q != m:
                    b = c.feat_from.get(q, 0.0) + c.struct_from.get(q, 0.0)
                    egr[(p, m, q)] = per * b / eg[q]
    W = len(devices)
    ar_s, ring_in, ring_out = 0.0, {}, {}
    if W > 1 and len(machines) > 1:
        vol = 2.0 * (W - 1) / W * problem.profile.grad_bytes
        slow = min(min(eg[m], ig[m]) / ntr[m] for m in machines)
        ar_s = vol / slow + 2 * (W - 1) * problem.cluster.latency + \
            problem.profile.allreduce_overhead_s
        for m in machines:
            ring_in[m] = ntr[m] * vol / ig[m]
            ring_out[m] = ntr[m] * vol / eg[m]
    return ShareInstance(problem, list(devices), machines, options, dev, cpu, ing, egr, ar_s,
                         ring_in, ring_out)


@dataclass
class ShareSolution:
    units: dict[tuple[int, int], int]  # (p, m) -> units of p's seeds trained on m
    load_s: float  # the model's per-iteration load of this split
    bound_s: float  # proven lower bound over the instance's space
    status: str
    wall_s: float


def solve(inst: ShareInstance, *, time_limit: float = 5.0, seed: int = 0) -> ShareSolution:
    """Minimise the most loaded resource over integer unit splits (see the module doc)."""
    t0 = time.perf_counter()
    pb = inst.problem
    # the load of keeping every part on its own store (or spread evenly), to size the units
    rough = max(sum(inst.device_s[(p, inst.options[p][0])] * UNITS for p in range(pb.P)), 1e-9)
    unit = rough / SCALE

    def q(v: float) -> int:
        return int(math.floor(v / unit))

    md = cp_model.CpModel()
    x = {(p, m): md.NewIntVar(0, UNITS, f"x{p}_{m}") for p in range(pb.P)
         for m in inst.options[p]}
    for p in range(pb.P):
        md.Add(sum(x[(p, m)] for m in inst.options[p]) == UNITS)
    L = md.NewIntVar(0, 1 << 40, "L")
    by_m: dict[int, list[tuple[int, int]]] = {m: [] for m in inst.machines}
    for (p, m) in x:
        by_m[m].append((p, m))
    ar = q(inst.allreduce_s)
    for m, keys in by_m.items():
        ntr = sum(1 for d in inst.devices if d.machine == m)
        md.Add(sum(x[k] for k in keys) >= ntr)  # every trainer gets some seeds
        md.Add(sum(q(inst.device_s[k]) * x[k] for k in keys) + ar <= L)
        md.Add(sum(q(inst.cpu_s[k]) * x[k] for k in keys) <= L)
        md.Add(sum(q(inst.ingress_s[k]) * x[k] for k in keys)
               + q(inst.ring_in.get(m, 0.0)) <= L)
    out: dict[int, list[tuple[int, tuple[int, int]]]] = {}
    for (p, m, s), v in inst.egress_s.items():
        out.setdefault(s, []).append((q(v), (p, m)))
    for s, terms in out.items():
        md.Add(sum(c * x[k] for c, k in terms) + q(inst.ring_out.get(s, 0.0)) <= L)
    md.Minimize(L)
    # hint: every part on its own store where it trains, else spread over its options
    for p in range(pb.P):
        own = pb.store_of[p]
        for m in inst.options[p]:
            md.AddHint(x[(p, m)], UNITS if m == own and own in by_m else 0)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = seed
    st = solver.Solve(md)
    name = solver.StatusName(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SpecError(pb.cluster.source, "trainers",
                        f"the seed-share model found no split ({name})",
                        "more time (--budget) or another placer")
    units = {k: int(solver.Value(v)) for k, v in x.items() if solver.Value(v) > 0}
    return ShareSolution(units, solver.Value(L) * unit, solver.BestObjectiveBound() * unit,
                         name, time.perf_counter() - t0)


def to_plan(inst: ShareInstance, sol: ShareSolution, placer: str = "shares") -> Plan:
    """Trainers from a split: each machine's seeds cut across its GPUs by speed."""
    pb = inst.problem
    names = pb.names
    trainers: list[TrainerPlan] = []
    owned: dict[int, list[tuple[int, int, float]]] = {}  # part -> (trainer, index, share)
    raw: list[tuple[Device, list[int], list[float]]] = []
    for m in inst.machines:
        devs = sorted((d for d in inst.devices if d.machine == m), key=lambda d: d.device)
        keys = sorted(p for (p, mm) in sol.units if mm == m)
        amount = [sol.units[(p, m)] / UNITS * max(float(pb.wl.seeds[p]), 1e-9) for p in keys]
        runs = seed_line(keys, amount, len(devs), [d.speed for d in devs])
        for d, (ps, sh) in zip(devs, runs):
            full = [s * sol.units[(p, m)] / UNITS for p, s in zip(ps, sh)]
            raw.append((d, list(ps), full))
    for i, (_d, ps, sh) in enumerate(raw):
        for j, p in enumerate(ps):
            owned.setdefault(p, []).append((i, j, sh[j]))
    for where in owned.values():  # exact sums: the last holder takes 1 minus the others
        if len(where) == 1:
            i, j, _ = where[0]
            raw[i][2][j] = 1.0
        else:
            i, j, _ = where[-1]
            raw[i][2][j] = 1.0 - sum(s for _, _, s in where[:-1])
    for i, (d, ps, sh) in enumerate(raw):
        n = names[d.machine]
        order = sorted(range(len(ps)), key=lambda j: ps[j])
        whole = all(sh[j] >= 1.0 for j in order)
        trainers.append(TrainerPlan(i, n, d.device, tuple(ps[j] for j in order), ((n, 1),), n,
                                    () if whole else tuple(sh[j] for j in order)))
    plan = pb.make_plan(placer, trainers, (), share_model_s=sol.load_s,
                        share_bound_s=sol.bound_s, share_status=sol.status)
    return fill_samplers(pb, plan)


def device_sets(problem: Problem) -> list[list[Device]]:
    """Candidate trainer devices, ``job.trainers`` of them: the fastest GPUs (ties: on
    machines that store partitions), and GPUs on the stores first (colocation's)."""
    W = problem.W
    all_ = [Device(s.machine, d, s.speed) for s in problem.usable_slots() for d in s.devices]
    stores = set(problem.store_of)
    fast = sorted(all_, key=lambda d: (-d.speed, d.machine not in stores, d.machine, d.device))
    local = sorted(all_, key=lambda d: (d.machine not in stores, -d.speed, d.machine, d.device))
    spread = _spread(fast, W)
    out: list[list[Device]] = []
    for cand in (fast[:W], local[:W], spread):
        key = sorted((d.machine, d.device) for d in cand)
        if len(cand) == W and all(sorted((d.machine, d.device) for d in o) != key for o in out):
            out.append(cand)
    return out


def _spread(devs: Sequence[Device], W: int) -> list[Device]:
    """`W` of `devs` (in preference order), round-robin over machines: NICs shared least."""
    by_m: dict[int, list[Device]] = {}
    for d in devs:
        by_m.setdefault(d.machine, []).append(d)
    order = list(by_m)
    out: list[Device] = []
    while len(out) < W and any(by_m.values()):
        for m in order:
            if by_m[m] and len(out) < W:
                out.append(by_m[m].pop(0))
    return out


def share_plans(problem: Problem, *, time_limit: float = 10.0, seed: int = 0
                ) -> list[tuple[Plan, ShareSolution]]:
    """A plan per candidate device set (:func:`device_sets`) that fits, best model load
    first."""
    sets = device_sets(problem)
    out = []
    for i, devs in enumerate(sets):
        inst = build(problem, devs)
        try:
            sol = solve(inst, time_limit=max(0.5, time_limit / (len(sets) - i)), seed=seed)
        except SpecError:
            continue
        plan = to_plan(inst, sol)
        if is_feasible(problem, plan):
            out.append((plan, sol))
    return sorted(out, key=lambda ps: ps[1].load_s)


@register("shares")
class SharePlacer(Placer):
    """The seed-share model alone: CP-SAT chooses how much of every partition each machine
    trains, for the best of a few device sets (no simulator)."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        found = share_plans(problem, time_limit=min(20.0, budget or 10.0), seed=seed)
        if not found:
            raise SpecError(problem.cluster.source, "trainers",
                            "no seed-share split fits the cluster's memory and cores",
                            "another placer, or more memory")
        best = min(found, key=lambda ps: problem.seconds_per_iteration(ps[0])[0])[0]
        return best


__all__ = ["Device", "SharePlacer", "ShareInstance", "ShareSolution", "build", "device_sets",
           "share_plans", "solve", "to_plan"]
