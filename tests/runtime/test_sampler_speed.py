"""Block compaction: the linear-pass ``compact`` gives the blocks the old numpy one gave
(``setdiff1d`` + ``searchsorted`` + ``lexsort``, kept here as the reference), deterministically,
for fan-out ``-1`` layers too, and at a fraction of its CPU."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from gnnsched.runtime import sampler as sampler_mod
from gnnsched.runtime.sampler import compact, local_sampler, sample_blocks


def old_compact(dst_nodes: np.ndarray, src: np.ndarray, dst: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compaction before the rewrite (the reference)."""
    extra = np.setdiff1d(src, dst_nodes)  # sorted, unique
    src_nodes = np.concatenate([dst_nodes, extra]).astype(np.int64)
    order = np.argsort(src_nodes, kind="stable")
    ranked = src_nodes[order]
    src_local = order[np.searchsorted(ranked, src)]
    dst_local = order[np.searchsorted(ranked, dst)]
    if len(dst_local) and dst_local.max() >= len(dst_nodes):
        raise ValueError("an edge points to a node outside the block's destinations")
    perm = np.lexsort((src_local, dst_local))
    return src_nodes, src_local[perm].astype(np.int64), dst_local[perm].astype(np.int64)


def _random_edges(rng: np.random.Generator, n: int, nd: int, e: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dst_nodes = rng.choice(n, nd, replace=False).astype(np.int64)  # any order
    dst = rng.choice(dst_nodes, e)
    src = rng.integers(0, n, e)  # repeats, self-loops, sources among the destinations
    return dst_nodes, src, dst


@pytest.mark.parametrize("n,nd,e", [(50, 5, 0), (50, 5, 40), (1000, 30, 500),
                                    (100_000, 200, 3000), (20_000, 5000, 80_000)])
def test_compact_equals_old(n: int, nd: int, e: int) -> None:
    rng = np.random.default_rng(n + nd + e)
    dst_nodes, src, dst = _random_edges(rng, n, nd, e)
    want = old_compact(dst_nodes, src, dst)
    for num_nodes in (None, n, 4 * n):  # both ways of finding new sources (bitmap, unique)
        got = compact(dst_nodes, src, dst, num_nodes)
        for g, w in zip(got, want):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w)
    src_nodes, s, d = got
    np.testing.assert_array_equal(src_nodes[:nd], dst_nodes)  # dst prefix
    assert len(np.unique(src_nodes)) == len(src_nodes)


def test_compact_rejects_foreign_destination_and_stays_clean() -> None:
    dst_nodes = np.array([3, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="outside the block"):
        compact(dst_nodes, np.array([5, 6]), np.array([3, 4]), 10)
    got = compact(dst_nodes, np.array([5, 6]), np.array([3, 1]), 10)  # tables still clean
    want = old_compact(dst_nodes, np.array([5, 6]), np.array([3, 1]))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory):
    from gnnsched.datasets import open_partitions, partition_graph
    from gnnsched.datasets.synthetic import generate
    from gnnsched.runtime.store import load_parts

    out: Path = tmp_path_factory.mktemp("sampler") / "parts"
    graph = generate(3000, avg_degree=12, feature_dim=8, num_classes=4, seed=1)
    partition_graph(graph, 3, out, method="random", seed=0)
    pset = open_partitions(out, verify=False)
    loaded = load_parts(str(out), [0, 1, 2], keep_features=False)
    return loaded, np.asarray(pset.node_part), graph


def _edges(batch: sampler_mod.SampledBatch) -> list[set[tuple[int, int]]]:
    """Each layer's edges in global ids, and the dst-prefix property checked on the way."""
    nodes = [batch.input_nodes]
    for _, _, ns, nd in batch.layers:  # input layer first: each dst set is a prefix
        assert ns == len(nodes[-1])
        nodes.append(nodes[-1][:nd])
    np.testing.assert_array_equal(nodes[-1], batch.seeds)
    return [set(zip(nodes[i][s].tolist(), nodes[i][d].tolist()))
            for i, (s, d, _, _) in enumerate(batch.layers)]


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [-1, 3], [4, -1]])
def test_blocks_equal_old_implementation(parts, fanouts: list[int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pg, node_part, graph = parts
    train = np.nonzero(graph.train_mask)[0]
    rng = np.random.default_rng(7)
    sample = local_sampler(pg)
    for seq in range(3):
        seeds = rng.choice(train, 64, replace=False)
        new = sample_blocks(seeds, fanouts, node_part, 5, 1, seq, sample)
        again = sample_blocks(seeds, fanouts, node_part, 5, 1, seq, sample)
        with monkeypatch.context() as m:
            m.setattr(sampler_mod, "compact", lambda a, b, c, n=None: old_compact(a, b, c))
            old = sample_blocks(seeds, fanouts, node_part, 5, 1, seq, sample)
        assert _edges(new) == _edges(old)
        for x in (old, again):  # identical arrays: same ids, same edge order
            np.testing.assert_array_equal(new.input_nodes, x.input_nodes)
            for a, b in zip(new.layers, x.layers):
                assert a[2:] == b[2:]
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_array_equal(a[1], b[1])
        for (_, d, _, nd), f in zip(new.layers, fanouts):
            assert np.all(np.diff(d) >= 0)  # grouped by destination, as the trainer expects
            deg = np.bincount(d, minlength=nd)
            if f > 0:
                assert deg.max() <= f
        if fanouts[-1] == -1:  # all in-edges of the seeds
            want = int(np.isin(graph.dst, seeds).sum())
            assert len(new.layers[-1][0]) == want


def _cpu(fn, *args, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        fn(*args)
        best = min(best, time.thread_time() - t0)
    return best


def test_compact_is_much_cheaper_than_old() -> None:
    rng = np.random.default_rng(0)
    n = 200_000
    dst_nodes, src, dst = _random_edges(rng, n, 20_000, 300_000)
    compact(dst_nodes, src, dst, n)  # allocates the tables
    new = _cpu(compact, dst_nodes, src, dst, n)
    old = _cpu(old_compact, dst_nodes, src, dst)
    assert new * 4 < old, (new, old)
