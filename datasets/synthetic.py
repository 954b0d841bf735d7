"""Seeded synthetic graphs of any size: a degree-corrected stochastic block model (DC-SBM).

Why this model: the schedulers care about (a) skewed degrees, which make mini-batch sizes
and sampling cost uneven, (b) community structure, which is what METIS exploits to cut few
edges, and (c) a learnable label signal so real training converges. A DC-SBM with power-law
degree propensities gives all three with a few knobs, and it samples in O(E) memory.

Construction (all vectorised numpy, deterministic per ``seed``):

* labels: each node joins one of ``num_classes`` communities uniformly at random;
* degree propensities theta ~ Pareto with tail exponent ``power`` (pdf ~ theta^-power),
  capped so no node expects more than a quarter of the graph as neighbours;
* ``homophily`` * M undirected edges are intra-community: community c gets a multinomial
  share ~ Theta_c^2 (Theta_c = its total propensity), both endpoints ~ theta inside it;
* the rest are inter-community: both endpoints ~ theta over all nodes, rejecting pairs in the
  same community and redrawing them;
* endpoints are drawn as multinomial per-node counts expanded with ``np.repeat`` and one side
  shuffled: the same law as iid weighted draws, but linear time and cache friendly (a
  searchsorted per endpoint was 4x slower at 20M edges);
* self loops are dropped and duplicate pairs always merged (a simple graph, like the real
  datasets; multi-edges would only inflate sampling fan-in), then top-up rounds replace what
  dedup removed, separately for intra and inter edges, so there are exactly
  ``round(num_nodes * avg_degree / 2)`` undirected edges and the measured edge homophily
  equals ``homophily`` to rounding (dedup would otherwise remove more intra edges, as
  communities are denser). Only when communities are too small to hold their quota (tiny,
  dense graphs) do counts fall short;
* the graph is symmetrised and edges are sorted by (src, dst) as in the ``.npz`` schema;
* features = class mean (a standard normal vector per class) + ``feature_noise`` * N(0, 1);
* observed labels: with ``label_noise`` > 0, that share of nodes gets a label drawn uniformly
  again (after structure and features were made from the true ones): an accuracy ceiling;
* masks: a random ``train_frac`` / ``val_frac`` / rest split.

Cost: about 6 s and 1.4 GB peak for 1M nodes / 20M directed edges / 128 features on one
core; memory is ~40 bytes per directed edge plus the features.

Presets (:data:`PRESETS`, :func:`preset`): named parameter sets for graphs that stand for a
kind of real dataset. ``products`` is the scale tier of ``gnnsched bench --scale``
(docs/evaluation.md, "At a million nodes"): shaped like ogbn-products (2.4M nodes, 62M
directed edges, 100-d features, 47 classes) at 1M nodes and 40M directed edges, with a task
that is learnable but not trivial. Edge homophily is 0.3 (a node's sampled neighbourhood is
mostly other classes), feature noise 1.0, and a fifth of the labels are redrawn at random
(``label_noise`` 0.2), so no model scores above about 1 - 0.2 * 46/47 = 0.80, as GraphSAGE
scores about 0.79 on ogbn-products. Why the difficulty sits in the labels and not in the
features: with noisier features (1.75, no label noise) accuracy depends on how far along its
learning curve a run is -- one epoch of the scale job gave 0.75 in one run and, for DistDGL
on another mini-batch order, 0.46 -- so two systems trained for the same steps could not be
compared to a point. With label noise the curve reaches its ceiling within the epoch
(measured with the reference at 200k nodes, 35 steps of 4 x 1024 seeds, standardised
features, Adam lr 0.003: test accuracy 0.804 and 0.799 for two job seeds, the ceiling 0.804;
feature noise 1.25 with label noise 0.15 gave 0.850 and 0.844 against a ceiling of 0.853).
"""

from __future__ import annotations

import numpy as np

from .npz import Graph
from .partition_writer import check_memory

# Named parameter sets for :func:`generate` (see the module docstring); a preset is a plain
# dict of generate's keyword arguments, so a job file can spell it out under `synthetic:`.
PRESETS: dict[str, dict[str, int | float]] = {
    "products": {
        "num_nodes": 1_000_000, "avg_degree": 40, "num_classes": 47, "feature_dim": 100,
        "homophily": 0.3, "feature_noise": 1.0, "label_noise": 0.2, "power": 2.5,
        "train_frac": 0.14, "val_frac": 0.1,
    },
}


def preset(name: str, **overrides: int | float | str) -> dict[str, int | float | str]:
    """The keyword arguments of preset ``name`` for :func:`generate`, with ``overrides``
    (e.g. ``num_nodes=200_000`` for a smaller graph with the same local structure: degree,
    homophily, noise, classes and feature width)."""
    if name not in PRESETS:
        raise ValueError(f"unknown synthetic preset {name!r} (valid: {', '.join(PRESETS)})")
    out: dict[str, int | float | str] = dict(PRESETS[name])
    out.update(overrides)
    return out


def generate(
    num_nodes: int,
    avg_degree: float = 20,
    num_classes: int = 8,
    feature_dim: int = 128,
    homophily: float = 0.8,
    power: float = 2.5,
    feature_noise: float = 1.0,
    label_noise: float = 0.0,
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
    homophily = _checked_homophily(num_nodes, num_classes, avg_degree, homophily, power,
                                   label_noise, train_frac, val_frac)
    target = int(round(n * avg_degree / 2))  # undirected edges
    need = generate_bytes(n, 2 * target, feature_dim)
    check_memory("synthetic", need, f"generating {n:,} nodes, {2 * target:,} directed edges, "
                 f"{feature_dim} features")

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=n, dtype=np.int64)
    # Propensities: Pareto(alpha = power - 1) on [1, inf), capped.
    theta = (1.0 - rng.random(n)) ** (-1.0 / (power - 1.0))
    cap = max(1.0, 0.25 * n / max(avg_degree, 1e-9)) * float(theta.mean())
    np.minimum(theta, cap, out=theta)
    src, dst = _edges(rng, labels, theta, k, homophily, target)

    rng_f = np.random.default_rng([seed, 1])  # features independent of the edge stream
    means = rng_f.standard_normal((k, feature_dim), dtype=np.float32)
    features = rng_f.standard_normal((n, feature_dim), dtype=np.float32)
    features *= np.float32(feature_noise)
    for lo in range(0, n, 1 << 16):  # class means added in row blocks: no [n, d] temporary
        features[lo:lo + (1 << 16)] += means[labels[lo:lo + (1 << 16)]]

    if label_noise > 0:  # observed labels: a share redrawn uniformly, after the structure
        # and the features were made from the true ones -- the best any model can score is
        # then about 1 - label_noise * (k - 1) / k, however long it trains
        rng_l = np.random.default_rng([seed, 3])
        flip = np.flatnonzero(rng_l.random(n) < label_noise)
        labels[flip] = rng_l.integers(0, k, size=len(flip), dtype=np.int64)

    perm = np.random.default_rng([seed, 2]).permutation(n)
    n_train, n_val = int(round(train_frac * n)), int(round(val_frac * n))
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True

    params = dict(num_nodes=n, avg_degree=avg_degree, num_classes=k, feature_dim=feature_dim,
                  homophily=homophily, power=power, feature_noise=feature_noise,
                  train_frac=train_frac, val_frac=val_frac, seed=seed)
    if label_noise > 0:
        params["label_noise"] = label_noise
    return Graph(
        name=name, num_nodes=n, src=src, dst=dst, features=features, labels=labels,
        train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_classes=k,
        meta={"source": "synthetic", "params": params},
    )


def _checked_homophily(num_nodes: int, num_classes: int, avg_degree: float, homophily: float,
                       power: float, label_noise: float, train_frac: float, val_frac: float
                       ) -> float:
    """ValueError for parameters out of range; the homophily to use (1 with one class:
    every edge is then intra-community)."""
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
    if not 0.0 <= label_noise <= 1.0:
        raise ValueError(f"label_noise must be in [0, 1], got {label_noise}")
    if train_frac < 0 or val_frac < 0 or train_frac + val_frac > 1:
        raise ValueError("train_frac and val_frac must be >= 0 and sum to <= 1")
    return homophily


def _edges(rng: np.random.Generator, labels: np.ndarray, theta: np.ndarray, k: int,
           homophily: float, target: int) -> tuple[np.ndarray, np.ndarray]:
    """``target`` undirected DC-SBM edges (``homophily`` of them inside a community), both
    directions, sorted by (src, dst): the graph's ``src`` and ``dst``."""
    n = labels.shape[0]
    # Nodes grouped by community: community c owns positions [start[c], start[c+1]) of `order`.
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=k)
    start = np.concatenate([[0], np.cumsum(counts)])
    theta_g = theta[order]
    comm_mass = np.bincount(labels, weights=theta, minlength=k)
    comm_sq = comm_mass**2
    comm_p = comm_sq / comm_sq.sum()
    p_all = theta / theta.sum()

    empty = np.empty(0, dtype=np.int64)

    def endpoints(m: int, nodes: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """m iid pairs with both ends ~ p over `nodes`: per-node counts are multinomial, and
        pairing one sorted endpoint list with a shuffled one is a uniform random matching,
        which is the same law as iid draws but needs no per-sample binary search."""
        a = np.repeat(nodes, rng.multinomial(m, p))
        b = rng.permutation(np.repeat(nodes, rng.multinomial(m, p)))
        return a, b

    def intra(m: int) -> np.ndarray:
        if m <= 0:
            return empty
        out = []
        for c, m_c in enumerate(rng.multinomial(m, comm_p)):
            if m_c == 0:
                continue
            seg = slice(start[c], start[c + 1])
            w = theta_g[seg]
            a, b = endpoints(int(m_c), order[seg], w / w.sum())
            out.append(_keys(a, b, n))
        return np.concatenate(out) if out else empty

    def inter(m: int) -> np.ndarray:
        if m <= 0:
            return empty
        out: list[np.ndarray] = []
        need = m
        for _ in range(64):  # rejection: redraw pairs that fell inside one community
            a, b = endpoints(int(need * 1.05) + 16, all_nodes, p_all)
            ok = labels[a] != labels[b]
            a, b = a[ok][:need], b[ok][:need]
            out.append(_keys(a, b, n))
            need -= a.shape[0]
            if need <= 0:
                break
        return np.concatenate(out)

    all_nodes = np.arange(n, dtype=np.int64)
    n_intra = int(round(homophily * target))
    # Intra and inter key sets are disjoint, so each is topped up to its own quota and the
    # measured homophily matches the knob even though dedup hits dense communities harder.
    keys = np.concatenate([
        _fill(rng, intra, n_intra), _fill(rng, inter, target - n_intra)
    ])
    keys.sort()

    # Both directions, sorted, split into src and dst, in place where numpy allows: no
    # edge-length temporaries beyond the arrays kept (the partition step's peak counts them).
    a = keys // n
    b = np.remainder(keys, n, out=keys)
    u = a.shape[0]
    directed = np.empty(2 * u, dtype=np.int64)
    np.multiply(a, n, out=directed[:u])
    directed[:u] += b
    np.multiply(b, n, out=directed[u:])
    directed[u:] += a
    del a, b, keys
    directed.sort()
    src = directed // n
    dst = np.remainder(directed, n, out=directed)
    del directed
    return src, dst


def generate_bytes(num_nodes: int, directed_edges: int, feature_dim: int) -> int:
    """Peak memory of :func:`generate`, an upper estimate: the kept arrays (16 bytes per
    directed edge, the node arrays) plus the edge keys while they are drawn, deduplicated and
    doubled (about 12 bytes more per directed edge at the peak) and per-node draws."""
    return int(28 * directed_edges + num_nodes * (4 * feature_dim + 96))


def parse_params(text: str) -> dict[str, int | float | str]:
    """``"num_nodes=100000,avg_degree=10"`` -> keyword arguments for :func:`generate`
    (for command lines; values become int, then float, else stay strings)."""
    out: dict[str, int | float | str] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        value = value.strip()
        parsed: int | float | str
        try:
            parsed = int(value)
        except ValueError:
            try:
                parsed = float(value)
            except ValueError:
                parsed = value
        out[key.strip()] = parsed
    return out


def _keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Undirected pair keys min*n + max, self loops removed."""
    keep = a != b
    a, b = a[keep], b[keep]
    return np.minimum(a, b) * n + np.maximum(a, b)


def _fill(rng: np.random.Generator, sampler, quota: int) -> np.ndarray:
    """Sorted unique keys from ``sampler(m)`` until ``quota`` are found (or 8 top-ups)."""
    keys = _sorted_unique(sampler(quota))
    for _ in range(8):  # top up what dedup and self-loop removal took away
        deficit = quota - keys.shape[0]
        if deficit <= 0:
            break
        fresh = _sorted_unique(sampler(int(deficit * 1.2) + 8))
        if keys.shape[0]:
            pos = np.minimum(np.searchsorted(keys, fresh), keys.shape[0] - 1)
            fresh = fresh[keys[pos] != fresh]
        if fresh.shape[0] > deficit:  # keep a random subset so the count is exact
            fresh = np.sort(rng.choice(fresh, deficit, replace=False))
        keys = np.concatenate([keys, fresh])
        keys.sort(kind="stable")  # two sorted runs: a near-linear merge
    return keys


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sorted unique keys via sort + adjacent compare (numpy's hash-based np.unique is
    ~80x slower on 10M int64 keys)."""
    if keys.shape[0] == 0:
        return keys
    keys = np.sort(keys)
    keep = np.empty(keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]
