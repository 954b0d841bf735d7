"""Reading a partition directory: :func:`open_partitions` checks it and returns a
:class:`PartitionSet`, whose :meth:`~PartitionSet.load_part` gives a store its
:class:`LocalPart`.

The files are DGL's format (``NAME.json`` plus ``partK/graph.dgl``, ``node_feat.dgl``,
``edge_feat.dgl``) with gnnsched's ``gnnsched.json`` beside them: the counts the schedulers
need without loading any graph, and a sha256 for every file, so that a store serving a
corrupted or half-copied partition is caught at open time with the file named
(:func:`verify_checksums`), instead of training on garbage.

Node ids: DGL renumbers nodes so each part owns a contiguous range of *new* ids.
``orig_nids.npy`` (as DGL returns it) maps new id -> original id; ``node_part.npy`` maps
original id -> part; ``splits.npy`` (written since the evaluation sample became global)
holds one byte per original id, the bits 1/2/4 saying train/val/test, so a coordinator knows
every part's evaluation nodes without loading a part (:meth:`PartitionSet.split_ids`). Edges
are owned by the part of their destination node (DGL stores the
in-edges of its inner nodes, with the sources outside the part as halo nodes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from gnnsched.spec import SpecError

from .npz import MASK_KEYS, Graph

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from gnnsched.compat import dgl

META_FILE = "gnnsched.json"
NODE_PART_FILE = "node_part.npy"
ORIG_NIDS_FILE = "orig_nids.npy"
SPLITS_FILE = "splits.npy"
SPLIT_BITS = {"train": 1, "val": 2, "test": 4}  # SPLITS_FILE's bit per phase
FORMAT = "gnnsched-partition"
FORMAT_VERSION = 1
NDATA = ("feat", "label", *MASK_KEYS)
_NTYPE = "_N"  # DGL's default node type; node features are stored as "_N/<name>"

T = TypeVar("T")


@dataclass
class LocalPart:
    """One partition as a graph store holds it.

    ``graph`` is DGL's local graph (inner nodes first, then halo nodes; ndata ``_ID`` holds
    new global ids, ``inner_node`` marks owned nodes). The node tensors cover inner nodes
    only, in the order of ``inner_new_ids`` / ``inner_orig_ids``.
    """

    part_id: int
    graph: dgl.DGLGraph
    book: Any  # dgl.distributed.GraphPartitionBook
    inner_local: torch.Tensor
    inner_new_ids: np.ndarray
    inner_orig_ids: np.ndarray
    features: torch.Tensor
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def num_inner(self) -> int:
        return int(self.inner_new_ids.shape[0])


def _only(type_map: dict[str, Any]) -> list[list[int]]:
    """The id ranges of the single node/edge type of a homogeneous graph."""
    return next(iter(type_map.values()))


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class _MetaField(Generic[T]):
    """A read-only field of ``gnnsched.json`` on a :class:`PartitionSet`, converted by ``kind``
    (one line per field instead of one property each)."""

    def __init__(self, key: str, kind: Callable[[Any], T]) -> None:
        self.key, self.kind = key, kind

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _MetaField[T]: ...

    @overload
    def __get__(self, obj: PartitionSet, owner: type | None = None) -> T: ...

    def __get__(self, obj: PartitionSet | None, owner: type | None = None
                ) -> T | _MetaField[T]:
        if obj is None:
            return self
        return self.kind(obj.meta[self.key])

    def __set__(self, obj: PartitionSet, value: Any) -> None:
        raise AttributeError(f"can't set attribute {self.name!r} (it is meta[{self.key!r}])")


@dataclass
class PartitionSet:
    """An on-disk partitioning, validated: counts from ``gnnsched.json``, data from DGL's files.

    ``node_part[orig_id]`` is the owning part; ``orig_nids[new_id]`` the original id of a
    renumbered node and ``new_nids[orig_id]`` the reverse.
    """

    root: Path
    meta: dict[str, Any]
    config: Path
    node_part: np.ndarray
    orig_nids: np.ndarray
    new_nids: np.ndarray = field(repr=False)
    dgl_meta: dict[str, Any] = field(default_factory=dict, repr=False)

    name = _MetaField("dataset", str)
    method = _MetaField("method", str)
    num_parts = _MetaField("num_parts", int)
    num_nodes = _MetaField("num_nodes", int)
    num_edges = _MetaField("num_edges", int)
    feature_dim = _MetaField("feature_dim", int)
    num_classes = _MetaField("num_classes", int)

    def part_nodes(self, i: int) -> np.ndarray:
        """Original ids of the nodes part ``i`` owns, in new-id order (no graph load)."""
        lo, hi = self.node_range(i)
        return self.orig_nids[lo:hi]

    def node_range(self, i: int) -> tuple[int, int]:
        """The contiguous range of new ids that part ``i`` owns."""
        if not self.dgl_meta:
            self.dgl_meta = json.loads(self.config.read_text())
        lo, hi = _only(self.dgl_meta["node_map"])[i]
        return int(lo), int(hi)

    def part_bytes(self) -> list[float]:
        """Bytes of the files each part's store loads (DGL's ``node_feats``, ``edge_feats``
        and ``part_graph``: features with labels and masks, and the graph structure): what
        a store's memory floor counts (:mod:`gnnsched.memory`)."""
        if not self.dgl_meta:
            self.dgl_meta = json.loads(self.config.read_text())
        out = []
        for i in range(self.num_parts):
            entry = self.dgl_meta.get(f"part-{i}")
            if not isinstance(entry, dict):
                raise SpecError(str(self.config), f"part-{i}", "is missing",
                                "a directory written by `gnnsched partition`")
            size = 0
            for key in ("node_feats", "edge_feats", "part_graph"):
                if entry.get(key):
                    f = self.config.parent / str(entry[key])
                    if not f.is_file():
                        raise SpecError(str(self.config), f"part-{i}.{key}",
                                        f"file {f} is missing", "re-run `gnnsched partition`")
                    size += f.stat().st_size
            out.append(float(size))
        return out

    def split_ids(self) -> dict[int, dict[str, np.ndarray]] | None:
        """Per part, the original ids of its train / val / test nodes, from ``splits.npy``
        without loading a part; None for a directory written before it existed (the
        stores still announce them)."""
        name = self.meta.get("splits")
        if not name:
            return None
        f = self.root / str(name)
        try:
            codes = np.load(f, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise SpecError(str(f), "", f"cannot be read ({exc})") from None
        if codes.shape != (self.num_nodes,) or codes.dtype != np.uint8:
            raise SpecError(str(f), "", f"must be a uint8 array of shape [{self.num_nodes}], "
                            f"got {codes.dtype} {codes.shape}", "re-run gnnsched partition")
        out: dict[int, dict[str, np.ndarray]] = {p: {} for p in range(self.num_parts)}
        for phase, bit in SPLIT_BITS.items():
            ids = np.flatnonzero(np.asarray(codes) & bit).astype(np.int64)
            owner = np.asarray(self.node_part)[ids]
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(self.num_parts + 1))
            for p in range(self.num_parts):
                out[p][phase] = ids[order[bounds[p]:bounds[p + 1]]]
        return out

    def load_part(self, i: int) -> LocalPart:
        """Load part ``i`` with DGL (``dgl.distributed.load_partition``)."""
        from gnnsched.compat import dgl

        if not 0 <= i < self.num_parts:
            raise SpecError(str(self.root), "part", f"part {i} does not exist",
                            f"0..{self.num_parts - 1}")
        try:
            local, node_feats, _, book, *_ = dgl.distributed.load_partition(str(self.config), i)
        except Exception as exc:  # DGL asserts or fails to parse: name the file
            raise SpecError(str(self.config), f"part-{i}", f"DGL could not load it ({exc})",
                            "re-run gnnsched partition") from None
        for key in NDATA:
            if f"{_NTYPE}/{key}" not in node_feats:
                raise SpecError(str(self.config), f"part-{i}.node_feats",
                                f"has no {key!r} tensor", ", ".join(NDATA))
        inner = local.ndata["inner_node"].bool()
        inner_local = inner.nonzero().flatten()
        inner_new = local.ndata[dgl.NID][inner].numpy().astype(np.int64)
        feats = {k: node_feats[f"{_NTYPE}/{k}"] for k in NDATA}
        return LocalPart(
            part_id=i, graph=local, book=book, inner_local=inner_local,
            inner_new_ids=inner_new, inner_orig_ids=self.orig_nids[inner_new],
            features=feats["feat"], labels=feats["label"],
            train_mask=feats["train_mask"].bool(), val_mask=feats["val_mask"].bool(),
            test_mask=feats["test_mask"].bool(),
        )

    def full_graph(self) -> Graph:
        """Reassemble the whole graph in original ids from the part files.

        Edges come back sorted by (src, dst), the ``.npz`` convention, so a graph loaded from
        a schema file round-trips exactly.
        """
        from gnnsched.compat import dgl

        n, f = self.num_nodes, self.feature_dim
        features = np.zeros((n, f), dtype=np.float32)
        labels = np.zeros(n, dtype=np.int64)
        masks = {k: np.zeros(n, dtype=bool) for k in MASK_KEYS}
        keys: list[np.ndarray] = []
        for i in range(self.num_parts):
            part = self.load_part(i)
            rows = part.inner_orig_ids
            features[rows] = part.features.numpy()
            labels[rows] = part.labels.numpy()
            for k in MASK_KEYS:
                masks[k][rows] = getattr(part, k).numpy()
            g = part.graph
            u, v = g.edges()
            own = g.edata["inner_edge"].bool() if "inner_edge" in g.edata else None
            if own is not None:
                u, v = u[own], v[own]
            gid = g.ndata[dgl.NID].numpy()
            src = self.orig_nids[gid[u.numpy()]]
            dst = self.orig_nids[gid[v.numpy()]]
            keys.append(src * n + dst)
        key = np.sort(np.concatenate(keys)) if keys else np.empty(0, np.int64)
        if key.shape[0] != self.num_edges:
            raise SpecError(str(self.root), "num_edges", f"parts hold {key.shape[0]} edges, "
                            f"{META_FILE} says {self.num_edges}", "re-run gnnsched partition")
        src, dst = np.divmod(key, n)
        return Graph(
            name=self.name, num_nodes=n, src=src, dst=dst, features=features, labels=labels,
            train_mask=masks["train_mask"], val_mask=masks["val_mask"],
            test_mask=masks["test_mask"], num_classes=self.num_classes,
            meta={"source": str(self.root), "split": self.meta.get("split", 0),
                  "partitioned": True},
        )

    def verify(self) -> None:
        """Re-hash every file listed in ``gnnsched.json``; SpecError naming the first bad one."""
        verify_checksums(self.root, self.meta)


def verify_checksums(root: str | Path, meta: dict[str, Any] | None = None, *,
                     parts: Collection[int] | None = None, shared: bool = True) -> int:
    """Re-hash partition files against the sha256 sums in ``gnnsched.json`` before trusting
    them; a SpecError names the first missing or corrupted file (in path order).

    ``parts``: only the files of these parts (``partN/...``), None: of every part; ``shared``:
    also the files outside the part folders (node map, DGL config). A store checks only what
    it loads, so the cost is spread over the stores. ``meta``: the already-read
    ``gnnsched.json``. Returns the bytes hashed."""
    root = Path(root)
    if meta is None:
        meta = json.loads((root / META_FILE).read_text())
    sums = meta.get("sha256")
    if not isinstance(sums, dict) or not sums:
        raise SpecError(str(root / META_FILE), "sha256", "is missing or empty",
                        "re-run gnnsched partition")
    folders = None if parts is None else {f"part{p}" for p in parts}
    hashed = 0
    for rel, expected in sorted(sums.items()):
        top = rel.split("/", 1)[0] if "/" in rel else None
        if not (shared if top is None else folders is None or top in folders):
            continue
        path = root / rel
        if not path.is_file():
            raise SpecError(str(path), "", "partition file is missing",
                            f"listed in {META_FILE}; restore it or re-run gnnsched partition")
        actual = sha256_file(path)
        if actual != expected:
            raise SpecError(str(path), "sha256", f"checksum mismatch: expected "
                            f"{expected[:16]}..., got {actual[:16]}... (corrupted or changed "
                            "after partitioning)", "re-run gnnsched partition")
        hashed += path.stat().st_size
    return hashed


def open_partitions(path: str | Path, *, verify: bool = True) -> PartitionSet:
    """Open a partition directory written by :func:`partition_graph`.

    With ``verify`` every file is re-hashed against ``gnnsched.json`` first (about 1 s/GB),
    so corruption is reported as a SpecError that names the file.
    """
    root = Path(path)
    if root.is_file():  # accept the gnnsched.json or the DGL json path as well
        root = root.parent
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise SpecError(str(meta_path), "", "not found: not a gnnsched partition directory",
                        "a directory written by `gnnsched partition`")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(str(meta_path), "", f"is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SpecError(str(meta_path), "format", "not a gnnsched partition file", FORMAT)
    for key in ("num_parts", "num_nodes", "num_edges", "feature_dim", "num_classes",
                "dgl_config", "dataset", "method"):
        if key not in meta:
            raise SpecError(str(meta_path), key, "is missing (required)")
    if verify:
        verify_checksums(root, meta)
    config = root / str(meta["dgl_config"])
    if not config.is_file():
        raise SpecError(str(config), "", "DGL partition config is missing")
    try:
        dgl_meta = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(str(config), "", f"is not valid JSON ({exc})") from None
    for key in ("num_parts", "num_nodes", "num_edges"):
        if dgl_meta.get(key) != meta[key]:
            raise SpecError(str(config), key, f"is {dgl_meta.get(key)!r} but {META_FILE} says "
                            f"{meta[key]!r}", "files from one partitioning run")
    n = int(meta["num_nodes"])
    arrays = {}
    for key, default in (("node_part", NODE_PART_FILE), ("orig_nids", ORIG_NIDS_FILE)):
        f = root / str(meta.get(key, default))
        try:
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise SpecError(str(f), "", f"cannot be read ({exc})") from None
        if arr.shape != (n,) or arr.dtype.kind not in "iu":
            raise SpecError(str(f), "", f"must be an integer array of shape [{n}], got "
                            f"{arr.dtype} {arr.shape}")
        arrays[key] = arr
    orig_nids = arrays["orig_nids"].astype(np.int64, copy=False)
    node_part = arrays["node_part"]
    if n and (node_part.min() < 0 or node_part.max() >= int(meta["num_parts"])):
        raise SpecError(str(root / NODE_PART_FILE), "", "part ids out of range",
                        f"0..{int(meta['num_parts']) - 1}")
    if n and (orig_nids.min() < 0 or orig_nids.max() >= n
              or not np.all(np.bincount(orig_nids, minlength=n) == 1)):
        raise SpecError(str(root / ORIG_NIDS_FILE), "", "is not a permutation of the node ids")
    new_nids = np.empty(n, dtype=np.int64)
    new_nids[orig_nids] = np.arange(n, dtype=np.int64)
    return PartitionSet(root=root, meta=meta, config=config, node_part=node_part,
                        orig_nids=orig_nids, new_nids=new_nids, dgl_meta=dgl_meta)


__all__ = ["FORMAT", "FORMAT_VERSION", "META_FILE", "NDATA", "NODE_PART_FILE",
           "ORIG_NIDS_FILE", "SPLITS_FILE", "SPLIT_BITS", "LocalPart", "PartitionSet", "open_partitions", "sha256_file",
           "verify_checksums"]
