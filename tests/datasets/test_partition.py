"""Partitioning into DGL's distributed format, reopening it, and catching corrupted files."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gnnsched.datasets import (
    Graph,
    PartitionSet,
    generate,
    load_dataset,
    open_partitions,
    partition_graph,
    run_partition,
)
from gnnsched.spec import SpecError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
needs_shared = pytest.mark.skipif(not (SHARED / "coauthor_cs.npz").is_file(),
                                  reason=f"shared datasets folder {SHARED} is absent")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.num_nodes == b.num_nodes and a.num_classes == b.num_classes
    for attr in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr


def _assert_exact_cover(ps: PartitionSet) -> None:
    """Every node is owned by exactly one part, and node_part agrees with the part files."""
    owned = []
    for i in range(ps.num_parts):
        part = ps.load_part(i)
        assert np.all(ps.node_part[part.inner_orig_ids] == i)
        assert np.array_equal(part.inner_orig_ids, ps.part_nodes(i))
        assert part.features.shape == (part.num_inner, ps.feature_dim)
        owned.append(part.inner_orig_ids)
    all_owned = np.concatenate(owned)
    assert all_owned.shape[0] == ps.num_nodes
    assert np.array_equal(np.sort(all_owned), np.arange(ps.num_nodes))
    assert np.array_equal(ps.new_nids[ps.orig_nids], np.arange(ps.num_nodes))


@pytest.fixture(scope="module")
def coauthor(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not (SHARED / "coauthor_cs.npz").is_file():
        pytest.skip(f"shared datasets folder {SHARED} is absent")
    g = load_dataset("coauthor_cs", data_dir=SHARED, feature_dim=16)
    root = tmp_path_factory.mktemp("parts")
    reports = {m: partition_graph(g, 4, root / m, method=m) for m in ("metis", "random")}
    return {"graph": g, "root": root, "reports": reports}


@needs_shared
def test_metis_cuts_far_fewer_edges_than_random(coauthor: dict) -> None:
    metis, rand = coauthor["reports"]["metis"], coauthor["reports"]["random"]
    assert rand.edge_cut > 0.6  # 4 random parts cut ~3/4 of all edges
    assert metis.edge_cut < 0.5 * rand.edge_cut
    assert metis.balance < 1.1  # METIS keeps parts even
    for r in (metis, rand):
        g = coauthor["graph"]
        assert sum(r.part_nodes) == g.num_nodes and sum(r.part_edges) == g.num_edges
        assert sum(r.part_train) == int(g.train_mask.sum())
        assert "edge cut" in r.table() and len(r.table().splitlines()) == 4 + 4


@needs_shared
@pytest.mark.parametrize("method", ["metis", "random"])
def test_coauthor_round_trip(coauthor: dict, method: str) -> None:
    ps = open_partitions(coauthor["root"] / method)
    assert (ps.num_parts, ps.feature_dim, ps.num_classes) == (4, 16, 15)
    assert ps.method == method and ps.name == "coauthor_cs"
    _assert_exact_cover(ps)
    _assert_same_graph(ps.full_graph(), coauthor["graph"])
    # The edge cut recorded matches what the assignment implies.
    g = coauthor["graph"]
    cut = np.mean(ps.node_part[g.src] != ps.node_part[g.dst])
    assert ps.meta["edge_cut"] == pytest.approx(cut)


def test_cora_and_synthetic_round_trip(tmp_path: Path) -> None:
    cora = load_dataset("cora", feature_dim=8)
    report = partition_graph(cora, 3, tmp_path / "cora", method="metis")
    ps = open_partitions(tmp_path / "cora")
    _assert_exact_cover(ps)
    _assert_same_graph(ps.full_graph(), cora)
    assert Path(report.config).name == "cora.json"
    meta = json.loads((tmp_path / "cora" / "gnnsched.json").read_text())
    dgl_files = {"cora.json"} | {f"part{i}/{f}" for i in range(3)
                                 for f in ("graph.dgl", "node_feat.dgl", "edge_feat.dgl")}
    assert dgl_files <= set(meta["sha256"])
    assert np.load(tmp_path / "cora" / "node_part.npy").dtype == np.int32

    syn = generate(1500, avg_degree=8, feature_dim=5, seed=1)
    partition_graph(syn, 2, tmp_path / "syn", method="random", seed=3)
    ps = open_partitions(tmp_path / "syn")
    _assert_exact_cover(ps)
    _assert_same_graph(ps.full_graph(), syn)
    # One part is a valid partitioning too.
    partition_graph(syn, 1, tmp_path / "one", method="metis")
    _assert_same_graph(open_partitions(tmp_path / "one").full_graph(), syn)


def test_random_partition_is_seeded(tmp_path: Path) -> None:
    g = generate(800, avg_degree=6, feature_dim=4, seed=0)
    partition_graph(g, 3, tmp_path / "a", method="random", seed=5)
    partition_graph(g, 3, tmp_path / "b", method="random", seed=5)
    a = open_partitions(tmp_path / "a", verify=False)
    b = open_partitions(tmp_path / "b", verify=False)
    assert np.array_equal(a.node_part, b.node_part)


def test_corruption_is_detected(tmp_path: Path) -> None:
    g = generate(600, avg_degree=6, feature_dim=4, seed=0)
    src = tmp_path / "good"
    partition_graph(g, 2, src, method="metis")

    flipped = tmp_path / "flipped"
    shutil.copytree(src, flipped)
    target = flipped / "part1" / "node_feat.dgl"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(SpecError, match="checksum mismatch") as err:
        open_partitions(flipped)
    assert err.value.source == str(target) and err.value.field == "sha256"
    open_partitions(flipped, verify=False)  # opening without verification still works

    missing = tmp_path / "missing"
    shutil.copytree(src, missing)
    (missing / "part0" / "graph.dgl").unlink()
    with pytest.raises(SpecError, match="missing") as err:
        open_partitions(missing)
    assert err.value.source == str(missing / "part0" / "graph.dgl")

    with pytest.raises(SpecError, match="not a gnnsched partition directory"):
        open_partitions(tmp_path)


def test_bad_requests(tmp_path: Path) -> None:
    g = generate(100, avg_degree=4, feature_dim=4, seed=0)
    with pytest.raises(SpecError, match="unknown method") as err:
        partition_graph(g, 2, tmp_path / "x", method="spectral")
    assert err.value.valid == "metis, random"
    with pytest.raises(SpecError, match="num_parts"):
        partition_graph(g, 0, tmp_path / "x")
    other = tmp_path / "not_a_partition"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(SpecError, match="refusing to overwrite"):
        partition_graph(g, 2, other)
    assert (other / "precious.txt").exists()
    tiny = generate(10, avg_degree=2, num_classes=2, feature_dim=2)
    with pytest.raises(SpecError, match="DGL could not partition") as err:
        partition_graph(tiny, 8, tmp_path / "tiny", method="metis")
    assert err.value.field == "num_parts"
    with pytest.raises(SpecError, match="does not exist"):
        partition_graph(g, 2, tmp_path / "ok")
        open_partitions(tmp_path / "ok").load_part(2)


def test_run_partition_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(dataset="cora", parts=2, out=str(tmp_path / "cli"),
                              method="random", data_dir=None, feature_dim=8, seed=0, split=0,
                              json=True)
    assert run_partition(args) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # stdout holds only the JSON: DGL's prints are swallowed
    assert report["num_parts"] == 2 and report["num_nodes"] == 2708
    assert report["load_seconds"] is not None
    args.json = False
    assert run_partition(args) == 0
    assert "edge cut" in capsys.readouterr().out
    # Generator parameters from the command line.
    args = argparse.Namespace(dataset="synthetic", synthetic="num_nodes=400,avg_degree=4",
                              parts=2, out=str(tmp_path / "syn"), method="metis", json=True)
    assert run_partition(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["num_nodes"], report["num_edges"]) == (400, 1600)
    args.synthetic, args.out = "num_nodes", str(tmp_path / "bad")
    with pytest.raises(SpecError, match="KEY=VALUE"):
        run_partition(args)
