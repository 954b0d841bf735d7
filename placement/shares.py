"""CP-SAT over seed shares: how much of every partition's training seeds each trainer owns.

The bundle model (:mod:`.cpsat_model`) gives every trainer whole partitions: a fast GPU gets
the seeds of a slow one, a skewed partition makes its trainer the straggler of every
iteration, and trainers cannot outnumber partitions. Here the seeds are the decision, on a
placement already made (devices, sampler hosts, gathering: from colocation, greedy, CP-SAT or
the search):

* **instance** (:class:`ShareInstance`): per partition, the trainers that may take its seeds
  (every trainer in small clusters; at scale its current owners, trainers on the same
  machines, on its store, and those already pulling from its store: ``CANDIDATES``), and per
  *unit* of its seeds (``1 / UNITS``) the
  seconds it adds to every resource. A trainer's mean mini-batch is linear in the seeds it owns
  (:meth:`gnnsched.workload.Workload.trainer_cost`: each part's mini-batch weighted by
  ``seeds x share / (iterations x batch)``), so every load of :meth:`Workload.loads` is a sum
  of per-unit terms: device time at the trainer's speed (plus the all-reduce), its sampler
  pool, each sampler host's cores, and the bytes of hops, blocks, features and relays on both
  NICs of every machine;
* **model**: integers ``x[p, w]`` summing to ``UNITS`` per part, every trainer with at least
  one unit and a mini-batch its GPU memory holds, every load at most ``L``; minimise ``L``,
  then, with ``L`` held, the slowest trainer's device time (the straggler every barrier
  waits for, which the bottleneck alone does not see when a NIC binds);
* **solution** -> the same placement with ``shares`` (whole parts where a trainer has all of
  one), spare cores to samplers.

Loads are integers in units of ``unit_s``, coefficients rounded down: ``L`` is a lower bound
on the most loaded resource of every share split of this placement over the candidates (the
mean-cost model of :meth:`Workload.loads`; prefetch windows and barriers are the
simulator's). The placement's own split is one of them, so the result never loads its
bottleneck more than the plan it started from.

**Reproducible.** Many splits load the bottleneck alike, and which of them the solver
returns moves the simulated epoch by a few percent. So the work is bounded, not the time:
one worker and a deterministic-time limit (:func:`effort`) give the same split whatever the
machine's load or the caller's budget, and the ``shares`` placer's plan is then exactly the
search's ``shares`` start. A wall-clock limit is only a safety cap. At 256 hosts (about
6,000 variables) that effort ends in presolve with no split, and each placement keeps its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from gnnsched.placement.base import Placer, register
from gnnsched.placement.feasibility import fill_samplers, is_feasible
from gnnsched.placement.problem import Problem
from gnnsched.plan import Plan
from gnnsched.prediction import Prediction, ShareModel
from gnnsched.spec import SpecError

UNITS = 24  # a partition's seeds in this many units: shares are multiples of 1/24
CANDIDATES = 8  # trainers that may take a partition's seeds (beyond ALL_TRAINERS)
ALL_TRAINERS = 4096  # every trainer is a candidate for every part while P x W is this small
SCALE = 200_000  # the plan's bottleneck is about this many model units
EFFORT = 0.5  # CP-SAT deterministic seconds per phase, for models up to EFFORT_VARS variables
EFFORT_VARS = 2000  # larger models get EFFORT x EFFORT_VARS / variables (presolve grows too)
WALL_CAP = 20.0  # seconds: a safety cap on one solve when the caller gives none


@dataclass
class ShareInstance:
    """Per (part, trainer) option, the model units it adds to every load (see module doc)."""

    problem: Problem
    plan: Plan
    options: list[list[int]]  # per part: candidate trainer positions
    terms: dict[tuple[int, int], dict[tuple[str, int], float]]  # (p, w) -> load key -> s/unit
    fixed: dict[tuple[str, int], float]  # load key -> seconds regardless of the split
    gpu_room: list[float]  # per trainer: bytes its GPU holds for two mini-batches
    gpu_per_unit: dict[tuple[int, int], float]  # (p, w) -> GPU bytes per unit
    unit_s: float


def _candidates(problem: Problem, plan: Plan) -> list[list[int]]:
    """Trainers that may take each part's seeds: owners first, then trainers on an owner's
    machine, on the part's store, and gathering or sampling where an owner does."""
    ts = plan.trainers
    on_machine: dict[str, list[int]] = {}
    for w, t in enumerate(ts):
        on_machine.setdefault(t.machine, []).append(w)
    pulls: dict[str, list[int]] = {}
    for w, t in enumerate(ts):
        for m in {t.fetch_at, *(s for s, _ in t.samplers)}:
            pulls.setdefault(m, []).append(w)
    owners: dict[int, list[int]] = {}
    for w, t in enumerate(ts):
        for p in t.parts:
            owners.setdefault(p, []).append(w)
    if problem.P * len(ts) <= ALL_TRAINERS:
        return [list(dict.fromkeys(owners.get(p, []) + list(range(len(ts)))))
                for p in range(problem.P)]
    out = []
    for p in range(problem.P):
        store = problem.names[problem.store_of[p]]
        pick = list(dict.fromkeys(owners.get(p, [])))
        for o in list(pick):
            for w in on_machine.get(ts[o].machine, []) + pulls.get(ts[o].fetch_at, []):
                if len(pick) < CANDIDATES and w not in pick:
                    pick.append(w)
        for w in on_machine.get(store, []) + pulls.get(store, []):
            if len(pick) < CANDIDATES and w not in pick:
                pick.append(w)
        out.append(pick)
    return out


def build(problem: Problem, plan: Plan) -> ShareInstance:
    """The instance for `plan`'s placement (:class:`ShareInstance`)."""
    wl = problem.wl
    idx = problem.cluster.machine_index
    K, B = wl.iterations, problem.job.batch_size
    options = _candidates(problem, plan)
    usable = {}  # sampler host -> cores its samplers use (as Workload.loads)
    for t in plan.trainers:
        for m, c in t.samplers:
            usable[idx(m)] = usable.get(idx(m), 0) + c
    usable = {m: max(min(int(problem.cpus[m]), n), 1) for m, n in usable.items()}
    terms: dict[tuple[int, int], dict[tuple[str, int], float]] = {}
    gpu_unit: dict[tuple[int, int], float] = {}
    for p in range(problem.P):
        c = wl.parts[p]
        a = float(wl.seeds[p]) / UNITS / (K * B)  # one unit as a share of a mini-batch
        for w in options[p]:
            t = plan.trainers[w]
            T, F, n = idx(t.machine), idx(t.fetch_at), t.num_samplers
            d: dict[tuple[str, int], float] = {}

            def add(key: tuple[str, int], v: float, d: dict = d) -> None:
                if v > 0:
                    d[key] = d.get(key, 0.0) + v

            add(("device", w), a * c.train_s / wl.speed(t))
            add(("sampler", w), a * c.sample_s / n)
            for mname, cnt in t.samplers:
                S, f = idx(mname), cnt / n
                add(("cpu", S), a * f * c.sample_s / usable[S])
                for m, v in c.struct_from.items():
                    if m != S:
                        add(("egress", m), a * f * v / wl.egress_bw[m])
                        add(("ingress", S), a * f * v / wl.ingress_bw[S])
                if S != T:
                    add(("egress", S), a * f * c.block_bytes / wl.egress_bw[S])
                    add(("ingress", T), a * f * c.block_bytes / wl.ingress_bw[T])
            for m, v in c.feat_from.items():
                if m != F:
                    add(("egress", m), a * v / wl.egress_bw[m])
                    add(("ingress", F), a * v / wl.ingress_bw[F])
            if F != T:
                add(("egress", F), a * c.feat_bytes / wl.egress_bw[F])
                add(("ingress", T), a * c.feat_bytes / wl.ingress_bw[T])
            terms[(p, w)] = d
            gpu_unit[(p, w)] = 2 * a * (c.feat_bytes + c.block_bytes)
    fixed: dict[tuple[str, int], float] = {}
    ar, ar_b = wl.allreduce_s(plan), wl.allreduce_bytes(plan)
    multi = len({t.machine for t in plan.trainers}) > 1
    for w, t in enumerate(plan.trainers):
        fixed[("device", w)] = ar
        if multi:
            T = idx(t.machine)
            fixed[("egress", T)] = fixed.get(("egress", T), 0.0) + ar_b / wl.egress_bw[T]
            fixed[("ingress", T)] = fixed.get(("ingress", T), 0.0) + ar_b / wl.ingress_bw[T]
    room = []
    for t in plan.trainers:
        gpu = problem.cluster.machine(t.machine).gpus[t.device]
        room.append(gpu.memory - problem.profile.model_bytes)
    bottleneck = max(problem.wl.loads(plan).bottleneck()[1], 1e-9)
    return ShareInstance(problem, plan, options, terms, fixed, room, gpu_unit,
                         bottleneck / SCALE)


@dataclass
class ShareSolution:
    units: dict[tuple[int, int], int]  # (p, w) -> units of part p's seeds trainer w owns
    load_s: float  # the model's most loaded resource per iteration
    bound_s: float  # proven lower bound over the instance's splits
    status: str
    wall_s: float


def effort(variables: int) -> float:
    """CP-SAT deterministic seconds per phase for a model of `variables` share variables."""
    return EFFORT * min(1.0, EFFORT_VARS / max(variables, 1))


def solve(inst: ShareInstance, *, time_limit: float | None = None, seed: int = 0
          ) -> ShareSolution:
    """Minimise the most loaded resource over integer unit splits (see the module doc), each
    phase for :func:`effort` deterministic seconds on one worker; `time_limit` caps the wall
    time of both phases together (a safety: where it binds, the split depends on the load)."""
    t0 = time.perf_counter()
    pb, unit = inst.problem, inst.unit_s

    def q(v: float) -> int:
        return int(math.floor(v / unit))

    md = cp_model.CpModel()
    x = {(p, w): md.NewIntVar(0, UNITS, f"x{p}_{w}") for p in range(pb.P)
         for w in inst.options[p]}
    for p in range(pb.P):
        md.Add(sum(x[(p, w)] for w in inst.options[p]) == UNITS)
    by_w: dict[int, list[tuple[int, int]]] = {}
    loads: dict[tuple[str, int], list[tuple[int, tuple[int, int]]]] = {}
    for k, d in inst.terms.items():
        by_w.setdefault(k[1], []).append(k)
        for key, v in d.items():
            loads.setdefault(key, []).append((q(v), k))
    W = len(inst.plan.trainers)
    for w in range(W):
        keys = by_w.get(w, [])
        if not keys:
            raise SpecError(pb.job.source, "trainers", f"trainer {w} may take no partition's "
                            "seeds in the share model", "another placer")
        md.Add(sum(x[k] for k in keys) >= 1)  # every trainer trains something
        md.Add(sum(int(inst.gpu_per_unit[k]) * x[k] for k in keys) <= int(inst.gpu_room[w]))
    L = md.NewIntVar(0, 1 << 50, "L")
    for key in dict.fromkeys([*loads, *inst.fixed]):  # ordered: a set's order of strings
        # changes with the process's hash seed, and with it which of several optima is found
        md.Add(sum(c * x[k] for c, k in loads.get(key, []) if c) + q(inst.fixed.get(key, 0.0))
               <= L)
    md.Minimize(L)
    shares_of = {(p, w): s for w, t in enumerate(inst.plan.trainers)
                 for p, s in zip(t.parts, t.seed_shares)}
    for k, v in x.items():  # hint: the plan's own split (rounded to units)
        md.AddHint(v, int(round(shares_of.get(k, 0.0) * UNITS)))
    cap = WALL_CAP if time_limit is None else time_limit
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = cap
    solver.parameters.max_deterministic_time = effort(len(x))
    solver.parameters.num_workers = 1  # one worker: the same split every run
    solver.parameters.random_seed = seed
    st = solver.Solve(md)
    name = solver.StatusName(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SpecError(pb.job.source, "trainers",
                        f"the seed-share model found no split ({name})",
                        "more time (--budget) or another placer")
    best_L, bound = solver.Value(L), solver.BestObjectiveBound() * unit
    units = {k: int(solver.Value(v)) for k, v in x.items() if solver.Value(v) > 0}
    # phase 2: the bottleneck held, the slowest device (the barrier's straggler) minimised
    left = cap - (time.perf_counter() - t0)
    if left > 0.2:
        md.Add(L <= best_L)
        D = md.NewIntVar(0, 1 << 50, "D")
        for w in range(W):
            key = ("device", w)
            md.Add(sum(c * x[k] for c, k in loads.get(key, []) if c)
                   + q(inst.fixed.get(key, 0.0)) <= D)
        md.Minimize(D)
        md.ClearHints()
        for k, v in x.items():
            md.AddHint(v, units.get(k, 0))
        solver.parameters.max_time_in_seconds = left
        st2 = solver.Solve(md)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            units = {k: int(solver.Value(v)) for k, v in x.items() if solver.Value(v) > 0}
    return ShareSolution(units, best_L * unit, bound, name, time.perf_counter() - t0)


def to_plan(inst: ShareInstance, sol: ShareSolution, placer: str = "shares") -> Plan:
    """The instance's placement with the solution's seeds (whole parts stay whole)."""
    per_w: dict[int, list[tuple[int, int]]] = {}
    for (p, w), u in sorted(sol.units.items()):
        per_w.setdefault(w, []).append((p, u))
    trainers = []
    for w, t in enumerate(inst.plan.trainers):
        own = per_w.get(w, [])
        parts = tuple(p for p, _ in own)
        shares = tuple(u / UNITS for _, u in own)
        trainers.append(replace(t, parts=parts,
                                shares=() if all(u == UNITS for _, u in own) else shares))
    plan = replace(inst.plan, placer=placer, trainers=tuple(trainers),
                   prediction=Prediction(share_model=ShareModel(sol.load_s, sol.bound_s,
                                                                sol.status)))
    return fill_samplers(inst.problem, plan)


def rebalance(problem: Problem, plan: Plan, *, time_limit: float | None = None, seed: int = 0
              ) -> Plan | None:
    """`plan`'s placement with the seed split that loads its bottleneck least, or None when
    that split does not fit (memory, cores) or loads it no less than the plan does."""
    inst = build(problem, plan)
    try:
        sol = solve(inst, time_limit=time_limit, seed=seed)
    except SpecError:
        return None
    out = to_plan(inst, sol, plan.placer)
    if not is_feasible(problem, out):
        return None
    if not _better(problem, out, plan):
        return None
    return out


def _better(problem: Problem, a: Plan, b: Plan) -> bool:
    """Whether `a` loads its most loaded resource less than `b` does, or as much (to 0.1%)
    with a faster slowest device (the barrier's straggler)."""
    la, lb = problem.wl.loads(a), problem.wl.loads(b)
    ta, tb = la.bottleneck()[1], lb.bottleneck()[1]
    if ta < tb * (1 - 1e-3):
        return True
    da, db = max(la.device.values(), default=0.0), max(lb.device.values(), default=0.0)
    return ta <= tb * (1 + 1e-3) and da < db * (1 - 1e-3)


def starting_plans(problem: Problem, *, seed: int = 0) -> list[Plan]:
    """The placements shares are rebalanced on: colocation (even and whole) and greedy."""
    from gnnsched.placement.base import get_placer

    out: list[Plan] = []
    for name in ("colocation", "colocation-even", "greedy"):
        try:
            p = get_placer(name).place_problem(problem, seed=seed)
        except SpecError:
            continue
        if len(p.trainers) == problem.W and all(p.key() != o.key() for o in out):
            out.append(p)
    return out


def share_plans(problem: Problem, starts: Sequence[Plan], *, time_limit: float | None = None,
                seed: int = 0) -> list[Plan]:
    """Every start rebalanced (those that improve), best model load first; `time_limit`
    (a safety cap on them all) is shared out over the starts left."""
    out = []
    t0 = time.perf_counter()
    for i, p in enumerate(starts):
        cap = None if time_limit is None else max(
            0.5, (time_limit - (time.perf_counter() - t0)) / (len(starts) - i))
        r = rebalance(problem, p, time_limit=cap, seed=seed)
        if r is not None:
            out.append(r)
    return sorted(out, key=lambda p: problem.wl.loads(p).bottleneck()[1])


@register("shares")
class SharePlacer(Placer):
    """The seed-share model alone: colocation and greedy placements with the seed split
    CP-SAT finds best for each (no simulator); the best by the cost model."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        starts = starting_plans(problem, seed=seed)
        if not starts:
            raise SpecError(problem.job.source, "trainers", "no placement to split seeds on",
                            "another placer")
        found = share_plans(problem, starts, time_limit=min(20.0, budget or 10.0), seed=seed)
        best = starts[0]
        for p in starts[1:] + found:
            if _better(problem, p, best):
                best = p
        return replace(best, placer="shares")


__all__ = ["SharePlacer", "ShareInstance", "ShareSolution", "build", "rebalance",
           "share_plans", "solve", "starting_plans", "to_plan"]
