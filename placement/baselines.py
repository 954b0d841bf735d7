"""Baseline placers: what gnnsched is measured against.

* ``colocation`` — DistDGL: every store machine runs its own partitions' trainer and samplers
  (with fewer trainers than stores, a trainer per group of neighbouring stores, on one of
  them); where no store of a trainer's partitions can host it (roles, no GPU, no room) it
  moves to the machine with the best link, and the plan says colocation is infeasible here
  and why.
* ``random`` — a seeded, feasible, uniformly drawn placement: the floor any placer must beat.
* ``greedy`` — HEFT-style list placement: trainer tasks in order of work, each to the device
  (and sampler host) where, given what is already placed, it finishes earliest.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gnnsched.placement.base import Placer, register
from gnnsched.placement.feasibility import fill_samplers, is_feasible
from gnnsched.placement.problem import MAX_SAMPLERS, Problem, fmt_bytes, transfers
from gnnsched.placement.splits import (
    bundle_parts,
    main_store,
    seed_line,
    seeds_of,
    store_groups,
    store_slices,
)
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.prediction import Prediction
from gnnsched.spec import SpecError


class Ledger:
    """Free devices, cores and host memory while a placer commits tasks one by one."""

    def __init__(self, problem: Problem) -> None:
        self.pb = problem
        self.cores = problem.cpus.copy()
        self.memory = problem.free_memory()
        gpu_free: dict[int, list[int]] = {}
        for s in problem.slots:
            gpu_free.setdefault(s.machine, []).extend(s.devices)
        self.devices = {m: sorted(d) for m, d in gpu_free.items()}

    def device_for(self, m: int, parts: Sequence[int], shares: Sequence[float] = ()) -> int | None:
        """A free GPU on machine `m` big enough for a trainer of `parts` (fastest first)."""
        c = self.pb.cost(parts, shares)
        need = self.pb.trainer_gpu_bytes(c)
        if self.cores[m] < 1 or self.memory[m] < self.pb.trainer_host_bytes(c):
            return None
        gpus = self.pb.cluster.machines[m].gpus
        ok = [d for d in self.devices.get(m, []) if gpus[d].memory >= need]
        return max(ok, key=lambda d: (gpus[d].speed, -d)) if ok else None

    def why_not(self, m: int, parts: Sequence[int], shares: Sequence[float] = ()) -> str:
        """Why :meth:`device_for` finds no device for a trainer of `parts` on machine `m`."""
        pb = self.pb
        mach = pb.cluster.machines[m]
        if not mach.can("train"):
            return f"may not train (roles: {', '.join(mach.roles)})"
        if not mach.gpus:
            return "has no GPU"
        c = pb.cost(parts, shares)
        gpu_need = pb.trainer_gpu_bytes(c)
        if all(g.memory < gpu_need for g in mach.gpus):
            return (f"has no GPU with the {fmt_bytes(gpu_need)} a trainer needs (model and two "
                    f"mini-batches; largest: {fmt_bytes(max(g.memory for g in mach.gpus))})")
        if self.cores[m] < 1:
            return f"has no core left for a trainer ({mach.cpus} cpus, all taken)"
        host_need = pb.trainer_host_bytes(c)
        if self.memory[m] < host_need:
            return (f"has {fmt_bytes(max(self.memory[m], 0.0))} of memory left after what it "
                    f"stores and runs, a trainer needs {fmt_bytes(host_need)} (process, model "
                    f"copy, {pb.job.prefetch} prefetched mini-batches)")
        return (f"has no free GPU: its {len(mach.gpus)} GPU(s) already run trainers of other "
                "partitions")

    def take_trainer(self, m: int, d: int, parts: Sequence[int], shares: Sequence[float] = ()
                     ) -> None:
        self.devices[m].remove(d)
        self.cores[m] -= 1
        self.memory[m] -= self.pb.trainer_host_bytes(self.pb.cost(parts, shares))

    def can_sample(self, m: int, parts: Sequence[int], reserve: int = 0,
                   shares: Sequence[float] = ()) -> bool:
        c = self.pb.cost(parts, shares)
        return self.pb.can_sample[m] and self.cores[m] - reserve >= 1 and \
            self.memory[m] >= self.pb.sampler_bytes(c)

    def take_sampler(self, m: int, parts: Sequence[int], shares: Sequence[float] = ()) -> None:
        self.cores[m] -= 1
        self.memory[m] -= self.pb.sampler_bytes(self.pb.cost(parts, shares))


def _trainer(i: int, problem: Problem, T: int, d: int, parts: Sequence[int], S: int,
             F: int | None = None, shares: Sequence[float] = ()) -> TrainerPlan:
    n = problem.names
    if shares and any(v < 1 for v in shares):
        order = sorted(range(len(parts)), key=lambda j: parts[j])
        return TrainerPlan(i, n[T], d, tuple(parts[j] for j in order), ((n[S], 1),),
                           n[T if F is None else F], tuple(shares[j] for j in order))
    return TrainerPlan(i, n[T], d, tuple(sorted(parts)), ((n[S], 1),), n[T if F is None else F])


def _sampler_host(ledger: Ledger, problem: Problem, prefer: Sequence[int],
                  parts: Sequence[int], shares: Sequence[float] = ()) -> int:
    """First machine of `prefer` (then any) with a free core for one more sampler."""
    for m in list(prefer) + sorted(range(problem.M), key=lambda m: -ledger.cores[m]):
        if ledger.can_sample(m, parts, shares=shares):
            return m
    raise SpecError(problem.cluster.source, "machines[*].cpus",
                    "no core left for a sampler after placing the trainers",
                    "more cores on machines that may sample, or fewer trainers")


# ---------------------------------------------------------------------- colocation


@register("colocation")
class Colocation(Placer):
    """DistDGL semantics: each store machine trains on its own partitions, with its samplers.

    A trainer runs on a store holding its partitions (with fewer trainers than stores, on one
    of its group's stores); only where none of them can host it (roles, no GPU, no room) does
    it move to the machine with the best link from its store, and then the plan says
    colocation is infeasible here and why (``colocation_feasible``).
    """

    even = False  # DistDGL's force_even split of the seeds (the colocation-even placer)

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        W, cl = problem.W, problem.cluster
        stores = sorted({problem.store_of[p] for p in range(problem.P)})
        notes: list[str] = []
        # DistDGL: every store trains on its own partitions (seeds split over its trainers)
        groups = store_groups(problem, W)
        shares: list[tuple[float, ...]] = [()] * len(groups)
        if self.even:
            order = sorted(range(problem.P), key=lambda p: (problem.store_of[p], p))
            runs = seed_line(order, [seeds_of(problem, [p]) for p in order], W)
            groups = [(_home(problem, ps, sh), list(ps)) for ps, sh in runs]
            shares = [sh for _, sh in runs]
            notes.append("training seeds split evenly over the trainers (DistDGL's "
                         "force_even node split)")
        elif W < len(stores):
            notes.append(f"{len(stores)} store machines but only {W} trainers: neighbouring "
                         "stores share a trainer, which runs on one of them")
        if len(groups) < W:  # more trainers than partitions: split every store's seeds evenly
            sl = store_slices(problem, W)
            groups = [(s, list(ps)) for s, ps, _ in sl]
            shares = [sh for _, _, sh in sl]
            notes.append(f"{W} trainers for {problem.P} partitions: every store's training "
                         "seeds split evenly over its trainers (DistDGL's split)")
        ledger = Ledger(problem)
        homes = [_homes(problem, s, parts) for s, parts in groups]
        # first pass: trainers that fit on a store of their own partitions
        placed: dict[int, tuple[int, int]] = {}
        for i, (_, parts) in enumerate(groups):
            for h in homes[i]:
                d = ledger.device_for(h, parts, shares[i])
                if d is not None:
                    ledger.take_trainer(h, d, parts, shares[i])
                    placed[i] = (h, d)
                    break
        # second pass: the rest go to the machine with the best link from their store
        for i, (s, parts) in enumerate(groups):
            if i in placed:
                continue
            why = "; ".join(f"store {problem.names[h]} {ledger.why_not(h, parts, shares[i])}"
                            for h in homes[i])
            best = None
            for m in range(problem.M):
                d = ledger.device_for(m, parts, shares[i])
                if d is None:
                    continue
                st = cl.machines[s]
                bw = min(st.egress, cl.machines[m].ingress)
                key = (-bw, abs(m - s), m)
                if best is None or key < best[0]:
                    best = (key, m, d)
            if best is None:
                raise SpecError(problem.job.source, "trainers",
                                f"no free device left for the trainer of partitions {parts}",
                                "fewer trainers or more GPUs")
            _, m, d = best
            ledger.take_trainer(m, d, parts, shares[i])
            placed[i] = (m, d)
            notes.append(f"colocation cannot train partitions {_span(parts)} on a store of "
                         f"their data: {why}; colocation's fallback runs their trainer on "
                         f"{problem.names[m]}")
        trainers = []
        for i, (s, parts) in enumerate(groups):
            m, d = placed[i]
            S = _sampler_host(ledger, problem, [s, m], parts, shares[i])
            ledger.take_sampler(S, parts, shares[i])
            trainers.append(_trainer(i, problem, m, d, parts, S, shares=shares[i]))
        feasible = all(placed[i][0] in homes[i] for i in range(len(groups)))
        plan = problem.make_plan("colocation", trainers, notes,
                                 Prediction(colocation_feasible=feasible))
        return fill_samplers(problem, plan)


@register("colocation-even")
class ColocationEven(Colocation):
    """Colocation with DistDGL's even split: every trainer gets the same number of training
    seeds (parts cut where needed), on the store holding most of them."""

    even = True


def _home(problem: Problem, parts: Sequence[int], shares: Sequence[float]) -> int:
    """The store holding most of a run's seeds."""
    held: dict[int, float] = {}
    for p, s in zip(parts, shares):
        m = problem.store_of[p]
        held[m] = held.get(m, 0.0) + s * seeds_of(problem, [p])
    return max(held, key=lambda m: (held[m], -m))


def _homes(problem: Problem, s: int, parts: Sequence[int]) -> list[int]:
    """The stores holding `parts`, `s` (the group's first) first, then by partitions held."""
    held: dict[int, int] = {}
    for p in parts:
        held[problem.store_of[p]] = held.get(problem.store_of[p], 0) + 1
    return sorted(held, key=lambda m: (m != s, -held[m], m))


def _span(parts: Sequence[int]) -> str:
    parts = sorted(parts)
    if len(parts) > 2 and parts[-1] - parts[0] == len(parts) - 1:
        return f"{parts[0]}-{parts[-1]}"
    return ",".join(str(p) for p in parts)


# ---------------------------------------------------------------------- random


@register("random")
class RandomPlacer(Placer):
    """Uniform over feasible plans (by rejection): devices, part split, sampler hosts, gathers."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            plan = self._draw(problem, rng)
            if plan is not None and is_feasible(problem, plan):
                return plan
        raise SpecError(problem.cluster.source, "machines",
                        "random placement found no feasible plan in 200 draws",
                        "more memory or cores, or use --placer greedy")

    @staticmethod
    def _draw(problem: Problem, rng: np.random.Generator) -> Plan | None:
        W, P = problem.W, problem.P
        order = [int(p) for p in rng.permutation(P)]
        groups: list[list[int]] = [[p] for p in order[:W]]  # random, seed-balanced split
        load = [seeds_of(problem, g) for g in groups]
        for p in order[W:]:
            i = int(np.argmin(load))
            groups[i].append(p)
            load[i] += seeds_of(problem, [p])
        groups = [sorted(g) for g in groups]
        ledger = Ledger(problem)
        devices = [(s.machine, d) for s in problem.slots for d in s.devices]
        picks = rng.permutation(len(devices))
        trainers = []
        k = 0
        for i, parts in enumerate(groups):
            while k < len(picks):
                m, d = devices[picks[k]]
                k += 1
                if d in ledger.devices.get(m, []) and ledger.device_for(m, parts) is not None \
                        and problem.cluster.machines[m].gpus[d].memory >= \
                        problem.trainer_gpu_bytes(problem.cost(parts)):
                    ledger.take_trainer(m, d, parts)
                    break
            else:
                return None
            trainers.append((i, m, d, parts))
        out = []
        hosts = [m for m in range(problem.M) if problem.can_sample[m]]
        fetchers = [m for m in range(problem.M) if problem.can_fetch[m]]
        for i, m, d, parts in trainers:
            ok = [h for h in hosts if ledger.can_sample(h, parts)]
            if not ok:
                return None
            S = int(rng.choice(ok))
            n = int(rng.integers(1, max(1, min(MAX_SAMPLERS, ledger.cores[S])) + 1))
            cnt = 0
            while cnt < n and ledger.can_sample(S, parts):
                ledger.take_sampler(S, parts)
                cnt += 1
            F = m if rng.random() < 0.5 or not fetchers else int(rng.choice(fetchers))
            tp = TrainerPlan(i, problem.names[m], d, tuple(parts),
                             ((problem.names[S], cnt),), problem.names[F])
            out.append(tp)
        return problem.make_plan("random", out)


# ---------------------------------------------------------------------- greedy


@register("greedy")
class GreedyPlacer(Placer):
    """HEFT-style: biggest trainer task first, each to the option where it finishes earliest.

    "Finishes" is the most loaded resource it touches (its device, its samplers, the NICs
    its mini-batches cross) after adding it to what is already placed.
    """

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        return greedy_plan(problem, bundle_parts(problem))


def greedy_plan(problem: Problem, bundles: Sequence[Sequence[int]],
                placer: str = "greedy") -> Plan:
    """List placement of fixed part bundles (also CP-SAT's warm start)."""
    cl = problem.cluster
    eg = np.array([m.egress for m in cl.machines])
    ig = np.array([m.ingress for m in cl.machines])
    mean_bw = float(np.mean(np.minimum(eg, ig)))
    out_s, in_s = np.zeros(problem.M), np.zeros(problem.M)
    W = len(bundles)
    ar_bytes = 2.0 * (W - 1) / W * problem.profile.grad_bytes if W > 1 else 0.0
    gpus_on = np.zeros(problem.M, dtype=np.int64)
    for s in problem.slots:
        gpus_on[s.machine] += s.count

    def work(parts: Sequence[int]) -> float:
        c = problem.cost(parts)
        return c.train_s + c.sample_s + (c.feat_bytes + c.block_bytes) / mean_bw

    order = sorted(range(len(bundles)), key=lambda b: (-work(bundles[b]), b))
    ledger = Ledger(problem)
    chosen: dict[int, tuple[int, int, int]] = {}
    for pos, b in enumerate(order):
        parts = bundles[b]
        left = len(order) - pos - 1  # trainers still to place after this one
        c = problem.cost(parts)
        home = main_store(problem, parts)
        local = set(c.feat_from) | set(c.struct_from)
        # loads when neither trainer nor samplers sit on a machine holding the inputs: the
        # same for every such candidate, so computed once
        far_o: dict[int, float] = {}
        for m, v in list(c.feat_from.items()) + list(c.struct_from.items()):
            far_o[m] = far_o.get(m, 0.0) + v / eg[m]
        far_max = max((out_s[m] + v for m, v in far_o.items()), default=0.0)
        far_in = sum(c.feat_from.values()) + sum(c.struct_from.values())
        best = None
        # a sampler elsewhere keeps a core for every trainer still to come on that machine's
        # free GPUs (else it may take the last core a later trainer needs); only if that
        # leaves this trainer no option, the reserve goes and any machine may sample for it
        for keep in (True, False):
            if best is not None:
                break
            for T in sorted(ledger.devices):
                d = ledger.device_for(T, parts)
                if d is None:
                    continue
                speed = cl.machines[T].gpus[d].speed
                starved = ledger.cores[T] - 1 < 2 * max(1, len(ledger.devices[T]))
                near = [T, home] if starved or not problem.can_sample[T] else [T]
                anywhere = [] if keep else \
                    sorted(range(problem.M), key=lambda m: (-ledger.cores[m], m))
                for S in dict.fromkeys(near + anywhere):
                    reserve = 1 if S == T else \
                        min(len(ledger.devices.get(S, [])), left) if keep else 0
                    if not ledger.can_sample(S, parts, reserve):
                        continue
                    share = max(1, int(gpus_on[S]) if S == T else 2)
                    n = max(1, min(MAX_SAMPLERS, (ledger.cores[S] - reserve) // share))
                    if S == T and T not in local:
                        add_o = {T: ar_bytes / eg[T]}
                        add_i = {T: (far_in + ar_bytes) / ig[T]}
                        finish = max(far_max, out_s[T] + add_o[T], in_s[T] + add_i[T],
                                     c.train_s / speed, c.sample_s / n)
                        add_o = {**far_o, T: far_o.get(T, 0.0) + add_o[T]}
                    else:
                        add_o = {T: ar_bytes / eg[T]}
                        add_i = {T: ar_bytes / ig[T]}
                        for src, dst, v, _ in transfers(c, T, [(S, 1.0)], T):
                            add_o[src] = add_o.get(src, 0.0) + v / eg[src]
                            add_i[dst] = add_i.get(dst, 0.0) + v / ig[dst]
                        # HEFT: when would *this* task finish, given what its resources carry
                        finish = max(max(out_s[k] + v for k, v in add_o.items()),
                                     max(in_s[k] + v for k, v in add_i.items()),
                                     c.train_s / speed, c.sample_s / n)
                    added = sum(add_o.values()) + sum(add_i.values())
                    key = (finish, added, -speed, S != T, T)
                    if best is None or key < best[0]:
                        best = (key, T, d, S, add_o, add_i)
        if best is None:
            raise SpecError(problem.job.source, "trainers",
                            f"greedy placement ran out of devices at the trainer of parts "
                            f"{list(parts)}", "fewer trainers or more GPUs")
        _, T, d, S, add_o, add_i = best
        for k, v in add_o.items():
            out_s[k] += v
        for k, v in add_i.items():
            in_s[k] += v
        ledger.take_trainer(T, d, parts)
        ledger.take_sampler(S, parts)
        chosen[b] = (T, d, S)
    trainers = [_trainer(b, problem, *chosen[b][:2], bundles[b], chosen[b][2])
                for b in range(len(bundles))]
    return fill_samplers(problem, problem.make_plan(placer, trainers))


__all__ = ["Colocation", "GreedyPlacer", "Ledger", "RandomPlacer", "greedy_plan"]
