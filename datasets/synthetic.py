"""Seeded synthetic graphs of any size: a degree-corrected stochastic block model (DC-SBM).

Why this model: the schedulers care about (a) skewed degrees, which make mini-batch sizes
and sampling cost uneven, (b) community structure, which is what METIS exploits to cut few
edges, and (c) a learnable label signal so real training converges. A DC-SBM with power-law
degree propensities gives all three with a few knobs, and it samples in O(E) memory.

Construction (all vectorised numpy, deterministic per ``seed``):

* labels: each node joins one of ``num_classes`` communities uniformly at random;
* degree propensities theta ~ Pareto with tail exponent ``power`` (pdf ~ theta^-power),
  capped so no node expects more than a quarter of the graph as neighbours;
* ``homophily`` * M undirected edges are intra-community: a community is drawn with
  probability ~ Theta_c^2, both endpoints ~ theta inside it (inverse-CDF sampling:
  searchsorted into the cumulative propensities of the community's node range);
* the rest are inter-community: both endpoints ~ theta over all nodes, rejecting pairs in the
  same community and redrawing them;
* self loops are dropped and duplicate pairs merged (a simple graph, like the real datasets),
  then top-up rounds replace what dedup removed, so the count lands within 0.1% of
  ``num_nodes * avg_degree`` directed edges; the graph is symmetrised and edges are sorted by
  (src, dst) as in the ``.npz`` schema;
* features = class mean (a standard normal vector per class) + ``feature_noise`` * N(0, 1);
* masks: a random ``train_frac`` / ``val_frac`` / rest split.

Measured edge homophily tracks ``homophily`` closely (dedup removes slightly more intra edges
because communities are denser).
"""

from __future__ import annotations

import numpy as np

from .npz import Graph


def _sample_in_ranges(rng: np.random.Generator, cum: np.ndarray, lo: np.ndarray,
                      width: np.ndarray) -> np.ndarray:
    """Inverse-CDF sampling: node i with probability ~ theta_i within [lo, lo + width).

    ``cum`` is the inclusive cumulative sum of propensities in node order; ``lo``/``width``
    are per-sample cumulative offsets.
    """
    u = lo + rng.random(lo.shape[0]) * width
    idx = np.searchsorted(cum, u, side="right")
    return np.minimum(idx, cum.shape[0] - 1)


def generate(
    num_nodes: int,
    avg_degree: float = 20,
    num_classes: int = 8,
    feature_dim: int = 128,
    homophily: float = 0.8,
    power: float = 2.5,
    feature_noise: float = 1.0,
    train_frac: float = 0.1,
    val_frac: float = 0.1,
    seed: int = 0,
    name: str = "synthetic",
) -> Graph:
    """Generate a DC-SBM node-classification graph (see the module docstring).

    ``avg_degree`` is the mean number of directed out-edges per node (so about
    ``num_nodes * avg_degree`` directed edges); ``homophily`` is the target fraction of
    edges whose endpoints share a label.
    """
    n, k = int(num_nodes), int(num_classes)
    if n < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    if k < 1 or k > n:
        raise ValueError(f"num_classes must be in [1, num_nodes], got {num_classes}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    if k == 1 and homophily < 1.0:
        homophily = 1.0  # one community: every edge is intra-community
    if power <= 1.0:
        raise ValueError(f"power must be > 1, got {power}")
    if avg_degree < 0 or avg_degree > n - 1:
        raise ValueError(f"avg_degree must be in [0, num_nodes-1], got {avg_degree}")
    if train_frac < 0 or val_frac < 0 or train_frac + val_frac > 1:
        raise ValueError("train_frac and val_frac must be >= 0 and sum to <= 1")

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=n, dtype=np.int64)

    # Propensities: Pareto(alpha = power - 1) on [1, inf), capped.
    theta = (1.0 - rng.random(n)) ** (-1.0 / (power - 1.0))
    cap = max(1.0, 0.25 * n / max(avg_degree, 1e-9)) * float(theta.mean())
    np.minimum(theta, cap, out=theta)

    # Nodes grouped by community: community c owns positions [start[c], start[c+1]) in `order`.
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=k)
    start = np.concatenate([[0], np.cumsum(counts)])
    cum = np.cumsum(theta[order])  # cumulative propensity in grouped order
    cum_before = np.concatenate([[0.0], cum])  # cum_before[i] = sum of the first i
    comm_mass = cum_before[start[1:]] - cum_before[start[:-1]]
    total_mass = float(cum[-1])
    comm_sq = comm_mass**2
    comm_p = comm_sq / comm_sq.sum() if comm_sq.sum() > 0 else np.full(k, 1.0 / k)

    target = int(round(n * avg_degree / 2))  # undirected edges
    n_intra = int(round(homophily * target))
    n_inter = target - n_intra
    empty = np.empty(0, dtype=np.int64)

    def intra(m: int) -> np.ndarray:
        if m <= 0:
            return empty
        per = rng.multinomial(m, comm_p)
        comm = np.repeat(np.arange(k), per)
        lo, width = cum_before[start[comm]], comm_mass[comm]
        a = order[_sample_in_ranges(rng, cum, lo, width)]
        b = order[_sample_in_ranges(rng, cum, lo, width)]
        return _keys(a, b, n)

    def inter(m: int) -> np.ndarray:
        if m <= 0:
            return empty
        out: list[np.ndarray] = []
        need = m
        for _ in range(64):
            draw = int(need * 1.05) + 16
            zeros, width = np.zeros(draw), np.full(draw, total_mass)
            a = order[_sample_in_ranges(rng, cum, zeros, width)]
            b = order[_sample_in_ranges(rng, cum, zeros, width)]
            ok = labels[a] != labels[b]
            a, b = a[ok][:need], b[ok][:need]
            out.append(_keys(a, b, n))
            need -= a.shape[0]
            if need <= 0:
                break
        return np.concatenate(out)

    # Undirected keys min*n+max, unique; self loops (a == b) dropped.
    keys = _unique_merge(empty, np.concatenate([intra(n_intra), inter(n_inter)]))
    for _ in range(8):  # top up what dedup and self-loop removal took away
        deficit = target - keys.shape[0]
        if deficit <= max(1, target // 1000):
            break
        extra = int(deficit * 1.1) + 8
        ei = int(round(homophily * extra))
        keys = _unique_merge(keys, np.concatenate([intra(ei), inter(extra - ei)]))

    a, b = np.divmod(keys, n)
    del keys
    directed = np.concatenate([a * n + b, b * n + a])
    del a, b
    directed.sort()
    src, dst = np.divmod(directed, n)
    del directed

    rng_f = np.random.default_rng([seed, 1])  # features independent of the edge stream
    means = rng_f.standard_normal((k, feature_dim), dtype=np.float32)
    features = rng_f.standard_normal((n, feature_dim), dtype=np.float32)
    features *= np.float32(feature_noise)
    features += means[labels]

    perm = np.random.default_rng([seed, 2]).permutation(n)
    n_train, n_val = int(round(train_frac * n)), int(round(val_frac * n))
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True

    params = dict(num_nodes=n, avg_degree=avg_degree, num_classes=k, feature_dim=feature_dim,
                  homophily=homophily, power=power, feature_noise=feature_noise,
                  train_frac=train_frac, val_frac=val_frac, seed=seed)
    return Graph(
        name=name, num_nodes=n, src=src, dst=dst, features=features, labels=labels,
        train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_classes=k,
        meta={"source": "synthetic", "params": params},
    )


def _keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Undirected pair keys min*n + max, self loops removed."""
    keep = a != b
    a, b = a[keep], b[keep]
    return np.minimum(a, b) * n + np.maximum(a, b)


def _unique_merge(sorted_keys: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Union of a sorted unique key array and new keys, sorted and unique."""
    new = np.unique(new)
    if sorted_keys.shape[0] == 0:
        return new
    pos = np.searchsorted(sorted_keys, new)
    pos_c = np.minimum(pos, sorted_keys.shape[0] - 1)
    fresh = new[sorted_keys[pos_c] != new]
    merged = np.concatenate([sorted_keys, fresh])
    merged.sort(kind="stable")  # two sorted runs: timsort-style merge is near linear
    return merged
