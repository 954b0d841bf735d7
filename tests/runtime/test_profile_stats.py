"""Profiles from graph statistics (issue 28, item 2): the fan-out law, its costs, and the
partition sizes it hands to placement's memory check."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import gnnsched  # noqa: F401  (before dgl)
from gnnsched.graphstats import (
    BUILTIN_REFERENCE,
    CostReference,
    GraphStats,
    fanout_law,
    model_work,
)
from gnnsched.profile import CostProfile, profile_for, profile_from_stats, synthetic_profile
from gnnsched.spec import SpecError, job_from_dict, load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]


def _stats(n: int, parts: int = 4, **kw) -> GraphStats:
    base = dict(num_nodes=n, num_edges=40 * n, feature_dim=100, num_classes=47, power=2.5,
                locality=0.45, num_parts=parts, train_frac=0.14)
    return GraphStats(**{**base, **kw})


def test_law_grows_with_the_graph_and_saturates() -> None:
    sizes = [20_000, 50_000, 200_000, 1_000_000, 10_000_000]
    mbs = [fanout_law(_stats(n), 1024, (15, 10, 5)) for n in sizes]
    inputs = [m.input_nodes for m in mbs]
    assert inputs == sorted(inputs) and inputs[-1] > 3 * inputs[1]
    for m, n in zip(mbs, sizes):
        # seeds: the batch, or all a partition has (20k nodes: 700 training nodes a part)
        assert m.nodes == sorted(m.nodes) and m.nodes[0] == pytest.approx(min(1024, 0.14 * n / 4))
        assert m.input_nodes <= n
    # a small graph saturates: nearly every node is an input
    assert mbs[0].input_nodes > 0.95 * sizes[0]
    # the bigger the graph, the less dedup: inputs approach the tree's size (seeds + edges;
    # hubs are still drawn repeatedly at 10M nodes)
    share = [m.input_nodes / (m.nodes[0] + m.total_edges) for m in mbs]
    assert share == sorted(share) and 0.6 < share[-1] <= 1
    # more seeds, more inputs; bigger fan-outs, more edges
    s = _stats(200_000)
    assert fanout_law(s, 256, (15, 10, 5)).input_nodes < fanout_law(s, 1024, (15, 10, 5)).input_nodes
    assert fanout_law(s, 1024, (10, 10)).total_edges < fanout_law(s, 1024, (20, 10)).total_edges


def test_degree_capping() -> None:
    s = _stats(100_000)
    ks, w = s.degree_classes()
    assert abs(float((ks * w).sum()) - 40) < 1e-6 and abs(w.sum() - 1) < 1e-9
    one = fanout_law(s, 512, (15,))
    assert one.edges[0] == pytest.approx(512 * float((np.minimum(15, ks) * w).sum()))
    assert one.edges[0] < 512 * 15  # low-degree seeds give fewer than the fan-out
    everything = fanout_law(s, 512, (-1,))
    assert everything.edges[0] == pytest.approx(512 * 40)
    assert fanout_law(s, 512, (10**6,)).edges[0] == pytest.approx(everything.edges[0])


def test_locality_moves_inputs_home() -> None:
    lo = fanout_law(_stats(400_000, locality=0.25), 1024, (15, 10, 5))
    hi = fanout_law(_stats(400_000, locality=0.9), 1024, (15, 10, 5))
    assert hi.local_share > lo.local_share + 0.15  # the home partition saturates first
    assert fanout_law(_stats(400_000, parts=1), 1024, (15, 10)).local_share == 1.0


def test_lognormal_law_and_scaling() -> None:
    s = _stats(100_000, degree_law="lognormal", sigma=1.2)
    assert fanout_law(s, 256, (10, 10)).input_nodes > 0
    big = _stats(100_000, part_nodes=(40_000, 30_000, 20_000, 10_000)).scaled(1_000_000)
    assert big.part_nodes == (400_000, 300_000, 200_000, 100_000)
    assert big.avg_degree == pytest.approx(40)
    assert GraphStats.from_dict(big.to_dict()) == big
    with pytest.raises(ValueError, match="part_nodes sum"):
        _stats(1000, part_nodes=(1, 2))


def test_profile_carries_partition_sizes_and_law_means() -> None:
    s = _stats(1_000_000, part_nodes=(400_000, 200_000, 200_000, 200_000))
    prof = profile_from_stats(s, batch_size=1024, fanouts=(15, 10, 5), hidden=256, samples=8)
    assert prof.synthetic and prof.num_parts == 4
    assert prof.meta["part_nodes"] == [400_000, 200_000, 200_000, 200_000]
    pb = prof.meta["part_bytes"]
    assert len(pb) == 4 and pb[0] == pytest.approx(2 * pb[1])
    assert prof.parts[0].train_seeds == 56_000
    mb = fanout_law(s, 1024, (15, 10, 5), part=1)
    pp = prof.parts[1]
    assert np.mean([c.sum() for c in pp.input_nodes]) == pytest.approx(mb.input_nodes, rel=1e-3)
    assert pp.edges.mean() == pytest.approx(mb.total_edges, rel=1e-3)
    dims = [100, 256, 256, 47]
    assert pp.train_s.mean() == pytest.approx(BUILTIN_REFERENCE.train_s(mb, "sage", dims))
    # round-trips through the JSON format
    again = CostProfile.from_dict(prof.to_dict())
    assert again.meta["part_bytes"] == pb
    # a papers100M-sized graph gets a bigger mini-batch than a products-sized one
    papers = profile_from_stats(_stats(111_000_000, num_edges=3_200_000_000, parts=4),
                                batch_size=1024, fanouts=(15, 10, 5), hidden=256, samples=4)
    products = profile_from_stats(_stats(2_400_000, num_edges=124_000_000, parts=4),
                                  batch_size=1024, fanouts=(15, 10, 5), hidden=256, samples=4)
    assert papers.parts[0].input_nodes[0].sum() > 1.2 * products.parts[0].input_nodes[0].sum()


def test_profile_for_uses_the_stats_law_when_the_job_gives_the_graph() -> None:
    job = load_job(ROOT / "examples" / "hetero16" / "job.yaml")
    prof = profile_for(job)
    assert prof.meta["generator"] == "profile_from_stats"
    assert len(prof.meta["part_bytes"]) == job.num_parts
    assert prof.meta["stats"]["num_nodes"] == 200_000
    assert prof.meta["stats"]["num_edges"] == 4_000_000
    old = load_job(ROOT / "examples" / "scale256" / "job.yaml")  # seeds_per_part: constants
    assert profile_for(old).meta["generator"] == "synthetic_profile"
    # skew makes partitions uneven
    skewed = replace(job, synthetic={**job.synthetic, "skew": 1.0})
    nodes = profile_for(skewed).meta["part_nodes"]
    assert sum(nodes) == 200_000 and max(nodes) > 2 * min(nodes)
    # a reference from a file
    ref = replace(BUILTIN_REFERENCE, train_s_fixed=1.0)
    assert min(profile_for(job, reference=ref).parts[0].train_s) > 0.5
    # the constant profile still works for its callers
    assert synthetic_profile(4, samples=2).meta["generator"] == "synthetic_profile"


def test_memory_check_covers_stats_profiles() -> None:
    """A store too small for its partitions is refused with a stats profile (the constant
    profile has no sizes, so the same cluster passes with a note)."""
    from gnnsched.placement import Problem

    cluster = load_cluster(ROOT / "examples" / "lab4" / "cluster.yaml")  # stores: 16 GB
    job = job_from_dict({"dataset": "synthetic", "num_parts": 4, "trainers": 2,
                         "batch_size": 256, "fanouts": [10, 10], "hidden": 64,
                         "synthetic": {"num_nodes": 30_000_000, "avg_degree": 20,
                                       "feature_dim": 128}})
    prof = profile_for(job)
    assert sum(prof.meta["part_bytes"][:2]) > 16e9  # two parts per store do not fit
    with pytest.raises(SpecError, match="store0|memory"):
        Problem(cluster, job, prof)
    small = replace(job, synthetic={**job.synthetic, "num_nodes": 200_000})
    pb = Problem(cluster, small, profile_for(small))
    assert not any("partition sizes unknown" in n for n in pb.notes)
    const = Problem(cluster, job, synthetic_profile(4, batch_size=256, fanouts=(10, 10),
                                                    hidden=64))
    assert any("partition sizes unknown" in n for n in const.notes)


def test_fit_recovers_known_unit_costs() -> None:
    """Costs made from known units are fitted back (the bench fits real profiles)."""
    s = _stats(50_000)
    truth = replace(BUILTIN_REFERENCE, sample_s_fixed=1e-3, sample_s_per_edge=4e-8,
                    sample_s_per_node=6e-8, train_s_fixed=2e-3, train_s_per_float=1e-9,
                    train_s_per_madd=3e-11)
    profs = [profile_from_stats(s, batch_size=b, fanouts=(15, 10, 5), hidden=256,
                                reference=replace(truth, spread=0.0), samples=2)
             for b in (1024, 512, 256)]
    fit = CostReference.fit(profs, s, model="sage", dims=[100, 256, 256, 47])
    mb = fanout_law(_stats(400_000), 1024, (15, 10, 5))
    dims = [100, 256, 256, 47]
    assert fit.sample_s(mb) == pytest.approx(truth.sample_s(mb), rel=0.02)
    assert fit.train_s(mb, "sage", dims) == pytest.approx(truth.train_s(mb, "sage", dims),
                                                          rel=0.02)
    agg, dense = model_work(mb, "sage", dims)
    assert agg > 0 and dense > 0


def test_law_matches_real_sampling_at_two_sizes() -> None:
    """DGL's NeighborSampler on generated graphs: unique inputs and sampled edges within 15%
    of the law at two sizes (a random 2-way partition, its locality measured)."""
    import torch

    from gnnsched.compat import dgl
    from gnnsched.datasets.synthetic import generate

    for n in (4_000, 16_000):
        g = generate(n, avg_degree=12, num_classes=4, feature_dim=4, homophily=0.5, seed=1,
                     train_frac=0.3)
        part = np.random.default_rng(0).integers(0, 2, n)
        stats = GraphStats.from_graph(g.src, g.dst, n, part, feature_dim=4, num_classes=4,
                                      train_frac=0.3)
        dg = dgl.graph((torch.from_numpy(g.src), torch.from_numpy(g.dst)), num_nodes=n)
        sampler = dgl.dataloading.NeighborSampler([10, 5])
        pool = np.nonzero(g.train_mask & (part == 0))[0]
        rng = np.random.default_rng(2)
        got_in, got_e = [], []
        for _ in range(6):
            seeds = torch.from_numpy(rng.choice(pool, 128, replace=False))
            inp, _, blocks = sampler.sample_blocks(dg, seeds)
            got_in.append(len(inp))
            got_e.append(sum(int(b.num_edges()) for b in blocks))
        mb = fanout_law(stats, 128, (10, 5), part=0)
        assert mb.input_nodes == pytest.approx(np.mean(got_in), rel=0.15), n
        assert mb.total_edges == pytest.approx(np.mean(got_e), rel=0.15), n


def test_graphstats_is_pure_logic() -> None:
    tree = ast.parse((ROOT / "gnnsched" / "graphstats.py").read_text())
    names = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for a in node.names}
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    bad = ("gnnsched.runtime", "gnnsched.commands", "gnnsched.cli", "gnnsched.evaluation",
           "gnnsched.api", "torch", "dgl")
    assert not [m for m in names if m.startswith(bad)]
