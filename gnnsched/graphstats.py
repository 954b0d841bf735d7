"""Graph statistics, and the law fan-out sampling follows on a graph that has them.

A cost profile measured on real partitions (:mod:`gnnsched.runtime.profiler`) knows its graph;
a cluster planned for a graph nobody has at hand (papers100M-sized, on a laptop) needs the
mini-batch that graph would give. :class:`GraphStats` is what decides it: node and edge
counts, the degree distribution (mean and the spread of a power law -- the synthetic
generator's, :mod:`gnnsched.datasets.synthetic` -- or of a log-normal), the feature width and
classes, the partitioning's locality and its partition sizes, and the training share.
:func:`fanout_law` turns them into a mini-batch: unique nodes and sampled edges per hop.
:class:`CostReference` holds what one sampled edge and one input node cost, fitted on a
measured profile of a generated graph with the same statistics at a size the box holds;
:func:`gnnsched.profile.profile_from_stats` combines the two into a cost profile.

Pure logic: numpy only (the import-linter contract of ``pyproject.toml`` forbids the runtime).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

DEGREE_LAWS = ("pareto", "lognormal")
# DGL-format partition files, measured on `gnnsched partition` output of the products preset
# (gnnsched.api.partition_bytes over nodes and owned in-edges): a node's feature row plus its
# label, masks and ids; an owned edge's src, dst, ids and the part graph's halo bookkeeping.
NODE_OVERHEAD_BYTES = 11
EDGE_BYTES_STORED = 41
_CLASSES_M = 1 << 16  # pseudo-nodes the degree classes are drawn from (stratified, seeded)


@dataclass(frozen=True)
class GraphStats:
    """What a graph and its partitioning look like to a sampler.

    ``num_edges`` counts directed edges (both directions of an undirected one, as
    :class:`gnnsched.datasets.npz.Graph` does), so the mean degree is ``num_edges / num_nodes``.
    ``degree_law`` ``pareto``: degrees are Poisson around propensities ``theta`` with a
    Pareto tail of exponent ``power`` (pdf ~ theta^-power, capped at a quarter of the graph),
    the synthetic generator's DC-SBM; ``lognormal``: ``theta = exp(sigma * Z)``.
    ``locality``: the share of a node's sampled neighbours in its own partition (1 - the
    partitioning's edge cut share). ``part_nodes``: nodes per partition (empty: equal parts
    of ``num_parts``).
    """

    num_nodes: int
    num_edges: int
    feature_dim: int = 128
    num_classes: int = 8
    degree_law: str = "pareto"
    power: float = 2.5
    sigma: float = 1.0
    locality: float = 0.5
    num_parts: int = 1
    part_nodes: tuple[int, ...] = ()
    train_frac: float = 0.1

    def __post_init__(self) -> None:
        if self.num_nodes < 2 or self.num_edges < 0:
            raise ValueError(f"need num_nodes >= 2 and num_edges >= 0, got {self.num_nodes}, "
                             f"{self.num_edges}")
        if self.degree_law not in DEGREE_LAWS:
            raise ValueError(f"degree_law must be one of {DEGREE_LAWS}, got {self.degree_law!r}")
        if self.degree_law == "pareto" and self.power <= 1:
            raise ValueError(f"power must be > 1, got {self.power}")
        if not 0 <= self.locality <= 1 or not 0 <= self.train_frac <= 1:
            raise ValueError("locality and train_frac must be in [0, 1]")
        parts = tuple(int(x) for x in self.part_nodes)
        if not parts:
            P = max(1, int(self.num_parts))
            base, extra = divmod(self.num_nodes, P)
            parts = tuple(base + (i < extra) for i in range(P))
        if len(parts) < 1 or min(parts) < 1:
            raise ValueError("part_nodes must list at least one partition of >= 1 node")
        if sum(parts) != self.num_nodes:
            raise ValueError(f"part_nodes sum to {sum(parts)}, num_nodes is {self.num_nodes}")
        object.__setattr__(self, "part_nodes", parts)
        object.__setattr__(self, "num_parts", len(parts))

    # ------------------------------------------------------------------ derived
    @property
    def avg_degree(self) -> float:
        return self.num_edges / self.num_nodes

    def part_train_seeds(self) -> list[int]:
        """Training seeds each partition owns (METIS balances them with the nodes)."""
        return [int(round(n * self.train_frac)) for n in self.part_nodes]

    def part_edges(self) -> list[float]:
        """Directed edges each partition stores (its nodes' in-edges; METIS balances them)."""
        return [self.num_edges * n / self.num_nodes for n in self.part_nodes]

    def part_bytes(self, feature_bytes: int | None = None) -> list[float]:
        """Bytes each partition keeps in its store's memory: features (with labels, masks
        and ids) of its nodes and its owned edges, as ``gnnsched partition`` writes them."""
        fb = 4 * self.feature_dim if feature_bytes is None else int(feature_bytes)
        return [n * (fb + NODE_OVERHEAD_BYTES) + e * EDGE_BYTES_STORED
                for n, e in zip(self.part_nodes, self.part_edges())]

    def degree_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """The degree distribution as (degree, share) classes, degrees integer, shares sum
        to 1: propensities at ``2**16`` stratified quantiles, Poisson degrees around them
        (seeded, so the same statistics give the same classes), the mean degree exact."""
        return _degree_classes(self.degree_law, float(self.power), float(self.sigma),
                               self.avg_degree, self.num_nodes)

    def scaled(self, num_nodes: int) -> GraphStats:
        """The same statistics at another size: mean degree, degree law, locality, train
        share and relative partition sizes kept."""
        share = np.array(self.part_nodes, dtype=float) / self.num_nodes
        parts = np.floor(share * num_nodes).astype(int)
        parts[: num_nodes - parts.sum()] += 1
        return GraphStats(**{**asdict(self), "num_nodes": int(num_nodes),
                             "num_edges": int(round(self.avg_degree * num_nodes)),
                             "part_nodes": tuple(int(x) for x in parts)})

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["part_nodes"] = list(self.part_nodes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphStats:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: (tuple(v) if k == "part_nodes" else v) for k, v in d.items()
                      if k in keys})

    @classmethod
    def from_synthetic(cls, params: dict[str, Any], num_parts: int, *,
                       locality: float | None = None,
                       part_nodes: Sequence[int] | None = None) -> GraphStats:
        """The statistics of the graph :func:`gnnsched.datasets.synthetic.generate` makes from
        ``params`` (a job's ``synthetic:`` block; the generator's defaults fill the gaps),
        cut into ``num_parts``. ``locality`` defaults to the params' ``locality``, else
        :data:`DEFAULT_LOCALITY` by homophily (METIS on the generator's graphs)."""
        from gnnsched.spec import SYNTHETIC_DEFAULTS

        p = {**SYNTHETIC_DEFAULTS, **params}
        n = int(p["num_nodes"])
        if locality is None:
            locality = p.get("locality")
        if locality is None:
            locality = default_locality(float(p["homophily"]), num_parts)
        return cls(num_nodes=n, num_edges=int(2 * round(n * float(p["avg_degree"]) / 2)),
                   feature_dim=int(p["feature_dim"]), num_classes=int(p["num_classes"]),
                   degree_law=str(p.get("degree_law", "pareto")), power=float(p["power"]),
                   sigma=float(p.get("sigma", 1.0)), locality=float(locality),
                   num_parts=int(num_parts), part_nodes=tuple(part_nodes or ()),
                   train_frac=float(p["train_frac"]))

    @classmethod
    def from_graph(cls, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                   node_part: np.ndarray, *, feature_dim: int, num_classes: int,
                   train_frac: float, degree_law: str = "pareto", power: float = 2.5,
                   sigma: float = 1.0) -> GraphStats:
        """Measured statistics of a partitioned graph: counts, partition sizes and locality
        (share of edges inside one partition); the degree law's parameter is given."""
        node_part = np.asarray(node_part)
        P = int(node_part.max()) + 1 if len(node_part) else 1
        same = float(np.mean(node_part[src] == node_part[dst])) if len(src) else 1.0
        return cls(num_nodes=int(num_nodes), num_edges=int(len(src)), feature_dim=feature_dim,
                   num_classes=num_classes, degree_law=degree_law, power=power, sigma=sigma,
                   locality=same, num_parts=P,
                   part_nodes=tuple(int(x) for x in np.bincount(node_part, minlength=P)),
                   train_frac=train_frac)


# METIS's locality on the generator's DC-SBM graphs (share of edges inside a partition), by
# homophily, at 4 partitions: products preset (homophily 0.3) 0.44-0.45 at 50k-400k nodes.
# With more partitions the cut grows; a rough law: locality = h_eff + (1 - h_eff) / P, where
# h_eff is what METIS keeps of the communities beyond chance (fitted: 0.26 at homophily 0.3).
def default_locality(homophily: float, num_parts: int) -> float:
    """A guess at METIS's locality on a generated graph of this homophily (state the
    measured one in ``synthetic.locality`` when known)."""
    if num_parts <= 1:
        return 1.0
    h_eff = min(1.0, 0.26 * homophily / 0.3)
    return float(h_eff + (1 - h_eff) / num_parts)


_CLASS_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _degree_classes(law: str, power: float, sigma: float, avg: float,
                    n: int) -> tuple[np.ndarray, np.ndarray]:
    key = (law, round(power, 9), round(sigma, 9), round(avg, 9), n)
    hit = _CLASS_CACHE.get(key)
    if hit is not None:
        return hit
    M = _CLASSES_M
    u = (np.arange(M) + 0.5) / M  # stratified quantiles
    if law == "pareto":
        theta = (1.0 - u) ** (-1.0 / (power - 1.0))
        # the generator's cap: no node expects more than a quarter of the graph
        cap = max(1.0, 0.25 * n / max(avg, 1e-9)) * float(theta.mean())
        theta = np.minimum(theta, cap)
    else:
        theta = np.exp(sigma * _norm_ppf(u))
    lam = avg * theta / theta.mean()
    deg = np.random.default_rng(12345).poisson(lam)
    deg = np.minimum(deg, n - 1)
    ks, counts = np.unique(deg, return_counts=True)
    w = counts / counts.sum()
    # keep the mean degree exact (Poisson draws wander by a hair)
    mean = float((ks * w).sum())
    if mean > 0 and avg > 0:
        ks = ks * (avg / mean)
    out = (ks.astype(float), w)
    _CLASS_CACHE[key] = out
    return out


def _norm_ppf(u: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = [-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00]
    b = [-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01]
    c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00]
    d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00]
    u = np.asarray(u, dtype=float)
    out = np.empty_like(u)
    lo, hi = u < 0.02425, u > 1 - 0.02425
    mid = ~(lo | hi)
    q = u[mid] - 0.5
    r = q * q
    out[mid] = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
                (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1))
    for mask, sign, uu in ((lo, 1.0, u[lo]), (hi, -1.0, 1 - u[hi])):
        q = np.sqrt(-2 * np.log(uu))
        out[mask] = sign * ((((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
                            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1))
    return out


# ---------------------------------------------------------------------------- the law
@dataclass
class Minibatch:
    """The expected mini-batch of ``batch`` seeds from one partition (per hop, seeds first).

    ``nodes[h]``: unique nodes after ``h`` hops (``nodes[0]`` the seeds, ``nodes[-1]`` the
    input nodes whose features are fetched); ``edges[h-1]``: edges sampled at hop ``h``
    (the block's size); ``own_nodes``/``own_edges``: the parts of those owned by (expanded
    in) the seeds' own partition.
    """

    batch: int
    nodes: list[float]
    edges: list[float]
    own_nodes: list[float]
    own_edges: list[float]

    @property
    def input_nodes(self) -> float:
        return self.nodes[-1]

    @property
    def total_edges(self) -> float:
        return float(sum(self.edges))

    @property
    def local_share(self) -> float:
        return self.own_nodes[-1] / max(self.nodes[-1], 1e-12)


def fanout_law(stats: GraphStats, batch: int, fanouts: Sequence[int], *,
               part: int = 0) -> Minibatch:
    """Expected unique nodes and sampled edges per hop of DGL's ``NeighborSampler(fanouts)``
    for ``batch`` training seeds drawn from partition ``part``.

    The law (all expectations, over degree classes ``k`` with shares ``w_k``):

    * hops run outwards from the seeds with ``fanouts`` reversed (DGL's order); at every hop
      *every* node gathered so far is expanded again (a block's sources include its
      destinations), and a node of degree ``k`` samples ``min(f, k)`` neighbours without
      replacement: the block has ``sum min(f, k)`` edges over those nodes (degree capping);
    * what a node's repeated expansions add is only the neighbours it had not drawn before:
      after expansions with fan-outs ``f_1..f_h`` it has drawn ``k (1 - prod(1 - min(f_i,
      k)/k))`` distinct neighbours, one of which (for a node reached by a draw) is the node
      it was reached from;
    * fresh draws land on a neighbour in the drawing node's partition with probability
      ``locality``, else evenly on the other partitions; within a pool of ``N_g`` nodes a
      draw picks a node proportionally to its degree (an edge's endpoint);
    * saturation: after ``D_g`` fresh draws into pool ``g``, a node of degree ``k`` there is
      present with probability ``1 - exp(-D_g k / (N_g kbar))`` (Poisson occupancy), so
      ``n_h = B + sum_g N'_g sum_k w_k (1 - exp(-D_g k / (N_g kbar)))``, ``N'_g`` the pool's
      nodes that are not seeds; it tends to the pool size as the draws grow.

    Two pools are tracked: the seeds' partition and the rest of the graph.
    """
    fan = [int(f) for f in fanouts]
    ks, w = stats.degree_classes()
    kbar = float((ks * w).sum()) or 1.0
    P = stats.num_parts
    Np = float(stats.part_nodes[part])
    Nr = float(stats.num_nodes - Np)
    seeds_here = stats.part_train_seeds()[part] or 1
    B = float(min(batch, seeds_here, Np))
    lam = stats.locality if P > 1 else 1.0
    to_own = np.array([lam, (1 - lam) / (P - 1) if P > 1 else 0.0])  # from own, from rest
    pools = np.array([Np - B, Nr])  # non-seed nodes that draws can add
    sizes = np.array([Np, max(Nr, 1.0)])
    safe_k = np.maximum(ks, 1.0)
    # cohorts: (counts [2, K] of nodes by pool and degree class, undrawn share r [K],
    # reached by a draw?)
    cohorts: list[tuple[np.ndarray, np.ndarray, bool]] = [
        (np.stack([B * w, np.zeros_like(w)]), np.ones_like(w), False)]
    present = np.zeros((2, len(w)))  # non-seed nodes present, by pool and class
    D = np.zeros(2)
    nodes, edges, own_nodes, own_edges = [B], [], [B], []
    for f in reversed(fan):
        take = ks if f < 0 else np.minimum(float(f), ks)
        e_pool = np.zeros(2)
        fresh = np.zeros(2)  # fresh draws made by nodes in each pool
        new_cohorts = []
        for counts, r, reached in cohorts:
            e_pool += counts @ take
            r_after = r * (1 - take / safe_k)
            distinct = (ks - (1.0 if reached else 0.0)).clip(min=0) * (r - r_after)
            fresh += counts @ distinct
            new_cohorts.append((counts, r_after, reached))
        edges.append(float(e_pool.sum()))
        own_edges.append(float(e_pool[0]))
        land_own = fresh[0] * to_own[0] + fresh[1] * to_own[1]
        D += np.array([land_own, fresh.sum() - land_own])
        hit = 1 - np.exp(-np.outer(D / sizes, ks / kbar))  # [2, K]
        now = pools[:, None] * w[None, :] * hit
        added = np.maximum(now - present, 0.0)
        present = np.maximum(now, present)
        new_cohorts.append((added, np.ones_like(w), True))
        cohorts = new_cohorts
        nodes.append(B + float(present.sum()))
        own_nodes.append(B + float(present[0].sum()))
    return Minibatch(int(B), nodes, edges, own_nodes, own_edges)


# ---------------------------------------------------------------------------- costs
def model_work(mb: Minibatch, model: str, dims: Sequence[int], heads: int = 4
               ) -> tuple[float, float]:
    """A mini-batch's training work for a model with layer widths ``dims`` (input features,
    hidden..., classes): (floats aggregated over edges, dense multiply-adds), forward pass,
    as ``gnnsched.runtime.model`` computes each layer (SAGE and GCN project before
    aggregating when that shrinks the rows, as DGL does; GAT projects every source)."""
    L = len(dims) - 1
    if len(mb.edges) != L:
        raise ValueError(f"{len(mb.edges)} hops for a {L}-layer model")
    agg = dense = 0.0
    for i in range(L):  # layer i from the input side: block of hop L - i
        a, b = dims[i], dims[i + 1]
        src, dst, e = mb.nodes[L - i], mb.nodes[L - i - 1], mb.edges[L - i - 1]
        if model == "gat":
            h = 1 if i == L - 1 else heads
            a_in = a if i == 0 else a * heads
            dense += src * a_in * h * b
            agg += e * h * b * 3
        elif model == "gcn":
            dense += (src if a > b else dst) * a * b
            agg += e * min(a, b)
        else:  # sage: fc_self on destinations + fc_neigh on sources or the mean
            dense += dst * a * b + (src if a > b else dst) * a * b
            agg += e * min(a, b)
    return agg, dense


@dataclass(frozen=True)
class CostReference:
    """What one mini-batch costs per unit of work, fitted on measured profiles.

    Sampling: ``sample_s = sample_s_fixed + sample_s_per_edge * edges + sample_s_per_node *
    nodes`` (sampler CPU seconds: a call's overhead, picking neighbours, relabelling the
    unique nodes of every hop). Training (forward + backward + optimiser on the reference
    device): ``train_s = train_s_fixed + train_s_per_float * floats aggregated over edges +
    train_s_per_madd * dense multiply-adds`` (:func:`model_work`), so a reference measured
    with one model shape prices another. ``job`` records what it was measured on.
    """

    sample_s_fixed: float
    sample_s_per_edge: float
    sample_s_per_node: float
    train_s_fixed: float
    train_s_per_float: float
    train_s_per_madd: float
    job: dict[str, Any] = field(default_factory=dict)
    reference: str = "cpu"
    source: str = ""
    spread: float = 0.05  # coefficient of variation of one mini-batch's cost, as measured

    def sample_s(self, mb: Minibatch) -> float:
        return self.sample_s_fixed + self.sample_s_per_edge * mb.total_edges + \
            self.sample_s_per_node * float(sum(mb.nodes[1:]))

    def train_s(self, mb: Minibatch, model: str, dims: Sequence[int]) -> float:
        agg, dense = model_work(mb, model, dims)
        return self.train_s_fixed + self.train_s_per_float * agg + self.train_s_per_madd * dense

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostReference:
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in keys})

    @classmethod
    def fit(cls, profiles: Sequence[Any], stats: GraphStats, *, model: str,
            dims: Sequence[int], job: dict[str, Any] | None = None,
            source: str = "") -> CostReference:
        """Fit the unit costs on measured profiles of a graph with statistics ``stats``
        (:class:`gnnsched.profile.CostProfile`; one graph profiled at two or three batch
        sizes, so edges, nodes and dense work vary apart; each profile's ``job_key`` names
        its batch size and fan-outs). Every (profile, partition) is one point: its mean
        seconds against the fan-out law's work for that batch and partition; non-negative
        least squares on relative errors."""
        xs, xt, ys, yt = [], [], [], []
        for prof in profiles:
            batch = int(prof.job_key["batch_size"])
            fan = [int(f) for f in prof.job_key["fanouts"]]
            for pp in prof.parts:
                mb = fanout_law(stats, batch, fan, part=pp.part)
                agg, dense = model_work(mb, model, dims)
                xs.append((1.0, mb.total_edges, float(sum(mb.nodes[1:]))))
                xt.append((1.0, agg, dense))
                ys.append(float(np.mean(pp.sample_s)))
                yt.append(float(np.mean(pp.train_s)))
        if not ys:
            raise ValueError("no profiled mini-batches to fit costs on")
        s0, se, sn = _nnls_rel(np.array(xs), np.array(ys))
        t0, tf, tm = _nnls_rel(np.array(xt), np.array(yt))
        first = np.concatenate([pp.sample_s + pp.train_s for pp in profiles[0].parts])
        cv = float(np.std(first) / max(float(np.mean(first)), 1e-12)) if len(first) > 1 else 0.0
        ref = getattr(profiles[0], "reference", "cpu")
        return cls(float(s0), float(se), float(sn), float(t0), float(tf), float(tm),
                   dict(job or {}), str(ref), source, round(min(max(cv, 0.0), 0.5), 4))


# Fitted by bench/bench_profile_stats.py (docs/bench/profile_stats.json): the products preset
# at 50,000 nodes, 4 METIS partitions, GraphSAGE 100->256x3->47, fan-outs (15, 10, 5), batches
# of 1024/512/256 seeds, profiled with gnnsched.runtime.profiler, CPU seconds of one thread.
BUILTIN_REFERENCE = CostReference(
    sample_s_fixed=0.0, sample_s_per_edge=3.63e-08, sample_s_per_node=6.66e-08,
    train_s_fixed=8.7e-05, train_s_per_float=0.0, train_s_per_madd=1.097e-10,
    job={"model": "sage", "feature_dim": 100, "hidden": 256, "num_classes": 47, "layers": 3,
         "fanouts": [15, 10, 5], "batch_size": 1024},
    reference="cpu (1 thread, torch 2.13.0+cpu)",
    source="the built-in reference (products preset at 50,000 nodes, 4 METIS parts, batches "
           "1024/512/256; bench/bench_profile_stats.py)", spread=0.056)


def _nnls_rel(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative errors (rows divided by ``y``): every subset
    of columns solved, the best non-negative one kept (enough for three columns)."""
    scale = np.maximum(y, 1e-12)
    A, b = X / scale[:, None], y / scale
    k = X.shape[1]
    best, best_err = np.zeros(k), float(np.sum(b ** 2))
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
        if (sol < 0).any():
            continue
        x = np.zeros(k)
        x[cols] = sol
        err = float(np.sum((A @ x - b) ** 2))
        if err < best_err:
            best, best_err = x, err
    return best


def summary(mb: Minibatch) -> dict[str, Any]:
    """A mini-batch of the law as plain numbers (for tables and JSON)."""
    return {"batch": mb.batch, "nodes": [round(x, 1) for x in mb.nodes],
            "edges": [round(x, 1) for x in mb.edges],
            "input_nodes": round(mb.input_nodes, 1), "total_edges": round(mb.total_edges, 1),
            "local_share": round(mb.local_share, 4)}


__all__ = ["BUILTIN_REFERENCE", "CostReference", "DEGREE_LAWS", "GraphStats", "Minibatch",
           "default_locality", "fanout_law", "model_work", "summary"]
