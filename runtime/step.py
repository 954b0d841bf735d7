"""One training step, the same in the distributed trainer and in the single-process reference.

The reference (:mod:`.reference`) must compute exactly what the trainers (:mod:`.trainer`)
compute -- same dropout seeds, same loss on an empty batch, same gradient layout for the
average -- or the accuracy test compares two different things. Both call these functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from gnnsched.runtime.model import Block
from gnnsched.runtime.role import seed_of


def forward_backward(model: nn.Module, blocks: list[Block], x: Tensor, y: Tensor,
                     opt: torch.optim.Optimizer, loss_fn: nn.Module, job_seed: int,
                     trainer: int, seq: int) -> tuple[Tensor, Tensor]:
    """Forward and backward of trainer ``trainer``'s training batch at step ``seq``, with
    dropout seeded by (job seed, trainer, step) so that any process replays it exactly.
    Leaves the gradients in the parameters (the optimizer step comes after the all-reduce);
    returns (output, loss). An empty batch contributes zero gradients."""
    model.train()
    torch.manual_seed(seed_of(job_seed, 1, trainer, seq))
    out = model(blocks, x)
    loss = loss_fn(out, y) if len(y) else out.sum() * 0.0
    opt.zero_grad()
    loss.backward()
    return out, loss


def evaluate(model: nn.Module, blocks: list[Block], x: Tensor) -> Tensor:
    """The model's output on an evaluation batch (no dropout, no gradients)."""
    model.eval()
    with torch.no_grad():
        return model(blocks, x)


def count_correct(out: Tensor, y: Tensor) -> int:
    """How many of the batch's predictions match its labels."""
    return int((out.argmax(1) == y).sum()) if len(y) else 0


def predictions(out: Tensor) -> tuple[np.ndarray, np.ndarray | None]:
    """The predicted classes and, for a binary task, the positive class's probability (what
    ROC-AUC ranks): what an evaluation batch reports for :mod:`gnnsched.metrics`."""
    pred = out.argmax(1).cpu().numpy()
    prob = torch.softmax(out, 1)[:, 1].cpu().numpy() if out.shape[1] == 2 else None
    return pred, prob


def flat_grads(params: Sequence[nn.Parameter]) -> Tensor:
    """Every parameter's gradient in one flat tensor (one collective, one sum per step)."""
    return torch.cat([p.grad.reshape(-1) for p in params])


def set_grads(params: Sequence[nn.Parameter], flat: Tensor) -> None:
    """Write a flat gradient (as :func:`flat_grads` lays it out) back into the parameters."""
    off = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[off:off + n].view_as(p))
        off += n


__all__ = ["count_correct", "evaluate", "flat_grads", "forward_backward", "predictions",
           "set_grads"]
