"""`gnnsched partition` is reproducible and records how features were scaled (issue 25).

METIS: the same graph and ``--seed`` give the same node -> part assignment and byte-identical
part files, in one process and across processes; the seed is what decides the assignment.
``--normalize``: the features are scaled before they are written, the partition meta records
it, and a job that asks for another scaling is refused by ``check_made_for``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnsched.datasets import load_dataset, open_partitions, partition_graph, run_partition
from gnnsched.datasets.cache import check_made_for
from gnnsched.datasets.partition import metis_assignment, metis_vertex_weights
from gnnsched.spec import JobSpec, SpecError

ROOT = Path(__file__).resolve().parents[2]


def _same_partitions(a: Path, b: Path) -> None:
    """node -> part, the renumbering and what every part holds are identical; so is every
    file but DGL's graph.dgl, whose headers carry stray memory bytes (pointers) run to run."""
    pa, pb = open_partitions(a), open_partitions(b)
    assert np.array_equal(pa.node_part, pb.node_part)
    assert np.array_equal(pa.orig_nids, pb.orig_nids)
    assert pa.meta["edge_cut"] == pb.meta["edge_cut"]
    sums = [{k: v for k, v in p.meta["sha256"].items() if not k.endswith("graph.dgl")}
            for p in (pa, pb)]
    assert sums[0] == sums[1] and len(sums[0]) == 4 + 2 * pa.num_parts
    for i in range(pa.num_parts):
        qa, qb = pa.load_part(i), pb.load_part(i)
        for x, y in zip(qa.graph.edges(), qb.graph.edges()):
            assert np.array_equal(x.numpy(), y.numpy())
        for data in ("ndata", "edata"):
            da, db = getattr(qa.graph, data), getattr(qb.graph, data)
            assert sorted(da.keys()) == sorted(db.keys())
            for key in da.keys():
                assert np.array_equal(da[key].numpy(), db[key].numpy()), (i, key)
        assert np.array_equal(qa.features.numpy(), qb.features.numpy())


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


def test_metis_same_seed_same_partitions_in_one_process(cora, tmp_path: Path) -> None:
    # DGL's bundled METIS gave a different assignment almost every call on Cora
    for name in ("a", "b", "c"):
        partition_graph(cora, 4, tmp_path / name, method="metis", seed=7)
    _same_partitions(tmp_path / "a", tmp_path / "b")
    _same_partitions(tmp_path / "a", tmp_path / "c")
    meta = open_partitions(tmp_path / "a").meta
    assert meta["seed"] == 7 and meta["metis"]["seed"] == 8  # METIS is handed seed + 1
    assert meta["metis"]["ncon"] == 4  # train/other counts and in-degrees, as DGL balances


def test_metis_same_seed_same_partitions_across_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
    outs = []
    for i in range(2):
        out = tmp_path / f"p{i}"
        subprocess.run([sys.executable, "-m", "gnnsched", "partition", "cora", "--parts", "4",
                        "--seed", "3", "--out", str(out), "--json"], check=True, cwd=ROOT,
                       env=env, capture_output=True, timeout=300)
        outs.append(out)
    _same_partitions(*outs)
    assert open_partitions(outs[0]).meta["seed"] == 3


def test_the_seed_decides_the_metis_assignment(cora) -> None:
    vwgt = metis_vertex_weights(cora.num_nodes, cora.dst, cora.train_mask.astype(np.int64))
    parts = {s: metis_assignment(cora.src, cora.dst, cora.num_nodes, 4, vwgt=vwgt, seed=s)
             for s in (0, 1, 2)}
    assert len({p.tobytes() for p in parts.values()}) == 3  # 0 and 1 too (libc: srand 0 == 1)
    again = metis_assignment(cora.src, cora.dst, cora.num_nodes, 4, vwgt=vwgt, seed=1)
    assert np.array_equal(again, parts[1])
    for p in parts.values():  # each a good partition: balanced, few cut edges
        counts = np.bincount(p, minlength=4)
        assert counts.max() / counts.mean() < 1.1
        assert (p[cora.src] != p[cora.dst]).mean() < 0.2


def test_metis_vertex_weights_match_dgl() -> None:
    dst = np.array([1, 2, 2, 0, 3])
    types = np.array([1, 0, 1, 1])
    w = metis_vertex_weights(4, dst, types, balance_edges=True)
    deg = np.array([1, 1, 2, 1])
    assert w.tolist() == np.stack([types == 0, types == 1, deg * (types == 0),
                                   deg * (types == 1)], 1).astype(int).tolist()
    assert metis_vertex_weights(4, dst, None, balance_edges=True).tolist() == [[1], [1], [2], [1]]
    assert metis_vertex_weights(4, dst, None, balance_edges=False) is None


def test_empty_metis_parts_are_refused(tmp_path: Path) -> None:
    from gnnsched.datasets import generate

    tiny = generate(10, avg_degree=2, num_classes=2, feature_dim=2)
    with pytest.raises(SpecError, match="could not partition") as err:
        partition_graph(tiny, 8, tmp_path / "tiny", method="metis")
    assert err.value.field == "num_parts"


def _cli(tmp_path: Path, name: str, normalize: str | None) -> Path:
    out = tmp_path / name
    args = argparse.Namespace(dataset="cora", parts=2, out=str(out), method="random", seed=0,
                              split=0, json=True, data_dir=None, feature_dim=None)
    if normalize is not None:
        args.normalize = normalize
    assert run_partition(args) == 0
    return out


def test_normalize_row_is_applied_and_recorded(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = _cli(tmp_path, "row", "row")
    json.loads(capsys.readouterr().out)  # stdout still holds only the JSON report
    pset = open_partitions(out)
    assert pset.meta["normalize"] == "row" and pset.meta["dataset_meta"]["normalize"] == "row"
    full = pset.full_graph()
    sums = np.abs(full.features).sum(axis=1)
    nonzero = sums > 0
    assert nonzero.mean() > 0.99
    np.testing.assert_allclose(sums[nonzero], 1.0, rtol=1e-5)
    raw = load_dataset("cora")
    assert not np.allclose(np.abs(raw.features).sum(axis=1)[nonzero], 1.0)  # Cora: 0/1 words

    check_made_for(JobSpec(dataset="cora", num_parts=2, normalize="row"), out, pset.meta)
    for other in ("none", "standard"):
        with pytest.raises(SpecError, match="normalised 'row'") as err:
            check_made_for(JobSpec(dataset="cora", num_parts=2, normalize=other), out, pset.meta)
        assert err.value.field == "features.normalize"


def test_normalize_defaults_to_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _cli(tmp_path, "plain", None)
    capsys.readouterr()
    meta = open_partitions(out).meta
    assert meta["normalize"] == "none" and meta["dataset_meta"]["normalize"] == "none"
    check_made_for(JobSpec(dataset="cora", num_parts=2), out, meta)
    with pytest.raises(SpecError, match="features.normalize|normalised"):
        check_made_for(JobSpec(dataset="cora", num_parts=2, normalize="row"), out, meta)


def test_cli_flag_parses_and_is_checked() -> None:
    from gnnsched.commands import partition as cmd

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    args = p.parse_args(["cora", "--parts", "2", "--out", ".", "--normalize", "standard"])
    assert args.normalize == "standard"
    assert p.parse_args(["cora", "--parts", "2", "--out", "."]).normalize == "none"
    with pytest.raises(SystemExit):
        p.parse_args(["cora", "--parts", "2", "--out", ".", "--normalize", "l2"])
    assert "METIS" in p.format_help() or "metis" in p.format_help()
