"""Feasibility: whether a plan fits its machines' cores, host memory and GPU memory.

:func:`check_resources` is the single test every placer's plan passes (``Plan.validate``
plus what the processes, buffers and caches of the plan take, :func:`usage`);
:func:`fill_samplers` gives spare cores to samplers while the plan still fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from gnnsched.placement.problem import MAX_SAMPLERS, Problem, fmt_bytes
from gnnsched.plan import Plan
from gnnsched.spec import GB, SpecError


@dataclass
class Usage:
    """Cores and memory a plan takes on each machine."""

    cores: np.ndarray
    memory: np.ndarray
    problems: list[str] = field(default_factory=list)


def usage(problem: Problem, plan: Plan) -> Usage:
    """Cores and host memory a plan uses per machine, and any GPU-memory overflow."""
    M = problem.M
    cores = np.zeros(M, dtype=np.int64)
    mem = problem.resident.copy()
    # per machine: bytes of trainers, samplers and relays (for the message of an overflow)
    parts_of = np.zeros((3, M))
    probs: list[str] = []
    idx = problem.cluster.machine_index
    for t in plan.trainers:
        c = problem.size_cost(t.parts, t.shares)
        T = idx(t.machine)
        cores[T] += 1
        mem[T] += problem.trainer_host_bytes(c)
        parts_of[0, T] += problem.trainer_host_bytes(c)
        gpu = problem.cluster.machines[T].gpus[t.device] if \
            0 <= t.device < len(problem.cluster.machines[T].gpus) else None
        if gpu is not None and gpu.memory < problem.trainer_gpu_bytes(c):
            probs.append(f"trainer {t.id}: GPU {t.device} of {t.machine} has "
                         f"{gpu.memory / GB:.1f} GB, needs {problem.trainer_gpu_bytes(c) / GB:.2f}")
        for m, n in t.samplers:
            S = idx(m)
            cores[S] += n
            mem[S] += n * problem.sampler_bytes(c)
            parts_of[1, S] += n * problem.sampler_bytes(c)
        if t.fetch_at != t.machine:
            mem[idx(t.fetch_at)] += problem.relay_bytes(c)
            parts_of[2, idx(t.fetch_at)] += problem.relay_bytes(c)
    caches = np.zeros(M)
    for name, b in cache_bytes(problem, plan).items():
        caches[idx(name)] = b
    mem += caches
    for m in range(M):
        mach = problem.cluster.machines[m]
        if cores[m] > mach.cpus:
            probs.append(f"{mach.name}: {cores[m]} processes (trainers + samplers) on "
                         f"{mach.cpus} cores")
        if mem[m] > mach.memory:
            what = [f"{label} {fmt_bytes(v)}" for label, v in
                    zip(("stored partitions", "trainers", "samplers", "relay buffers",
                         "feature caches"),
                        (problem.resident[m], *parts_of[:, m], caches[m])) if v > 0]
            probs.append(f"{mach.name}: needs {fmt_bytes(mem[m])} of memory ("
                         f"{' + '.join(what)}), has memory_gb: {mach.memory / GB:g} "
                         f"({fmt_bytes(mach.memory)})")
    return Usage(cores, mem, probs)


def gatherers(plan: Plan) -> dict[str, int]:
    """Feature gatherers per machine: every trainer fetching in its own process, plus one
    relay on each machine that gathers for trainers elsewhere. Each holds its own copy of
    its machine's cache."""
    out: dict[str, int] = {}
    relays = set()
    for t in plan.trainers:
        if t.fetch_at == t.machine:
            out[t.machine] = out.get(t.machine, 0) + 1
        else:
            relays.add(t.fetch_at)
    for m in relays:
        out[m] = out.get(m, 0) + 1
    return out


def cache_bytes(problem: Problem, plan: Plan) -> dict[str, float]:
    """Host memory of the plan's feature caches per machine: every gatherer there holds the
    rows and a node -> row map (4 bytes per graph node)."""
    if not plan.caches:
        return {}
    g = gatherers(plan)
    n = float((problem.profile.meta or {}).get("num_nodes", 0) or 0)
    return {m: g.get(m, 0) * (rows * problem.profile.feature_bytes + 4 * n)
            for m, rows in plan.caches.items() if rows > 0 and g.get(m, 0)}


def check_resources(problem: Problem, plan: Plan, source: str = "plan") -> None:
    """Plan.validate plus cores, memory and GPU memory; raises SpecError naming the overflow."""
    plan.validate(problem.cluster, problem.job, source)
    u = usage(problem, plan)
    if u.problems:
        raise SpecError(source, "resources", u.problems[0],
                        "fewer processes or less data on that machine")


def is_feasible(problem: Problem, plan: Plan) -> bool:
    try:
        check_resources(problem, plan)
    except SpecError:
        return False
    return True


def fill_samplers(problem: Problem, plan: Plan, cap: int = MAX_SAMPLERS) -> Plan:
    """Give every machine's spare cores to the trainers sampling there, slowest first.

    More samplers only lower a trainer's sampling time per mini-batch, so spare cores are
    never wasted; memory is checked per added sampler.
    """
    u = usage(problem, plan)
    idx = problem.cluster.machine_index
    samplers = {t.id: dict(t.samplers) for t in plan.trainers}
    by_id = {t.id: t for t in plan.trainers}
    hosts: dict[int, list[int]] = {}
    for t in plan.trainers:
        for m, _ in t.samplers:
            hosts.setdefault(idx(m), []).append(t.id)
    for m, tids in sorted(hosts.items()):
        mach = problem.cluster.machines[m]
        while u.cores[m] < mach.cpus:
            best, worst = None, -1.0
            for tid in tids:
                n = sum(samplers[tid].values())
                if n >= cap:
                    continue
                s = problem.cost(by_id[tid].parts, by_id[tid].shares).sample_s / n
                if s > worst:
                    best, worst = tid, s
            if best is None:
                break
            need = problem.sampler_bytes(problem.cost(by_id[best].parts, by_id[best].shares))
            if u.memory[m] + need > mach.memory:
                break
            samplers[best][mach.name] = samplers[best].get(mach.name, 0) + 1
            u.cores[m] += 1
            u.memory[m] += need
    out = []
    for t in plan.trainers:
        s = tuple(sorted(samplers[t.id].items(), key=lambda kv: idx(kv[0])))
        out.append(replace(t, samplers=s))
    return Plan(plan.placer, plan.cluster, plan.cluster_fingerprint, tuple(out), plan.job,
                plan.prediction, plan.notes)


__all__ = ["Usage", "cache_bytes", "check_resources", "fill_samplers", "gatherers", "is_feasible",
           "usage"]
