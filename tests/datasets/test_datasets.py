"""Dataset loading (shared .npz files, the bundled Cora, malformed files) and the generator."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from gnnsched.datasets import (
    Graph,
    available_datasets,
    bundled_datasets,
    generate,
    load_dataset,
    load_npz,
)
from gnnsched.spec import SpecError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
STATS = SHARED / "stats.json"
needs_shared = pytest.mark.skipif(not STATS.is_file(),
                                  reason=f"shared datasets folder {SHARED} is absent")
SHARED_NAMES = (sorted(json.loads(STATS.read_text())) if STATS.is_file()
                else ["cora", "citeseer", "amazon_photo", "coauthor_cs", "coauthor_physics"])


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


# --------------------------------------------------------------------------------------
# Real data


@needs_shared
@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_dataset_matches_stats(name: str) -> None:
    stats = json.loads(STATS.read_text())[name]
    # feature_dim keeps Coauthor Physics from ever being densified at full width.
    g = load_dataset(name, data_dir=SHARED, feature_dim=16, seed=3)
    assert g.name == name
    assert g.num_nodes == stats["num_nodes"]
    assert g.num_edges == stats["num_edges_directed"]
    assert g.num_classes == stats["num_classes"]
    assert g.features.shape == (g.num_nodes, 16) and g.features.dtype == np.float32
    assert g.meta["raw_feature_dim"] == stats["num_features"] and g.meta["projected"]
    for key, size in stats["mask_sizes_split0"].items():
        mask = getattr(g, key)
        assert mask.dtype == np.bool_ and mask.shape == (g.num_nodes,)
        assert int(mask.sum()) == size, key
    assert g.src.dtype == np.int64 and g.dst.dtype == np.int64
    assert g.labels.dtype == np.int64 and g.labels.shape == (g.num_nodes,)
    # Symmetrized, no self loops, sorted by (src, dst), as the schema promises.
    key = g.src * g.num_nodes + g.dst
    assert np.all(np.diff(key) > 0)
    assert np.array_equal(np.sort(g.dst * g.num_nodes + g.src), key)
    assert not np.any(g.src == g.dst)


@needs_shared
def test_splits_and_projection() -> None:
    a0 = load_dataset("amazon_photo", data_dir=SHARED, split=0, feature_dim=8)
    a1 = load_dataset("amazon_photo", data_dir=SHARED, split=9, feature_dim=8)
    assert not np.array_equal(a0.train_mask, a1.train_mask)
    assert a0.train_mask.sum() == a1.train_mask.sum() == 20 * 8
    with pytest.raises(SpecError, match="split 10 is out of range") as err:
        load_dataset("amazon_photo", data_dir=SHARED, split=10, feature_dim=8)
    assert err.value.field == "train_mask" and "amazon_photo.npz" in err.value.source
    # Same seed, same projection; another seed, another one.
    b0 = load_dataset("amazon_photo", data_dir=SHARED, feature_dim=8)
    b1 = load_dataset("amazon_photo", data_dir=SHARED, feature_dim=8, seed=1)
    assert np.array_equal(a0.features, b0.features)
    assert not np.array_equal(a0.features, b1.features)


def test_bundled_cora(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GNNSCHED_DATA_DIR", raising=False)
    assert "cora" in bundled_datasets()
    g = load_npz(bundled_datasets()["cora"])
    assert (g.num_nodes, g.num_edges, g.feature_dim, g.num_classes) == (2708, 10556, 1433, 7)
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (140, 500, 1000)
    assert set(np.unique(g.features).tolist()) == {0.0, 1.0}  # raw binary, not normalised
    if STATS.is_file():  # the packaged copy is byte-identical to the shared file
        digest = hashlib.sha256(bundled_datasets()["cora"].read_bytes()).hexdigest()
        assert digest == json.loads(STATS.read_text())["cora"]["sha256"]
    with pytest.raises(SpecError, match="split 1 is out of range"):
        load_npz(bundled_datasets()["cora"], split=1)


def test_to_dgl() -> None:
    import torch

    g = load_dataset("cora").to_dgl()
    assert g.num_nodes() == 2708 and g.num_edges() == 10556
    assert g.ndata["feat"].dtype == torch.float32 and g.ndata["feat"].shape == (2708, 1433)
    assert g.ndata["label"].dtype == torch.int64
    for key in ("train_mask", "val_mask", "test_mask"):
        assert g.ndata[key].dtype == torch.bool


# --------------------------------------------------------------------------------------
# Name resolution


def _tiny_arrays(n: int = 4) -> dict[str, np.ndarray]:
    import scipy.sparse as sp

    x = sp.csr_matrix(np.eye(n, 3, dtype=np.float32))
    return {
        "num_nodes": np.int64(n),
        "edge_index": np.array([[0, 1, 1, 2], [1, 0, 2, 1]], dtype=np.int64),
        "x_indptr": x.indptr.astype(np.int64),
        "x_indices": x.indices.astype(np.int32),
        "x_data": x.data.astype(np.float32),
        "x_shape": np.array([n, 3], dtype=np.int64),
        "y": np.array([0, 1, 0, 2][:n], dtype=np.int64),
        "train_mask": np.array([True, False, False, False]),
        "val_mask": np.array([False, True, False, False]),
        "test_mask": np.array([False, False, True, True]),
    }


def _write(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    np.savez_compressed(path, **arrays)
    return path


def test_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GNNSCHED_DATA_DIR", raising=False)
    _write(tmp_path / "cora.npz", _tiny_arrays())
    # An explicit data_dir wins over the bundled copy.
    assert load_dataset("cora", data_dir=tmp_path).num_nodes == 4
    # So does the environment variable.
    monkeypatch.setenv("GNNSCHED_DATA_DIR", str(tmp_path))
    assert load_dataset("cora").num_nodes == 4
    assert available_datasets()["cora"] == tmp_path / "cora.npz"
    # A path to a file.
    path = _write(tmp_path / "my graph.npz", _tiny_arrays())
    g = load_dataset(str(path))
    assert g.num_nodes == 4 and g.name == "my graph"


def test_unknown_name_lists_what_exists(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="unknown dataset") as err:
        load_dataset("no_such_graph", data_dir=tmp_path)
    assert "cora" in err.value.valid and "synthetic" in err.value.valid


def test_an_unknown_name_in_a_job_names_the_job_file(tmp_path: Path, monkeypatch) -> None:
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.spec import job_from_dict

    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))
    job = job_from_dict({"dataset": "corra", "num_parts": 2, "trainers": 1}, "bad/job.yaml")
    with pytest.raises(SpecError) as err:
        partitions_for(job, data_dir=str(tmp_path), quiet=True)
    assert str(err.value).startswith("bad/job.yaml: dataset: 'corra': unknown dataset")


def test_synthetic_through_load_dataset() -> None:
    g = load_dataset("synthetic", synthetic={"num_nodes": 500, "avg_degree": 6}, feature_dim=12,
                     seed=4)
    assert (g.num_nodes, g.num_edges, g.feature_dim) == (500, 3000, 12)
    assert np.array_equal(g.src, generate(500, avg_degree=6, feature_dim=12, seed=4).src)
    with pytest.raises(SpecError, match="unknown generator parameter") as err:
        load_dataset("synthetic", synthetic={"nodes": 5})
    assert err.value.field == "nodes"
    with pytest.raises(SpecError, match="homophily"):
        load_dataset("synthetic", synthetic={"num_nodes": 50, "homophily": 2.0})
    # command-line parameters are typed like a job's: no silent 2.5 -> 2 or 'true' strings
    from gnnsched.datasets.synthetic import parse_params

    for text, field in (("num_classes=2.5", "num_classes"), ("homophily=true", "homophily"),
                        ("power=inf", "power"), ("seed=1e3", "seed")):
        with pytest.raises(SpecError) as err:
            load_dataset("synthetic", synthetic=parse_params(f"num_nodes=50,{text}"))
        assert err.value.field == field


# --------------------------------------------------------------------------------------
# Malformed files


def _bad(**changes: object) -> dict[str, np.ndarray]:
    arrays = _tiny_arrays()
    for k, v in changes.items():
        if v is None:
            del arrays[k]
        else:
            arrays[k] = v  # type: ignore[assignment]
    return arrays


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"y": None}, "y", "is missing"),
        ({"edge_index": np.zeros((3, 2), np.int64)}, "edge_index", "shape"),
        ({"edge_index": np.array([[0], [9]], np.int64)}, "edge_index", r"\[0, 4\)"),
        ({"edge_index": np.zeros((2, 2), np.float32)}, "edge_index", "integer"),
        ({"num_nodes": np.array([4, 4])}, "num_nodes", "scalar"),
        ({"x_shape": np.array([5, 3], np.int64)}, "x_shape", "num_nodes"),
        ({"x_indptr": np.array([0, 1, 2, 1, 3], np.int64)}, "x_indptr", "decreasing"),
        ({"x_data": np.ones(2, np.float32)}, "x_data", "values"),
        ({"x_indices": np.array([0, 1, 7], np.int32)}, "x_indices", "column"),
        ({"y": np.array([0, 1, 0], np.int64)}, "y", "shape"),
        ({"y": np.array([0, -1, 0, 0], np.int64)}, "y", ">= 0"),
        ({"train_mask": np.ones(4, np.int64)}, "train_mask", "bool"),
        ({"val_mask": np.ones((2, 3), bool)}, "val_mask", "shape"),
    ],
)
def test_malformed_npz(tmp_path: Path, changes: dict, field: str, message: str) -> None:
    path = _write(tmp_path / "bad.npz", _bad(**changes))
    with pytest.raises(SpecError, match=message) as err:
        load_npz(path)
    assert err.value.field == field
    assert err.value.source == str(path)
    assert str(path) in str(err.value)


def test_pickle_and_garbage_refused(tmp_path: Path) -> None:
    arrays = _tiny_arrays()
    arrays["y"] = np.array([0, 1, "x", None], dtype=object)
    path = tmp_path / "pickled.npz"
    np.savez(path, **arrays)  # object arrays are stored with pickle
    with pytest.raises(SpecError, match="without pickle") as err:
        load_npz(path)
    assert err.value.field == "y"

    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(SpecError, match="not a readable .npz"):
        load_npz(junk)
    with pytest.raises(SpecError, match="file not found"):
        load_npz(tmp_path / "absent.npz")


def test_multi_split_masks(tmp_path: Path) -> None:
    arrays = _tiny_arrays()
    for key in ("train_mask", "val_mask", "test_mask"):
        arrays[key] = np.stack([arrays[key], np.roll(arrays[key], 1)])
    path = _write(tmp_path / "two.npz", arrays)
    assert load_npz(path, split=1).train_mask.tolist() == [False, True, False, False]
    with pytest.raises(SpecError, match="split 2 is out of range") as err:
        load_npz(path, split=2)
    assert err.value.valid == "0..1"


# --------------------------------------------------------------------------------------
# Generator


def test_generator_size_and_shape() -> None:
    g = generate(3000, avg_degree=10, num_classes=5, feature_dim=7, seed=1)
    assert isinstance(g, Graph)
    assert g.num_nodes == 3000 and g.num_edges == 30000
    assert g.features.shape == (3000, 7) and g.features.dtype == np.float32
    assert g.num_classes == 5 and set(np.unique(g.labels).tolist()) == set(range(5))
    key = g.src * g.num_nodes + g.dst
    assert np.all(np.diff(key) > 0)  # sorted, no duplicates
    assert np.array_equal(np.sort(g.dst * g.num_nodes + g.src), key)  # symmetric
    assert not np.any(g.src == g.dst)
    masks = np.stack([g.train_mask, g.val_mask, g.test_mask])
    assert np.all(masks.sum(0) == 1)
    assert (g.train_mask.sum(), g.val_mask.sum()) == (300, 300)
    # Degrees are skewed (power law) rather than Poisson-like.
    deg = np.bincount(g.src, minlength=g.num_nodes)
    assert deg.max() > 8 * deg.mean()


def test_generator_deterministic_per_seed() -> None:
    a, b, c = generate(2000, seed=7), generate(2000, seed=7), generate(2000, seed=8)
    for attr in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr
    assert not np.array_equal(a.labels, c.labels)


def test_homophily_knob() -> None:
    measured = []
    for h in (0.1, 0.3, 0.5, 0.7, 0.9):
        g = generate(4000, avg_degree=10, homophily=h, feature_dim=4, seed=2)
        measured.append(g.edge_homophily())
        assert abs(measured[-1] - h) < 0.05, (h, measured[-1])
    assert measured == sorted(measured)


def test_features_carry_the_label() -> None:
    g = generate(2000, avg_degree=4, num_classes=4, feature_dim=16, feature_noise=0.5, seed=0)
    means = np.stack([g.features[g.labels == c].mean(0) for c in range(4)])
    nearest = np.argmin(((g.features[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == g.labels) > 0.95


def test_generator_rejects_bad_arguments() -> None:
    for kwargs in ({"num_nodes": 1}, {"num_nodes": 10, "power": 1.0},
                   {"num_nodes": 10, "homophily": -0.1}, {"num_nodes": 10, "avg_degree": 10},
                   {"num_nodes": 10, "train_frac": 0.8, "val_frac": 0.3}):
        with pytest.raises(ValueError):
            generate(**kwargs)  # type: ignore[arg-type]
