"""``gnnsched export``: a run's trained model for DGL users and for plain-PyTorch users.

The runtime's layers reproduce ``dgl.nn`` (:mod:`.model`), with the same parameter names,
so the export is a re-keyed copy of the checkpoint's weights, never a conversion:

- ``dgl_state.pt``: the state dict of a ``torch.nn.ModuleList`` of ``dgl.nn.SAGEConv``
  (``aggregator_type='mean'``), ``GraphConv(norm='both')`` or ``GATConv`` layers, keys
  ``0.fc_self.weight``, ...; ``model.json`` says each layer's class and arguments and the
  activation between layers;
- ``torch_state.pt`` + ``gnn_torch.py``: the runtime's own model as one torch-only file
  (:mod:`.export_torch_model`, copied), for GPU users without DGL;
- ``README.md``: how to load each in five lines.

Like predictions, an export is staged in a hidden sibling folder and renamed into place, and
an ``--out`` that already holds files is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from gnnsched.runtime.inference import TrainedModel, check_out_dir, load_trained, staging_dir

FILES = ("model.json", "dgl_state.pt", "torch_state.pt", "gnn_torch.py", "README.md")


def layer_specs(trained: TrainedModel) -> list[dict[str, Any]]:
    """Each layer's ``dgl.nn`` class, its constructor's arguments, and its width in and out
    (GAT: read from the weights, whose input is the previous layer's heads x width)."""
    out = []
    state = trained.state
    for i in range(trained.layers):
        p = f"layers.{i}."
        if trained.kind == "sage":
            d_out, d_in = state[p + "fc_self.weight"].shape
            spec = {"class": "SAGEConv", "args": [int(d_in), int(d_out), "mean"], "kwargs": {}}
        elif trained.kind == "gcn":
            d_in, d_out = state[p + "weight"].shape
            spec = {"class": "GraphConv", "args": [int(d_in), int(d_out)],
                    "kwargs": {"norm": "both", "allow_zero_in_degree": True}}
        else:
            heads, d_out = state[p + "attn_l"].shape[1:]
            d_in = state[p + "fc.weight"].shape[1]
            spec = {"class": "GATConv", "args": [int(d_in), int(d_out), int(heads)],
                    "kwargs": {"allow_zero_in_degree": True}, "heads": int(heads)}
        out.append({**spec, "in": int(d_in), "out": int(d_out)})
    return out


def activation(kind: str) -> str:
    return ("elu(h.flatten(1)) between layers, h.mean(1) after the last" if kind == "gat"
            else "relu between layers, none after the last")


def readme(trained: TrainedModel) -> str:
    loop = ("    h = conv(g, h)\n    h = h.mean(1) if i == len(convs) - 1 else "
            "torch.nn.functional.elu(h.flatten(1))" if trained.kind == "gat" else
            "    h = conv(g, h)\n    h = h if i == len(convs) - 1 else torch.relu(h)")
    return f"""# Exported gnnsched model

`{trained.kind}`, widths {trained.dims}, from `{trained.checkpoint}` (step {trained.seq},
epoch {trained.epoch + 1}). Activation: {activation(trained.kind)}. Dropout is off
(inference).

## DGL (`dgl.nn`)

```python
import json, torch, dgl.nn as dglnn
spec = json.load(open("model.json"))
convs = torch.nn.ModuleList(getattr(dglnn, c["class"])(*c["args"], **c["kwargs"])
                            for c in spec["layers"])
convs.load_state_dict(torch.load("dgl_state.pt", weights_only=True))
h = x  # g: the whole graph (dgl.graph((src, dst))), x: its node features
for i, conv in enumerate(convs):
{loop}
```

## Plain PyTorch (no DGL), CPU or CUDA

```python
import torch, gnn_torch                      # gnn_torch.py is in this folder
model = gnn_torch.load(".")                  # model.json + torch_state.pt
logits = model(x, src, dst)                  # edge index src -> dst (int64)
probs = torch.softmax(logits, 1)
emb = model(x, src, dst, embeddings=True)    # the last hidden layer
```
"""


def export_run(run_dir: str | Path, out: str | Path | None = None,
               checkpoint: str | Path | None = None,
               job: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export the run's (or ``checkpoint``'s) model into ``out`` (default ``RUN/export``);
    returns what was written."""
    out = Path(out) if out is not None else Path(run_dir) / "export"
    trained = load_trained(run_dir, checkpoint, job)
    check_out_dir(out)
    layers = layer_specs(trained)
    spec = {"format": "gnnsched-export", "version": 1, "model": trained.kind,
            "dims": trained.dims, "layers": layers, "activation": activation(trained.kind),
            "source": trained.describe(), "written": time.strftime("%Y-%m-%dT%H:%M:%S")}
    dgl_state = {k.removeprefix("layers."): v.detach().clone().contiguous()
                 for k, v in trained.state.items()}
    stage = staging_dir(out)
    try:
        stage.mkdir(parents=True)
        torch.save(dgl_state, stage / "dgl_state.pt")
        torch.save({k: v.detach().clone().contiguous() for k, v in trained.state.items()},
                   stage / "torch_state.pt")
        shutil.copyfile(Path(__file__).with_name("export_torch_model.py"), stage / "gnn_torch.py")
        (stage / "README.md").write_text(readme(trained))
        (stage / "model.json").write_text(json.dumps(spec, indent=1, default=str) + "\n")
        check_out_dir(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"out": str(out), "files": list(FILES), **spec}


__all__ = ["FILES", "export_run", "layer_specs"]
