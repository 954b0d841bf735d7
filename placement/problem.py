"""The placement problem: the resource rules and the cost model every placer obeys.

A placer turns (cluster, job, profile) into a :class:`~gnnsched.plan.Plan`: the device of every
trainer, the partitions whose seeds it owns, where its samplers run (and how many) and where its
feature gathering runs. All placers share :class:`Problem` (the resource rules and the cost
model, :class:`~gnnsched.workload.Workload`), so a plan that one placer may produce is one that
every other could have produced, and :func:`~gnnsched.placement.feasibility.check_resources` is
the single feasibility test.

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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from gnnsched.plan import Plan, TrainerPlan, owned_key
from gnnsched.prediction import Prediction
from gnnsched.profile import CostProfile
from gnnsched.spec import GB, ClusterSpec, JobSpec, SpecError, check_compatible
from gnnsched.workload import DrawnWorkload, PartCost, Workload

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
                  notes: Sequence[str] = (), prediction: Prediction | None = None,
                  **keys: Any) -> Plan:
        """A plan of `trainers` (sorted by id) for this cluster and job; `keys`: prediction
        fields as the plan file names them (:meth:`Prediction.with_legacy`)."""
        ts = tuple(sorted(trainers, key=lambda t: t.id))
        plan = Plan(placer, self.cluster.name, self.cluster.fingerprint(), ts, self.job.name,
                    prediction, tuple(notes))
        return plan.with_prediction(**keys) if keys else plan

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



# ---------------------------------------------------------------------- store memory


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


# ---------------------------------------------------------------------- bytes moved


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


__all__ = ["MAX_SAMPLERS", "PROCESS_BYTES", "Problem", "Slot", "check_store_memory",
           "fmt_bytes", "plan_transfers", "transfers"]
