"""``gnnsched export``: the exported dgl.nn stack and the plain-PyTorch model give the runtime
model's full-graph outputs to 1e-5 (SAGE, GCN, GAT), loaded as the export's README says."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsched.runtime.inference import ChunkBuilder, in_csr, layer_forward, load_trained
from gnnsched.spec import JobSpec, SpecError


def fake_run(root: Path, kind: str, in_dim: int, classes: int, layers: int = 2,
             hidden: int = 16, seed: int = 0, **job_fields) -> Path:
    """A run folder whose ``checkpoints/latest.pt`` holds a freshly initialised model (non-zero
    biases), as trainer 0 writes it: enough to predict or export without training."""
    from gnnsched.runtime.model import build_model

    torch.manual_seed(seed)
    model = build_model(kind, in_dim, hidden, classes, layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    job = JobSpec(name=f"fake-{kind}", model=kind, hidden=hidden,
                  fanouts=tuple([5] * layers), **job_fields).to_dict()
    (root / "checkpoints").mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": {}, "epoch": 0, "seq": 3, "job": job,
                "version": 2}, root / "checkpoints" / "latest.pt")
    return root


def random_graph(n: int = 80, e: int = 400, dim: int = 12, seed: int = 1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n - 5, e)  # the last 5 nodes have no in-edge
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return src.astype(np.int64), dst.astype(np.int64), x


def runtime_logits(trained, src, dst, x, chunk: int) -> torch.Tensor:
    """The runtime model, layer by layer over chunks of destinations (full neighbourhoods)."""
    n = len(x)
    model = trained.build()
    nodes = np.arange(n)
    builder = ChunkBuilder(n, nodes, *in_csr(n, src, dst, nodes))
    out_deg = torch.from_numpy(np.bincount(src, minlength=n).astype(np.float32))
    h = torch.from_numpy(x)
    with torch.no_grad():
        for i in range(len(model.layers)):
            rows = []
            for a, b in builder.ranges(chunk):
                block, s = builder.block(a, b)
                idx = torch.from_numpy(s)
                rows.append(layer_forward(model, i, block, h[idx], out_deg[idx]))
            h = torch.cat(rows)
    return h


def _export(tmp_path: Path, kind: str, layers: int = 2) -> tuple[Path, object]:
    from gnnsched.commands import export as cmd

    run = fake_run(tmp_path / f"run-{kind}", kind, 12, 5, layers)
    out = tmp_path / f"export-{kind}"
    args = argparse.Namespace(run=str(run), out=str(out), checkpoint=None, job=None, json=True)
    assert cmd.run(args) == 0
    return out, load_trained(run)


@pytest.mark.parametrize("kind,layers", [("sage", 2), ("gcn", 2), ("gat", 2), ("gat", 3),
                                         ("sage", 3)])
def test_dgl_export_matches_the_runtime_model(tmp_path: Path, kind: str, layers: int) -> None:
    import importlib

    from gnnsched.compat import dgl  # the stub DGL needs, before dgl.nn

    dglnn = importlib.import_module("dgl.nn")
    out, trained = _export(tmp_path, kind, layers)
    src, dst, x = random_graph()
    want = runtime_logits(trained, src, dst, x, chunk=17)
    # exactly the README's lines
    spec = json.load(open(out / "model.json"))
    convs = torch.nn.ModuleList(getattr(dglnn, c["class"])(*c["args"], **c["kwargs"])
                                for c in spec["layers"])
    convs.load_state_dict(torch.load(out / "dgl_state.pt", weights_only=True))
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=len(x))
    h = torch.from_numpy(x)
    with torch.no_grad():
        for i, conv in enumerate(convs):
            h = conv(g, h)
            if kind == "gat":
                h = h.mean(1) if i == len(convs) - 1 else torch.nn.functional.elu(h.flatten(1))
            else:
                h = h if i == len(convs) - 1 else torch.relu(h)
    assert h.shape == want.shape == (len(x), 5)
    torch.testing.assert_close(h, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_plain_torch_export_matches_the_runtime_model(tmp_path: Path, kind: str) -> None:
    out, trained = _export(tmp_path, kind)
    spec = importlib.util.spec_from_file_location("gnn_torch_export", out / "gnn_torch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src_text = (out / "gnn_torch.py").read_text()
    assert "gnnsched" not in src_text.split('"""', 2)[2] and "dgl" not in \
        src_text.split('"""', 2)[2].replace("dgl.nn", "")
    model = mod.load(out)
    src, dst, x = random_graph()
    want = runtime_logits(trained, src, dst, x, chunk=1000)
    with torch.no_grad():
        got = model(torch.from_numpy(x), torch.from_numpy(src), torch.from_numpy(dst))
        emb = model(torch.from_numpy(x), torch.from_numpy(src), torch.from_numpy(dst),
                    embeddings=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert emb.shape[0] == len(x) and emb.shape[1] == (16 * 4 if kind == "gat" else 16)


def test_export_refuses_bad_input(tmp_path: Path) -> None:
    from gnnsched.runtime.export import export_run

    empty = tmp_path / "empty-run"
    empty.mkdir()
    with pytest.raises(SpecError, match="holds no checkpoint"):
        export_run(empty)
    out, _ = _export(tmp_path, "sage")
    with pytest.raises(SpecError, match="is not empty"):
        export_run(tmp_path / "run-sage", out)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.json", "dgl_state.pt", "torch_state.pt", "gnn_torch.py", "README.md"])
    assert not list(tmp_path.glob(".*partial*"))
