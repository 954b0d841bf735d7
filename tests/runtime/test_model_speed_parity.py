"""The fast aggregation path (``embedding_bag`` over ``Block.in_csr``) computes what the plain
formula says: GraphSAGE-mean is ``fc_self(h_v) + fc_neigh(mean of h_u over in-edges u -> v)``,
zero neighbour term without in-edges; on unsorted, duplicated and empty edge lists, full
(fan-out -1) blocks, with gradients; and equal to ``dgl.nn.SAGEConv`` with copied weights.
``bench/bench_model.py`` measures the speed itself (not asserted here: a shared box is noisy).
"""

from __future__ import annotations

import pytest
import torch

from gnnsched.compat import dgl
from gnnsched.runtime.model import (
    Block,
    SAGEConv,
    aggregate,
    aggregate_with_dst,
    blocks_to_tensors,
    build_model,
)

torch.set_num_threads(1)


def _random_block(seed: int, num_src: int = 30, num_dst: int = 12, edges: int = 70) -> Block:
    """Unsorted edges with duplicates; destinations ``num_dst - 3 ..`` have no in-edge."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (edges,), generator=g)
    dst = torch.randint(0, num_dst - 3, (edges,), generator=g)
    src[:5], dst[:5] = src[5], dst[5]  # parallel edges count once each, as in DGL
    return Block(src, dst, num_src, num_dst)


def _reference_mean(block: Block, h: torch.Tensor) -> torch.Tensor:
    """Mean over in-neighbours, one destination at a time (zeros without in-edges)."""
    rows = []
    for v in range(block.num_dst):
        nbrs = block.src[block.dst == v]
        rows.append(h[nbrs].mean(0) if len(nbrs) else h.new_zeros(h.shape[1]))
    return torch.stack(rows)


def _reference_sage(layer: SAGEConv, block: Block, h: torch.Tensor) -> torch.Tensor:
    return layer.fc_self(h[: block.num_dst]) + layer.fc_neigh(_reference_mean(block, h))


@pytest.mark.parametrize("in_dim,out_dim", [(9, 5), (5, 9), (6, 6)])  # both projection orders
@pytest.mark.parametrize("seed", [0, 1])
def test_sage_layer_matches_formula_with_gradients(seed: int, in_dim: int, out_dim: int) -> None:
    torch.manual_seed(seed)
    block = _random_block(seed)
    layer = SAGEConv(in_dim, out_dim)
    with torch.no_grad():
        layer.fc_self.bias.normal_()
    h1 = torch.randn(block.num_src, in_dim, requires_grad=True)
    h2 = h1.detach().clone().requires_grad_(True)
    out = layer(block, h1)
    expected = _reference_sage(layer, block, h2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    # destinations without an in-edge get the self term only
    torch.testing.assert_close(out[-3:], layer.fc_self(h1[block.num_dst - 3: block.num_dst]))

    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum(), [h1, *layer.parameters()])
    expected_grads = torch.autograd.grad((expected * w).sum(), [h2, *layer.parameters()])
    for got, want in zip(grads, expected_grads):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert grads[0].abs().sum() > 0, "gradient reaches the inputs"


def test_edge_order_does_not_matter() -> None:
    block = _random_block(3)
    order = torch.argsort(block.dst * block.num_src + block.src)
    sorted_block = Block(block.src[order], block.dst[order], block.num_src, block.num_dst)
    h = torch.randn(block.num_src, 4)
    torch.testing.assert_close(aggregate(block, h), aggregate(sorted_block, h))
    torch.testing.assert_close(aggregate(block, h, "sum"), aggregate(sorted_block, h, "sum"))
    offsets, sources = sorted_block.in_csr()
    assert sources is sorted_block.src, "edges already grouped by destination are not copied"
    assert sorted_block.in_csr()[0] is offsets, "cached on the block"
    assert offsets.tolist()[0] == 0 and offsets.tolist()[-1] == block.num_edges


def test_sum_and_empty_blocks() -> None:
    block = _random_block(4)
    h = torch.randn(block.num_src, 3, dtype=torch.float64)
    counts = torch.bincount(block.dst, minlength=block.num_dst).unsqueeze(1)
    torch.testing.assert_close(aggregate(block, h, "sum"), _reference_mean(block, h) * counts)
    empty = Block(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 5, 3)
    x = torch.randn(5, 3, requires_grad=True)
    out = aggregate(empty, x)
    assert out.shape == (3, 3) and not out.any()
    out.sum().backward()
    assert x.grad is not None and not x.grad.any()
    no_dst = Block(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 4, 0)
    assert aggregate(no_dst, torch.randn(4, 2)).shape == (0, 2)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(block, h, "max")


@pytest.mark.parametrize("use", ["both", "neigh", "dst"])
def test_aggregate_with_dst_gradients(use: str) -> None:
    """One gradient buffer for h: the same gradients as slicing h, whichever output is used."""
    block = _random_block(5)
    h1 = torch.randn(block.num_src, 4, requires_grad=True)
    h2 = h1.detach().clone().requires_grad_(True)
    neigh, h_dst = aggregate_with_dst(block, h1)
    torch.testing.assert_close(h_dst, h1[: block.num_dst])
    ref_neigh, ref_dst = _reference_mean(block, h2), h2[: block.num_dst]
    torch.testing.assert_close(neigh, ref_neigh)
    w1, w2 = torch.randn_like(neigh), torch.randn_like(h_dst)
    pick = {"both": lambda a, b: (a * w1).sum() + (b * w2).sum(),
            "neigh": lambda a, b: (a * w1).sum(), "dst": lambda a, b: (b * w2).sum()}[use]
    pick(neigh, h_dst).backward()
    pick(ref_neigh, ref_dst).backward()
    torch.testing.assert_close(h1.grad, h2.grad)
    with torch.no_grad():
        _, view = aggregate_with_dst(block, h1)
    assert view.data_ptr() == h1.data_ptr(), "no copy when no gradient is needed"


def _graph_with_isolated_nodes(seed: int):
    dgl.seed(seed)
    torch.manual_seed(seed)
    g = dgl.rand_graph(200, 900)
    return dgl.add_nodes(g, 20)  # nodes 200..219: no in-edge at all


@pytest.mark.parametrize("fanouts", [[-1, -1], [-1, 4, 3], [5, -1]])
def test_sage_stack_matches_dgl_sageconv(fanouts: list[int]) -> None:
    """Full and sampled blocks, seeds including isolated nodes: DGL's output within 1e-5,
    and the same input and weight gradients."""
    g = _graph_with_isolated_nodes(len(fanouts))
    seeds = torch.cat([torch.arange(0, 30), torch.arange(205, 215)])
    _, _, dblocks = dgl.dataloading.NeighborSampler(fanouts).sample_blocks(g, seeds)
    blocks = blocks_to_tensors(dblocks)
    assert any((b.in_degrees() == 0).any() for b in blocks)
    dims = [12] + [10] * (len(fanouts) - 1) + [4]
    ours = build_model("sage", dims[0], dims[1], dims[-1], len(fanouts), dropout=0.0)
    theirs = [dgl.nn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(len(fanouts))]
    with torch.no_grad():
        for lo, lt in zip(ours.layers, theirs):
            lt.fc_self.bias.normal_()
            lo.fc_self.load_state_dict(lt.fc_self.state_dict())
            lo.fc_neigh.load_state_dict(lt.fc_neigh.state_dict())
    x1 = torch.randn(blocks[0].num_src, dims[0], requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    out = ours(blocks, x1)
    h = x2
    for i, (lt, db) in enumerate(zip(theirs, dblocks)):
        h = lt(db, h)
        if i < len(theirs) - 1:
            h = torch.relu(h)
    torch.testing.assert_close(out, h, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    (h * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    for lo, lt in zip(ours.layers, theirs):
        for name in ("fc_self.weight", "fc_self.bias", "fc_neigh.weight"):
            torch.testing.assert_close(lo.get_parameter(name).grad, lt.get_parameter(name).grad,
                                       rtol=1e-5, atol=1e-5, msg=name)
