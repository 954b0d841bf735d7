"""A trained gnnsched model in plain PyTorch: no DGL, no gnnsched (written by ``gnnsched export``).

This file is copied as it is into an export folder (``gnn_torch.py``), so it imports only
torch. The layers are gnnsched's (``dgl.nn.SAGEConv(aggregator_type='mean')``,
``GraphConv(norm='both')`` and ``GATConv``, same parameter names), applied to a whole graph
given as an edge index (``src -> dst``, int64), on CPU or CUDA::

    import torch, gnn_torch
    model = gnn_torch.load("EXPORT_DIR")           # model.json + torch_state.pt
    logits = model(x, src, dst)                     # x: [num_nodes, in_dim] float32
    probs = torch.softmax(logits, 1)
    hidden = model(x, src, dst, embeddings=True)    # the last hidden layer's rows
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _sum_into(values: Tensor, dst: Tensor, n: int) -> Tensor:
    out = values.new_zeros((n, *values.shape[1:]))
    return out.index_add_(0, dst, values)


def _degrees(index: Tensor, n: int, like: Tensor) -> Tensor:
    return torch.zeros(n, dtype=like.dtype, device=like.device).index_add_(
        0, index, torch.ones_like(index, dtype=like.dtype))


class SAGEConv(nn.Module):
    """``fc_self(h) + fc_neigh(mean of in-neighbours' h)``."""

    def __init__(self, in_feats: int, out_feats: int) -> None:
        super().__init__()
        self.fc_self = nn.Linear(in_feats, out_feats, bias=True)
        self.fc_neigh = nn.Linear(in_feats, out_feats, bias=False)

    def forward(self, h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        n = h.shape[0]
        deg = _degrees(dst, n, h).clamp(min=1).unsqueeze(-1)
        neigh = self.fc_neigh(h)[src]
        return self.fc_self(h) + _sum_into(neigh, dst, n) / deg


class GraphConv(nn.Module):
    """Symmetric normalisation: out-degrees of sources, in-degrees of destinations."""

    def __init__(self, in_feats: int, out_feats: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        self.bias = nn.Parameter(torch.zeros(out_feats))

    def forward(self, h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        n = h.shape[0]
        h = h * _degrees(src, n, h).clamp(min=1).pow(-0.5).unsqueeze(-1)
        rst = _sum_into((h @ self.weight)[src], dst, n)
        return rst * _degrees(dst, n, h).clamp(min=1).pow(-0.5).unsqueeze(-1) + self.bias


class GATConv(nn.Module):
    """Graph attention, ``[num_nodes, heads, out]``."""

    def __init__(self, in_feats: int, out_feats: int, heads: int) -> None:
        super().__init__()
        self.heads, self.out_feats = heads, out_feats
        self.fc = nn.Linear(in_feats, heads * out_feats, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_feats))
        self.bias = nn.Parameter(torch.zeros(heads * out_feats))

    def forward(self, h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        n = h.shape[0]
        feat = self.fc(h).view(-1, self.heads, self.out_feats)
        el, er = (feat * self.attn_l).sum(-1), (feat * self.attn_r).sum(-1)
        e = F.leaky_relu(el[src] + er[dst], 0.2)
        emax = e.new_full((n, self.heads), float("-inf")).scatter_reduce(
            0, dst.unsqueeze(-1).expand_as(e), e, reduce="amax", include_self=True)
        w = torch.exp(e - emax[dst])
        a = w / _sum_into(w, dst, n)[dst]
        rst = _sum_into(feat[src] * a.unsqueeze(-1), dst, n)
        return rst + self.bias.view(1, self.heads, self.out_feats)


class GNN(nn.Module):
    """The stack: ReLU between SAGE / GCN layers; GAT's heads flattened with ELU between
    layers and averaged at the last."""

    def __init__(self, spec: dict) -> None:
        super().__init__()
        self.kind = spec["model"]
        self.layers = nn.ModuleList()
        for layer in spec["layers"]:
            d_in, d_out = layer["in"], layer["out"]
            if self.kind == "sage":
                self.layers.append(SAGEConv(d_in, d_out))
            elif self.kind == "gcn":
                self.layers.append(GraphConv(d_in, d_out))
            else:
                self.layers.append(GATConv(d_in, d_out, layer["heads"]))

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, embeddings: bool = False) -> Tensor:
        h = x
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            if embeddings and i == last:
                return h
            h = layer(h, src, dst)
            if self.kind == "gat":
                h = h.mean(1) if i == last else F.elu(h.flatten(1))
            elif i != last:
                h = F.relu(h)
        return h


def load(folder: str | Path, map_location: str = "cpu") -> GNN:
    """The exported model, weights loaded, in eval mode."""
    folder = Path(folder)
    spec = json.loads((folder / "model.json").read_text())
    model = GNN(spec)
    state = torch.load(folder / "torch_state.pt", map_location=map_location, weights_only=True)
    model.load_state_dict(state)
    return model.eval()
