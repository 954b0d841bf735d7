"""Using a trained model: full-neighbour, layer-wise inference and its outputs.

Why layer-wise: a mini-batch forward of every node recomputes each node's neighbourhood
once per seed that reaches it (``fanout^L`` rows per node); layer-wise inference computes
layer ``l`` once for every node, in chunks of destination nodes, from *all* in-neighbours'
layer ``l-1`` rows, so each layer reads each edge once (DistDGL's
``examples/distributed/graphsage`` does the same). Full neighbourhoods also make the test
metric exact, not the sampled estimate ``gnnsched train`` reports.

The maths is the whole graph's: a layer's output for node ``v`` depends only on ``v``'s
in-edges and its neighbours' rows, never on how nodes were chunked, so the single-process
pass here (:func:`reference_inference`) and the distributed one
(:mod:`.inference_run`, one ``infer`` role per store machine, :mod:`.inference_role`) give
the same scores. GraphConv's symmetric normalisation uses the graph's out-degrees (not a
chunk's), as ``dgl.nn.GraphConv`` does on the full graph.

This module also checks what a prediction starts from, before any work: the run folder and
its checkpoint (:func:`load_trained`), the partitions (:func:`check_partitions`) and the
output folder (:func:`check_out_dir`), each refusal a :class:`~gnnsched.spec.SpecError`
naming the file and the fix; and it writes the outputs (:func:`write_outputs`): per
partition, in original node ids, ``part{p}-nodes.npy``, ``-pred.npy`` (class),
``-probs.npy`` (softmax scores) and optionally ``-emb.npy`` (the last hidden layer), with
``manifest.json``, all staged in a sibling folder renamed into place at the end, so a folder
named ``--out`` is either absent or complete.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gnnsched.runtime import checkpoints
from gnnsched.runtime.model import GNN, Block, aggregate, build_model
from gnnsched.spec import SpecError

MANIFEST = "manifest.json"
FORMAT = "gnnsched-predictions"
VERSION = 1
CHUNK_NODES = 4096  # destination nodes per chunk: bounds the gathered rows per step
# the job fields a checkpoint's model and a partition folder must agree on
MODEL_KEYS = ("model", "hidden", "fanouts")
DATA_KEYS = ("dataset", "num_parts", "part_method", "split", "feature_dim", "normalize")
_FIX_RUN = "the --out folder of a finished `gnnsched train`"


# --------------------------------------------------------------------------------------
# The trained model, from a run folder


@dataclass
class TrainedModel:
    """A checkpoint's model and the job it was trained for (``job``: the job's dict)."""

    run_dir: Path
    checkpoint: Path
    job: dict[str, Any]
    state: dict[str, Tensor]
    seq: int
    epoch: int
    kind: str = ""
    dims: list[int] = field(default_factory=list)  # in, hidden..., classes
    heads: int = 1

    @property
    def layers(self) -> int:
        return len(self.dims) - 1

    @property
    def in_dim(self) -> int:
        return self.dims[0]

    @property
    def num_classes(self) -> int:
        return self.dims[-1]

    def build(self) -> GNN:
        """The runtime's model with the checkpoint's weights, in eval mode (no dropout)."""
        model = build_model(self.kind, self.in_dim, int(self.job["hidden"]), self.num_classes,
                            self.layers, float(self.job.get("dropout", 0.0)))
        model.load_state_dict(self.state)
        return model.eval()

    def describe(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "checkpoint": str(self.checkpoint),
                "seq": self.seq, "epoch": self.epoch, "model": self.kind, "dims": self.dims,
                "heads": self.heads, "job": self.job.get("name")}


def find_checkpoint(run_dir: str | Path, checkpoint: str | Path | None = None) -> Path:
    """The checkpoint to use: ``checkpoint`` (a path, or a file name in the run's
    ``checkpoints/``; refused if it fails its digest), else the run's ``latest.pt``, or the
    newest intact step file where that one is corrupt (said on stderr)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise SpecError(str(run), "", "is not a folder", _FIX_RUN)
    folder = run / "checkpoints"
    if checkpoint is not None:
        c = Path(checkpoint)
        for cand in (c, folder / c):
            if cand.is_file():
                why = checkpoints.verify(cand)
                if why is not None:
                    raise SpecError(str(cand), "", why, "another checkpoint of the run: "
                                    + ", ".join(_listing(folder)))
                return cand
        raise SpecError(str(checkpoint), "", "no such checkpoint file",
                        f"a .pt file, or a name in {folder}: " + ", ".join(_listing(folder)))
    if (folder / "latest.pt").is_file():
        got = checkpoints.newest_intact(folder, say=lambda m: print(
            f"gnnsched: {m}; using the previous intact checkpoint", file=sys.stderr))
        if got is None:
            raise SpecError(str(folder), "", "holds no intact checkpoint (every one fails "
                            "its digest)", f"{_FIX_RUN}, or --checkpoint FILE")
        return got
    found = _listing(folder)
    raise SpecError(str(folder if folder.is_dir() else run), "",
                    "holds no checkpoint" + (f" named latest.pt ({', '.join(found)} are there)"
                                             if found else ""),
                    f"{_FIX_RUN} (trainer 0 writes checkpoints/latest.pt), or --checkpoint "
                    "FILE")


def _listing(folder: Path) -> list[str]:
    return sorted(f.name for f in folder.glob("*.pt")) if folder.is_dir() else []


def _load_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (torch raises many kinds for a bad file)
        raise SpecError(str(path), "", f"cannot be read as a checkpoint ({type(exc).__name__}: "
                        f"{str(exc)[:200]})", "a checkpoint gnnsched train wrote") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict) or \
            not isinstance(state.get("job"), dict):
        raise SpecError(str(path), "", "is not a gnnsched training checkpoint (no 'model' "
                        "and 'job' entries)", "a checkpoints/*.pt file gnnsched train wrote")
    return state


def model_shape(kind: str, state: dict[str, Tensor], source: str) -> tuple[list[int], int]:
    """(dims, heads) of a runtime-model state dict: in, hidden..., classes."""
    dims: list[int] = []
    heads = 1
    count = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    for i in range(count):
        p = f"layers.{i}."
        try:
            if kind == "sage":
                out, d_in = state[p + "fc_self.weight"].shape
            elif kind == "gcn":
                d_in, out = state[p + "weight"].shape
            else:
                h, out = state[p + "attn_l"].shape[1:]
                d_in = state[p + "fc.weight"].shape[1]
                heads = max(heads, int(h))
        except KeyError as exc:
            raise SpecError(source, "model", f"has no {exc.args[0]!r}: the weights are not a "
                            f"{kind} model's", "a checkpoint of this job's model") from None
        if i == 0:
            dims.append(int(d_in))
        dims.append(int(out))
    if not dims:
        raise SpecError(source, "model", "holds no layers", "a checkpoint gnnsched train wrote")
    return dims, heads


def load_trained(run_dir: str | Path, checkpoint: str | Path | None = None,
                 job: dict[str, Any] | None = None) -> TrainedModel:
    """The run's model: its checkpoint loaded (tensors only, ``weights_only``) and checked
    against the run (a ``--checkpoint`` of another job is refused, naming what differs) and,
    if given, against ``job`` (a job file's ``to_dict()``)."""
    path = find_checkpoint(run_dir, checkpoint)
    state = _load_state(path)
    cjob = dict(state["job"])
    own = Path(run_dir) / "checkpoints" / "latest.pt"
    if own.is_file() and own.resolve() != path.resolve():
        other = _load_state(own)["job"]
        _same_job(cjob, other, str(path), f"the run's own checkpoint {own}")
    if job is not None:
        _same_job(cjob, job, str(path), "the job file")
    kind = str(cjob.get("model"))
    if kind not in ("sage", "gcn", "gat"):
        raise SpecError(str(path), "job.model", f"unknown model {kind!r}", "sage, gcn, gat")
    dims, heads = model_shape(kind, state["model"], str(path))
    if len(dims) - 1 != len(cjob.get("fanouts", ())):
        raise SpecError(str(path), "model", f"{len(dims) - 1} layers, its job has "
                        f"{len(cjob.get('fanouts', ()))} fan-outs", "a checkpoint of this job")
    t = TrainedModel(Path(run_dir), path, cjob, state["model"], int(state.get("seq", -1)),
                     int(state.get("epoch", -1)), kind, dims, heads)
    try:
        t.build()
    except RuntimeError as exc:  # shapes the job's model does not have
        raise SpecError(str(path), "model", f"does not fit a {kind} model of its job "
                        f"({str(exc).splitlines()[0][:200]})", "a checkpoint of this job's "
                        "model") from None
    return t


def _same_job(a: dict[str, Any], b: dict[str, Any], source: str, other: str) -> None:
    diff = [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in (*MODEL_KEYS, *DATA_KEYS, "name")
            if k in b and _norm(a.get(k)) != _norm(b.get(k))]
    if diff:
        raise SpecError(source, "job", f"is a checkpoint of another job or model than "
                        f"{other} ({'; '.join(diff)})", "a checkpoint of this run (--checkpoint "
                        "NAME from its checkpoints/ folder), or the run folder it came from")


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def check_partitions(trained: TrainedModel, pset: Any) -> None:
    """The partitions must be the ones the model was trained on: same dataset, part count,
    feature width and classes (a SpecError names the partition folder and the fix)."""
    job = trained.job
    fix = (f"the partitions of job {job.get('name')!r} (gnnsched partition with its job "
           "file, or --partitions DIR of the run)")
    root = str(getattr(pset, "root", "partitions"))
    checks = [("num_parts", pset.num_parts, job.get("num_parts")),
              ("feature_dim", pset.feature_dim, trained.in_dim),
              ("num_classes", pset.num_classes, trained.num_classes)]
    meta = getattr(pset, "meta", {}) or {}
    if meta.get("dataset") and job.get("dataset") and \
            Path(str(job["dataset"])).stem != Path(str(meta["dataset"])).stem:
        checks.append(("dataset", meta["dataset"], job["dataset"]))
    for name, have, want in checks:
        if want is not None and have != want:
            raise SpecError(root, name, f"is {have!r}, the model in {trained.checkpoint} "
                            f"needs {want!r}", fix)


def check_out_dir(out: str | Path) -> Path:
    """``out`` must not exist, or be an empty folder: predictions are never overwritten."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecError(str(out), "", "is a file, not a folder", "a new folder for --out")
    if out.is_dir() and any(out.iterdir()):
        what = "already holds predictions (manifest.json)" if (out / MANIFEST).exists() \
            else "is not empty"
        raise SpecError(str(out), "", what, "another --out, or remove the folder first")
    return out


# --------------------------------------------------------------------------------------
# One layer over one chunk of destination nodes, with full neighbourhoods


def layer_forward(model: GNN, i: int, block: Block, h: Tensor,
                  src_out_deg: Tensor | None = None) -> Tensor:
    """Layer ``i`` of ``model`` on ``block`` (all in-edges of its destinations), with the
    activation that follows it in :class:`GNN` (none after the last layer; GAT's heads
    flattened, or averaged at the last). ``src_out_deg``: the graph's out-degree of each
    source (GraphConv's normalisation)."""
    layer = model.layers[i]
    last = i == len(model.layers) - 1
    if model.kind == "gcn":
        out = gcn_full(layer, block, h, src_out_deg)
    else:
        out = layer(block, h)
    if model.kind == "gat":
        return out.mean(1) if last else F.elu(out.flatten(1))
    return out if last else F.relu(out)


def gcn_full(layer: Any, block: Block, h: Tensor, src_out_deg: Tensor | None) -> Tensor:
    """``GraphConv(norm='both')`` with the graph's out-degrees of the sources (a chunk's
    block sees only its own destinations' edges) and the destinations' in-degrees."""
    if src_out_deg is None:
        raise ValueError("GCN inference needs the sources' out-degrees")
    h = h * src_out_deg.clamp(min=1).pow(-0.5).unsqueeze(-1)
    if layer.in_feats > layer.out_feats:
        rst = aggregate(block, h @ layer.weight, "sum")
    else:
        rst = aggregate(block, h, "sum") @ layer.weight
    rst = rst * block.in_degrees().clamp(min=1).pow(-0.5).unsqueeze(-1)
    return rst + layer.bias


class ChunkBuilder:
    """Blocks of chunks of destination nodes from an in-edge CSR in original ids.

    ``indptr``/``indices``: the in-edges of ``dst_nodes`` (row ``r``'s sources are
    ``indices[indptr[r]:indptr[r+1]]``). A block's sources are its destinations first (DGL's
    block convention, which SAGE's self term reads), then the other in-neighbours in
    ascending id order. One scratch array of ``num_nodes`` ints is reused across chunks."""

    def __init__(self, num_nodes: int, dst_nodes: np.ndarray, indptr: np.ndarray,
                 indices: np.ndarray) -> None:
        self.dst_nodes, self.indptr, self.indices = dst_nodes, indptr, indices
        self.pos = np.full(num_nodes, -1, dtype=np.int64)

    def ranges(self, chunk: int) -> Iterator[tuple[int, int]]:
        n = len(self.dst_nodes)
        for a in range(0, n, max(1, chunk)):
            yield a, min(n, a + chunk)

    def block(self, a: int, b: int) -> tuple[Block, np.ndarray]:
        """The block of destinations ``a..b-1`` and its source nodes (original ids)."""
        dst = self.dst_nodes[a:b]
        e0, e1 = int(self.indptr[a]), int(self.indptr[b])
        src = self.indices[e0:e1]
        counts = np.diff(self.indptr[a:b + 1])
        pos = self.pos
        pos[dst] = np.arange(len(dst))
        extra = np.unique(src[pos[src] < 0])
        pos[extra] = len(dst) + np.arange(len(extra))
        local_src = pos[src]
        nodes = np.concatenate([dst, extra])
        pos[nodes] = -1
        local_dst = np.repeat(np.arange(len(dst), dtype=np.int64), counts)
        return Block(torch.from_numpy(local_src), torch.from_numpy(local_dst), len(nodes),
                     len(dst)), nodes


def in_csr(num_nodes: int, src: np.ndarray, dst: np.ndarray,
           dst_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of ``dst_nodes`` as (indptr, sources), rows in ``dst_nodes`` order."""
    row = np.full(num_nodes, -1, dtype=np.int64)
    row[dst_nodes] = np.arange(len(dst_nodes))
    r = row[dst]
    keep = r >= 0
    r, s = r[keep], src[keep]
    order = np.argsort(r, kind="stable")
    indptr = np.zeros(len(dst_nodes) + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=len(dst_nodes)), out=indptr[1:])
    return indptr, s[order].astype(np.int64)


# --------------------------------------------------------------------------------------
# The single-process reference


@dataclass
class Predictions:
    """Every node's outputs (rows in ``nodes`` order, original ids)."""

    nodes: np.ndarray
    probs: np.ndarray
    pred: np.ndarray
    embeddings: np.ndarray | None = None
    logits: np.ndarray | None = None
    seconds: float = 0.0
    layer_seconds: list[float] = field(default_factory=list)

    def nodes_per_s(self, layers: int) -> float:
        """Node-layers per second over the layers: every node once per layer."""
        return len(self.nodes) * layers / self.seconds if self.seconds > 0 else float("nan")


def reference_inference(trained: TrainedModel, pset: Any, chunk: int = CHUNK_NODES,
                        embeddings: bool = False,
                        progress: Callable[[str], None] | None = None) -> Predictions:
    """Layer-wise full-neighbour inference of every node in one process: layer ``l`` for
    all nodes, ``chunk`` destinations at a time, from layer ``l-1``'s rows of all of them."""
    g = pset.full_graph()
    n = g.num_nodes
    model = trained.build()
    nodes = np.arange(n, dtype=np.int64)
    indptr, indices = in_csr(n, g.src, g.dst, nodes)
    out_deg = torch.from_numpy(np.bincount(g.src, minlength=n).astype(np.float32))
    builder = ChunkBuilder(n, nodes, indptr, indices)
    h = torch.from_numpy(g.features)
    emb = None
    times = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(len(model.layers)):
            t1 = time.perf_counter()
            out: Tensor | None = None
            for a, b in builder.ranges(chunk):
                block, src = builder.block(a, b)
                idx = torch.from_numpy(src)
                rows = layer_forward(model, i, block, h[idx],
                                     out_deg[idx] if model.kind == "gcn" else None)
                if out is None:
                    out = rows.new_empty((n, rows.shape[1]))
                out[a:b] = rows
            assert out is not None
            if embeddings and i == len(model.layers) - 2:
                emb = out.numpy().copy()
            h = out
            times.append(time.perf_counter() - t1)
            if progress:
                progress(f"layer {i + 1}/{len(model.layers)}: {n} nodes in {times[-1]:.2f} s")
    probs = torch.softmax(h, dim=1).numpy()
    return Predictions(nodes, probs, probs.argmax(1), emb, h.numpy(),
                       time.perf_counter() - t0, times)


def full_test_metric(trained: TrainedModel, pset: Any, nodes: np.ndarray, pred: np.ndarray,
                probs: np.ndarray) -> dict[str, Any]:
    """The job's metric (and accuracy) on the full test set, from full-neighbour scores."""
    from gnnsched import metrics

    g_labels, test = _labels_and_test(pset)
    at = np.full(pset.num_nodes, -1, dtype=np.int64)
    at[nodes] = np.arange(len(nodes))
    rows = at[test]
    if (rows < 0).any():
        raise ValueError(f"{int((rows < 0).sum())} test nodes have no prediction")
    name = metrics.resolve(str(trained.job.get("metric", "auto")), pset.num_classes)
    y, p = g_labels[test], pred[rows]
    pos = probs[rows, 1] if probs.shape[1] == 2 else None
    return {"metric": name, "test_metric": metrics.score(name, y, p, pos),
            "test_accuracy": metrics.score("accuracy", y, p), "test_nodes": int(len(test)),
            "neighbourhoods": "full"}


def _labels_and_test(pset: Any) -> tuple[np.ndarray, np.ndarray]:
    labels = np.zeros(pset.num_nodes, dtype=np.int64)
    test = []
    for p in range(pset.num_parts):
        part = pset.load_part(p)
        labels[part.inner_orig_ids] = part.labels.numpy()
        test.append(part.inner_orig_ids[part.test_mask.numpy().astype(bool)])
    return labels, np.sort(np.concatenate(test))


def sampled_metric(run_dir: Path) -> dict[str, Any] | None:
    """The test metric ``gnnsched train`` measured on sampled neighbourhoods (its run
    record in ``metrics.jsonl``), to print beside the full-neighbour one; None if absent."""
    try:
        lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "run":
            return {"metric": rec.get("metric"), "test_metric": rec.get("test_metric"),
                    "neighbourhoods": "sampled (the job's fan-outs)"}
    return None


# --------------------------------------------------------------------------------------
# Outputs


def per_part(preds: Predictions, pset: Any) -> dict[int, dict[str, np.ndarray]]:
    """Every-node outputs cut into the partitions' own nodes (original ids, part order)."""
    at = np.full(pset.num_nodes, -1, dtype=np.int64)
    at[preds.nodes] = np.arange(len(preds.nodes))
    out = {}
    for p in range(pset.num_parts):
        nodes = np.asarray(pset.part_nodes(p), dtype=np.int64)
        rows = at[nodes]
        arrays = {"nodes": nodes, "pred": preds.pred[rows].astype(np.int64),
                  "probs": preds.probs[rows].astype(np.float32)}
        if preds.embeddings is not None:
            arrays["emb"] = preds.embeddings[rows].astype(np.float32)
        out[p] = arrays
    return out


def part_files(p: int, embeddings: bool) -> dict[str, str]:
    """The file names of partition ``p``'s outputs."""
    names = {k: f"part{p}-{k}.npy" for k in ("nodes", "pred", "probs")}
    if embeddings:
        names["emb"] = f"part{p}-emb.npy"
    return names


def staging_dir(out: Path) -> Path:
    """Where outputs are written before they are complete: a hidden sibling of ``out``."""
    out = Path(out).resolve()
    return out.parent / f".{out.name}.partial-{os.getpid()}-{time.time_ns() % 10**9}"


def save_part(stage: Path, p: int, arrays: dict[str, np.ndarray]) -> None:
    """One partition's arrays into the staging folder."""
    stage.mkdir(parents=True, exist_ok=True)
    for key, name in part_files(p, "emb" in arrays).items():
        np.save(stage / name, np.ascontiguousarray(arrays[key]), allow_pickle=False)


def publish(stage: Path, out: Path, manifest: dict[str, Any]) -> Path:
    """Check the staged files, write the manifest, and rename the folder to ``out`` (an
    empty ``out`` is replaced): ``out`` appears complete or not at all."""
    files = {}
    for p, names in manifest["files"].items():
        for name in names.values():
            f = stage / name
            if not f.is_file():
                raise RuntimeError(f"partition {p}: {name} was not written")
            arr = np.load(f, mmap_mode="r", allow_pickle=False)
            files[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    body = {"format": FORMAT, "version": VERSION, **manifest, "arrays": files,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = stage / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(body, indent=1, default=str) + "\n")
    os.replace(tmp, stage / MANIFEST)
    out = Path(out)
    check_out_dir(out)  # nobody wrote there meanwhile
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(stage, out)
    return out


def discard(stage: Path) -> None:
    """Remove an unfinished staging folder (an interrupted or failed prediction)."""
    shutil.rmtree(stage, ignore_errors=True)


def write_outputs(out: Path, parts: dict[int, dict[str, np.ndarray]],
                  manifest: dict[str, Any]) -> Path:
    """Write per-partition outputs and the manifest atomically (see :func:`publish`)."""
    stage = staging_dir(out)
    try:
        for p, arrays in parts.items():
            save_part(stage, p, arrays)
        emb = any("emb" in a for a in parts.values())
        manifest = {**manifest, "files": {str(p): part_files(p, emb) for p in parts}}
        return publish(stage, out, manifest)
    finally:
        discard(stage)


def load_outputs(out: str | Path) -> dict[str, np.ndarray]:
    """Every partition's outputs of a prediction folder concatenated, sorted by node id."""
    out = Path(out)
    man = json.loads((out / MANIFEST).read_text())
    got: dict[str, list[np.ndarray]] = {}
    for names in man["files"].values():
        for key, name in names.items():
            got.setdefault(key, []).append(np.load(out / name, allow_pickle=False))
    cat = {k: np.concatenate(v) for k, v in got.items()}
    order = np.argsort(cat["nodes"])
    return {k: v[order] for k, v in cat.items()}


# --------------------------------------------------------------------------------------
# Entry points (re-exported by gnnsched.api)


def predict_single(run_dir: str | Path, partitions: str | Path, out: str | Path | None = None,
                   checkpoint: str | Path | None = None, embeddings: bool = False,
                   chunk: int = CHUNK_NODES, job: dict[str, Any] | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Single-process prediction (the reference): check, infer, score, write. Returns the
    manifest's summary (metric, nodes per second, where the files are)."""
    from gnnsched.datasets import open_partitions

    out = Path(out) if out is not None else Path(run_dir) / "predictions"
    trained = load_trained(run_dir, checkpoint, job)
    pset = open_partitions(str(partitions), verify=False)
    check_partitions(trained, pset)
    check_out_dir(out)
    preds = reference_inference(trained, pset, chunk, embeddings, progress)
    summary = {"mode": "single-process", "model": trained.describe(),
               "partitions": str(Path(str(pset.root)).resolve()),
               "nodes": int(len(preds.nodes)), "seconds": preds.seconds,
               "layer_seconds": preds.layer_seconds,
               "nodes_per_s": preds.nodes_per_s(trained.layers),
               "full": full_test_metric(trained, pset, preds.nodes, preds.pred, preds.probs),
               "sampled": sampled_metric(Path(run_dir)), "embeddings": embeddings}
    write_outputs(out, per_part(preds, pset), summary)
    return {**summary, "out": str(out)}


__all__ = ["CHUNK_NODES", "MANIFEST", "ChunkBuilder", "Predictions", "TrainedModel",
           "check_out_dir", "check_partitions", "find_checkpoint", "gcn_full", "in_csr",
           "layer_forward", "load_outputs", "load_trained", "model_shape", "per_part",
           "predict_single", "reference_inference", "sampled_metric", "full_test_metric",
           "write_outputs"]
