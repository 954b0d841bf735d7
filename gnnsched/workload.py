"""The work a plan implies: per-mini-batch demands on every resource, and the lower bound.

This is the one place that turns (cluster, job, profile) into costs in machine space, so the
simulator, the lower bounds and the placers agree on what a mini-batch costs:

* sampling: ``sample_s`` CPU seconds on the sampler's machine (one core per sampler process),
  plus the sampled edges of every remote hop, sent by the store that owns the frontier to the
  sampler (``EDGE_BYTES`` per edge);
* the block (sampled structure) from the sampler to the trainer;
* features: every input node's row from the store that owns it to the gathering machine
  (``fetch_at``), then — when gathering runs elsewhere (a relay) — one message to the trainer;
* training: ``train_s / speed`` on the trainer's device;
* all-reduce: a ring over all trainers, ``2 (W-1)/W`` gradient bytes through each trainer's
  NIC, once per iteration; the barrier makes it part of every trainer's iteration.

A trainer's mini-batch is ``1 / iterations`` of its seeds (the runtime cuts every trainer's
seeds into the epoch's iterations), so the profile's mini-batch of ``batch_size`` seeds is
scaled by the trainer's *load*, its seeds over ``iterations x batch_size``
(:meth:`Workload.load`): a trainer owning more seeds (a bigger partition, or a larger share
of split partitions) runs larger mini-batches, and skew costs time. The scaling is linear in
seeds: sampled edges and training work are per seed; input nodes are slightly sublinear
(neighbourhoods overlap more in a larger batch), so it slightly overcharges large loads.

Transfers inside a machine are free. Means come from the profile; the simulator draws samples
(:meth:`Workload.draws`: a trainer's mini-batches are a function of the seed and of the
partitions it owns, never of its position in the plan, so every plan with the same part split
runs the same mini-batches; each batch mixes one profiled sample of every partition the trainer
owns, weighted by its seeds there, as the runtime shuffles a trainer's seeds together).
:class:`DrawnWorkload` has the same interface with each trainer's cost the average of the
mini-batches the simulator will actually draw for it: loads and bounds computed on it hold for
the simulated epoch, not just in expectation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnsched.plan import Plan, TrainerPlan, owned_key
from gnnsched.profile import EDGE_BYTES, CostProfile
from gnnsched.spec import ClusterSpec, JobSpec

# A store's send windows on shaped links, as seconds of its own egress: the total bytes in
# flight from its NIC, and to any one receiver. The runtime's stores size their send windows
# with them (``gnnsched.runtime.coordinator``: a window must cover the bandwidth-delay
# product of *its* NIC), and the simulator's window model (``nic_window_s``) uses the first to
# queue what the runtime would, so both sides read the same numbers from here.
NIC_WINDOW_S, PEER_WINDOW_S = 0.15, 0.12
# A store's chunk on shaped links, as seconds of its own egress: the runtime's stores send
# chunks of this (at most ``CHUNK_BYTES``, 256 KiB), the next one always from the most urgent
# transfer with window room; the simulator's window model moves bytes in pieces of this size
# (on NICs too fast for 256 KiB to be 8 ms, a coarser step of the same rule).
NIC_CHUNK_S = 0.008
# The bytes one TCP connection may park in a FIFO NIC queue (Linux's TCP small queues; the
# emulated cluster caps it at this, ``gnnsched.runtime.netns_ops.TSQ_BYTES``). A small message
# on a busy FIFO NIC -- a sampler's request for a remote hop, a store's answer -- waits behind
# that much of every other connection's unsent bytes: the simulator's window model charges
# each remote hop's round trip that wait (``nic_fifo_bytes``), which fair sharing misses.
# 64 KiB: far below the cap, as TSQ holds about two GSO segments per socket; measured with
# ``tc -s qdisc`` every ~30 ms on the held-out cluster's busy stores (mean backlog 39-61 KB,
# p90 151-194 KB, with 2-3 bulk connections). On lab4 (D = 1) the stores' queues were
# non-empty 16-23% of the time (mean 91-110 KB then) and the model's wait per mini-batch is
# 21 ms against 10 ms measured (15 ms without it): an over-estimate there, where sampling
# is off the critical path (the steady epoch moves 0.3%).
NIC_FIFO_BYTES = 64 * 1024

# A store's total send window is work-conserving: a transfer it blocks goes past it anyway
# when the store's NIC carried less than ``CONSERVE_BELOW`` of its rate over the last
# ``CONSERVE_EVERY`` of the window's drain time (``NIC_WINDOW_S``) -- the bytes in flight wait
# at congested receivers, not at its NIC -- at most one such transfer per that time. Counted
# in full, bytes stuck at congested receivers idle the store's NIC while its other receivers
# wait (head-of-line blocking: 10-25% of a simulated epoch on 64 hosts of 1 Gbit/s, where ~15
# stores send to every trainer); when the NIC itself is the bottleneck nothing changes, and
# the policy's order holds. A quarter of the drain time is ~5 chunks of acknowledgements
# (``NIC_CHUNK_S``), enough to measure a rate by; once per drain time recovered only half the
# loss in simulation. The runtime's stores (:class:`gnnsched.runtime.store.NicQueue`, from
# acknowledged bytes) and the simulator's window model (from the streams' rates) use both.
CONSERVE_BELOW, CONSERVE_EVERY = 0.9, 0.25

# Wire levels. Policies with ``wire_levels`` (gnnsched's first rule: the oldest iteration
# first) have the stores keep their levels on the wire, at both ends of a link:
# * a store hands no connection a chunk of a higher level while a chunk of a lower level it
#   sent is unacknowledged, unless its NIC idles (the work-conserving rule above then lets
#   the best held transfer past);
# * a store holds a transfer whose receiver still has a lower level unfinished from any
#   store (the receiver's floor, which the coordinator sends every store), and sends its
#   other receivers' meanwhile.
# The windows alone order bytes only within one connection, and connections share both NICs
# fairly, so the next batch's prefetched features took NIC time from the batches the barrier
# waits for: on the 32-host *mixed* planning shape the first iteration took 0.56 s where the
# ideal network (every NIC in the policy's order) takes 0.42 s, and the epoch was 1.10x the
# ideal one; with both rules 1.005x. The first rule alone gained 5% there but lost 17% on
# papers-sized *mixed*, where a store's next level then waited behind one slow receiver,
# and with the floors gained 7%. The runtime (``NicQueue(levels=True)``, the coordinator's
# floors) and the simulator's window model (``_WindowNet(levels=True)``) apply the same rules.


def ring_wire_s(volume: float, trainer_machines: list[int], egress: Any, ingress: Any,
                latency: float) -> float:
    """Seconds a ring all-reduce sending ``volume`` bytes from each trainer keeps the wire
    busy: at the slowest trainer machine's share of its NIC (trainers on one machine split
    it), plus the ring's 2 (W-1) message latencies. The cost model adds the profile's fixed
    overhead to this (:meth:`Workload.allreduce_s`); the runtime holds prefetch into
    all-reducing machines for this long."""
    per = {m: trainer_machines.count(m) for m in set(trainer_machines)}
    bw = min(min(egress[m], ingress[m]) / n for m, n in per.items())
    return volume / bw + 2 * (len(trainer_machines) - 1) * latency


@dataclass(frozen=True)
class PartCost:
    """Mean cost of one mini-batch whose seeds lie in one partition, in machine space."""

    sample_s: float
    train_s: float  # on the reference device (speed 1.0)
    block_bytes: float
    feat_from: dict[int, float]  # store machine -> feature bytes it owns for this batch
    struct_from: dict[int, float]  # store machine -> sampled-edge bytes of remote hops

    @property
    def feat_bytes(self) -> float:
        return sum(self.feat_from.values())


@dataclass
class Loads:
    """Seconds of work per iteration on every resource (one mini-batch per trainer)."""

    egress: np.ndarray  # [M] seconds of sending per machine
    ingress: np.ndarray  # [M]
    cpu: np.ndarray  # [M] sampling seconds per machine / usable cores
    device: dict[tuple[int, int], float]  # (machine, gpu) -> train + all-reduce seconds
    sampler: dict[int, float]  # trainer id -> its sampling seconds / its sampler count
    names: list[str] = field(default_factory=list)

    def bottleneck(self) -> tuple[str, float]:
        """The most loaded resource and its seconds per iteration."""
        best = ("nothing", 0.0)
        for kind, arr in (("egress", self.egress), ("ingress", self.ingress), ("cpu", self.cpu)):
            if len(arr) and float(arr.max()) > best[1]:
                i = int(arr.argmax())
                best = (f"{kind} of {self.names[i]}", float(arr[i]))
        for (m, d), v in self.device.items():
            if v > best[1]:
                best = (f"gpu {d} of {self.names[m]}", v)
        for t, v in self.sampler.items():
            if v > best[1]:
                best = (f"samplers of trainer {t}", v)
        return best


@dataclass(frozen=True)
class Bound:
    """Lower bound on a plan's time: no schedule of this placement can beat it."""

    iteration_s: float  # most loaded resource per iteration
    chain_s: float  # longest dependency chain of the epoch
    epoch_s: float  # max(iterations * iteration_s, chain_s)
    bottleneck: str


class Workload:
    """Costs of a (cluster, job, profile) triple; cheap to query for many plans."""

    def __init__(self, cluster: ClusterSpec, job: JobSpec, profile: CostProfile) -> None:
        self.cluster, self.job, self.profile = cluster, job, profile
        self.M = len(cluster.machines)
        self.names = [m.name for m in cluster.machines]
        self.store = np.array(cluster.part_stores, dtype=np.int64)
        # payload rates: the NICs' rates count wire bytes (CostProfile.wire_overhead)
        wire = 1.0 + profile.wire_overhead
        self.egress_bw = np.array([m.egress / wire for m in cluster.machines])
        self.ingress_bw = np.array([m.ingress / wire for m in cluster.machines])
        self.cores = np.array([m.cpus for m in cluster.machines])
        self.iterations = profile.iterations_per_epoch(job.trainers, job.batch_size)
        self.parts = [self._part_cost(p) for p in range(profile.num_parts)]
        self.seeds = np.array([pp.train_seeds for pp in profile.parts], dtype=float)
        meta = profile.meta or {}
        self.num_nodes = int(meta.get("num_nodes", 0) or 0)
        pn = meta.get("part_nodes")
        self.part_nodes = np.array(pn, dtype=float) if isinstance(pn, list) and \
            len(pn) == profile.num_parts else None
        hot = meta.get("hot_coverage")
        self.hot_x = self.hot_y = None
        if isinstance(hot, dict) and len(hot.get("parts", [])) == profile.num_parts:
            self.hot_x = np.array(hot["x"], dtype=float)
            self.hot_y = np.array(hot["parts"], dtype=float)  # [P, len(x)]

    def _part_cost(self, p: int) -> PartCost:
        pp = self.profile.part(p)
        P, fb = self.profile.num_parts, self.profile.feature_bytes
        nodes = pp.mean_input_nodes(P)
        edges = pp.mean_edge_counts(P)
        feat: dict[int, float] = {}
        struct: dict[int, float] = {}
        for q in np.nonzero(nodes)[0]:
            m = int(self.store[q])
            feat[m] = feat.get(m, 0.0) + float(nodes[q]) * fb
        for q in np.nonzero(edges)[0]:
            m = int(self.store[q])
            struct[m] = struct.get(m, 0.0) + float(edges[q]) * EDGE_BYTES
        return PartCost(float(pp.sample_s.mean()), float(pp.train_s.mean()),
                        float(pp.edges.mean()) * EDGE_BYTES, feat, struct)

    # ------------------------------------------------------------------ seeds
    def weights(self, parts: tuple[int, ...] | list[int], shares: tuple[float, ...] | list[float]
                = ()) -> np.ndarray:
        """Training seeds a trainer owns in each of ``parts`` (``shares``: fractions of
        them, empty for whole parts)."""
        w = self.seeds[list(parts)]
        return w * np.asarray(shares, dtype=float) if len(shares) else w

    def load(self, parts: tuple[int, ...] | list[int], shares: tuple[float, ...] | list[float]
             = ()) -> float:
        """The trainer's mini-batch size over the profile's (``batch_size`` seeds): its
        seeds over ``iterations x batch_size``."""
        denom = self.iterations * self.job.batch_size
        return float(self.weights(parts, shares).sum()) / denom if denom > 0 else 1.0

    # ------------------------------------------------------------------ feature caches
    def cache_share(self, machine: int, rows: int) -> float:
        """The fraction of the nodes ``machine`` does not store that a cache of ``rows``
        holds (the cache takes the hottest of them: :mod:`gnnsched.datasets.hot`)."""
        if rows <= 0 or self.num_nodes <= 0:
            return 0.0
        own = 0.0
        if self.part_nodes is not None:
            own = float(self.part_nodes[self.store == machine].sum())
        remote = max(self.num_nodes - own, 1.0)
        return min(1.0, rows / remote)

    def cache_hit(self, part: int, share: float) -> float:
        """Expected share of a mini-batch's remote feature rows (seeds in ``part``) that a
        cache holding the hottest ``share`` of the remote nodes serves: the profile's
        measured in-degree coverage curve, else ``share`` itself (any order's hit rate)."""
        if share <= 0:
            return 0.0
        if share >= 1:
            return 1.0
        if self.hot_x is None:
            return share
        return float(np.interp(share, self.hot_x, self.hot_y[part]))

    def cache_miss(self, plan: Plan, fetch_machine: int, parts: tuple[int, ...] | list[int],
                   shares: tuple[float, ...] = ()) -> float:
        """Share of remote feature bytes still fetched by a gatherer on ``fetch_machine``
        with the plan's cache there, for a trainer owning ``parts`` (seed-weighted)."""
        rows = plan.caches.get(self.names[fetch_machine], 0) if plan.caches else 0
        share = self.cache_share(fetch_machine, rows)
        if share <= 0:
            return 1.0
        ps = list(parts)
        w = self.weights(ps, shares)
        w = w / w.sum() if w.sum() > 0 else np.full(len(ps), 1.0 / len(ps))
        return float(sum(wi * (1.0 - self.cache_hit(p, share)) for wi, p in zip(w, ps)))

    # ------------------------------------------------------------------ per trainer
    def trainer_cost(self, parts: tuple[int, ...], shares: tuple[float, ...] = ()) -> PartCost:
        """Mean mini-batch of a trainer owning `parts` (batches drawn in proportion to its
        seeds in each), scaled by its :meth:`load`."""
        w = self.weights(parts, shares)
        w = w / w.sum() if w.sum() > 0 else np.full(len(parts), 1 / len(parts))
        w = w * self.load(parts, shares)
        feat: dict[int, float] = {}
        struct: dict[int, float] = {}
        s = t = b = 0.0
        for wi, p in zip(w, parts):
            c = self.parts[p]
            s, t, b = s + wi * c.sample_s, t + wi * c.train_s, b + wi * c.block_bytes
            for m, v in c.feat_from.items():
                feat[m] = feat.get(m, 0.0) + wi * v
            for m, v in c.struct_from.items():
                struct[m] = struct.get(m, 0.0) + wi * v
        return PartCost(s, t, b, feat, struct)

    def draws(self, parts: tuple[int, ...] | list[int], seed: int, K: int,
              shares: tuple[float, ...] | list[float] = ()
              ) -> list[tuple[tuple[int, int, float], ...]]:
        """The ``K`` mini-batches of a trainer: each a tuple of (partition, profiled sample,
        weight), one per partition it owns, the weights its seeds' fractions there.

        The runtime shuffles all of a trainer's seeds together and cuts them into the
        epoch's iterations, so every batch mixes its partitions in proportion to their seeds:
        a batch costs the weighted sum of one profiled sample of each (times the trainer's
        :meth:`load`). The random stream is keyed by (seed, the sorted parts and shares): the
        draws depend on what the trainer owns, not on where it runs nor on its number in the
        plan; a one-partition trainer draws what it drew before batches were mixed.
        """
        pairs = owned_key(parts, shares)
        ps = [p for p, _ in pairs]
        key = [int(seed) & 0xFFFFFFFF, *ps]
        if any(s < 1.0 for _, s in pairs):
            key += [int(round(s * 1e6)) for _, s in pairs]
        rng = np.random.default_rng(key)
        wts = self.weights(ps, [s for _, s in pairs])
        frac = wts / wts.sum() if wts.sum() > 0 else np.full(len(ps), 1.0 / len(ps))
        rng.choice(len(ps), size=K, p=frac)  # the stream's first draws (single-part batches)
        us = [rng.random(K) for _ in ps]
        ns = [self.profile.part(q).n for q in ps]
        return [tuple((q, min(int(u[k] * n), n - 1), float(f))
                      for q, u, n, f in zip(ps, us, ns, frac) if f > 0)
                for k in range(K)]

    def drawn_cost(self, parts: tuple[int, ...], seed: int, K: int,
                   shares: tuple[float, ...] = ()) -> PartCost:
        """Average of the ``K`` mini-batches :meth:`draws` gives a trainer owning `parts`
        (scaled by its :meth:`load`)."""
        prof, fb = self.profile, self.profile.feature_bytes
        feat: dict[int, float] = {}
        struct: dict[int, float] = {}
        s = t = b = 0.0
        for mix in self.draws(parts, seed, K, shares):
            for q, i, f in mix:
                pp = prof.part(q)
                s += f * float(pp.sample_s[i])
                t += f * float(pp.train_s[i])
                b += f * float(pp.edges[i]) * EDGE_BYTES
                for r, c in zip(pp.input_parts[i].tolist(), pp.input_nodes[i].tolist()):
                    m = int(self.store[r])
                    feat[m] = feat.get(m, 0.0) + f * c * fb
                for r, c in zip(pp.edge_parts[i].tolist(), pp.edge_counts[i].tolist()):
                    m = int(self.store[r])
                    struct[m] = struct.get(m, 0.0) + f * c * EDGE_BYTES
        ld = self.load(parts, shares)
        n = K / ld if ld > 0 else float("inf")  # the average, scaled by the trainer's load
        feat = {m: v / n for m, v in feat.items() if v > 0}
        struct = {m: v / n for m, v in struct.items() if v > 0}
        return PartCost(s / n, t / n, b / n, feat, struct)

    def speed(self, t: TrainerPlan) -> float:
        return self.cluster.machine(t.machine).gpus[t.device].speed

    def allreduce_s(self, plan: Plan) -> float:
        """Ring all-reduce time per iteration: 2 (W-1)/W gradient bytes through each NIC, plus
        the profile's fixed overhead (NICs idle meanwhile, so the simulator's reserved
        gradient rate is bytes / this time)."""
        W = len(plan.trainers)
        machines = [self.cluster.machine_index(t.machine) for t in plan.trainers]
        if W <= 1 or len(set(machines)) == 1:
            return 0.0
        return (ring_wire_s(self.allreduce_bytes(plan), machines, self.egress_bw,
                            self.ingress_bw, self.cluster.latency)
                + self.profile.allreduce_overhead_s)

    def allreduce_bytes(self, plan: Plan) -> float:
        W = len(plan.trainers)
        return 2.0 * (W - 1) / W * self.profile.grad_bytes if W > 1 else 0.0

    # ------------------------------------------------------------------ loads and bounds
    def loads(self, plan: Plan) -> Loads:
        M = self.M
        out_b, in_b, cpu_work = np.zeros(M), np.zeros(M), np.zeros(M)
        samplers_on = np.zeros(M)
        device: dict[tuple[int, int], float] = {}
        sampler: dict[int, float] = {}
        ar = self.allreduce_s(plan)
        ar_bytes = self.allreduce_bytes(plan)
        multi = len({t.machine for t in plan.trainers}) > 1
        for t in plan.trainers:
            c = self.trainer_cost(t.parts, t.shares)
            T = self.cluster.machine_index(t.machine)
            F = self.cluster.machine_index(t.fetch_at)
            n = t.num_samplers
            sampler[t.id] = c.sample_s / n
            for mname, cnt in t.samplers:
                S = self.cluster.machine_index(mname)
                f = cnt / n
                cpu_work[S] += f * c.sample_s
                samplers_on[S] += cnt
                for m, v in c.struct_from.items():
                    if m != S:
                        out_b[m] += f * v
                        in_b[S] += f * v
                if S != T:
                    out_b[S] += f * c.block_bytes
                    in_b[T] += f * c.block_bytes
            miss = self.cache_miss(plan, F, t.parts, t.shares)
            for m, v in c.feat_from.items():
                if m != F:
                    out_b[m] += v * miss
                    in_b[F] += v * miss
            if F != T:
                out_b[F] += c.feat_bytes
                in_b[T] += c.feat_bytes
            if multi:
                out_b[T] += ar_bytes
                in_b[T] += ar_bytes
            device[(T, t.device)] = c.train_s / self.speed(t) + ar
        usable = np.maximum(np.minimum(self.cores, samplers_on), 1)
        return Loads(out_b / self.egress_bw, in_b / self.ingress_bw, cpu_work / usable,
                     device, sampler, self.names)

    def bound(self, plan: Plan) -> Bound:
        """Most loaded resource per iteration, and the longest dependency chain.

        The chain: the first mini-batch must be sampled and its features moved before any
        training, then every iteration trains and all-reduces in sequence on each device.
        """
        loads = self.loads(plan)
        name, per_iter = loads.bottleneck()
        K = self.iterations
        chain = 0.0
        for t in plan.trainers:
            c = self.trainer_cost(t.parts, t.shares)
            T = self.cluster.machine_index(t.machine)
            first = c.sample_s + self._fetch_time_alone(c, t, T, plan)
            chain = max(chain, first + K * loads.device[(T, t.device)])
        return Bound(per_iter, chain, max(K * per_iter, chain), name)

    def _fetch_time_alone(self, c: PartCost, t: TrainerPlan, T: int,
                          plan: Plan | None = None) -> float:
        """Time to move one batch's features with the network to itself."""
        F = self.cluster.machine_index(t.fetch_at)
        miss = 1.0 if plan is None else self.cache_miss(plan, F, t.parts, t.shares)
        worst = 0.0
        for m, v in c.feat_from.items():
            if m != F:
                worst = max(worst, miss * v / min(self.egress_bw[m], self.ingress_bw[F]))
        remote_in = miss * sum(v for m, v in c.feat_from.items() if m != F)
        if remote_in:
            worst = max(worst, remote_in / self.ingress_bw[F])
        if F != T:
            worst += c.feat_bytes / min(self.egress_bw[F], self.ingress_bw[T])
        return worst



class DrawnWorkload(Workload):
    """A Workload whose trainer costs are the simulator's drawn mini-batches, averaged.

    ``trainer_cost(parts)`` is :meth:`Workload.drawn_cost` for the given seed and the epoch's
    iterations, so ``loads`` are the exact per-iteration work of the simulated epoch on every
    resource (what :func:`gnnsched.bounds.instance_bound` counts), whatever the placement.
    """

    def __init__(self, base: Workload, seed: int, iterations: int | None = None) -> None:
        self.__dict__.update(base.__dict__)
        self.base, self.seed = base, seed
        self.K = int(iterations or base.iterations)
        self._drawn: dict[tuple[tuple[int, float], ...], PartCost] = {}

    def trainer_cost(self, parts: tuple[int, ...], shares: tuple[float, ...] = ()) -> PartCost:
        key = owned_key(parts, shares)
        c = self._drawn.get(key)
        if c is None:
            ps, sh = zip(*key)
            c = self._drawn[key] = self.drawn_cost(ps, self.seed, self.K, sh)
        return c

