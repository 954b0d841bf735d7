"""The drawn instance: a plan with every mini-batch drawn, in flat tables.

It is the input of the simulator (:mod:`gnnsched.simulator`), of the bounds and of the exact
schedule (:mod:`gnnsched.bounds`). It lives outside the simulator package so that the bounds
need no simulator and the simulator can report the bounds: the imports only go one way.

Every trainer runs ``K`` iterations; its mini-batch ``k`` is drawn (seeded) from the profiled
samples of its partitions, in proportion to their training seeds. The draws are keyed by the
seed and the trainer's parts (:meth:`Workload.draws`), so a trainer's mini-batches do not
change with its number in the plan or where it runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnsched.plan import Plan
from gnnsched.policy import Policy, PolicyContext
from gnnsched.profile import EDGE_BYTES, HOLDS_HOP_WAIT, CostProfile
from gnnsched.spec import ClusterSpec, JobSpec, SpecError
from gnnsched.workload import NIC_FIFO_BYTES, Workload


class _Tables:
    """Per (partition, sample): feature and sampled-edge bytes by store machine."""

    def __init__(self, wl: Workload) -> None:
        prof, store = wl.profile, wl.store
        fb = prof.feature_bytes
        self.feat: list[list[tuple[tuple[int, float], ...]]] = []
        self.struct: list[list[tuple[tuple[int, float], ...]]] = []
        for pp in prof.parts:
            fl, sl = [], []
            for ids, cnt, eids, ecnt in zip(pp.input_parts, pp.input_nodes, pp.edge_parts,
                                            pp.edge_counts):
                fl.append(_by_machine(store, ids, cnt, fb))
                sl.append(_by_machine(store, eids, ecnt, EDGE_BYTES))
            self.feat.append(fl)
            self.struct.append(sl)


def _by_machine(store: np.ndarray, ids: np.ndarray, cnt: np.ndarray, unit: float
                ) -> tuple[tuple[int, float], ...]:
    out: dict[int, float] = {}
    for p, c in zip(ids.tolist(), cnt.tolist()):
        if c > 0:
            m = int(store[p])
            out[m] = out.get(m, 0.0) + c * unit
    return tuple(sorted(out.items()))


_CACHE: list[tuple[Any, ...]] = []  # small LRU: (cluster, job, profile, workload, tables)


def workload_for(cluster: ClusterSpec, job: JobSpec, profile: CostProfile) -> Workload:
    """A (cached) Workload: placement search simulates many plans of one problem."""
    return _cached(cluster, job, profile)[0]


def _cached(cluster: ClusterSpec, job: JobSpec, profile: CostProfile) -> tuple[Workload, _Tables]:
    for entry in _CACHE:
        if entry[0] is cluster and entry[1] is job and entry[2] is profile:
            return entry[3], entry[4]
    if profile.num_parts != cluster.num_parts:
        raise SpecError("cost profile", "num_parts",
                        f"profile has {profile.num_parts} partitions but cluster "
                        f"{cluster.source} stores {cluster.num_parts}",
                        "a profile measured for this job's partitions")
    wl = Workload(cluster, job, profile)
    tab = _Tables(wl)
    _CACHE.insert(0, (cluster, job, profile, wl, tab))
    del _CACHE[4:]
    return wl, tab


def _tables(wl: Workload) -> _Tables:
    for entry in _CACHE:
        if entry[3] is wl:
            return entry[4]
    tab = _Tables(wl)
    _CACHE.insert(0, (wl.cluster, wl.job, wl.profile, wl, tab))
    del _CACHE[4:]
    return tab


class Instance:
    """A plan with every mini-batch drawn: what the simulator runs and CP-SAT solves exactly.

    Trainer ``w`` is ``plan.trainers[w]``; all arrays are ``[W][K]`` nested lists for speed.
    """

    def __init__(self, workload: Workload, plan: Plan, *, seed: int = 0,
                 iterations: int | None = None, nic_window_s: float | None = None,
                 nic_chunk_s: float | None = None,
                 nic_fifo_bytes: float | None = NIC_FIFO_BYTES) -> None:
        wl, cl = workload, workload.cluster
        self.workload, self.plan, self.seed = wl, plan, seed
        for name, v in (("nic_window_s", nic_window_s), ("nic_chunk_s", nic_chunk_s)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 seconds or None, got {v!r}")
        self.nic_window_s = nic_window_s
        self.nic_chunk_s = nic_chunk_s  # the window model's piece (None: NIC_CHUNK_S)
        # with the window model: what a connection parks in a FIFO NIC queue, which every
        # remote hop's request and answer wait behind (None or 0: no such wait)
        # (not for a profile whose sampling seconds hold that wait: HOLDS_HOP_WAIT)
        holds = bool((wl.profile.meta or {}).get(HOLDS_HOP_WAIT))
        self.nic_fifo_bytes = nic_fifo_bytes if nic_window_s is not None and nic_fifo_bytes \
            and not holds else None
        self.layers = len(wl.job.fanouts)  # rounds of remote requests per mini-batch, at most
        self.M = wl.M
        self.W = len(plan.trainers)
        self.K = K = int(iterations or wl.iterations)
        self.full_iterations = wl.iterations
        idx = cl.machine_index
        self.T = [idx(t.machine) for t in plan.trainers]
        self.dev = [t.device for t in plan.trainers]
        self.F = [idx(t.fetch_at) for t in plan.trainers]
        self.speed = [wl.speed(t) for t in plan.trainers]
        self.samplers: list[list[tuple[int, int]]] = []
        for t in plan.trainers:
            merged: dict[int, int] = {}
            for m, c in t.samplers:
                merged[idx(m)] = merged.get(idx(m), 0) + int(c)
            self.samplers.append(sorted(merged.items()))
        self.egress = [float(x) for x in wl.egress_bw]
        self.ingress = [float(x) for x in wl.ingress_bw]
        self.cores = [int(x) for x in wl.cores]
        self.latency = float(cl.latency)
        self.names = list(wl.names)
        self._draw_batches(wl, plan, seed, K)
        self.allreduce_s = float(wl.allreduce_s(plan))
        self.release: list[list[float]] | None = self._draw_release(wl.profile, seed, K)
        ar_bytes = float(wl.allreduce_bytes(plan))
        self.grad_rate: dict[int, float] = {}  # trainer machine -> reserved bytes/s
        if self.allreduce_s > 0 and ar_bytes > 0:
            for m in set(self.T):
                n = self.T.count(m)
                self.grad_rate[m] = min(n * ar_bytes / self.allreduce_s,
                                        self.egress[m], self.ingress[m])
        self.ar_bytes = ar_bytes
        self._expected_costs(wl, plan)

    def _draw_batches(self, wl: Workload, plan: Plan, seed: int, K: int) -> None:
        """Every trainer's K mini-batches from the profile: their sampling and training
        seconds, block bytes, and feature and remote-hop bytes per source machine."""
        tab = _tables(wl)
        prof = wl.profile
        self.sample_s: list[list[float]] = []
        self.train_s: list[list[float]] = []  # on the trainer's device
        self.block: list[list[float]] = []
        self.feat: list[list[tuple[tuple[int, float], ...]]] = []
        self.struct: list[list[tuple[tuple[int, float], ...]]] = []
        self.feat_total: list[list[float]] = []
        # per batch: the machines storing its seeds' partitions (their hops start remote)
        self.seed_at: list[list[tuple[int, ...]]] = []
        for w, t in enumerate(plan.trainers):
            ss, ts, bl, fe, st, ft, sa = [], [], [], [], [], [], []
            Fw = self.F[w]
            share = wl.cache_share(Fw, plan.caches.get(t.fetch_at, 0)) if plan.caches else 0.0
            ld = wl.load(t.parts, t.shares)  # the trainer's batch over the profile's
            for mix in wl.draws(t.parts, seed, K, t.shares):
                s = tr = e = tot = 0.0
                fd: dict[int, float] = {}
                sd: dict[int, float] = {}
                for q, i, f in mix:  # the batch mixes the trainer's parts by their seeds
                    pp = prof.part(q)
                    s += f * float(pp.sample_s[i])
                    tr += f * float(pp.train_s[i])
                    e += f * float(pp.edges[i])
                    # cached rows are read at F, not fetched (the relay F -> T, if any, still
                    # carries every row: feat_total below is unchanged)
                    miss = 1.0 - wl.cache_hit(q, share) if share > 0 else 1.0
                    for m, b in tab.feat[q][i]:
                        fd[m] = fd.get(m, 0.0) + f * b * (miss if m != Fw else 1.0)
                        tot += f * b
                    for m, b in tab.struct[q][i]:
                        sd[m] = sd.get(m, 0.0) + f * b
                ss.append(ld * s)
                ts.append(ld * tr / self.speed[w])
                bl.append(ld * e * EDGE_BYTES)
                fe.append(tuple((m, ld * b) for m, b in sorted(fd.items())))
                st.append(tuple((m, ld * b) for m, b in sorted(sd.items())))
                ft.append(ld * tot)
                sa.append(tuple(sorted({int(wl.store[q]) for q, _, f in mix if f > 0})))
            self.sample_s.append(ss)
            self.train_s.append(ts)
            self.block.append(bl)
            self.feat.append(fe)
            self.struct.append(st)
            self.feat_total.append(ft)
            self.seed_at.append(sa)

    def _draw_release(self, prof: CostProfile, seed: int, K: int) -> list[list[float]] | None:
        """When each trainer leaves all-reduce k after the first one: a measured row per
        iteration (profile.barrier_skew_s), trainer for trainer when the run had W trainers;
        None when the profile measured no skew."""
        rows = [r for r in prof.barrier_skew_s if r]
        if not (rows and self.W > 1 and max(max(r) for r in rows) > 0):
            return None
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0xBA55])
        release = [[0.0] * K for _ in range(self.W)]
        for k in range(K):
            row = rows[int(rng.integers(len(rows)))]
            vals = row if len(row) == self.W else rng.choice(row, size=self.W).tolist()
            for w in range(self.W):
                release[w][k] = float(vals[w])
        return release

    def _expected_costs(self, wl: Workload, plan: Plan) -> None:
        """Expected costs: what a policy may know before anything is sampled."""
        cl = wl.cluster
        self.exp_sample, self.exp_train, self.exp_fetch, self.buffer = [], [], [], []
        for w, t in enumerate(plan.trainers):
            c = wl.trainer_cost(t.parts, t.shares)
            self.exp_sample.append(c.sample_s)
            self.exp_train.append(c.train_s / self.speed[w])
            miss = wl.cache_miss(plan, self.F[w], t.parts, t.shares)
            self.exp_fetch.append(self._fetch_alone(
                w, {m: (b * miss if m != self.F[w] else b) for m, b in c.feat_from.items()},
                c.feat_bytes))
            n_on = self.T.count(self.T[w])
            mem = cl.machines[self.T[w]].memory / 2 / n_on  # half the host's memory buffers
            per = max(c.feat_bytes + c.block_bytes, 1.0)
            self.buffer.append(max(1, int(mem // per)))

    def _fetch_alone(self, w: int, feat_from: Any, total: float) -> float:
        F, T = self.F[w], self.T[w]
        items = feat_from.items() if isinstance(feat_from, dict) else feat_from
        t = 0.0
        for m, b in items:
            if m != F:
                t = max(t, b / min(self.egress[m], self.ingress[F]))
        if F != T:
            t += total / min(self.egress[F], self.ingress[T])
        return t

    def rate(self, src: int, dst: int) -> float:
        """Full rate of a transfer alone on the network."""
        return min(self.egress[src], self.ingress[dst])

    def context(self, prefetch: int) -> PolicyContext:
        return PolicyContext(
            trainers=self.W, iterations=self.K, prefetch=prefetch,
            train_s=list(self.exp_train), fetch_s=list(self.exp_fetch),
            sample_s=list(self.exp_sample), egress=list(self.egress),
            ingress=list(self.ingress), trainer_machine=list(self.T),
            fetch_machine=list(self.F), buffer_batches=list(self.buffer))

    def prefetch_depths(self, prefetch: int | None = None) -> list[int]:
        """Per trainer depth the base policy allows (what the CP-SAT model assumes)."""
        pol = Policy()
        pol.reset(self.context(prefetch or self.workload.job.prefetch))
        return [pol.prefetch(w) for w in range(self.W)]


__all__ = ["Instance", "workload_for"]
