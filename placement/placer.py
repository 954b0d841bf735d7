"""The placer interface, its registry, and the resource rules every placer obeys.

A placer turns (cluster, job, profile) into a :class:`~gnnsched.plan.Plan`: the device of every
trainer, the partitions whose seeds it owns, where its samplers run (and how many) and where its
feature gathering runs. All placers share :class:`Problem` (the resource rules and the cost
model, :class:`~gnnsched.workload.Workload`), so a plan that one placer may produce is one that
every other could have produced, and :func:`check_resources` is the single feasibility test.

Resource rules (what a machine must hold, estimated from the profile's sizes):

* cores: every trainer and every sampler process takes one core
  (``trainers + samplers <= cpus``); gathering and the store server are I/O-bound and share;
* host memory: the partitions it stores (when the profile says how big they are), and per
  trainer a model copy plus ``prefetch`` buffered mini-batches, per sampler two blocks, per
  relay ``prefetch`` gathered feature messages, plus ``PROCESS_BYTES`` per process;
* GPU memory: the model plus two mini-batches (the one training and the next);
* roles: trainers only where ``train`` is allowed, samplers where ``sample`` is, relays where
  ``fetch`` is.

Pure logic: no torch, no DGL, no runtime.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from gnnsched.plan import Plan, TrainerPlan, owned_key
from gnnsched.plugins import PLACERS_GROUP
from gnnsched.profile import CostProfile
from gnnsched.registry import Registry
from gnnsched.spec import GB, ClusterSpec, JobSpec, SpecError, check_compatible
from gnnsched.workload import NIC_WINDOW_S, DrawnWorkload, PartCost, Workload

Scorer = Callable[[Plan], float]  # a plan's predicted epoch seconds (lower is better)

PROCESS_BYTES = 0.25 * GB  # resident size of one Python worker process (trainer or sampler)
MAX_SAMPLERS = 8  # samplers per trainer; more only queue behind the prefetch bound


@dataclass(frozen=True)
class Slot:
    """GPUs of one kind on one machine: trainers placed on them are interchangeable."""

    machine: int
    devices: tuple[int, ...]
    speed: float
    gpu_memory: float

    @property
    def count(self) -> int:
        return len(self.devices)


class Problem:
    """What every placer needs: the cost model, the devices, and the resource limits.

    Construction checks that the job can fit at all and raises a :class:`SpecError` naming
    the shortage (devices, GPU memory, host memory, cores) otherwise.
    """

    def __init__(self, cluster: ClusterSpec, job: JobSpec, profile: CostProfile, *,
                 part_bytes: Sequence[float] | None = None, part_bytes_from: str = "") -> None:
        """``part_bytes``: the bytes every partition keeps in its store's memory, measured
        on the real partitions (``part_bytes_from`` says where); without them the profile's
        estimate (:meth:`_part_bytes`) is used."""
        check_compatible(cluster, job)
        if profile.num_parts != cluster.num_parts:
            raise SpecError("cost profile", "num_parts",
                            f"profile has {profile.num_parts} partitions, cluster "
                            f"{cluster.source} stores {cluster.num_parts}",
                            "a profile of this job's partitions")
        self.cluster, self.job, self.profile = cluster, job, profile
        self.wl = Workload(cluster, job, profile)
        self.M = len(cluster.machines)
        self.W = job.trainers
        self.P = cluster.num_parts
        self.names = [m.name for m in cluster.machines]
        self.cpus = np.array([m.cpus for m in cluster.machines], dtype=np.int64)
        self.can_sample = [m.can("sample") for m in cluster.machines]
        self.can_fetch = [m.can("fetch") for m in cluster.machines]
        self.store_of = list(cluster.part_stores)
        self.notes: list[str] = []
        self._costs: dict[tuple[tuple[int, float], ...], PartCost] = {}
        if part_bytes is not None:
            if len(part_bytes) != self.P:
                raise SpecError(part_bytes_from or "partitions", "num_parts",
                                f"holds {len(part_bytes)} partitions, cluster "
                                f"{cluster.source} stores {self.P}",
                                "the partitions of this job")
            self.part_bytes = [float(b) for b in part_bytes]
            self.part_bytes_from = part_bytes_from or "the partitions"
        else:
            self.part_bytes = self._part_bytes()
        self.resident = np.zeros(self.M)
        for p, b in enumerate(self.part_bytes):
            self.resident[self.store_of[p]] += b
        self.slots = self._slots()
        self._check_fits()

    # ------------------------------------------------------------------ sizes
    def _part_bytes(self) -> list[float]:
        """Bytes each stored partition keeps in memory, when the profile can tell (sets
        :attr:`part_bytes_from`, empty when it cannot)."""
        meta = self.profile.meta or {}
        if isinstance(meta.get("part_bytes"), list) and len(meta["part_bytes"]) == self.P:
            self.part_bytes_from = "the profile's part_bytes"
            return [float(b) for b in meta["part_bytes"]]
        if "num_nodes" in meta and "num_edges" in meta:
            seeds = np.array([pp.train_seeds for pp in self.profile.parts], dtype=float)
            share = seeds / seeds.sum() if seeds.sum() > 0 else np.full(self.P, 1 / self.P)
            per_node = self.profile.feature_bytes + 8
            total = meta["num_nodes"] * per_node + meta["num_edges"] * 16
            self.part_bytes_from = (f"estimated from the profile ({meta['num_nodes']:,} nodes, "
                                    f"{meta['num_edges']:,} edges, shared by training seeds); "
                                    "`gnnsched plan --partitions DIR` measures the real ones")
            return [float(total * s) for s in share]
        self.part_bytes_from = ""
        self.notes.append("partition sizes unknown (synthetic profile): the memory check "
                          "covers buffers, samplers and model copies only")
        return [0.0] * self.P

    def cost(self, parts: Sequence[int], shares: Sequence[float] = ()) -> PartCost:
        """Mean mini-batch of a trainer owning `parts` (``shares`` of their seeds; empty:
        whole parts), cached: placers ask repeatedly."""
        key = owned_key(parts, shares)
        c = self._costs.get(key)
        if c is None:
            ps, sh = zip(*key) if key else ((), ())
            c = self._costs[key] = self.wl.trainer_cost(ps, sh)
        return c

    def size_cost(self, parts: Sequence[int], shares: Sequence[float] = ()) -> PartCost:
        """The mini-batch sizes the memory rules use (mean costs, also in :meth:`drawn`)."""
        return self.cost(parts, shares)

    def drawn(self, seed: int) -> Problem:
        """This problem with the simulator's drawn mini-batches as its timing costs.

        Every trainer's cost becomes the average of the ``iterations`` mini-batches the
        simulator draws for it with `seed` (:class:`~gnnsched.workload.DrawnWorkload`), so
        loads and bottleneck bounds of the copy hold for the *simulated* epoch exactly, not
        only in expectation; memory rules keep the mean sizes (:meth:`size_cost`), so the
        copy accepts exactly the placements this problem accepts.
        """
        cache = self.__dict__.setdefault("_drawn_problems", {})
        if seed not in cache:
            dp = object.__new__(type(self))
            dp.__dict__.update({k: v for k, v in self.__dict__.items()
                                if k not in ("_drawn_problems", "max_batch")})
            dp.wl = DrawnWorkload(self.wl, seed)
            dp._costs = {}
            dp.size_cost = self.cost  # type: ignore[method-assign]
            dp.base = self
            cache[seed] = dp
        return cache[seed]

    @cached_property
    def max_batch(self) -> tuple[float, float]:
        """Largest mean (feature bytes, block bytes) of one partition's mini-batch."""
        return (max(c.feat_bytes for c in self.wl.parts), max(c.block_bytes for c in self.wl.parts))

    def trainer_host_bytes(self, c: PartCost) -> float:
        return PROCESS_BYTES + self.profile.model_bytes + \
            self.job.prefetch * (c.feat_bytes + c.block_bytes)

    def trainer_gpu_bytes(self, c: PartCost) -> float:
        return self.profile.model_bytes + 2 * (c.feat_bytes + c.block_bytes)

    def sampler_bytes(self, c: PartCost) -> float:
        return PROCESS_BYTES + 2 * c.block_bytes

    def relay_bytes(self, c: PartCost) -> float:
        return self.job.prefetch * c.feat_bytes

    # ------------------------------------------------------------------ devices
    def _slots(self) -> list[Slot]:
        slots = []
        for i, m in enumerate(self.cluster.machines):
            if not m.can("train") or not m.gpus:
                continue
            groups: dict[tuple[float, float], list[int]] = {}
            for d, g in enumerate(m.gpus):
                groups.setdefault((g.speed, g.memory), []).append(d)
            for (speed, mem), devs in sorted(groups.items(), key=lambda kv: kv[1][0]):
                slots.append(Slot(i, tuple(devs), speed, mem))
        return slots

    def usable_slots(self, c: PartCost | None = None) -> list[Slot]:
        """Slots whose GPU memory holds a trainer of mini-batch `c` (default: the largest)."""
        need = self.trainer_gpu_bytes(c) if c is not None else \
            self.profile.model_bytes + 2 * sum(self.max_batch)
        return [s for s in self.slots if s.gpu_memory >= need]

    def _check_stores(self) -> None:
        """Refuse a cluster whose store machine cannot hold the partitions it stores
        (:func:`check_store_memory`)."""
        check_store_memory(self.cluster, self.part_bytes, self.part_bytes_from)

    def _check_fits(self) -> None:
        """Refuse jobs no placement can run, naming the resource that is short."""
        self._check_stores()
        src = self.job.source
        W = self.W
        devices = sum(s.count for s in self.slots)
        if devices < W:
            raise SpecError(src, "trainers", f"{W} trainers but cluster {self.cluster.name!r} "
                            f"has only {devices} GPU(s) on machines that may train",
                            f"trainers <= {devices}, or add GPUs to {self.cluster.source}")
        smallest = min((self.cost([p]) for p in range(self.P)),
                       key=lambda c: c.feat_bytes + c.block_bytes)
        roomy = [s for s in self.slots if s.gpu_memory >= self.trainer_gpu_bytes(smallest)]
        if sum(s.count for s in roomy) < W:
            need = self.trainer_gpu_bytes(smallest) / GB
            raise SpecError(src, "trainers",
                            f"{W} trainers need {need:.2f} GB of GPU memory each (model + two "
                            f"mini-batches) but only {sum(s.count for s in roomy)} GPU(s) "
                            "have that much", "fewer trainers, a smaller batch_size or "
                            "bigger GPUs")
        if not any(self.can_sample):
            raise SpecError(self.cluster.source, "machines[*].roles",
                            "no machine may run samplers", "add 'sample' to some roles")
        host_need = self.trainer_host_bytes(smallest)
        free = self.free_memory()
        cap = 0
        for s in roomy:
            m = s.machine
            fit = min(s.count, int(free[m] // host_need), int(self.cpus[m]))
            cap += max(fit, 0)
        if cap < W:
            raise SpecError(src, "trainers",
                            f"{W} trainers but only {cap} GPU(s) sit on machines with a free "
                            f"core and {host_need / GB:.2f} GB of free host memory each "
                            "(model copy + prefetch buffers)",
                            "fewer trainers, a smaller prefetch or batch_size, or more memory")
        if int(self.cpus.sum()) < 2 * W:
            raise SpecError(self.cluster.source, "machines[*].cpus",
                            f"{W} trainers and at least {W} samplers need {2 * W} cores, the "
                            f"cluster has {int(sum(self.cpus))}", "more cores or fewer trainers")

    def free_memory(self) -> np.ndarray:
        """Host memory left after the stored partitions."""
        return np.array([m.memory for m in self.cluster.machines]) - self.resident

    # ------------------------------------------------------------------ plans
    def make_plan(self, placer: str, trainers: Sequence[TrainerPlan],
                  notes: Sequence[str] = (), **predicted: Any) -> Plan:
        ts = tuple(sorted(trainers, key=lambda t: t.id))
        return Plan(placer, self.cluster.name, self.cluster.fingerprint(), ts,
                    self.job.name, dict(predicted), tuple(notes))

    def window_s(self, c: PartCost, T: int, samplers: Sequence[int], F: int) -> float:
        """Per-iteration time the prefetch window forces on one trainer.

        Batch ``k + d`` (``d`` = the job's prefetch) may start sampling only once batch ``k``
        started training, and must then be sampled (its remote hops included) and gathered
        before it trains, so ``d`` iterations last at least that latency. This is what caps
        a trainer that has many samplers but slow mini-batches; ``Workload.loads`` counts
        throughput only. With several sampler hosts the fastest is assumed (a lower bound).
        """
        eg, ig = self.wl.egress_bw, self.wl.ingress_bw
        lat = self.cluster.latency
        best = math.inf
        for S in samplers:
            hops = 0.0
            remote = sum(v for m, v in c.struct_from.items() if m != S)
            for m, v in c.struct_from.items():
                if m != S:
                    hops = max(hops, v / min(eg[m], ig[S]))
            if remote:
                hops = max(hops, remote / ig[S]) + lat
            feat = 0.0
            into_f = sum(v for m, v in c.feat_from.items() if m != F)
            for m, v in c.feat_from.items():
                if m != F:
                    feat = max(feat, v / min(eg[m], ig[F]))
            if into_f:
                feat = max(feat, into_f / ig[F]) + lat
            if F != T:
                feat += c.feat_bytes / min(eg[F], ig[T]) + lat
            block = c.block_bytes / min(eg[S], ig[T]) + lat if S != T else 0.0
            into_t = (into_f if F == T else c.feat_bytes) + (c.block_bytes if S != T else 0.0)
            fetch = max(feat, block, into_t / ig[T] if into_t else 0.0)
            best = min(best, c.sample_s + hops + fetch)
        return best / max(self.job.prefetch, 1)

    def plan_window(self, plan: Plan) -> tuple[float, int]:
        """The largest prefetch-window time of any trainer of `plan`, and which trainer."""
        idx = self.cluster.machine_index
        worst = (0.0, -1)
        for t in plan.trainers:
            v = self.window_s(self.cost(t.parts, t.shares), idx(t.machine),
                              [idx(m) for m, _ in t.samplers], idx(t.fetch_at))
            worst = max(worst, (v, t.id))
        return worst

    def epoch_bound(self, plan: Plan) -> float:
        """Lower bound on the epoch of `plan`: Workload.bound, or the window over the epoch."""
        return max(self.wl.bound(plan).epoch_s, self.wl.iterations * self.plan_window(plan)[0])

    def seconds_per_iteration(self, plan: Plan) -> tuple[float, str]:
        """The placement model's time per iteration of a plan, and what causes it.

        The most loaded resource of :meth:`Workload.loads`, or the prefetch window of the
        slowest trainer when that is longer (:meth:`window_s`).
        """
        name, v = self.wl.loads(plan).bottleneck()
        w, tid = self.plan_window(plan)
        if w > v:
            return w, f"prefetch window of trainer {tid} (sample + gather latency / prefetch)"
        return v, name


# ---------------------------------------------------------------------- feasibility


def check_store_memory(cluster: ClusterSpec, part_bytes: Sequence[float],
                       sizes_from: str = "") -> None:
    """Refuse a cluster whose store machine cannot hold the partitions it stores.

    ``part_bytes[p]`` is what partition ``p`` keeps in its store's memory (``sizes_from``
    says where the sizes come from). Stores are an input (the data sits there before the
    job), so no placement fixes this; the SpecError names the host, its partitions and their
    sizes, what it needs and has, and what would be valid.
    """
    P = len(part_bytes)
    store_of = list(cluster.part_stores)
    resident = np.zeros(len(cluster.machines))
    for p, b in enumerate(part_bytes):
        resident[store_of[p]] += b
    short = [m for m, mach in enumerate(cluster.machines) if resident[m] > mach.memory]
    if not short:
        return
    m = short[0]
    mach = cluster.machines[m]
    need = float(resident[m])
    parts = sorted(p for p in range(P) if store_of[p] == m)
    biggest = max(part_bytes[p] for p in parts)
    fixes = [f"memory_gb: {_gb_up(need)} or more on {mach.name}"]
    if len(parts) > 1 and biggest <= mach.memory:
        fixes.append(f"fewer of these partitions on {mach.name} (more hosts to store them: "
                     "machines[*].partitions)")
    else:
        split = math.ceil(biggest / max(mach.memory, 1.0))
        fixes.append(f"more hosts and more partitions (num_parts: {P * split} or more, so "
                     f"that one is at most {fmt_bytes(mach.memory)}), each host storing what "
                     "its memory_gb holds")
    if len(parts) > 1:
        sizes = ", ".join(f"{p}: {fmt_bytes(part_bytes[p])}" for p in parts[:8])
        if len(parts) > 8:
            sizes += f", ... ({len(parts)} in all)"
        held = (f"partitions {parts} need {fmt_bytes(need)} of memory (features + graph "
                f"structure: {sizes}")
    else:
        held = (f"partition {parts[0]} needs {fmt_bytes(need)} of memory (features + graph "
                "structure")
    others = [cluster.machines[o].name for o in short[1:]]
    raise SpecError(cluster.source, f"machines[{m}].memory_gb",
                    f"store {mach.name} cannot hold its partitions: {held}; sizes "
                    f"{sizes_from or 'given'}), {mach.name} has memory_gb: "
                    f"{mach.memory / GB:g} ({fmt_bytes(mach.memory)})"
                    + (f"; nor can {', '.join(others)}" if others else ""),
                    "; or ".join(fixes))




def fmt_bytes(b: float) -> str:
    """Bytes for a person: kB, MB or GB (decimal, as memory_gb is)."""
    for unit, size in (("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}" if b < 100 * size else f"{b / size:.0f} {unit}"
    return f"{b:.0f} B"


def _gb_up(b: float) -> str:
    """``b`` bytes as memory_gb, rounded up at three significant digits."""
    gb = b / GB
    digits = max(0, 2 - math.floor(math.log10(gb))) if gb > 0 else 0
    return f"{math.ceil(gb * 10 ** digits) / 10 ** digits:g}"



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


# ---------------------------------------------------------------------- shared heuristics


def split_balanced(items: Sequence[int], weights: Sequence[float], k: int) -> list[list[int]]:
    """Cut `items` (in order) into `k` non-empty contiguous runs of about equal weight."""
    n = len(items)
    if not 1 <= k <= n:
        raise ValueError(f"cannot cut {n} items into {k} non-empty runs")
    total = float(sum(weights))
    out: list[list[int]] = []
    cur: list[int] = []
    acc = 0.0
    for i, (x, w) in enumerate(zip(items, weights)):
        cur.append(x)
        acc += w
        left_items, left_runs = n - i - 1, k - len(out) - 1
        if left_runs == 0:
            continue
        if left_items == left_runs or (acc >= total * (len(out) + 1) / k - w / 2
                                       and left_items >= left_runs):
            out.append(cur)
            cur = []
    out.append(cur)
    return out


def seeds_of(problem: Problem, parts: Sequence[int]) -> float:
    return float(sum(max(problem.profile.parts[p].train_seeds, 1) for p in parts))


def store_groups(problem: Problem, W: int | None = None) -> list[tuple[int, list[int]]]:
    """DistDGL's split: (home store, parts) per trainer, every trainer on one store's data.

    With at least as many trainers as stores, every store gets one trainer and the rest go
    where the seeds are (largest seeds per trainer first, at most one per part); a store's
    parts are then cut into seed-balanced runs. With fewer trainers than stores, runs of
    neighbouring stores with balanced seeds share a trainer.
    """
    W = problem.W if W is None else W
    stores = sorted({problem.store_of[p] for p in range(problem.P)})
    parts_of = {s: sorted(problem.cluster.machines[s].partitions) for s in stores}
    seeds = {s: seeds_of(problem, parts_of[s]) for s in stores}
    groups: list[tuple[int, list[int]]] = []
    if W >= len(stores):
        count = {s: 1 for s in stores}
        for _ in range(W - len(stores)):
            open_ = [s for s in stores if count[s] < len(parts_of[s])]
            if not open_:
                break
            s = max(open_, key=lambda s: (seeds[s] / count[s], -s))
            count[s] += 1
        for s in stores:
            w = [seeds_of(problem, [p]) for p in parts_of[s]]
            groups.extend((s, g) for g in split_balanced(parts_of[s], w, count[s]))
    else:
        for run in split_balanced(stores, [seeds[s] for s in stores], W):
            groups.append((run[0], [p for s in run for p in parts_of[s]]))
    return groups


def seed_line(parts: Sequence[int], seeds: Sequence[float], k: int,
              sizes: Sequence[float] | None = None
              ) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Cut the seeds of `parts` (laid end to end, in order) into `k` runs: each run is
    (parts, shares of their seeds). Equal runs (DistDGL's even split of training seeds), or
    in proportion to ``sizes`` (e.g. GPU speeds); a part is cut where a run ends, so at most
    ``k - 1`` parts are split."""
    total = float(sum(seeds))
    if k < 1 or total <= 0:
        raise ValueError(f"cannot cut {total} seeds into {k} runs")
    rel = [1.0] * k if sizes is None else [float(v) for v in sizes]
    want = [total * v / sum(rel) for v in rel]
    out: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
    cur_p: list[int] = []
    cur_s: list[float] = []
    room = want[0]
    for p, n in zip(parts, seeds):
        left = float(n)
        while left > 1e-9 * total:
            take = min(left, room)
            cur_p.append(p)
            cur_s.append(take / n)
            left -= take
            room -= take
            if room <= 1e-9 * total and len(out) < k - 1:
                out.append((tuple(cur_p), tuple(cur_s)))
                cur_p, cur_s, room = [], [], want[len(out)]
    if cur_p:
        out.append((tuple(cur_p), tuple(cur_s)))
    # exact sums: the last share of each part is 1 minus its others
    seen: dict[int, list[tuple[int, int]]] = {}
    for i, (ps, _) in enumerate(out):
        for j, p in enumerate(ps):
            seen.setdefault(p, []).append((i, j))
    fixed = [list(sh) for _, sh in out]
    for where in seen.values():
        if len(where) == 1:
            i, j = where[0]
            fixed[i][j] = 1.0
        else:
            i, j = where[-1]
            fixed[i][j] = 1.0 - sum(fixed[a][b] for a, b in where[:-1])
    return [(ps, tuple(sh)) for (ps, _), sh in zip(out, fixed)]


def store_slices(problem: Problem, W: int | None = None
                 ) -> list[tuple[int, tuple[int, ...], tuple[float, ...]]]:
    """DistDGL's split with more trainers than partitions: (home store, parts, shares) per
    trainer. Every store gets a trainer, the rest go where the most seeds per trainer are
    (at most the GPUs a store may train on, when it has any), and each store's seeds are cut
    into equal runs (:func:`seed_line`)."""
    W = problem.W if W is None else W
    stores = sorted({problem.store_of[p] for p in range(problem.P)})
    parts_of = {s: sorted(problem.cluster.machines[s].partitions) for s in stores}
    seeds = {s: seeds_of(problem, parts_of[s]) for s in stores}
    gpus = {s: (len(problem.cluster.machines[s].gpus)
                if problem.cluster.machines[s].can("train") else 0) for s in stores}
    count = {s: 1 for s in stores}
    for _ in range(W - len(stores)):
        open_ = [s for s in stores if count[s] < gpus[s]] or stores
        s = max(open_, key=lambda s: (seeds[s] / count[s], -s))
        count[s] += 1
    out = []
    for s in stores:
        w = [seeds_of(problem, [p]) for p in parts_of[s]]
        out.extend((s, ps, sh) for ps, sh in seed_line(parts_of[s], w, count[s]))
    return out


def bundle_parts(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """The part split placers start from: whose seeds each trainer owns.

    :func:`store_groups` (a trainer's parts all on one store, so its mini-batches pull from
    few stores and it can sit next to its data), unless that needs more trainers than the
    stores can give a part each; then seed-balanced runs of parts in store order. Seeds stay
    balanced because every trainer runs the same number of iterations: a trainer owning more
    than its share would not visit all of them in an epoch.
    """
    W = problem.W if W is None else W
    P = problem.P
    if W >= P:
        return [(p,) for p in range(P)]
    groups = store_groups(problem, W)
    if len(groups) == W:
        return [tuple(g) for _, g in groups]
    return contiguous_split(problem, W)


def contiguous_split(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """Seed-balanced runs of parts in store order (runs may straddle two stores)."""
    W = problem.W if W is None else W
    if W >= problem.P:
        return [(p,) for p in range(problem.P)]
    order = sorted(range(problem.P), key=lambda p: (problem.store_of[p], p))
    runs = split_balanced(order, [seeds_of(problem, [p]) for p in order], W)
    return [tuple(sorted(r)) for r in runs]


def lpt_split(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """The most seed-balanced split: largest part first, each to the lightest trainer.

    Balance matters beyond coverage: a trainer's mini-batches are drawn from its parts in
    proportion to their seeds, so a part in a light trainer is sampled more often per
    iteration and its store sends more; equal seeds spread the stores' egress evenly. Among
    equally light trainers, one already holding parts of the same store is preferred.
    """
    W = problem.W if W is None else W
    if W >= problem.P:
        return [(p,) for p in range(problem.P)]
    order = sorted(range(problem.P), key=lambda p: (-seeds_of(problem, [p]), p))
    groups: list[list[int]] = [[] for _ in range(W)]
    load = [0.0] * W
    for p in order:
        st = problem.store_of[p]
        i = min(range(W), key=lambda i: (load[i], not any(problem.store_of[q] == st
                                                          for q in groups[i]), i))
        groups[i].append(p)
        load[i] += seeds_of(problem, [p])
    return [tuple(sorted(g)) for g in groups]


def split_of(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """A plan's part split, canonical (sorted), for comparing splits across plans (with seed
    shares: (part, share) pairs, which no whole-part split equals)."""
    return tuple(sorted(tuple(sorted(t.parts)) if not t.shares else t.owned
                        for t in plan.trainers))


def has_shares(plan: Plan) -> bool:
    """Whether some trainer owns part of a partition's seeds (outside the CP-SAT bundle
    model's space: bounds use such a plan's own floor)."""
    return any(t.shares for t in plan.trainers)


def candidate_splits(problem: Problem) -> list[list[tuple[int, ...]]]:
    """Part splits the model is solved for when it cannot choose the split itself."""
    out: list[list[tuple[int, ...]]] = []
    seen: set[tuple] = set()
    for split in (bundle_parts(problem), contiguous_split(problem), lpt_split(problem)):
        key = tuple(sorted(split))
        if key not in seen:
            seen.add(key)
            out.append(split)
    return out


def main_store(problem: Problem, parts: Sequence[int]) -> int:
    """The machine that sends a trainer of `parts` the most feature bytes."""
    c = problem.cost(parts)
    return max(c.feat_from, key=lambda m: (c.feat_from[m], -m))


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
                dict(plan.predicted), plan.notes)


def transfers(c: PartCost, T: int, samplers: Sequence[tuple[int, float]], F: int
              ) -> list[tuple[int, int, float, str]]:
    """(src, dst, bytes, kind) one mini-batch of cost `c` moves across the network.

    Mirrors :meth:`Workload.loads`: remote hops from stores to samplers, blocks from samplers
    to the trainer at `T`, features from stores to the gatherer `F`, and (relay) from `F` to
    `T`. `samplers` is (machine, share of the trainer's mini-batches).
    """
    out: list[tuple[int, int, float, str]] = []
    for S, f in samplers:
        for m, v in c.struct_from.items():
            if m != S:
                out.append((m, S, f * v, "struct"))
        if S != T:
            out.append((S, T, f * c.block_bytes, "block"))
    for m, v in c.feat_from.items():
        if m != F:
            out.append((m, F, v, "feat"))
    if F != T:
        out.append((F, T, c.feat_bytes, "relay"))
    return out


def plan_transfers(problem: Problem, plan: Plan) -> dict[tuple[int, int], float]:
    """Mini-batch bytes per iteration between machine pairs (the all-reduce is separate)."""
    idx = problem.cluster.machine_index
    out: dict[tuple[int, int], float] = {}
    for t in plan.trainers:
        n = t.num_samplers
        shares = [(idx(m), k / n) for m, k in t.samplers]
        for src, dst, b, _ in transfers(problem.cost(t.parts, t.shares), idx(t.machine), shares,
                                        idx(t.fetch_at)):
            out[(src, dst)] = out.get((src, dst), 0.0) + b
    return out


def bound_scorer(problem: Problem) -> Scorer:
    """The cost model's lower bound on a plan's epoch time (no simulator needed)."""
    return problem.epoch_bound


def simulator_scorer(problem: Problem, policy: str = "gnnsched", seed: int = 0,
                     iterations: int | None = None) -> Scorer | None:
    """The simulator running `policy`, or None when the simulator is not installed.

    `iterations` below the epoch's simulates that many and extrapolates (for search moves on
    long epochs); None simulates the whole epoch.
    """
    try:
        from gnnsched import simulator
        from gnnsched.policy import get_policy

        get_policy(policy)
    except (ImportError, ValueError):
        return None
    sim = getattr(simulator, "simulate", None)
    if sim is None:
        return None
    its = iterations if iterations and iterations < problem.wl.iterations else None

    def score(plan: Plan) -> float:  # on the runtime's network: its send windows
        return float(sim(problem.wl, plan, policy=policy, seed=seed, iterations=its,
                         validate=False, nic_window_s=NIC_WINDOW_S).epoch_time_s)

    return score


SEARCH_ITERATIONS = 48  # search moves simulate at most this many iterations (extrapolated)


def default_scorer(problem: Problem, seed: int = 0, iterations: int | None = None
                   ) -> tuple[Scorer, str]:
    """Simulator with the gnnsched policy when available, else the cost model's bound."""
    s = simulator_scorer(problem, "gnnsched", seed, iterations)
    if s is not None:
        return s, "simulator (gnnsched policy, windowed network)"
    return bound_scorer(problem), "cost-model bound (simulator not installed)"


# ---------------------------------------------------------------------- registry


class Placer(ABC):
    """Base class: ``place`` returns a feasible plan or raises a SpecError saying why not."""

    name: ClassVar[str] = "base"

    def __init__(self, scorer: Scorer | None = None, search_scorer: Scorer | None = None
                 ) -> None:
        # used by placers that evaluate candidates (gnnsched): `scorer` picks the final plan,
        # `search_scorer` (default: `scorer`, or a shorter simulation) scores search moves
        self.scorer = scorer
        self.search_scorer = search_scorer
        self.outcome: Any = None  # CP-SAT's outcome, for placers that solve the model

    def place(self, cluster: ClusterSpec, job: JobSpec, profile: CostProfile, *,
              seed: int = 0, budget: float | None = None) -> Plan:
        """Plan for (cluster, job, profile); `budget` caps planning seconds."""
        return self.place_problem(Problem(cluster, job, profile), seed=seed, budget=budget)

    @abstractmethod
    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        """Plan for a prepared problem (lets callers share one Problem across placers)."""


PLACERS: Registry[Placer] = Registry(
    "placer", Placer, group=PLACERS_GROUP, flag="--placer",
    modules=tuple(f"gnnsched.placement.{m}" for m in ("baselines", "cpsat", "shares", "search")))
register = PLACERS.register  # class decorator: make a placer available as ``--placer name``


def placers() -> dict[str, type[Placer]]:
    """Every placer by name: the built-ins (registered on import) and those installed as
    plug-ins (:mod:`gnnsched.registry`, entry point group ``gnnsched.placers``)."""
    return dict(PLACERS.load())


def get_placer(name: str, **kwargs: Any) -> Placer:
    """An instance of the placer registered as `name`; an unknown name raises
    :class:`~gnnsched.registry.UnknownName` listing the installed ones."""
    return PLACERS.create(name, **kwargs)


__all__ = ["MAX_SAMPLERS", "PLACERS", "PROCESS_BYTES", "check_store_memory", "fmt_bytes", "SEARCH_ITERATIONS", "Placer", "Problem", "Scorer", "Slot",
           "Usage", "bound_scorer", "plan_transfers", "transfers", "bundle_parts", "candidate_splits", "check_resources", "contiguous_split", "default_scorer",
           "fill_samplers", "get_placer", "placers", "seeds_of", "split_balanced", "store_groups", "is_feasible", "main_store", "register",
           "simulator_scorer", "split_of", "usage"]
