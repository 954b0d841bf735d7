"""DGL's chunked graph format (issue 55, item 1): a graph written in chunks reads back equal,
one chunk at a time; bad folders are refused before any work, naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gnnsched.datasets import ChunkedGraph, load_dataset, partition_graph, write_chunked
from gnnsched.datasets.chunked import METADATA
from gnnsched.spec import SpecError


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


@pytest.fixture
def folder(cora, tmp_path: Path) -> Path:
    write_chunked(cora, tmp_path / "cora", 3)
    return tmp_path / "cora"


def _meta(folder: Path) -> dict:
    return json.loads((folder / METADATA).read_text())


def _edit(folder: Path, fn) -> None:
    m = _meta(folder)
    fn(m)
    (folder / METADATA).write_text(json.dumps(m))


def test_a_graph_reads_back_equal_chunk_by_chunk(cora, folder: Path) -> None:
    g = ChunkedGraph.open(folder)
    assert g.num_nodes == cora.num_nodes and g.num_edges == cora.num_edges
    assert g.feature_dim == cora.feature_dim and len(g.nodes_per_chunk) == 3
    sizes = [len(s) for s, _ in g.edges()]
    assert sizes == g.edges_per_chunk and sum(sizes) == cora.num_edges
    back = g.to_graph()
    for key in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(back, key), getattr(cora, key)), key
    assert back.num_classes == cora.num_classes
    via = load_dataset(str(folder))  # a dataset name may be a chunked folder
    assert np.array_equal(via.features, cora.features)
    with pytest.raises(SpecError, match="already exists"):
        write_chunked(cora, folder, 2)


def test_partitions_from_chunks_equal_those_from_the_file(cora, folder: Path,
                                                          tmp_path: Path) -> None:
    from gnnsched.datasets import open_partitions

    partition_graph(cora, 4, tmp_path / "a", method="metis", seed=0)
    partition_graph(load_dataset(str(folder)), 4, tmp_path / "b", method="metis", seed=0)
    a, b = open_partitions(tmp_path / "a"), open_partitions(tmp_path / "b")
    assert np.array_equal(np.asarray(a.node_part), np.asarray(b.node_part))


def test_csv_edges_are_read(cora, folder: Path) -> None:
    m = _meta(folder)
    files = []
    for i, f in enumerate(m["edges"]["_N:_E:_N"]["data"]):
        arr = np.load(folder / f)
        name = f"edges/part{i}.csv"
        np.savetxt(folder / name, arr, fmt="%d", delimiter=",")
        files.append(name)
    _edit(folder, lambda m: m["edges"]["_N:_E:_N"].update(
        format={"name": "csv", "delimiter": ","}, data=files))
    g = ChunkedGraph.open(folder).to_graph()
    assert np.array_equal(g.src, cora.src) and np.array_equal(g.dst, cora.dst)


def test_bad_folders_name_the_file_and_field(folder: Path) -> None:
    part1 = folder / "edges" / "part1.npy"
    good = np.load(part1)
    cases = []
    np.save(part1, good.astype(np.float32))  # a wrong dtype
    cases.append((str(part1), "must be an integer"))
    np.save(part1, good[:-1])  # a shape that disagrees with num_edges_per_chunk
    cases.append(("num_edges_per_chunk", f"[{len(good)}, 2]"))
    for needle, more in cases:
        with pytest.raises(SpecError, match="part1.npy") as exc:
            ChunkedGraph.open(folder)
        assert more in str(exc.value) and needle in str(exc.value)
    bad = good.copy()
    bad[0, 0] = 10 ** 6  # an id out of range: caught when its chunk is read
    np.save(part1, bad)
    g = ChunkedGraph.open(folder)
    with pytest.raises(SpecError, match=r"part1.npy: node ids must lie in \[0, 2708\)"):
        list(g.edges())
    np.save(part1, good)
    (folder / "node_data" / "label-part2.npy").unlink()  # a missing chunk
    with pytest.raises(SpecError, match=r"label-part2.npy: is missing \(node_data._N.label"):
        ChunkedGraph.open(folder)


def test_bad_metadata_is_refused(folder: Path) -> None:
    with pytest.raises(SpecError, match="homogeneous"):
        _edit(folder, lambda m: m.update(node_type=["paper", "author"]))
        ChunkedGraph.open(folder)
    _edit(folder, lambda m: m.update(node_type=["_N"]))
    _edit(folder, lambda m: m["num_nodes_per_chunk"][0].append(5))
    with pytest.raises(SpecError, match=r"node_data._N.feat.data: lists 3 file\(s\) for 4"):
        ChunkedGraph.open(folder)
    _edit(folder, lambda m: m["num_nodes_per_chunk"][0].pop())
    _edit(folder, lambda m: m["node_data"]["_N"].pop("train_mask"))
    with pytest.raises(SpecError, match=r"node_data._N.train_mask: is missing"):
        ChunkedGraph.open(folder)
    with pytest.raises(SpecError, match="metadata.json: is missing"):
        ChunkedGraph.open(folder / "edges")


def test_the_whole_graph_is_refused_where_it_does_not_fit(folder: Path) -> None:
    g = ChunkedGraph.open(folder)
    with pytest.raises(SpecError, match=r"the whole graph needs 0\.0[0-9] GB in memory, more "
                       r"than the 0\.00 GB available"):
        g.to_graph(limit_bytes=1000)
