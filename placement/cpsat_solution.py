"""CP-SAT placement, step 3 — solutions: a model assignment, to and from a plan.

:func:`to_plan` turns an assignment into a plan: individually placed bundles take a GPU of
their slot, bundles placed on a class of machines are spread over its members largest-first
(LPT), spare cores then become samplers. :func:`solution_from_plan` goes the other way, for
warm starts (a greedy plan as the solver's hint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gnnsched.placement.cpsat_instance import AssignmentInstance
from gnnsched.placement.feasibility import fill_samplers
from gnnsched.placement.problem import transfers
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import SpecError


@dataclass
class Solution:
    """A model assignment: the option of every used bundle and its sampler count."""

    choice: dict[int, int]  # bundle -> option index
    samplers: dict[int, int]  # bundle -> sampler processes (1 in the relaxed CPU model)
    objective_s: float

    def key(self) -> tuple:
        return tuple(sorted(self.choice.items()))


def solution_from_plan(inst: AssignmentInstance, plan: Plan) -> Solution | None:
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


def to_plan(inst: AssignmentInstance, sol: Solution, placer: str = "cpsat") -> Plan:
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


__all__ = ["Solution", "solution_from_plan", "to_plan"]
