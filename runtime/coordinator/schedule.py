"""What is trained when: the run's steps and each trainer's seeds per step.

Every trainer runs ``K = ceil(train seeds / (W * batch))`` iterations per epoch; trainer
``t``'s seeds (the training nodes of its plan's parts) are shuffled per epoch with seed (job
seed, epoch, t) and split into ``K`` near-equal batches, so each seed is trained exactly once
per epoch and nobody waits at epoch end (a trainer with fewer seeds gets smaller, possibly
empty, batches). Validation batches follow each ``eval_every``-th epoch (0: only the last)
and test batches the last one, equally many per trainer, of at most the job's evaluation
batch size. With ``evaluation: {max_nodes}`` each trainer evaluates its share of that many
nodes: those of its nodes whose seeded hash is smallest, so the sample is the same in every
run of the job, whatever the placement. Trainers that share a partition (a plan's seed
``shares``) each take their slice of its nodes in a seeded order (:func:`slice_of`), so every
node is trained and evaluated by exactly one trainer. The single-process reference
(:mod:`gnnsched.runtime.reference`) uses the same :class:`Schedule`, which is why the two agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnsched.runtime.role import PHASES, seed_of
from gnnsched.spec import JobSpec


@dataclass(frozen=True)
class Item:
    """One step of every trainer: ``phase`` 0 train, 1 validation, 2 test."""

    seq: int
    epoch: int
    phase: int
    index: int


class Schedule:
    """The run's sequence of steps and each trainer's seeds (identical in the reference)."""

    def __init__(self, job: JobSpec, trainer_parts: list[list[int]],
                 part_counts: list[dict[str, int]], eval_batch_size: int | None = None,
                 slices: list[dict[int, tuple[float, float]]] | None = None) -> None:
        """``slices``: per trainer, {part: (from, to)} fractions of the part's nodes it owns
        (:func:`gnnsched.plan.seed_slices`); None: whole parts."""
        self.job, self.W = job, len(trainer_parts)
        self.trainer_parts = [list(p) for p in trainer_parts]
        self.slices = slices or [{p: (0.0, 1.0) for p in ps} for ps in trainer_parts]
        total = sum(c["train"] for c in part_counts)
        self.K = max(1, math.ceil(total / (self.W * job.batch_size)))
        batch = eval_batch_size or job.eval_batch_size
        self.cap: dict[str, list[int]] = {}  # phase -> nodes each trainer evaluates

        def steps(name: str) -> int:
            counts = [sum(len(range(*_cut(part_counts[p][name], self.slices[w][p])))
                          for p in ps) for w, ps in enumerate(trainer_parts)]
            every = sum(counts)
            if job.eval_max_nodes is not None and every > job.eval_max_nodes:
                counts = [min(c, math.ceil(job.eval_max_nodes * c / every)) for c in counts]
                self.cap[name] = counts
            most = max(counts)
            return max(1, math.ceil(most / batch)) if most else 0

        self.n_val, self.n_test = steps("val"), steps("test")
        items: list[Item] = []
        for e in range(job.epochs):
            items += [Item(len(items) + k, e, 0, k) for k in range(self.K)]
            every = job.eval_every
            if self.n_val and ((every and (e + 1) % every == 0) or e == job.epochs - 1):
                items += [Item(len(items) + k, e, 1, k) for k in range(self.n_val)]
        items += [Item(len(items) + k, job.epochs - 1, 2, k) for k in range(self.n_test)]
        self.items = items
        self.nodes: list[dict[str, tuple[np.ndarray, np.ndarray]]] = []
        self._perm: dict[tuple[int, int], list[np.ndarray]] = {}

    def set_nodes(self, splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]) -> None:
        """Per part ``{train|val|test: (ids, labels)}`` -> per trainer, sorted by node id
        (evaluation nodes sampled down to the job's cap)."""
        self.nodes = []
        for w, ps in enumerate(self.trainer_parts):
            mine = {}
            for name in PHASES:
                cuts = [slice_of(splits[p][name][0], self.slices[w][p], self.job.seed)
                        for p in ps]
                ids = np.concatenate([splits[p][name][0][c] for p, c in zip(ps, cuts)]
                                     ).astype(np.int64)
                lab = np.concatenate([splits[p][name][1][c] for p, c in zip(ps, cuts)]
                                     ).astype(np.int64)
                if name in self.cap and len(ids) > self.cap[name][w]:
                    keep = np.argsort(node_hash(ids, self.job.seed), kind="stable")
                    keep = keep[:self.cap[name][w]]
                    ids, lab = ids[keep], lab[keep]
                order = np.argsort(ids, kind="stable")
                mine[name] = (ids[order], lab[order])
            self.nodes.append(mine)

    def batch(self, trainer: int, item: Item) -> tuple[np.ndarray, np.ndarray]:
        """(seeds, labels) of ``trainer`` at ``item``."""
        ids, lab = self.nodes[trainer][PHASES[item.phase]]
        if item.phase == 0:
            key = (trainer, item.epoch)
            if key not in self._perm:
                rng = np.random.default_rng(seed_of(self.job.seed, item.epoch, trainer))
                self._perm = {k: v for k, v in self._perm.items() if k[1] >= item.epoch - 1}
                self._perm[key] = np.array_split(rng.permutation(len(ids)), self.K)
            sel = self._perm[key][item.index]
        else:
            n = self.n_val if item.phase == 1 else self.n_test
            sel = np.array_split(np.arange(len(ids)), n)[item.index]
        return ids[sel], lab[sel]

    def record_seqs(self) -> dict[int, int]:
        """Epoch -> the step after whose barrier its record (and validation) is complete."""
        out = {}
        for i, it in enumerate(self.items):
            nxt = self.items[i + 1] if i + 1 < len(self.items) else None
            if it.phase != 2 and (nxt is None or nxt.epoch != it.epoch or nxt.phase == 2):
                out[it.epoch] = it.seq
        return out


def _cut(n: int, frac: tuple[float, float]) -> tuple[int, int]:
    """Index range of the slice ``frac`` = (from, to) of ``n`` items."""
    return int(round(frac[0] * n)), int(round(frac[1] * n))


def slice_of(ids: np.ndarray, frac: tuple[float, float], seed: int) -> np.ndarray:
    """Indices into ``ids`` of the slice ``frac`` = (from, to) of a partition's nodes, in a
    seeded order (:func:`node_hash`): consecutive slices of one partition never overlap and
    together cover it, and each is a random sample of the partition."""
    lo, hi = _cut(len(ids), frac)
    if (lo, hi) == (0, len(ids)):
        return np.arange(len(ids))
    order = np.argsort(node_hash(np.asarray(ids), seed), kind="stable")
    return np.sort(order[lo:hi])


def node_hash(ids: np.ndarray, seed: int) -> np.ndarray:
    """A seeded pseudo-random 64-bit key per node id (splitmix64): the evaluation sample is
    the nodes with the smallest keys, whichever trainer holds them."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % (1 << 64))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def part_counts(meta: dict[str, Any]) -> list[dict[str, int]]:
    """Per part, its train / val / test node counts from a partition set's metadata."""
    return [{k: int(p.get(k, 0)) for k in PHASES} for p in meta["parts"]]


__all__ = ["Item", "Schedule", "part_counts"]
