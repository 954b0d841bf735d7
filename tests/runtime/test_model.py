"""The plain-tensor layers equal DGL's SAGEConv / GraphConv / GATConv (outputs and gradients)."""

from __future__ import annotations

import pytest
import torch

from gnnsched.compat import dgl
from gnnsched.runtime.model import (
    Block,
    GATConv,
    GCNConv,
    SAGEConv,
    blocks_to_tensors,
    build_model,
    tensors_to_dgl,
)

torch.set_num_threads(1)


def _sampled_blocks(seed: int = 0, fanouts=(4, 6)) -> list:
    """Real DGL blocks from neighbour sampling on a random graph (some dst without edges)."""
    dgl.seed(seed)
    torch.manual_seed(seed)
    g = dgl.rand_graph(300, 1500)
    sampler = dgl.dataloading.NeighborSampler(list(fanouts))
    _, _, blocks = sampler.sample_blocks(g, torch.arange(0, 40))
    return blocks


def _compare(ours: torch.nn.Module, theirs: torch.nn.Module, dblock, block: Block, x: torch.Tensor,
             pairs: list[tuple[str, str]], reshape=lambda t: t) -> None:
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    out_ours = ours(block, x1)
    out_theirs = reshape(theirs(dblock, x2))
    assert out_ours.shape == out_theirs.shape
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-4, atol=1e-4)
    w = torch.randn_like(out_ours)
    (out_ours * w).sum().backward()
    (out_theirs * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-4)
    po, pt = dict(ours.named_parameters()), dict(theirs.named_parameters())
    for a, b in pairs:
        torch.testing.assert_close(po[a].grad, pt[b].grad.reshape(po[a].shape), rtol=1e-4,
                                   atol=1e-4, msg=f"gradient of {a}")


def _copy(ours: torch.nn.Module, theirs: torch.nn.Module, pairs: list[tuple[str, str]]) -> None:
    po, pt = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert set(a for a, _ in pairs) == set(po), "every parameter is compared"
    with torch.no_grad():
        for a, b in pairs:
            torch.nn.init.normal_(pt[b])  # non-zero biases too
            po[a].copy_(pt[b].reshape(po[a].shape))


@pytest.mark.parametrize("in_dim,out_dim", [(16, 8), (8, 16)])  # both projection orders
def test_sage_matches_dgl(in_dim: int, out_dim: int) -> None:
    dblocks = _sampled_blocks(1)
    blocks = blocks_to_tensors(dblocks)
    theirs = dgl.nn.SAGEConv(in_dim, out_dim, "mean")
    ours = SAGEConv(in_dim, out_dim)
    pairs = [("fc_self.weight", "fc_self.weight"), ("fc_self.bias", "fc_self.bias"),
             ("fc_neigh.weight", "fc_neigh.weight")]
    _copy(ours, theirs, pairs)
    for db, b in zip(dblocks, blocks):
        ours.zero_grad()
        theirs.zero_grad()
        x = torch.randn(b.num_src, in_dim)
        _compare(ours, theirs, db, b, x, pairs)


@pytest.mark.parametrize("in_dim,out_dim", [(16, 8), (8, 16)])
def test_gcn_matches_dgl(in_dim: int, out_dim: int) -> None:
    dblocks = _sampled_blocks(2)
    blocks = blocks_to_tensors(dblocks)
    theirs = dgl.nn.GraphConv(in_dim, out_dim, norm="both", allow_zero_in_degree=True)
    ours = GCNConv(in_dim, out_dim)
    pairs = [("weight", "weight"), ("bias", "bias")]
    _copy(ours, theirs, pairs)
    for db, b in zip(dblocks, blocks):
        ours.zero_grad()
        theirs.zero_grad()
        _compare(ours, theirs, db, b, torch.randn(b.num_src, in_dim), pairs)


@pytest.mark.parametrize("heads", [1, 3])
def test_gat_matches_dgl(heads: int) -> None:
    dblocks = _sampled_blocks(3)
    blocks = blocks_to_tensors(dblocks)
    theirs = dgl.nn.GATConv(12, 5, heads, allow_zero_in_degree=True)
    ours = GATConv(12, 5, heads)
    pairs = [("fc.weight", "fc.weight"), ("attn_l", "attn_l"), ("attn_r", "attn_r"),
             ("bias", "bias")]
    _copy(ours, theirs, pairs)
    for db, b in zip(dblocks, blocks):
        ours.zero_grad()
        theirs.zero_grad()
        _compare(ours, theirs, db, b, torch.randn(b.num_src, 12), pairs)


def test_zero_in_degree_and_empty_block() -> None:
    """A destination with no sampled neighbour gets its self term only; no NaN anywhere."""
    block = Block(torch.tensor([2, 3]), torch.tensor([0, 0]), 4, 2)
    dblock = tensors_to_dgl([block])[0]
    assert dblock.num_dst_nodes() == 2 and dblock.num_edges() == 2
    for kind in ("sage", "gcn", "gat"):
        model = build_model(kind, 6, 8, 3, 1, dropout=0.0)
        out = model([block], torch.randn(4, 6))
        assert out.shape == (2, 3) and torch.isfinite(out).all()
        empty = Block(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 2, 2)
        assert torch.isfinite(model([empty], torch.randn(2, 6))).all()


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_model_stack_trains(kind: str) -> None:
    """The full model runs on sampled blocks, backprops and reduces the loss."""
    torch.manual_seed(0)
    blocks = blocks_to_tensors(_sampled_blocks(4))
    model = build_model(kind, 10, 16, 4, len(blocks), dropout=0.0)
    x = torch.randn(blocks[0].num_src, 10)
    y = torch.randint(0, 4, (blocks[-1].num_dst,))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    first = None
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(blocks, x), y)
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first * 0.7


def test_sage_stack_matches_dgl_stack() -> None:
    """Two SAGE layers with ReLU between: the same output as DGL layers chained on blocks."""
    dblocks = _sampled_blocks(5)
    blocks = blocks_to_tensors(dblocks)
    ours = build_model("sage", 8, 6, 3, 2, dropout=0.0)
    theirs = [dgl.nn.SAGEConv(8, 6, "mean"), dgl.nn.SAGEConv(6, 3, "mean")]
    with torch.no_grad():
        for lo, lt in zip(ours.layers, theirs):
            lo.fc_self.weight.copy_(lt.fc_self.weight)
            lo.fc_self.bias.copy_(torch.randn_like(lt.fc_self.bias))
            lt.fc_self.bias.copy_(lo.fc_self.bias)
            lo.fc_neigh.weight.copy_(lt.fc_neigh.weight)
    x = torch.randn(blocks[0].num_src, 8)
    h = torch.relu(theirs[0](dblocks[0], x))
    expected = theirs[1](dblocks[1], h)
    torch.testing.assert_close(ours(blocks, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_cuda_matches_cpu(kind: str) -> None:
    torch.manual_seed(0)
    blocks = blocks_to_tensors(_sampled_blocks(6))
    model = build_model(kind, 10, 16, 4, len(blocks), dropout=0.0)
    x = torch.randn(blocks[0].num_src, 10)
    cpu = model(blocks, x)
    gpu = model.to("cuda")([b.to("cuda") for b in blocks], x.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-4)
