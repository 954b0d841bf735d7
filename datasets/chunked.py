"""DGL's chunked graph format: a graph as ``metadata.json`` plus edge and node-data chunks.

What DistDGL's distributed pre-processing reads (``dgl/tools/chunk_graph.py`` writes it), so a
user with a graph too large for one file or one machine already has it. For a homogeneous
graph (one node type ``_N``, one edge type ``_N:_E:_N``)::

    metadata.json   {"graph_name", "node_type": ["_N"], "num_nodes_per_chunk": [[n0, n1, ..]],
                     "edge_type": ["_N:_E:_N"], "num_edges_per_chunk": [[e0, e1, ..]],
                     "edges": {"_N:_E:_N": {"format": {"name": "numpy"|"csv", ...},
                                            "data": ["edges/part0.npy", ...]}},
                     "node_data": {"_N": {"feat": {"format": {"name": "numpy"},
                                                   "data": [...]}, "label": ..., ...}},
                     "edge_data": {}}

Edge chunks are ``[e_i, 2]`` integer arrays (numpy) or ``src dst`` lines (csv, with the
format's ``delimiter``); node-data chunk ``i`` holds the rows of the ``n_i`` nodes after
those of the chunks before it. gnnsched reads ``feat`` (float ``[n_i, F]``), ``label``
(integer ``[n_i]``) and ``train_mask`` / ``val_mask`` / ``test_mask`` (bool or 0/1
``[n_i]``). :meth:`ChunkedGraph.open` checks everything it can without reading the data
(every file there, every chunk's dtype and shape against the metadata, from the ``.npy``
headers) and names the file and field of what is wrong; :meth:`ChunkedGraph.edges` then
reads one chunk at a time (ids checked per chunk), so nothing needs the whole graph.
:func:`write_chunked` converts a :class:`~.npz.Graph` (``gnnsched chunk``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.datasets.npz import Graph
from gnnsched.spec import SpecError

METADATA = "metadata.json"
NTYPE, ETYPE = "_N", "_N:_E:_N"  # DGL's names of a homogeneous graph's types
NODE_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask")
FIX = "a folder made by `gnnsched chunk` or DGL's chunk_graph (metadata.json + chunks)"


@dataclass(frozen=True)
class Chunks:
    """One array's chunks: the files and how they are stored."""

    files: tuple[Path, ...]
    fmt: str  # numpy | csv
    delimiter: str = " "


def _shape(path: Path, field: str) -> tuple[np.dtype, tuple[int, ...]]:
    """A ``.npy`` file's dtype and shape from its header (nothing else read)."""
    if not path.is_file():
        raise SpecError(str(path), "", f"is missing ({field} names it)", FIX)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise SpecError(str(path), "", f"is not a readable .npy array ({exc})", FIX) from None
    return arr.dtype, tuple(arr.shape)


class ChunkedGraph:
    """A chunked graph folder, checked at :meth:`open`; its chunks read one at a time."""

    def __init__(self, root: Path, meta: dict[str, Any], nodes: list[int], edges: list[int],
                 edge_chunks: Chunks, node_data: dict[str, Chunks]) -> None:
        self.root, self.meta = root, meta
        self.nodes_per_chunk, self.edges_per_chunk = nodes, edges
        self.edge_chunks, self.node_data = edge_chunks, node_data
        self.num_nodes, self.num_edges = sum(nodes), sum(edges)
        self.name = str(meta.get("graph_name") or root.name)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, folder: str | Path) -> ChunkedGraph:
        root = Path(folder)
        path = root / METADATA
        src = str(path)
        if not path.is_file():
            raise SpecError(str(root), METADATA, "is missing", FIX)
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SpecError(src, "", f"is not JSON ({exc})", FIX) from None
        if not isinstance(meta, dict):
            raise SpecError(src, "", "must be a JSON object", FIX)
        if meta.get("node_type") != [NTYPE] or meta.get("edge_type") != [ETYPE]:
            raise SpecError(src, "node_type", f"node_type {meta.get('node_type')!r} / "
                            f"edge_type {meta.get('edge_type')!r}: gnnsched trains homogeneous "
                            "graphs", f'["{NTYPE}"] and ["{ETYPE}"]')
        nodes = cls._counts(src, meta, "num_nodes_per_chunk")
        edges = cls._counts(src, meta, "num_edges_per_chunk")
        ec = cls._chunks(root, src, meta.get("edges", {}), ETYPE, f"edges.{ETYPE}", len(edges))
        nd_all = meta.get("node_data", {})
        nd = nd_all.get(NTYPE, {}) if isinstance(nd_all, dict) else None
        if not isinstance(nd, dict):
            raise SpecError(src, "node_data", "must map node types to their arrays", FIX)
        missing = [k for k in NODE_KEYS if k not in nd]
        if missing:
            raise SpecError(src, f"node_data.{NTYPE}.{missing[0]}", "is missing (required)",
                            ", ".join(NODE_KEYS))
        data = {k: cls._chunks(root, src, nd, k, f"node_data.{NTYPE}.{k}", len(nodes))
                for k in NODE_KEYS}
        g = cls(root, meta, nodes, edges, ec, data)
        g._check_shapes(src)
        return g

    @staticmethod
    def _counts(src: str, meta: dict[str, Any], key: str) -> list[int]:
        v = meta.get(key)
        if not (isinstance(v, list) and len(v) == 1 and isinstance(v[0], list) and v[0]
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                        for x in v[0])):
            raise SpecError(src, key, f"must be [[count per chunk, ...]] of one type, got "
                            f"{str(v)[:80]}", "non-negative integers, one list")
        return list(v[0])

    @staticmethod
    def _chunks(root: Path, src: str, table: Any, key: str, field: str, n: int) -> Chunks:
        spec = table.get(key) if isinstance(table, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("data"), list):
            raise SpecError(src, field, "is missing or has no 'data' list of files", FIX)
        fmt = spec.get("format", {}) if isinstance(spec.get("format", {}), dict) else {}
        name = fmt.get("name", "numpy")
        if name not in ("numpy", "csv") or (name == "csv" and key in NODE_KEYS):
            raise SpecError(src, f"{field}.format.name", f"unsupported format {name!r}",
                            "numpy (csv for edges)")
        files = tuple((root / f) if not Path(f).is_absolute() else Path(f)
                      for f in spec["data"])
        if len(files) != n:
            raise SpecError(src, f"{field}.data", f"lists {len(files)} file(s) for {n} "
                            "chunk(s)", "one file per chunk")
        for f in files:
            if not f.is_file():
                raise SpecError(str(f), "", f"is missing ({field} names it)", FIX)
        return Chunks(files, name, str(fmt.get("delimiter", " ")))

    def _check_shapes(self, src: str) -> None:
        """Every numpy chunk's dtype and shape against the metadata (headers only)."""
        if self.edge_chunks.fmt == "numpy":
            for f, e in zip(self.edge_chunks.files, self.edges_per_chunk):
                dt, sh = _shape(f, f"edges.{ETYPE}")
                if dt.kind not in "iu" or sh != (e, 2):
                    raise SpecError(str(f), "", f"must be an integer [{e}, 2] array of "
                                    f"(src, dst) (num_edges_per_chunk), got {dt} {list(sh)}")
        width = None
        for key, ch in self.node_data.items():
            for f, n in zip(ch.files, self.nodes_per_chunk):
                dt, sh = _shape(f, f"node_data.{NTYPE}.{key}")
                if key == "feat":
                    ok = dt.kind == "f" and len(sh) == 2 and sh[0] == n and \
                        (width is None or sh[1] == width)
                    width = sh[1] if len(sh) == 2 else width
                    want = f"a float [{n}, F] array (the same F in every chunk)"
                elif key == "label":
                    ok, want = dt.kind in "iu" and sh == (n,), f"an integer [{n}] array"
                else:
                    ok, want = dt.kind in "biu" and sh == (n,), f"a bool or 0/1 [{n}] array"
                if not ok:
                    raise SpecError(str(f), "", f"{key} chunk must be {want} "
                                    f"(num_nodes_per_chunk), got {dt} {list(sh)}")
        self.feature_dim = int(width or 0)

    # ------------------------------------------------------------------ reading
    def edges(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(src, dst) of one chunk at a time, ids checked against the node count."""
        ch = self.edge_chunks
        for f, e in zip(ch.files, self.edges_per_chunk):
            if ch.fmt == "numpy":
                arr = np.load(f, allow_pickle=False)
            else:
                try:
                    arr = np.loadtxt(f, dtype=np.int64, delimiter=None if ch.delimiter == " "
                                     else ch.delimiter, ndmin=2)
                except ValueError as exc:
                    raise SpecError(str(f), "", f"is not 'src{ch.delimiter}dst' integer "
                                    f"lines ({exc})") from None
                if arr.size == 0:
                    arr = arr.reshape(0, 2)
                if arr.shape != (e, 2):
                    raise SpecError(str(f), "", f"must hold {e} 'src dst' lines "
                                    f"(num_edges_per_chunk), got shape {list(arr.shape)}")
            arr = arr.astype(np.int64, copy=False)
            if arr.size and (arr.min() < 0 or arr.max() >= self.num_nodes):
                raise SpecError(str(f), "", f"node ids must lie in [0, {self.num_nodes}), got "
                                f"[{arr.min()}, {arr.max()}]")
            yield np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1])

    def node_chunks(self, key: str) -> Iterator[np.ndarray]:
        """Node array ``key`` one chunk at a time (memory-mapped)."""
        for f in self.node_data[key].files:
            yield np.load(f, mmap_mode="r", allow_pickle=False)

    def nbytes(self) -> int:
        """The bytes of the graph held whole (what :meth:`to_graph` allocates)."""
        return self.num_edges * 16 + self.num_nodes * (4 * self.feature_dim + 8 + 3)

    def to_graph(self, limit_bytes: int | None = None) -> Graph:
        """The whole graph in memory, where it fits: refused, naming the bytes, above
        ``limit_bytes`` (default: the memory available now)."""
        need = self.nbytes()
        if limit_bytes is None:
            import psutil

            limit_bytes = int(psutil.virtual_memory().available)
        if need > limit_bytes:
            raise SpecError(str(self.root), "", f"the whole graph needs {need / 1e9:.2f} GB in "
                            f"memory, more than the {limit_bytes / 1e9:.2f} GB available",
                            "a machine with more memory, or a path that reads chunk by chunk")
        src, dst = zip(*self.edges()) if self.edges_per_chunk else ((), ())
        cat = {k: np.concatenate([np.asarray(c) for c in self.node_chunks(k)])
               for k in NODE_KEYS}
        labels = cat["label"].astype(np.int64, copy=False)
        n = self.num_nodes
        if n and labels.min() < 0:
            raise SpecError(str(self.node_data["label"].files[0]), "",
                            f"labels must be >= 0, got {labels.min()}")
        extra = self.meta.get("gnnsched", {}) if isinstance(self.meta.get("gnnsched"),
                                                              dict) else {}
        return Graph(
            name=self.name, num_nodes=n,
            src=np.concatenate(src) if src else np.zeros(0, np.int64),
            dst=np.concatenate(dst) if dst else np.zeros(0, np.int64),
            features=np.ascontiguousarray(cat["feat"], dtype=np.float32), labels=labels,
            train_mask=cat["train_mask"].astype(bool), val_mask=cat["val_mask"].astype(bool),
            test_mask=cat["test_mask"].astype(bool),
            num_classes=int(extra.get("num_classes") or (int(labels.max()) + 1 if n else 0)),
            meta={"source": str(self.root), "chunks": len(self.nodes_per_chunk)})


def _split(total: int, chunks: int) -> list[int]:
    """``total`` items in ``chunks`` nearly equal runs (DGL's chunk_graph rule)."""
    return [total // chunks + (i < total % chunks) for i in range(chunks)]


def write_chunked(graph: Graph, out: str | Path, chunks: int) -> Path:
    """``graph`` as a chunked folder of ``chunks`` chunks (numpy edges and node data); an
    ``out`` that already holds a ``metadata.json`` is refused. Returns the metadata's path."""
    root = Path(out)
    if chunks < 1:
        raise SpecError("--chunks", "", f"must be >= 1, got {chunks}")
    if (root / METADATA).exists():
        raise SpecError(str(root), METADATA, "already exists", "another --out, or remove it")
    (root / "edges").mkdir(parents=True, exist_ok=True)
    (root / "node_data").mkdir(exist_ok=True)
    ns, es = _split(graph.num_nodes, chunks), _split(graph.num_edges, chunks)
    edge_files, lo = [], 0
    for i, e in enumerate(es):
        name = f"edges/part{i}.npy"
        np.save(root / name, np.stack([graph.src[lo:lo + e], graph.dst[lo:lo + e]], axis=1)
                .astype(np.int64))
        edge_files.append(name)
        lo += e
    arrays = {"feat": graph.features, "label": graph.labels, "train_mask": graph.train_mask,
              "val_mask": graph.val_mask, "test_mask": graph.test_mask}
    node_data: dict[str, Any] = {}
    for key, arr in arrays.items():
        files, lo = [], 0
        for i, n in enumerate(ns):
            name = f"node_data/{key}-part{i}.npy"
            np.save(root / name, np.ascontiguousarray(arr[lo:lo + n]))
            files.append(name)
            lo += n
        node_data[key] = {"format": {"name": "numpy"}, "data": files}
    meta = {"graph_name": graph.name, "node_type": [NTYPE], "num_nodes_per_chunk": [ns],
            "edge_type": [ETYPE], "num_edges_per_chunk": [es],
            "edges": {ETYPE: {"format": {"name": "numpy"}, "data": edge_files}},
            "node_data": {NTYPE: node_data}, "edge_data": {},
            "gnnsched": {"num_classes": int(graph.num_classes)}}
    tmp = root / f".{METADATA}.tmp"
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    tmp.replace(root / METADATA)  # last: a folder with metadata.json is complete
    return root / METADATA


def is_chunked(path: str | Path) -> bool:
    return (Path(path) / METADATA).is_file()


__all__ = ["ChunkedGraph", "METADATA", "is_chunked", "write_chunked"]
