"""Feature caches (issue 30; the lever of issue 26's throughput): a plan says how many of
other machines' hottest rows each gathering host replicates, the placement charges their
memory and refuses caches that do not fit, the simulator charges only the misses, and the
runtime serves hits from the gatherer's own memory -- the same mini-batches, the same
accuracy, fewer bytes from the stores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnsched.instance import Instance
from gnnsched.placement import Problem, check_resources
from gnnsched.placement.caches import size_caches
from gnnsched.placement.placer import cache_bytes, usage
from gnnsched.plan import Plan, TrainerPlan, plan_dict_diff
from gnnsched.profile import synthetic_profile
from gnnsched.runtime.profiler import HOT_GRID, hot_rank
from gnnsched.spec import SpecError, cluster_from_dict, job_from_dict
from gnnsched.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
N = 100_000


def _problem(gpu_gb: float = 8.0, coverage: bool = True) -> Problem:
    """Two stores (no GPU) and two GPU hosts with ``gpu_gb`` of memory; a synthetic profile
    that knows the graph's size (and, with ``coverage``, a measured-like coverage curve)."""
    machines = [{"name": f"s{i}", "cpus": 4, "memory_gb": 16, "nic_gbps": 1.0,
                 "partitions": [2 * i, 2 * i + 1]} for i in range(2)]
    machines += [{"name": f"g{i}", "cpus": 2, "memory_gb": gpu_gb, "nic_gbps": 1.0,
                  "gpus": [{"kind": "t4", "speed": 1.0, "memory_gb": 16}]} for i in range(2)]
    cluster = cluster_from_dict({"name": "cachelab", "machines": machines})
    job = job_from_dict({"dataset": "synthetic", "num_parts": 4, "trainers": 2,
                         "batch_size": 256, "fanouts": [10, 10], "prefetch": 2})
    prof = synthetic_profile(4, seeds_per_part=2000, batch_size=256, fanouts=(10, 10),
                             feature_dim=256, locality=0.3)
    prof.meta.update(num_nodes=N, part_nodes=[N // 4] * 4)
    if coverage:  # hotter rows first: x of the nodes cover more than x of the rows
        prof.meta["hot_coverage"] = {"x": HOT_GRID.tolist(),
                                     "parts": [np.sqrt(HOT_GRID).tolist()] * 4}
    return Problem(cluster, job, prof)


def _plan(pb: Problem) -> Plan:
    return Plan("hand", pb.cluster.name, pb.cluster.fingerprint(), (
        TrainerPlan(0, "g0", 0, (0, 1), (("s0", 1),), "g0"),
        TrainerPlan(1, "g1", 0, (2, 3), (("s1", 1),), "g1")))


# ---------------------------------------------------------------------- the plan


def test_caches_round_trip_and_bad_entries_are_named(tmp_path: Path) -> None:
    pb = _problem()
    plan = _plan(pb).with_caches({"g0": 1000, "g1": 0})
    assert plan.caches == {"g0": 1000}  # zero rows: no cache
    back = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert back.caches == {"g0": 1000}
    # a plan without caches writes what it always wrote: no `caches` key at all
    assert "caches" not in _plan(pb).with_caches({"g0": 0}).to_dict()
    with pytest.raises(SpecError, match=r"caches\.g0.*row count"):
        Plan.from_dict({**plan.to_dict(), "caches": {"g0": -5}}, "p.json")
    with pytest.raises(SpecError, match="caches.*mapping"):
        Plan.from_dict({**plan.to_dict(), "caches": [1, 2]}, "p.json")
    with pytest.raises(SpecError, match=r"caches\.nowhere.*not in cluster"):
        _plan(pb).with_caches({"nowhere": 5}).validate(pb.cluster)
    assert plan_dict_diff(_plan(pb), plan) == ["caches.g0: 0 -> 1000 rows"]


def test_caches_take_free_memory_and_a_cache_that_does_not_fit_is_refused() -> None:
    pb = _problem()
    plan = size_caches(pb, _plan(pb), 0.5)
    # both GPU hosts gather for themselves and store nothing: each may cache every node
    assert set(plan.caches) == {"g0", "g1"}
    assert all(0 < r <= N for r in plan.caches.values())
    u = usage(pb, plan)
    assert not u.problems
    for name, b in cache_bytes(pb, plan).items():
        assert b == plan.caches[name] * pb.profile.feature_bytes + 4 * N
    # half the free memory, no more
    free = usage(pb, plan.with_caches({}))
    for name in plan.caches:
        m = pb.cluster.machine_index(name)
        assert u.memory[m] - free.memory[m] <= 0.5 * (pb.cluster.machines[m].memory
                                                     - free.memory[m]) + 1
    # a host with no memory to spare gets no cache
    used = float(free.memory[pb.cluster.machine_index("g0")])
    tight = _problem(gpu_gb=(used + 2 * 4 * N) / 1e9)  # room for the row map, not a row
    assert size_caches(tight, _plan(tight), 0.5).caches == {}
    # caches bigger than a host are refused, naming the host and the caches
    big = _plan(tight).with_caches({"g0": 10_000_000})
    with pytest.raises(SpecError, match=r"g0: needs .*feature caches"):
        check_resources(tight, big)


def test_the_prediction_charges_only_the_misses() -> None:
    pb = _problem()
    plan = _plan(pb)
    wl = Workload(pb.cluster, pb.job, pb.profile)
    g0 = pb.cluster.machine_index("g0")
    assert wl.cache_share(g0, N // 4) == pytest.approx(0.25)
    hit = float(np.interp(0.25, HOT_GRID, np.sqrt(HOT_GRID)))  # the curve, interpolated
    assert wl.cache_hit(0, 0.25) == pytest.approx(hit) and hit > 0.45
    assert wl.cache_miss(plan.with_caches({"g0": N // 4}), g0, (0, 1)) == pytest.approx(1 - hit)
    none = Instance(wl, plan, seed=3)
    zero = Instance(wl, plan.with_caches({"g0": 0}), seed=3)
    assert zero.feat == none.feat and zero.feat_total == none.feat_total
    half = Instance(wl, plan.with_caches({"g0": N // 4}), seed=3)
    for k in range(none.K):
        assert sum(b for _, b in half.feat[0][k]) == pytest.approx(
            (1 - hit) * sum(b for _, b in none.feat[0][k]))
        assert half.feat[1][k] == none.feat[1][k]  # g1 has no cache
        assert half.feat_total[0][k] == none.feat_total[0][k]
    loads0, loads1 = wl.loads(plan), wl.loads(plan.with_caches({"g0": N, "g1": N}))
    assert loads1.ingress[g0] < 0.1 * loads0.ingress[g0]  # blocks and gradients are left
    # without a coverage curve a cache is worth its share of the nodes (any order)
    flat = Workload(pb.cluster, pb.job, _problem(coverage=False).profile)
    assert flat.cache_hit(0, 0.25) == pytest.approx(0.25)


def test_hot_rank_orders_each_partition_by_in_degree() -> None:
    deg = np.array([5, 1, 9, 9, 0, 3])
    part = np.array([0, 0, 0, 1, 1, 1])
    r = hot_rank(deg, part, 2)
    # part 0: node 2 (9) then 0 (5) then 1 (1); part 1: node 3 (9), 5 (3), 4 (0)
    assert r.tolist() == pytest.approx([1 / 3, 2 / 3, 0, 0, 2 / 3, 1 / 3])


# ---------------------------------------------------------------------- the runtime


def _train(lab4: tuple, plan: Plan, out: Path) -> Any:
    from gnnsched.commands.train import train
    from gnnsched.runtime.coordinator import RuntimeOptions

    cluster, job, _, parts = lab4
    return train(cluster, job, plan, policy="gnnsched", out_dir=out, partitions=parts,
                 options=RuntimeOptions(start_timeout=240, request_timeout=60,
                                        stop_grace_s=10))


@pytest.mark.slow
def test_cache_hits_are_served_locally_and_the_stores_send_that_much_less(
        lab4: tuple, tmp_path: Path) -> None:
    """The relay on store0 caches 1,000 rows of store1's nodes and trainer 1 (gathering on
    gpu1, which stores nothing) 600 of any: hits are counted, the stores send the hit bytes
    less (plus what filling the caches took once), and the run trains exactly as without."""
    cluster, job, plan, parts = lab4
    base = _train(lab4, plan, tmp_path / "none")
    cached = _train(lab4, plan.with_caches({"store0": 1000, "gpu1": 600}), tmp_path / "cache")
    assert cached.test_accuracy == base.test_accuracy
    assert cached.val_accuracy == pytest.approx(base.val_accuracy, abs=1e-9)
    row = 1433 * 4
    relay, t1 = cached.processes["fetcher:store0"], cached.processes["trainer:1"]
    assert relay["cache_rows"] == 1000 and t1["cache_rows"] == 600
    assert relay["cache_ready"] and t1["cache_ready"]
    hits = relay["cache_hits"] + t1["cache_hits"]
    assert relay["cache_hits"] > 0 and t1["cache_hits"] > 0
    assert relay["cache_hit_bytes"] == relay["cache_hits"] * row
    assert t1["cache_bytes"] >= 600 * row
    # the relay caches none of store0's own nodes: it reads those from shared memory
    from gnnsched.datasets.hot import HOT_FILE

    order = np.load(parts / HOT_FILE)
    node_part = np.load(parts / "node_part.npy")
    store_of = np.array(cluster.part_stores)
    first = order[store_of[node_part[order]] != cluster.machine_index("store0")][:1000]
    assert (store_of[node_part[first]] == cluster.machine_index("store1")).all()

    def store_bytes(res: Any) -> int:  # through NICs (a same-machine socket is not one)
        return sum(int(p.get("network_bytes", 0)) for n, p in res.processes.items()
                   if n.startswith("store:"))

    saved = store_bytes(base) - store_bytes(cached)
    fill = (1000 + 600) * row
    assert saved == pytest.approx(hits * row - fill, rel=0.05), (saved, hits * row, fill)


def test_a_plan_with_caches_fills_them_from_the_hot_order(tmp_path: Path) -> None:
    """The order caches fill in is computed part by part and kept beside the partitions."""
    from gnnsched.datasets import load_dataset, open_partitions, partition_graph
    from gnnsched.datasets.hot import HOT_FILE, cache_nodes, hot_order

    g = load_dataset("cora")
    partition_graph(g, 2, tmp_path, method="metis", seed=0)
    pset = open_partitions(tmp_path)
    order = hot_order(pset)
    deg = np.bincount(g.dst, minlength=g.num_nodes)
    assert sorted(order.tolist()) == list(range(g.num_nodes))
    assert (np.diff(deg[order]) <= 0).all()  # most in-edges first
    assert (tmp_path / HOT_FILE).is_file()
    np.testing.assert_array_equal(hot_order(pset), order)  # loaded the second time
    node_part = np.asarray(pset.node_part)
    mine = cache_nodes(order, node_part, [0, 1], 0, 50)
    assert len(mine) == 50 and (node_part[mine] == 1).all()
    assert cache_nodes(order, node_part, [0, 1], 0, 0).size == 0


def test_plan_with_caches_is_compared_with_colocation_and_the_same_caches() -> None:
    """`gnnsched plan --cache-share`: the plan gets caches, and colocation is scored beside
    it twice -- as it is, and with caches by the same rule (what a DistDGL user would add by
    hand); caches only take bytes off the NICs, so neither is predicted slower with them."""
    from gnnsched.placement.search import plan_and_compare

    pb = _problem()
    plan = plan_and_compare(pb, "gnnsched", seed=0, budget=2.0, cache_share=0.5)
    assert plan.caches
    base = plan.prediction
    assert base.baseline("colocation+cache").caches
    assert base.baseline("colocation+cache").epoch_time_s <= \
        base.baseline("colocation").epoch_time_s * 1.001
    plain = plan_and_compare(pb, "gnnsched", seed=0, budget=2.0)
    assert not plain.caches and plain.prediction.baseline("colocation+cache") is None
    # the same placement without its caches (the two searches stop on the clock, so under
    # load they need not reach the same placement)
    from dataclasses import replace

    from gnnsched.placement.placer import default_scorer

    score = default_scorer(pb, 0)[0]
    assert plan.prediction.epoch_time_s <= score(replace(plan, caches=())) * 1.001
