"""Lower bounds: what no online policy can beat.

The two bounds ``gnnsched plan`` and ``gnnsched simulate`` report, defined once here and
printed by both with the same words and numbers (:func:`bound_lines`, :func:`bound_fields`):

* the **per-plan bound** (:func:`per_plan_bound`, :data:`PER_PLAN_MEANS`): no schedule of this
  placement beats it — the larger of a resource's work with the pipeline's fill and drain
  (:func:`flow_bound`) and the longest dependency chain over the epoch, on the mini-batches
  the simulator draws with the seed (:func:`instance_bound` of the whole epoch's
  :class:`Instance`, feature caches included);
* the **any-placement bound** (:func:`any_placement_bound`, :data:`ANY_PLACEMENT_MEANS`): no
  placement beats it — CP-SAT's proven bound on the same draws, with the fill and drain no
  placement avoids and the busiest store's unavoidable egress
  (:func:`gnnsched.placement.cpsat.simulated_lower_bound`, times the iterations), lowered to
  the per-plan bound of every plan compared. ``plan`` computes it and stores it in the plan;
  ``simulate`` prints it from there when its seed and draws are the plan's.

The parts:

* :func:`plan_bound` — per plan, from mean costs (``Workload.bound``): the most loaded
  resource per iteration and the longest dependency chain. What placers optimise.
* :func:`instance_bound` — the same two arguments on a drawn :class:`Instance` (the actual
  mini-batch sizes the simulator runs), so it is a true lower bound of every simulated epoch:
  :func:`resource_bound` (the most loaded resource), :func:`flow_bound` (each resource's work
  with the pipeline's fill and drain, by :func:`one_machine_bound`) and :func:`chain_bound`
  (the barrier and prefetch-window chain of every trainer's batches).
* :func:`isolation_bound` — the per-iteration *upper* bound the ``gnnsched`` policy guarantees
  (see :mod:`gnnsched.policy`).

Exact schedules of small instances (CP-SAT's optimum, to measure each policy's gap to it) are
test code: ``tests/exact_schedules.py``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gnnsched.instance import Instance
from gnnsched.plan import Plan
from gnnsched.prediction import Prediction
from gnnsched.workload import Bound, Workload


def plan_bound(workload: Workload, plan: Plan) -> Bound:
    """Per-plan lower bound from mean costs (re-export of ``Workload.bound``)."""
    return workload.bound(plan)


def _min_over(choices: list[float]) -> float:
    return min(choices) if choices else 0.0


def instance_bound(inst: Instance, prefetch: int | None = None) -> Bound:
    """Lower bound of a drawn instance: most loaded resource and the dependency chain.

    ``iteration_s`` is the most loaded resource's work (:func:`resource_bound`) per
    iteration, ``chain_s`` the longest dependency chain (:func:`chain_bound`, with prefetch
    depth ``prefetch``, default the depths the built-in policies allow), and ``epoch_s`` the
    larger of the chain and that resource's work with its fill and drain
    (:func:`flow_bound`): no simulated epoch of the instance is shorter.
    """
    name, res = resource_bound(inst)
    starts, chain = _chain(inst, prefetch)
    fname, flow = flow_bound(inst, prefetch, starts)
    return Bound(res / inst.K, chain, max(flow, res, chain),
                 fname if max(flow, res) >= chain else "barrier chain")


def resource_bound(inst: Instance) -> tuple[str, float]:
    """The most loaded resource of a drawn instance and its seconds of work over the epoch.

    Every resource (a NIC direction, a machine's sampling cores, a trainer's samplers, a
    device) must do its work one unit of capacity at a time, so the epoch lasts at least the
    largest of these. Work whose resource depends on which sampler machine builds a batch (a
    trainer with samplers on several hosts) is counted at its minimum over those hosts.
    """
    M, W, K = inst.M, inst.W, inst.K
    out, inn = [0.0] * M, [0.0] * M
    cpu = [0.0] * M
    slots_on = [0] * M
    trainer_cpu = 0.0
    for w in range(W):
        S_all = [m for m, _ in inst.samplers[w]]
        for m, c in inst.samplers[w]:
            slots_on[m] += c
        Tw, Fw = inst.T[w], inst.F[w]
        single = len(S_all) == 1
        tot_s = sum(inst.sample_s[w])
        trainer_cpu = max(trainer_cpu, tot_s / sum(c for _, c in inst.samplers[w]))
        if single:
            cpu[S_all[0]] += tot_s
        for k in range(K):
            for m, b in inst.struct[w][k]:
                out[m] += _min_over([0.0 if m == S else b for S in S_all])
                if single and m != S_all[0]:
                    inn[S_all[0]] += b
            if single and S_all[0] != Tw:
                out[S_all[0]] += inst.block[w][k]
            inn[Tw] += _min_over([0.0 if S == Tw else inst.block[w][k] for S in S_all])
            for m, b in inst.feat[w][k]:
                if m != Fw:
                    out[m] += b
                    inn[Fw] += b
            if Fw != Tw:
                out[Fw] += inst.feat_total[w][k]
                inn[Tw] += inst.feat_total[w][k]
    A = inst.allreduce_s
    for m, g in inst.grad_rate.items():
        out[m] += K * g * A
        inn[m] += K * g * A
    best = ("nothing", 0.0)

    def consider(name: str, v: float) -> None:
        nonlocal best
        if v > best[1]:
            best = (name, v)

    for m in range(M):
        consider(f"egress of {inst.names[m]}", out[m] / inst.egress[m])
        consider(f"ingress of {inst.names[m]}", inn[m] / inst.ingress[m])
        if cpu[m] > 0:
            consider(f"cpu of {inst.names[m]}", cpu[m] / max(min(inst.cores[m], slots_on[m]), 1))
    usable = sum(min(inst.cores[m], slots_on[m]) for m in range(M))
    consider("all sampler cores", sum(map(sum, inst.sample_s)) / max(usable, 1))
    consider("samplers of one trainer", trainer_cpu)
    for w in range(W):
        consider(f"device of trainer {w}", sum(inst.train_s[w]) + K * A)
    return best


def chain_bound(inst: Instance, prefetch: int | None = None) -> float:
    """Epoch seconds of the longest dependency chain of a drawn instance.

    Trainer ``w`` trains batch ``k`` only after the barrier ``B_{k-1}`` (every trainer's
    training of batch ``k - 1`` and the all-reduce), and once the batch was sampled and its
    block and features arrived, which takes at least :func:`_batch_chain` (every transfer
    alone at full rate, on its fastest sampler host) from the start of its sampling; with
    prefetch depth ``d`` that sampling starts only once batch ``k - d`` started training. So
    ``start[w][k] >= max(B_{k-1}, start[w][k-d] + chain[w][k])`` and
    ``B_k = max_w(start[w][k] + train[w][k]) + A``: the epoch lasts at least ``B_{K-1}``.
    ``prefetch`` None takes the depth the built-in policies allow each trainer
    (:meth:`Instance.prefetch_depths`); a larger depth only weakens the bound.
    """
    return _chain(inst, prefetch)[1]


def _chain(inst: Instance, prefetch: int | None = None) -> tuple[list[list[float]], float]:
    """:func:`chain_bound`'s recursion: the earliest training start of every batch (each a
    lower bound of its start in any schedule) and ``B_{K-1}``."""
    W, K, A = inst.W, inst.K, inst.allreduce_s
    depth = inst.prefetch_depths(prefetch)
    lat = [[_batch_latency(inst, w, k) for k in range(K)] for w in range(W)]
    start = [[0.0] * K for _ in range(W)]
    barrier = 0.0
    for k in range(K):
        last = 0.0
        for w in range(W):
            d = depth[w]
            ready = lat[w][k] + (start[w][k - d] if k >= d else 0.0)
            start[w][k] = max(barrier, ready)
            last = max(last, start[w][k] + inst.train_s[w][k])
        barrier = last + A
    return start, barrier


def one_machine_bound(jobs: list[tuple[float, float, float]]) -> float:
    """Least ``max(C_j + q_j)`` of jobs ``(r_j, p_j, q_j)`` on one machine with preemption
    (Jackson's preemptive schedule: at every moment run the released job with the longest
    tail ``q``), which is optimal for that relaxation. A resource shared by fluid rates
    (a NIC, a pool of cores at its total rate) is such a machine with preemption allowed,
    so this bounds any schedule whose job ``j`` needs ``p_j`` of the resource's time after
    ``r_j`` and leaves at least ``q_j`` of the epoch after it."""
    if not jobs:
        return 0.0
    order = sorted(jobs)
    heap: list[tuple[float, float]] = []
    t, i, n, best = 0.0, 0, len(order), 0.0
    while i < n or heap:
        if not heap:
            t = max(t, order[i][0])
        while i < n and order[i][0] <= t:
            r, p, q = order[i]
            heapq.heappush(heap, (-q, p))
            i += 1
        nq, p = heapq.heappop(heap)
        nxt = order[i][0] if i < n else math.inf
        run = min(p, nxt - t)
        t += run
        if p - run > 1e-15 * max(1.0, t):
            heapq.heappush(heap, (nq, p - run))
        else:
            best = max(best, t - nq)
    return best


def flow_bound(inst: Instance, prefetch: int | None = None,
               starts: list[list[float]] | None = None) -> tuple[str, float]:
    """The most loaded resource with its fill and drain: epoch seconds and its name.

    :func:`resource_bound` counts a resource's work alone; but nothing crosses a NIC before
    some batch is sampled, and after a batch's last byte it still trains and all-reduces, so
    with few iterations per epoch the pipeline's fill and drain add to the work. Every piece
    of work on a resource (the same accounting as :func:`resource_bound`) becomes a job with
    a release (its batch's sampling cannot end earlier: the earliest start of batch
    ``k - d``'s training from :func:`_chain`, plus its sampling time), a length (its share of
    the resource) and a tail (its batch's training, the all-reduce, and every later
    iteration's slowest training and all-reduce); a gradient slice of the all-reduce of
    iteration ``k`` is released when the slowest training of ``k`` could end at the earliest
    and is followed by the later iterations. :func:`one_machine_bound` of each resource's
    jobs is a lower bound of the epoch; this is the largest, never below
    :func:`resource_bound`.
    """
    W, K, A = inst.W, inst.K, inst.allreduce_s
    if starts is None:
        starts = _chain(inst, prefetch)[0]
    depth = inst.prefetch_depths(prefetch)
    slow = [max(inst.train_s[w][k] for w in range(W)) + A for k in range(K)]
    rest = [0.0] * (K + 1)  # the least time of iterations k..K-1 once iteration k-1 ended
    for k in range(K - 1, -1, -1):
        rest[k] = rest[k + 1] + slow[k]
    jobs: dict[tuple[str, int], list[tuple[float, float, float]]] = {}

    def add(key: tuple[str, int], work: float, r: float, q: float) -> None:
        if work > 0:
            jobs.setdefault(key, []).append((r, work, q))

    slots_on = [0] * inst.M
    for w in range(W):
        for m, c in inst.samplers[w]:
            slots_on[m] += c
    usable = sum(min(inst.cores[m], slots_on[m]) for m in range(inst.M))
    cap: dict[tuple[str, int], float] = {}  # work per second (keys absent: 1)
    for m in range(inst.M):
        cap[("egress", m)], cap[("ingress", m)] = inst.egress[m], inst.ingress[m]
        cap[("cpu", m)] = float(max(min(inst.cores[m], slots_on[m]), 1))
    lat = inst.latency
    for w in range(W):
        S_all = [m for m, _ in inst.samplers[w]]
        single = len(S_all) == 1
        Tw, Fw = inst.T[w], inst.F[w]
        n_slots = sum(c for _, c in inst.samplers[w])
        for k in range(K):
            d = depth[w]
            r0 = starts[w][k - d] if k >= d else 0.0
            s = inst.sample_s[w][k]
            r = r0 + s
            q = lat + inst.train_s[w][k] + A + rest[k + 1]
            qs = inst.train_s[w][k] + A + rest[k + 1]  # after sampling: at least this
            add(("samplers", w), s / max(n_slots, 1), r0, qs)
            add(("all cores", -1), s / max(usable, 1), r0, qs)
            if single:
                add(("cpu", S_all[0]), s, r0, qs)
            for m, b in inst.struct[w][k]:
                add(("egress", m), _min_over([0.0 if m == S else b for S in S_all]), r, q)
                if single and m != S_all[0]:
                    add(("ingress", S_all[0]), b, r, q)
            if single and S_all[0] != Tw:
                add(("egress", S_all[0]), inst.block[w][k], r, q)
            add(("ingress", Tw), _min_over([0.0 if S == Tw else inst.block[w][k]
                                            for S in S_all]), r, q)
            for m, b in inst.feat[w][k]:
                if m != Fw:
                    add(("egress", m), b, r, q)
                    add(("ingress", Fw), b, r, q)
            if Fw != Tw:
                add(("egress", Fw), inst.feat_total[w][k], r, q)
                add(("ingress", Tw), inst.feat_total[w][k], r, q)
    for k in range(K):  # the all-reduce of iteration k
        r = max(starts[w][k] + inst.train_s[w][k] for w in range(W))
        for m, g in inst.grad_rate.items():
            add(("egress", m), g * A, r, rest[k + 1])
            add(("ingress", m), g * A, r, rest[k + 1])
    best = ("nothing", 0.0)
    for key in sorted(jobs):
        kind, i = key
        c = cap.get(key, 1.0)
        v = one_machine_bound([(r, work / c, q) for r, work, q in jobs[key]])
        if v > best[1]:
            if kind in ("egress", "ingress", "cpu"):
                name = f"{kind} of {inst.names[i]}"
            else:
                name = f"samplers of trainer {i}" if kind == "samplers" else "all sampler cores"
            best = (name, v)
    return best


def _batch_latency(inst: Instance, w: int, k: int) -> float:
    """:func:`_batch_chain`'s time on the trainer's fastest sampler host (no resource list)."""
    lat = inst.latency
    Tw, Fw = inst.T[w], inst.F[w]
    eg, ig = inst.egress, inst.ingress
    ft = 0.0
    for m, b in inst.feat[w][k]:
        if m != Fw and b > 0:
            ft = max(ft, b / min(eg[m], ig[Fw]) + lat)
    total = inst.feat_total[w][k]
    if Fw != Tw and total > 0:
        ft += total / min(eg[Fw], ig[Tw]) + lat
    block = inst.block[w][k]
    best = math.inf
    for S, _ in inst.samplers[w]:
        st = 0.0
        for m, b in inst.struct[w][k]:
            if m != S and b > 0:
                st = max(st, b / min(eg[m], ig[S]) + lat)
        blk = block / min(eg[S], ig[Tw]) + lat if S != Tw and block > 0 else 0.0
        best = min(best, st + max(blk, ft))
    return inst.sample_s[w][k] + best


def _batch_chain(inst: Instance, w: int, k: int, S: int) -> tuple[float, list[tuple[str, int]]]:
    """Batch (w, k) sampled on S, every transfer alone at full rate: time and resources."""
    lat = inst.latency
    Tw, Fw = inst.T[w], inst.F[w]
    t = inst.sample_s[w][k]
    res: list[tuple[str, int]] = [("cpu", S)]
    st = 0.0
    for m, b in inst.struct[w][k]:
        if m != S and b > 0:
            st = max(st, b / inst.rate(m, S) + lat)
            res += [("out", m), ("in", S)]
    t += st
    blk = 0.0
    if S != Tw and inst.block[w][k] > 0:
        blk = inst.block[w][k] / inst.rate(S, Tw) + lat
        res += [("out", S), ("in", Tw)]
    ft = 0.0
    for m, b in inst.feat[w][k]:
        if m != Fw and b > 0:
            ft = max(ft, b / inst.rate(m, Fw) + lat)
            res += [("out", m), ("in", Fw)]
    if Fw != Tw and inst.feat_total[w][k] > 0:
        ft += inst.feat_total[w][k] / inst.rate(Fw, Tw) + lat
        res += [("out", Fw), ("in", Tw)]
    return t + max(blk, ft), res


def iteration_loads(inst: Instance, k: int) -> dict[tuple[str, int], float]:
    """Seconds of work that ranks with iteration k under gnnsched on every resource: all of
    iteration k, plus the remote hops of iteration k + 1. Work whose resource depends on the
    sampler host is counted on every host it might use (an over-estimate, as an upper bound
    needs)."""
    L: dict[tuple[str, int], float] = {}

    def add(key: tuple[str, int], v: float) -> None:
        L[key] = L.get(key, 0.0) + v

    for w in range(inst.W):
        Tw, Fw = inst.T[w], inst.F[w]
        for S, _ in inst.samplers[w]:
            add(("cpu", S), inst.sample_s[w][k] / inst.cores[S])
            for j in (k, k + 1) if k + 1 < inst.K else (k,):
                for m, b in inst.struct[w][j]:
                    if m != S:
                        add(("out", m), b / inst.egress[m])
                        add(("in", S), b / inst.ingress[S])
            if S != Tw:
                add(("out", S), inst.block[w][k] / inst.egress[S])
                add(("in", Tw), inst.block[w][k] / inst.ingress[Tw])
        for m, b in inst.feat[w][k]:
            if m != Fw:
                add(("out", m), b / inst.egress[m])
                add(("in", Fw), b / inst.ingress[Fw])
        if Fw != Tw:
            add(("out", Fw), inst.feat_total[w][k] / inst.egress[Fw])
            add(("in", Tw), inst.feat_total[w][k] / inst.ingress[Tw])
    return L


def isolation_bound(inst: Instance, k: int) -> float:
    """Right-hand side of the gnnsched guarantee: B_k - B_{k-1} never exceeds this."""
    L = iteration_loads(inst, k)
    s_max = max(max(row) for row in inst.sample_s)
    worst = 0.0
    for w in range(inst.W):
        for S, _ in inst.samplers[w]:
            c, res = _batch_chain(inst, w, k, S)
            worst = max(worst, c + inst.train_s[w][k] + sum(L.get(r, 0.0) for r in set(res)))
    return inst.allreduce_s + s_max + worst


# ------------------------------------------------------------------------------ reported


PER_PLAN_NAME = "per-plan bound"
PER_PLAN_MEANS = ("no schedule of this placement beats it: the larger of a resource's work "
                  "with the pipeline's fill and drain (nothing crosses it before a batch is "
                  "sampled, and a batch still trains after its last byte) and its longest "
                  "dependency chain, on the mini-batches the simulator draws with this seed")
ANY_PLACEMENT_NAME = "any-placement bound"
ANY_PLACEMENT_MEANS = ("no placement beats it: CP-SAT's proven bound on the most loaded "
                       "resource with the fill and drain no placement avoids, on the same "
                       "mini-batches, lowered to the per-plan bound of every plan compared")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)


@dataclass(frozen=True)
class PerPlanBound:
    """:data:`PER_PLAN_MEANS`: seconds over the whole epoch of ``iterations`` mini-batches
    per trainer, drawn with ``seed``."""

    epoch_s: float  # max(flow_s, chain_s)
    iterations: int
    seed: int
    resource: str  # the most loaded resource
    resource_s: float  # its work over the epoch (:func:`resource_bound`)
    chain_s: float  # the longest dependency chain of the epoch (:func:`chain_bound`)
    flow_s: float = 0.0  # a resource's work with fill and drain (:func:`flow_bound`)
    flow_resource: str = ""  # which resource sets flow_s

    name = PER_PLAN_NAME
    definition = PER_PLAN_MEANS

    @property
    def iteration_s(self) -> float:
        return self.epoch_s / max(self.iterations, 1)

    @property
    def binding(self) -> str:
        """What sets it: a resource with its fill and drain, or the dependency chain."""
        if max(self.flow_s, self.resource_s) < self.chain_s:
            return "the dependency chain"
        if self.flow_s > self.resource_s:
            return f"{self.flow_resource or self.resource} with fill and drain"
        return self.resource

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "definition": self.definition, "epoch_s": self.epoch_s,
                "iteration_s": self.iteration_s, "iterations": self.iterations,
                "seed": self.seed, "set_by": self.binding, "resource": self.resource,
                "resource_s": self.resource_s, "chain_s": self.chain_s,
                "flow_s": self.flow_s, "flow_resource": self.flow_resource}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PerPlanBound:
        return cls(float(d["epoch_s"]), int(d["iterations"]), int(d["seed"]),
                   str(d["resource"]), float(d["resource_s"]), float(d["chain_s"]),
                   float(d.get("flow_s", d["resource_s"])), str(d.get("flow_resource", "")))


def per_plan_bound(wl: Workload, plan: Plan, seed: int = 0) -> PerPlanBound:
    """The per-plan bound (:data:`PER_PLAN_MEANS`) of `plan`: :func:`instance_bound` of the
    whole epoch's mini-batches drawn with `seed` (its feature caches charged as the
    simulator charges them), with the most loaded resource named even where the chain binds.
    What ``gnnsched plan`` and ``gnnsched simulate`` both report; the simulated epoch of the
    same seed is never below it, whatever the policy and ``--iterations``.
    """
    inst = Instance(wl, plan, seed=seed)
    name, work = resource_bound(inst)
    starts, chain = _chain(inst)
    fname, flow = flow_bound(inst, None, starts)
    return PerPlanBound(max(flow, work, chain), inst.K, seed, name, work, chain, flow, fname)


@dataclass(frozen=True)
class AnyPlacementBound:
    """:data:`ANY_PLACEMENT_MEANS`: seconds over the epoch, on the draws of ``seed``."""

    epoch_s: float  # min(cpsat_s, every compared plan's per-plan bound)
    iterations: int
    seed: int
    cpsat_s: float | None  # CP-SAT's proven bound, times the iterations (None: not solved)
    cpsat_status: str  # OPTIMAL | FEASIBLE | ... of the model it came from
    set_by: str  # "CP-SAT", or "the per-plan bound of <plan>"
    scope: str  # the placements it holds for

    name = ANY_PLACEMENT_NAME
    definition = ANY_PLACEMENT_MEANS

    @property
    def iteration_s(self) -> float:
        return self.epoch_s / max(self.iterations, 1)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "definition": self.definition, "epoch_s": self.epoch_s,
                "iteration_s": self.iteration_s, "iterations": self.iterations,
                "seed": self.seed, "set_by": self.set_by, "cpsat_s": self.cpsat_s,
                "cpsat_status": self.cpsat_status, "scope": self.scope}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnyPlacementBound:
        cp = d.get("cpsat_s")
        return cls(float(d["epoch_s"]), int(d["iterations"]), int(d["seed"]),
                   None if cp is None else float(cp), str(d.get("cpsat_status", "")),
                   str(d["set_by"]), str(d["scope"]))


def any_placement_bound(cpsat_s: float | None, per_plan: Mapping[str, PerPlanBound], *,
                        status: str = "", scope: str = "") -> AnyPlacementBound:
    """The any-placement bound (:data:`ANY_PLACEMENT_MEANS`): CP-SAT's proven bound over the
    epoch (`cpsat_s`, ``simulated_lower_bound`` times the iterations, on the same draws) and
    the per-plan bound of every plan compared (``{label: bound}``, one seed), the smallest.
    Lowering it to every compared plan's own bound keeps it a bound of each of them, whether
    or not the model can express that plan (several sampler hosts, feature caches)."""
    if not per_plan:
        raise ValueError("the any-placement bound needs the per-plan bound of at least one plan")
    first = next(iter(per_plan.values()))
    if any(b.seed != first.seed or b.iterations != first.iterations for b in per_plan.values()):
        raise ValueError("per-plan bounds of different draws (seeds or iterations)")
    best, by = math.inf, ""
    if cpsat_s is not None:
        best, by = cpsat_s, "CP-SAT"
    for label, b in per_plan.items():
        if b.epoch_s < best:
            best, by = b.epoch_s, f"the per-plan bound of {label}"
    return AnyPlacementBound(best, first.iterations, first.seed, cpsat_s, status, by, scope)


def bound_fields(per: PerPlanBound, anyb: AnyPlacementBound | None) -> dict[str, Any]:
    """The keys both commands store (the plan file's ``predicted``, ``simulate --json``):
    ``per_plan_bound_s``, ``any_placement_bound_s`` (None where unknown) and ``bounds``
    ({seed, iterations, per_plan: {...}, any_placement: {...} | None}, each with its name and
    definition)."""
    return {"per_plan_bound_s": per.epoch_s,
            "any_placement_bound_s": None if anyb is None else anyb.epoch_s,
            "bounds": {"seed": per.seed, "iterations": per.iterations,
                       "per_plan": per.to_dict(),
                       "any_placement": None if anyb is None else anyb.to_dict()}}


def recorded_bounds(prediction: Prediction | Mapping[str, Any] | None, per: PerPlanBound
                    ) -> tuple[AnyPlacementBound | None, str]:
    """The any-placement bound a plan records (:attr:`Prediction.bounds`; a bare mapping is
    read as the plan file's ``predicted``), where it was computed on the draws `per` was (same
    seed, same per-plan bound: same plan, profile and iterations); else None and why not, in
    words."""
    seed, perd, anyd = _bounds_record(prediction)
    if not anyd or not perd:
        return None, ("not in the plan (`gnnsched plan` records it; this plan was made "
                      "otherwise or before it did)")
    if int(-1 if seed is None else seed) != per.seed:
        return None, (f"not known for seed {per.seed}: the plan's is for seed {seed} "
                      f"(simulate with --seed {seed}, or plan with --seed {per.seed})")
    mine = PerPlanBound.from_dict(perd)
    if mine.iterations != per.iterations or not _close(mine.epoch_s, per.epoch_s):
        return None, ("not known for these mini-batches: the plan's was computed on other "
                      "draws (another profile or job, or the plan was edited)")
    return AnyPlacementBound.from_dict(anyd), ""


def _bounds_record(prediction: Prediction | Mapping[str, Any] | None
                   ) -> tuple[Any, Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """(seed, per-plan bound, any-placement bound) of a recorded :class:`BoundsRecord`; a
    mapping's ``bounds`` is taken as it is (a caller's may leave out its iterations)."""
    if isinstance(prediction, Prediction) or prediction is None:
        rec = prediction.bounds if prediction is not None else None
        return (None, None, None) if rec is None else (rec.seed, rec.per_plan, rec.any_placement)
    raw = prediction.get("bounds") or {}
    return raw.get("seed"), raw.get("per_plan"), raw.get("any_placement")


def fmt_s(s: float) -> str:
    """Seconds as both commands print bounds (4 significant digits)."""
    return f"{s * 1e3:.4g} ms" if s < 1 else f"{s:.4g} s"


def bound_lines(per: PerPlanBound, anyb: AnyPlacementBound | None, why_missing: str = ""
                ) -> list[str]:
    """The bound lines, word for word the same in ``gnnsched plan`` and ``gnnsched simulate``
    for the same plan, profile and seed: each bound named, its value over the epoch and per
    iteration, what sets it, and its one-line definition."""
    w = max(len(PER_PLAN_NAME), len(ANY_PLACEMENT_NAME))
    pad = " " * (w + 4)
    lines = [f"lower bounds of the epoch ({per.iterations} iterations, mini-batches drawn "
             f"with seed {per.seed}):",
             f"  {PER_PLAN_NAME:<{w}}  {fmt_s(per.epoch_s)} ({fmt_s(per.iteration_s)} per "
             f"iteration), set by {per.binding} (most loaded resource {fmt_s(per.resource_s)}, "
             f"with fill and drain {fmt_s(max(per.flow_s, per.resource_s))}, dependency "
             f"chain {fmt_s(per.chain_s)})",
             f"{pad}{PER_PLAN_MEANS}"]
    if anyb is None:
        lines.append(f"  {ANY_PLACEMENT_NAME:<{w}}  {why_missing}")
    else:
        cp = "" if anyb.cpsat_s is None else \
            f"CP-SAT's {anyb.cpsat_status.lower() or 'proven'} bound {fmt_s(anyb.cpsat_s)}"
        by = cp if anyb.set_by == "CP-SAT" else f"{anyb.set_by}" + (f"; {cp}" if cp else "")
        lines.append(f"  {ANY_PLACEMENT_NAME:<{w}}  {fmt_s(anyb.epoch_s)} "
                     f"({fmt_s(anyb.iteration_s)} per iteration), set by {by}; over "
                     f"{anyb.scope}")
    lines.append(f"{pad}{ANY_PLACEMENT_MEANS}")
    return lines


def ratio_line(epoch_s: float, per: PerPlanBound, anyb: AnyPlacementBound | None,
               what: str = "this plan's epoch") -> str:
    """``what`` against both bounds, in the same words in both commands."""
    out = f"{what} {fmt_s(epoch_s)} is {epoch_s / per.epoch_s:.3f}x the {PER_PLAN_NAME}"
    if anyb is not None and anyb.epoch_s > 0:
        out += f" and {epoch_s / anyb.epoch_s:.3f}x the {ANY_PLACEMENT_NAME}"
    return out


__all__ = ["ANY_PLACEMENT_MEANS", "ANY_PLACEMENT_NAME", "PER_PLAN_MEANS", "PER_PLAN_NAME",
           "AnyPlacementBound", "PerPlanBound", "any_placement_bound", "bound_fields",
           "bound_lines", "chain_bound", "flow_bound", "fmt_s", "instance_bound",
           "isolation_bound", "iteration_loads", "one_machine_bound", "per_plan_bound",
           "plan_bound", "ratio_line", "recorded_bounds", "resource_bound"]
