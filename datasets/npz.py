"""The in-memory graph (:class:`Graph`) and a validating loader for the shared ``.npz`` schema.

The schema (see ``../shared/datasets/README.md``): ``num_nodes`` int64 scalar; ``edge_index``
int64 ``[2, E]`` (both directions stored, sorted by (src, dst)); node features as CSR
(``x_indptr`` ``[N+1]``, ``x_indices``, ``x_data`` float32, ``x_shape`` ``[2]``); ``y`` int64
``[N]``; ``train_mask``/``val_mask``/``test_mask`` bool ``[N]`` or ``[S, N]`` (row ``i`` is
split ``i``).

Every defect is reported as a :class:`~gnnsched.spec.SpecError` naming the file and the key,
because these files are user inputs: a truncated download must read as "edge_index: ..." and
not as an IndexError three modules later.

Features are kept raw (no row normalisation): normalisation is a modelling choice that
belongs to the training code, and raw values keep the stored data verifiable. Sparse
bag-of-words features can be too wide to densify (Coauthor Physics is 1.16 GB as dense
float32), so ``feature_dim`` projects them with a seeded Gaussian random projection computed
sparse @ dense; the full-width dense matrix never exists.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from gnnsched.spec import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from gnnsched.compat import dgl

REQUIRED_KEYS = (
    "num_nodes", "edge_index", "x_indptr", "x_indices", "x_data", "x_shape", "y",
    "train_mask", "val_mask", "test_mask",
)
MASK_KEYS = ("train_mask", "val_mask", "test_mask")


@dataclass
class Graph:
    """A homogeneous node-classification graph held as numpy arrays (original node ids).

    ``src``/``dst`` are directed edges (undirected graphs carry both directions). Features
    are dense float32 ``[N, F]``; the masks are the one split chosen at load time.
    """

    name: str
    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        """Number of directed edges."""
        return int(self.src.shape[0])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    def edge_homophily(self) -> float:
        """Fraction of edges whose endpoints share a label (NaN for an edgeless graph)."""
        if self.num_edges == 0:
            return float("nan")
        return float(np.mean(self.labels[self.src] == self.labels[self.dst]))

    def to_dgl(self) -> dgl.DGLGraph:
        """A DGLGraph with ndata ``feat``, ``label``, ``train_mask``, ``val_mask``, ``test_mask``.

        The tensors share memory with the numpy arrays (no copy of the features).
        """
        import torch

        from gnnsched.compat import dgl

        g = dgl.graph(
            (torch.from_numpy(self.src), torch.from_numpy(self.dst)), num_nodes=self.num_nodes
        )
        g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(self.features, np.float32))
        g.ndata["label"] = torch.from_numpy(np.ascontiguousarray(self.labels, np.int64))
        for key in MASK_KEYS:
            g.ndata[key] = torch.from_numpy(np.ascontiguousarray(getattr(self, key), bool))
        return g

    def summary(self) -> str:
        return (
            f"{self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges, "
            f"{self.feature_dim} features, {self.num_classes} classes, "
            f"train/val/test {int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
            f"{int(self.test_mask.sum())}"
        )


def random_projection(features: sp.csr_matrix, dim: int, seed: int) -> np.ndarray:
    """Project sparse features to ``dim`` columns with a seeded Gaussian matrix.

    Scaled by 1/sqrt(dim) so squared row norms are preserved in expectation
    (Johnson-Lindenstrauss); the product is sparse @ dense, so memory is N*dim, not N*F.
    """
    rng = np.random.default_rng(seed)
    proj = rng.standard_normal((features.shape[1], dim), dtype=np.float32)
    proj /= np.float32(np.sqrt(dim))
    out = features @ proj
    return np.ascontiguousarray(out, dtype=np.float32)


def _int_array(source: str, key: str, arr: np.ndarray, ndim: int) -> np.ndarray:
    if arr.dtype.kind not in "iu":
        raise SpecError(source, key, f"must be an integer array, got dtype {arr.dtype}", "int64")
    if arr.ndim != ndim:
        raise SpecError(source, key, f"must have {ndim} dimension(s), got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def row_normalize(x: sp.csr_matrix | np.ndarray) -> sp.csr_matrix | np.ndarray:
    """Each row divided by the sum of its absolute values (all-zero rows stay zero): raw
    bag-of-words counts become frequencies, so long documents do not dominate a layer."""
    if sp.issparse(x):
        sums = np.asarray(abs(x).sum(axis=1)).ravel()
        scale = np.divide(1.0, sums, out=np.zeros_like(sums, dtype=np.float64), where=sums > 0)
        return sp.diags(scale.astype(np.float32)) @ x
    sums = np.abs(x).sum(axis=1, keepdims=True)
    return np.divide(x, sums, out=np.zeros_like(x), where=sums > 0).astype(np.float32)


def standardize(x: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance per column (constant columns become 0)."""
    mean = x.mean(axis=0, dtype=np.float64)
    std = x.std(axis=0, dtype=np.float64)
    out = (x - mean) / np.where(std > 0, std, 1.0)
    return out.astype(np.float32)


def scale_features(features: np.ndarray, normalize: str) -> np.ndarray:
    """A job's ``features.normalize`` applied to dense features (see :mod:`gnnsched.spec`)."""
    if normalize == "row":
        return row_normalize(features)
    if normalize == "standard":
        return standardize(features)
    if normalize != "none":
        raise SpecError("features", "normalize", f"unknown value {normalize!r}",
                        "none, row, standard")
    return features


def load_npz(
    path: str | Path, *, split: int = 0, feature_dim: int | None = None, seed: int = 0,
    name: str | None = None, normalize: str = "none",
) -> Graph:
    """Load and validate one ``.npz`` graph file.

    ``split`` picks the row of ``[S, N]`` masks (must be 0 for single-split files);
    ``feature_dim`` (if given and different from the stored width) projects the sparse
    features to that width with a Gaussian random projection seeded by ``seed``;
    ``normalize`` (``none``, ``row``, ``standard``) scales them, rows before a projection
    (the counts are what needs it) and columns after it.
    """
    path = Path(path)
    source = str(path)
    data = _read_archive(path)
    n_arr = data["num_nodes"]
    if n_arr.shape != () or n_arr.dtype.kind not in "iu" or int(n_arr) < 0:
        raise SpecError(source, "num_nodes", f"must be a non-negative integer scalar, got "
                        f"{n_arr.dtype} shape {n_arr.shape}")
    n = int(n_arr)

    edge_index = _int_array(source, "edge_index", data["edge_index"], 2)
    if edge_index.shape[0] != 2:
        raise SpecError(source, "edge_index", f"must have shape [2, E], got {edge_index.shape}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise SpecError(source, "edge_index", f"node ids must lie in [0, {n}), got "
                        f"[{edge_index.min()}, {edge_index.max()}]")
    x = _sparse_features(source, data, n)
    width = int(x.shape[1])
    labels = _int_array(source, "y", data["y"], 1)
    if labels.shape != (n,):
        raise SpecError(source, "y", f"must have shape [{n}], got {labels.shape}")
    if n and labels.min() < 0:
        raise SpecError(source, "y", f"labels must be >= 0, got {labels.min()}")
    masks = _masks(source, data, n, split)

    if normalize == "row":
        x = sp.csr_matrix(row_normalize(x))
    if feature_dim is not None and feature_dim != width:
        if feature_dim < 1:
            raise SpecError(source, "feature_dim", f"must be >= 1, got {feature_dim}")
        features = random_projection(x, int(feature_dim), seed)
        projected = True
    else:
        features = x.toarray().astype(np.float32, copy=False)
        projected = False
    if normalize != "row":
        features = scale_features(features, normalize)

    return Graph(
        name=name or path.stem,
        num_nodes=n,
        src=np.ascontiguousarray(edge_index[0]),
        dst=np.ascontiguousarray(edge_index[1]),
        features=features,
        labels=labels,
        train_mask=masks["train_mask"],
        val_mask=masks["val_mask"],
        test_mask=masks["test_mask"],
        num_classes=int(labels.max()) + 1 if n else 0,
        meta={"source": source, "split": split, "raw_feature_dim": width,
              "projected": projected, "seed": seed, "normalize": normalize},
    )


def _read_archive(path: Path) -> dict[str, np.ndarray]:
    """The schema's arrays from an ``.npz`` file (no pickle), or a SpecError naming the
    file and the key."""
    source = str(path)
    if not path.is_file():
        raise SpecError(source, "", "file not found", "a .npz file in the shared dataset schema")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise SpecError(source, "", f"not a readable .npz archive ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise SpecError(source, "", "is a single .npy array, not an .npz archive")
    with archive:
        missing = [k for k in REQUIRED_KEYS if k not in archive.files]
        if missing:
            raise SpecError(source, missing[0], "is missing (required)", ", ".join(REQUIRED_KEYS))
        data: dict[str, np.ndarray] = {}
        for key in REQUIRED_KEYS:
            try:
                data[key] = archive[key]
            except ValueError as exc:  # object arrays need pickle, which is refused
                raise SpecError(source, key, f"cannot be read without pickle ({exc})",
                                "numeric arrays only") from None
            except (OSError, zipfile.BadZipFile, EOFError) as exc:
                raise SpecError(source, key, f"is corrupt ({exc})") from None
    return data


def _sparse_features(source: str, data: dict[str, np.ndarray], n: int) -> sp.csr_matrix:
    """The stored CSR features ``[n, F]`` (float32), checked."""
    shape = _int_array(source, "x_shape", data["x_shape"], 1)
    if shape.shape != (2,) or shape[0] != n or shape[1] < 1:
        raise SpecError(source, "x_shape", f"must be [num_nodes={n}, F>=1], got {shape.tolist()}")
    indptr = _int_array(source, "x_indptr", data["x_indptr"], 1)
    indices = _int_array(source, "x_indices", data["x_indices"], 1)
    values = data["x_data"]
    if values.dtype.kind != "f" or values.ndim != 1:
        raise SpecError(source, "x_data", f"must be a 1-D float array, got {values.dtype} "
                        f"shape {values.shape}", "float32")
    if indptr.shape != (n + 1,):
        raise SpecError(source, "x_indptr", f"must have shape [{n + 1}], got {indptr.shape}")
    nnz = indices.shape[0]
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
        raise SpecError(source, "x_indptr", f"must rise from 0 to len(x_indices)={nnz} "
                        "without decreasing")
    if values.shape[0] != nnz:
        raise SpecError(source, "x_data", f"must have len(x_indices)={nnz} values, got "
                        f"{values.shape[0]}")
    if nnz and (indices.min() < 0 or indices.max() >= shape[1]):
        raise SpecError(source, "x_indices", f"column ids must lie in [0, {shape[1]})")
    return sp.csr_matrix((values.astype(np.float32, copy=False), indices, indptr),
                         shape=(n, int(shape[1])))


def _masks(source: str, data: dict[str, np.ndarray], n: int, split: int
           ) -> dict[str, np.ndarray]:
    """The train/val/test masks of split ``split`` (one row of ``[S, N]`` masks)."""
    masks: dict[str, np.ndarray] = {}
    for key in MASK_KEYS:
        mask = data[key]
        if mask.dtype != np.bool_:
            raise SpecError(source, key, f"must be bool, got {mask.dtype}", "bool")
        if mask.ndim == 1 and mask.shape == (n,):
            splits = 1
            row = mask
        elif mask.ndim == 2 and mask.shape[1] == n:
            splits = mask.shape[0]
            row = mask[split] if 0 <= split < splits else None
        else:
            raise SpecError(source, key, f"must have shape [{n}] or [S, {n}], got {mask.shape}")
        if row is None or (mask.ndim == 1 and split != 0):
            raise SpecError(source, key, f"split {split} is out of range",
                            f"0..{splits - 1}")
        masks[key] = np.ascontiguousarray(row)
    return masks
