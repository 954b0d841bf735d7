"""Graphs for gnnsched: real datasets from ``.npz`` files, a seeded synthetic generator, and
METIS/random partitioning into DGL's distributed partition format.

``load_dataset(name)`` resolves ``name`` in this order:

1. ``"synthetic"``: :func:`generate` with the keyword arguments in ``synthetic``;
2. a path to an existing ``.npz`` file;
3. ``NAME.npz`` in the data directories: the ``data_dir`` argument, then the environment
   variable ``GNNSCHED_DATA_DIR``, then ``../shared/datasets`` beside the repository root;
4. a dataset bundled with the package (``cora``), so tests run with no data directory.
"""

from __future__ import annotations

import inspect
import os
from importlib import resources
from pathlib import Path
from typing import Any

from gnnsched.spec import SYNTHETIC_DEFAULTS, SpecError, check_synthetic

from .chunked import ChunkedGraph, is_chunked, write_chunked
from .npz import Graph, load_npz, random_projection, scale_features
from .partition import (
    LocalPart,
    PartitionReport,
    PartitionSet,
    open_partitions,
    partition_graph,
    run_partition,
)
from .synthetic import generate

DATA_DIR_ENV = "GNNSCHED_DATA_DIR"
SYNTHETIC_DEFAULT_NODES = SYNTHETIC_DEFAULTS["num_nodes"]
_REPO_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

__all__ = [
    "ChunkedGraph", "Graph", "LocalPart", "PartitionReport", "PartitionSet", "available_datasets",
    "bundled_datasets", "data_dirs", "generate", "load_dataset", "load_npz",
    "is_chunked", "open_partitions", "partition_graph", "random_projection", "run_partition",
    "write_chunked",
]


def data_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The directories searched for ``NAME.npz``, in order (only those that exist)."""
    candidates: list[Path] = []
    if data_dir is not None:
        candidates.append(Path(data_dir))
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        candidates.append(Path(env))
    candidates.append(_REPO_SHARED)
    seen: list[Path] = []
    for c in candidates:
        if c.is_dir() and c.resolve() not in [s.resolve() for s in seen]:
            seen.append(c)
    return seen


def bundled_datasets() -> dict[str, Path]:
    """Datasets shipped inside the package (``datasets/data/*.npz``)."""
    root = resources.files(__name__) / "data"
    out: dict[str, Path] = {}
    if root.is_dir():
        for entry in root.iterdir():
            if entry.name.endswith(".npz"):
                out[entry.name[:-4]] = Path(str(entry))
    return dict(sorted(out.items()))


def available_datasets(data_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Every loadable dataset name and the file it resolves to (first match wins)."""
    out: dict[str, Path] = {}
    for d in data_dirs(data_dir):
        for f in sorted(d.glob("*.npz")):
            out.setdefault(f.stem, f)
    for name, path in bundled_datasets().items():
        out.setdefault(name, path)
    return out


def _load_chunked(path: Path, split: int, feature_dim: int | None, seed: int,
                  normalize: str) -> Graph:
    """A chunked graph folder held whole (where it fits), with the job's feature settings."""
    if split != 0:
        raise SpecError(str(path), "split", f"a chunked graph holds one split, got {split}",
                        "0")
    graph = ChunkedGraph.open(path).to_graph()
    width = graph.feature_dim
    if feature_dim is not None and feature_dim != width:
        graph.features = random_projection(graph.features, int(feature_dim), seed)
    graph.features = scale_features(graph.features, normalize)
    graph.meta.update(split=0, raw_feature_dim=width, seed=seed, normalize=normalize,
                      projected=feature_dim is not None and feature_dim != width)
    return graph


def load_dataset(
    name: str,
    *,
    data_dir: str | os.PathLike | None = None,
    split: int = 0,
    feature_dim: int | None = None,
    seed: int = 0,
    synthetic: dict[str, Any] | None = None,
    normalize: str = "none",
) -> Graph:
    """Load a dataset by name or path, or generate a synthetic one (see the module docstring).

    ``feature_dim`` projects real features (seeded by ``seed``) or sets the synthetic width;
    ``synthetic`` holds :func:`generate` keyword arguments (``num_nodes`` defaults to
    10,000; ``seed`` and ``feature_dim`` default to the arguments here); ``normalize`` is the
    job's ``features.normalize`` (none, row, standard).
    """
    if name == "synthetic":
        params = dict(synthetic or {})
        valid = [p for p in inspect.signature(generate).parameters]
        for key in params:
            if key not in valid:
                raise SpecError("synthetic", key, "unknown generator parameter", ", ".join(valid))
        params = check_synthetic(params)
        params.setdefault("num_nodes", SYNTHETIC_DEFAULT_NODES)
        params.setdefault("seed", seed)
        if feature_dim is not None:
            params.setdefault("feature_dim", feature_dim)
        try:
            graph = generate(**params)
        except (TypeError, ValueError) as exc:
            raise SpecError("synthetic", "", str(exc)) from None
        if normalize != "none":
            graph.features = scale_features(graph.features, normalize)
        graph.meta["normalize"] = normalize
        return graph
    if synthetic:
        raise SpecError(name, "synthetic", "generator parameters given for a real dataset",
                        "use name='synthetic'")

    path = Path(name).expanduser()
    if path.is_dir() and is_chunked(path):  # DGL's chunked graph format (metadata.json)
        return _load_chunked(path, split, feature_dim, seed, normalize)
    if path.is_file():
        return load_npz(path, split=split, feature_dim=feature_dim, seed=seed,
                        normalize=normalize)
    found = available_datasets(data_dir)
    key = path.stem if path.suffix == ".npz" and path.name == name else name
    if key in found:
        return load_npz(found[key], split=split, feature_dim=feature_dim, seed=seed, name=key,
                        normalize=normalize)
    if path.suffix == ".npz":  # a path that does not exist: say so, naming the path
        return load_npz(path, split=split, feature_dim=feature_dim, seed=seed,
                        normalize=normalize)
    searched = ", ".join(str(d) for d in data_dirs(data_dir)) or "no data directory exists"
    raise SpecError(
        name, "dataset", f"unknown dataset (searched: {searched}; set --data-dir or "
        f"{DATA_DIR_ENV})", ", ".join([*found, "synthetic", "a path to a .npz file"]),
    )
