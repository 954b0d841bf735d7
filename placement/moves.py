"""The search's local moves on a plan, and the repair that keeps a moved plan feasible.

Move a trainer, swap two, change sampler counts or hosts, change where gathering runs,
reassign a part or a share of its seeds (:class:`Moves`); :func:`repair` sheds samplers on
over-subscribed machines; :func:`bottleneck_machine` is where moves concentrate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from gnnsched.placement.cpsat import BALANCE
from gnnsched.placement.feasibility import usage
from gnnsched.placement.problem import MAX_SAMPLERS, Problem
from gnnsched.placement.splits import main_store
from gnnsched.plan import Plan, TrainerPlan

MOVES = ("move", "swap", "samplers", "sampler_host", "fetch", "part", "share")
_SHARES = "shares" in {f.name for f in fields(TrainerPlan)}  # seed shares in this model


def _cost(pb: Problem, t: TrainerPlan) -> Any:
    shares = getattr(t, "shares", ())
    return pb.cost(t.parts, shares) if shares else pb.cost(t.parts)


def _owned(t: TrainerPlan) -> dict[int, float]:
    shares = getattr(t, "shares", ()) or (1.0,) * len(t.parts)
    out: dict[int, float] = {}
    for p, s in zip(t.parts, shares):
        out[p] = out.get(p, 0.0) + s
    return out


def _with_owned(t: TrainerPlan, owned: dict[int, float]) -> TrainerPlan:
    parts = tuple(sorted(owned))
    if not _SHARES:
        return replace(t, parts=parts)
    sh = tuple(min(1.0, owned[p]) for p in parts)
    return replace(t, parts=parts, shares=() if all(s >= 1 - 1e-9 for s in sh) else sh)


class Moves:
    """Local moves on a plan; each returns a new plan or None (not applicable)."""

    def __init__(self, problem: Problem, rng: np.random.Generator) -> None:
        self.pb, self.rng = problem, rng
        self.idx = problem.cluster.machine_index
        self.devices = [(s.machine, d) for s in problem.slots for d in s.devices]
        seeds = [max(pp.train_seeds, 1) for pp in problem.profile.parts]
        self.seeds = seeds
        self.avg = sum(seeds) / problem.W

    # -------------------------------------------------------------- helpers
    def _balanced(self, owned: dict[int, float]) -> bool:
        if len(owned) == 1 and next(iter(owned.values())) >= 1 - 1e-9:
            return True
        return abs(sum(self.seeds[p] * s for p, s in owned.items()) - self.avg) \
            <= BALANCE * self.avg

    def _set(self, plan: Plan, trainers: list[TrainerPlan]) -> Plan:
        return replace(plan, trainers=tuple(sorted(trainers, key=lambda t: t.id)),
                       prediction=None)

    def _put(self, plan: Plan, changed: dict[int, TrainerPlan]) -> Plan:
        """`plan` with trainers ``changed[i]`` in place of its ``i``-th."""
        ts = list(plan.trainers)
        for i, t in changed.items():
            ts[i] = t
        return self._set(plan, ts)

    def _samplers(self, plan: Plan, i: int, samplers: dict[str, int]) -> Plan:
        """`plan` with trainer `i`'s samplers ``{machine: count}``."""
        return self._put(plan, {i: replace(plan.trainers[i],
                                           samplers=tuple(sorted(samplers.items())))})

    def _home(self, t: TrainerPlan) -> str:
        """The machine that sends trainer `t` the most feature bytes (its main store)."""
        return self.pb.names[main_store(self.pb, t.parts)]

    def _pick(self, plan: Plan, focus: int | None) -> int:
        """A trainer index, preferring ones that touch machine `focus`."""
        ts = plan.trainers
        if focus is not None and self.rng.random() < 0.7:
            near = [i for i, t in enumerate(ts) if focus in
                    {self.idx(t.machine), self.idx(t.fetch_at)} |
                    {self.idx(m) for m, _ in t.samplers} |
                    set(_cost(self.pb, t).feat_from)]
            if near:
                return int(self.rng.choice(near))
        return int(self.rng.integers(len(ts)))

    # -------------------------------------------------------------- moves
    def move(self, plan: Plan, focus: int | None) -> Plan | None:
        """A trainer to a free device; its own-machine samplers follow it."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        used = {(self.idx(x.machine), x.device) for x in plan.trainers}
        free = [dv for dv in self.devices if dv not in used]
        if not free:
            return None
        m, d = free[int(self.rng.integers(len(free)))]
        name = self.pb.names[m]
        samplers = tuple((name if s == t.machine else s, c) for s, c in t.samplers)
        fetch = name if t.fetch_at == t.machine else t.fetch_at
        return self._put(plan, {i: replace(t, machine=name, device=d, samplers=_merge(samplers),
                                           fetch_at=fetch)})

    def swap(self, plan: Plan, focus: int | None) -> Plan | None:
        """Two trainers exchange devices (and own-machine samplers / gathering)."""
        if len(plan.trainers) < 2:
            return None
        i = self._pick(plan, focus)
        j = int(self.rng.integers(len(plan.trainers) - 1))
        j += j >= i
        a, b = plan.trainers[i], plan.trainers[j]
        if a.machine == b.machine and a.device == b.device:
            return None

        def moved(t: TrainerPlan, o: TrainerPlan) -> TrainerPlan:
            s = tuple((o.machine if m == t.machine else m, c) for m, c in t.samplers)
            f = o.machine if t.fetch_at == t.machine else t.fetch_at
            return replace(t, machine=o.machine, device=o.device, samplers=_merge(s),
                           fetch_at=f)

        return self._put(plan, {i: moved(a, b), j: moved(b, a)})

    def samplers(self, plan: Plan, focus: int | None) -> Plan | None:
        """One sampler more or fewer for a trainer."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        s = dict(t.samplers)
        host = list(s)[int(self.rng.integers(len(s)))]
        if self.rng.random() < 0.5:
            if t.num_samplers >= MAX_SAMPLERS:
                return None
            s[host] += 1
        else:
            if t.num_samplers <= 1:
                return None
            s[host] -= 1
            if s[host] == 0:
                del s[host]
        return self._samplers(plan, i, s)

    def sampler_host(self, plan: Plan, focus: int | None) -> Plan | None:
        """Move some of a trainer's samplers to its own machine, its main store, or anywhere."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        pb = self.pb
        home = self._home(t)
        choices = [m for m in dict.fromkeys([t.machine, home,
                                              pb.names[int(self.rng.integers(pb.M))]])
                   if pb.can_sample[self.idx(m)]]
        tgt = choices[int(self.rng.integers(len(choices)))]
        s = dict(t.samplers)
        src = list(s)[int(self.rng.integers(len(s)))]
        if src == tgt:
            return None
        k = s[src] if self.rng.random() < 0.5 else 1
        s[src] -= k
        if s[src] == 0:
            del s[src]
        s[tgt] = s.get(tgt, 0) + k
        return self._samplers(plan, i, s)

    def fetch(self, plan: Plan, focus: int | None) -> Plan | None:
        """Gather at the trainer, at its main store (one pushed message), or at a relay."""
        i = self._pick(plan, focus)
        t = plan.trainers[i]
        pb = self.pb
        home = self._home(t)
        if t.fetch_at != t.machine:
            tgt = t.machine
        elif self.rng.random() < 0.7:
            tgt = home
        else:
            tgt = pb.names[int(self.rng.integers(pb.M))]
        if tgt == t.fetch_at or (tgt != t.machine and not pb.can_fetch[self.idx(tgt)]):
            return None
        return self._put(plan, {i: replace(t, fetch_at=tgt)})

    def part(self, plan: Plan, focus: int | None) -> Plan | None:
        """Move a partition's seeds (a trainer's whole share of it) to another trainer, or
        swap two partitions' shares."""
        if len(plan.trainers) < 2:
            return None
        i = self._pick(plan, focus)
        j = int(self.rng.integers(len(plan.trainers) - 1))
        j += j >= i
        a, b = plan.trainers[i], plan.trainers[j]
        oa, ob = _owned(a), _owned(b)
        pa = list(oa)[int(self.rng.integers(len(oa)))]
        if len(oa) > 1 and self.rng.random() < 0.5:
            ob[pa] = ob.get(pa, 0.0) + oa.pop(pa)
        else:
            pbp = list(ob)[int(self.rng.integers(len(ob)))]
            if pbp == pa:
                return None
            sa, sb = oa.pop(pa), ob.pop(pbp)
            ob[pa] = ob.get(pa, 0.0) + sa
            oa[pbp] = oa.get(pbp, 0.0) + sb
        if not (self._balanced(oa) and self._balanced(ob)):
            return None
        return self._put(plan, {i: _with_owned(a, oa), j: _with_owned(b, ob)})

    def share(self, plan: Plan, focus: int | None) -> Plan | None:
        """Shift part of one partition's seeds between two trainers that both own some of
        it (seed shares: only where the plan model has them)."""
        if not _SHARES:
            return None
        i = self._pick(plan, focus)
        a = plan.trainers[i]
        oa = _owned(a)
        mates = [j for j, t in enumerate(plan.trainers) if j != i and set(_owned(t)) & set(oa)]
        if not mates:
            return None
        j = mates[int(self.rng.integers(len(mates)))]
        b = plan.trainers[j]
        ob = _owned(b)
        p = sorted(set(oa) & set(ob))[int(self.rng.integers(len(set(oa) & set(ob))))]
        d = oa[p] * float(self.rng.choice([0.1, 0.25, 0.5]))
        if self.rng.random() < 0.5:  # or the other way round
            a, b, oa, ob, i, j = b, a, ob, oa, j, i
            d = oa[p] * float(self.rng.choice([0.1, 0.25, 0.5]))
        oa[p] -= d
        ob[p] += d
        if oa[p] <= 1e-6 or not (self._balanced(oa) and self._balanced(ob)):
            return None
        return self._put(plan, {i: _with_owned(a, oa), j: _with_owned(b, ob)})


def _merge(samplers: Sequence[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for m, c in samplers:
        out[m] = out.get(m, 0) + c
    return tuple(sorted(out.items()))


def repair(problem: Problem, plan: Plan) -> Plan | None:
    """Shed samplers on over-subscribed machines (keeping one per trainer); None if stuck."""
    u = usage(problem, plan)
    if not u.problems:
        return plan
    idx = problem.cluster.machine_index
    ts = {t.id: dict(t.samplers) for t in plan.trainers}
    for m in range(problem.M):
        mach = problem.cluster.machines[m]
        while u.cores[m] > mach.cpus or u.memory[m] > mach.memory:
            cands = [(sum(s.values()), tid) for tid, s in ts.items()
                     if s.get(mach.name, 0) > 0 and sum(s.values()) > 1]
            if not cands:
                return None
            _, tid = max(cands)
            ts[tid][mach.name] -= 1
            if ts[tid][mach.name] == 0:
                del ts[tid][mach.name]
            u.cores[m] -= 1
            t = next(x for x in plan.trainers if x.id == tid)
            u.memory[m] -= problem.sampler_bytes(_cost(problem, t))
    out = tuple(replace(t, samplers=tuple(sorted(ts[t.id].items(), key=lambda kv: idx(kv[0]))))
                for t in plan.trainers)
    fixed = replace(plan, trainers=out)
    return fixed if not usage(problem, fixed).problems else None


def bottleneck_machine(problem: Problem, plan: Plan) -> int | None:
    """The machine behind the plan's bottleneck resource (moves concentrate there)."""
    _, name = problem.seconds_per_iteration(plan)
    names = set(problem.names)
    for word in name.split():
        if word in names:
            return problem.cluster.machine_index(word)
    if name.startswith("prefetch window of trainer"):
        tid = int(name.split()[4])
        t = next(t for t in plan.trainers if t.id == tid)
        return problem.cluster.machine_index(t.machine)
    if name.startswith("samplers of trainer"):
        tid = int(name.rsplit(" ", 1)[1])
        t = next(t for t in plan.trainers if t.id == tid)
        return problem.cluster.machine_index(t.samplers[0][0])
    return None


__all__ = ["MOVES", "Moves", "bottleneck_machine", "repair"]
