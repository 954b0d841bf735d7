"""Single-process mini-batch training: the baseline the distributed run must match.

It computes exactly what the distributed runtime computes, in one process and with no
network: the same :class:`~gnnsched.runtime.coordinator.Schedule` (steps and each trainer's
seeds), the same sampling function (:func:`~gnnsched.runtime.sampler.sample_blocks`, every
partition sampled in process with the same per-request seeds), the same model initialisation,
the same per-batch dropout seeds, and synchronous data parallelism emulated step by step:
each of the ``W`` virtual trainers runs forward/backward on its batch, the gradients are
averaged in trainer order (what the all-reduce computes), then one optimizer step. Floating
point sums over more than two trainers may associate differently, so the accuracy test allows
one point; with two trainers the runs agree to the bit on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gnnsched import metrics
from gnnsched.runtime.coordinator import Schedule, part_counts
from gnnsched.runtime.coordinator.schedule import eval_ids_of
from gnnsched.runtime.model import Block, build_model
from gnnsched.runtime.role import PHASES, pin_threads
from gnnsched.runtime.sampler import local_sampler, sample_blocks
from gnnsched.runtime.step import evaluate, flat_grads, forward_backward, predictions, set_grads
from gnnsched.runtime.store import PartGraph, load_parts
from gnnsched.spec import JobSpec


@dataclass
class ReferenceResult:
    val_accuracy: list[float]
    test_accuracy: float
    train_loss: list[float]
    seconds: float
    epoch_time_s: list[float] = field(default_factory=list)
    metric: str = "accuracy"  # the job's metric, resolved for the task (gnnsched.metrics)
    test_metric: float = float("nan")
    val_metric: list[float] = field(default_factory=list)
    majority_rate: float | None = None  # test accuracy of always predicting the commonest class
    num_classes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _gather(parts: dict[int, PartGraph], node_part: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    dim = next(iter(parts.values())).features.shape[1]
    out = np.empty((len(nodes), dim), dtype=np.float32)
    owner = node_part[nodes]
    for p, pg in parts.items():
        sel = owner == p
        if sel.any():
            out[sel] = pg.rows(nodes[sel])
    return out


def reference_train(job: JobSpec, partitions: str, trainer_parts: list[list[int]], *,
                    eval_batch_size: int | None = None,
                    progress: Callable[[str], None] | None = None,
                    slices: list[dict[int, tuple[float, float]]] | None = None,
                    threads: int = 1) -> ReferenceResult:
    """Train ``job`` in this process as ``len(trainer_parts)`` synchronous trainers would
    (``slices``: each trainer's share of split partitions, :func:`gnnsched.plan.seed_slices`).

    ``threads``: torch's intra-op threads for the gather and the training steps. Sampling
    always runs on one (DGL's sampling RNG streams depend on the thread count, and the
    reference trains the mini-batches a distributed run does), so more threads change the
    speed, never the batches."""
    from gnnsched.compat import dgl
    from gnnsched.datasets import open_partitions

    if threads < 1:
        raise ValueError(f"reference_train: threads must be >= 1 (got {threads})")
    saved = torch.get_num_threads()
    pin_threads(threads)

    def sampling() -> None:  # one OpenMP thread count for both libraries: set per stage
        dgl.utils.set_num_threads(1)

    def computing() -> None:
        if threads > 1:
            torch.set_num_threads(threads)

    torch.set_num_threads(threads)
    sampling()
    try:
        t0 = time.monotonic()
        pset = open_partitions(partitions, verify=False)
        parts = load_parts(partitions, list(range(pset.num_parts)))
        node_part = np.asarray(pset.node_part)
        W = len(trainer_parts)
        sched = Schedule(job, trainer_parts, part_counts(pset.meta), eval_batch_size, slices,
                         eval_ids_of(job, pset))
        sched.set_nodes({p: {k: pg.split(k) for k in PHASES} for p, pg in parts.items()})
        sample = local_sampler(parts)
        torch.manual_seed(job.seed)
        model = build_model(job.model, pset.feature_dim, job.hidden, pset.num_classes,
                            job.layers, job.dropout)
        opt = torch.optim.Adam(model.parameters(), lr=job.lr)
        loss_fn = torch.nn.CrossEntropyLoss()
        params = list(model.parameters())
        tally = metrics.EvalTally(metrics.resolve(job.metric, pset.num_classes, job.source))
        losses: dict[int, list[float]] = {}
        epoch_start: dict[int, float] = {}
        epoch_times: list[float] = []
        for item in sched.items:
            epoch_start.setdefault(item.epoch, time.monotonic())
            acc = None
            for w in range(W):
                seeds, labels = sched.batch(w, item)
                fanouts = job.fanouts if item.phase == 0 else job.evaluation_fanouts
                if threads > 1:
                    sampling()
                b = sample_blocks(seeds, list(fanouts), node_part, job.seed, w, item.seq,
                                  sample)
                computing()
                blocks = [Block(torch.from_numpy(s), torch.from_numpy(d), ns, nd)
                          for s, d, ns, nd in b.layers]
                x = torch.from_numpy(_gather(parts, node_part, b.input_nodes))
                y = torch.from_numpy(labels)
                if item.phase == 0:
                    _, loss = forward_backward(model, blocks, x, y, opt, loss_fn, job.seed, w,
                                               item.seq)
                    flat = flat_grads(params)
                    acc = flat if acc is None else acc + flat
                    losses.setdefault(item.epoch, []).append(float(loss.detach()))
                else:
                    out = evaluate(model, blocks, x)
                    tally.add((item.phase, item.epoch), labels, *predictions(out))
            if item.phase == 0:
                assert acc is not None
                set_grads(params, acc / W)  # what the trainers' all-reduce computes
                opt.step()
                if item.index == sched.K - 1:
                    epoch_times.append(time.monotonic() - epoch_start[item.epoch])
                    if progress:
                        progress(f"reference epoch {item.epoch + 1}: loss "
                                 f"{np.mean(losses[item.epoch]):.4f}")
        val = [k for k in sorted(tally.parts) if k[0] == 1 and tally.nodes(k)]
        test = [k for k in tally.parts if k[0] == 2 and tally.nodes(k)]
        nan = float("nan")
        return ReferenceResult(
            [tally.accuracy(k) for k in val], tally.accuracy(test[0]) if test else nan,
            [float(np.mean(losses[e])) for e in sorted(losses)], time.monotonic() - t0,
            epoch_times, metric=tally.metric, test_metric=tally.value(test[0]) if test else nan,
            val_metric=[tally.value(k) for k in val],
            majority_rate=metrics.majority_rate(tally.arrays(test[0])[0]) if test else None,
            num_classes=pset.num_classes)
    finally:
        torch.set_num_threads(saved)


__all__ = ["ReferenceResult", "reference_train"]
