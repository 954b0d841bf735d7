"""What is trained when: the run's steps and each trainer's seeds per step.

Every trainer runs ``K = ceil(train seeds / (W * batch))`` iterations per epoch; trainer
``t``'s seeds (the training nodes of its plan's parts) are shuffled per epoch with seed (job
seed, epoch, t) and split into ``K`` near-equal batches, so each seed is trained exactly once
per epoch and nobody waits at epoch end (a trainer with fewer seeds gets smaller, possibly
empty, batches). Validation batches follow each ``eval_every``-th epoch (0: only the last)
and test batches the last one, equally many per trainer, of at most the job's evaluation
batch size. With ``evaluation: {max_nodes}`` the job evaluates one global sample of that many
nodes per phase: the ``max_nodes`` whose seeded hash of their original id
(:func:`node_hash`, a bijection, so there are no ties) is smallest over the whole graph
(:func:`eval_threshold`). It depends only on the job's seed and the node ids, never on the
plan, so every plan and system of a job scores the same nodes; each trainer evaluates the
members among its own nodes (:func:`in_sample`: its hash is at most the threshold), and
DistDGL's role draws the same sample (:mod:`gnnsched.runtime.distdgl_role`). Trainers that
share a partition (a plan's seed
``shares``) each take their slice of its nodes in a seeded order (:func:`slice_of`), so every
node is trained and evaluated by exactly one trainer. The single-process reference
(:mod:`gnnsched.runtime.reference`) uses the same :class:`Schedule`, which is why the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
                 slices: list[dict[int, tuple[float, float]]] | None = None,
                 eval_ids: Mapping[int, Mapping[str, np.ndarray]] | None = None) -> None:
        """``slices``: per trainer, {part: (from, to)} fractions of the part's nodes it owns
        (:func:`gnnsched.plan.seed_slices`); None: whole parts. ``eval_ids``: per part, the
        original ids of its ``val`` / ``test`` nodes, known before the stores announce them
        (:meth:`gnnsched.datasets.PartitionSet.split_ids`): with them each trainer's share of
        a capped phase's sample is counted exactly; without, the steps are bounded by
        ``min(its nodes, max_nodes)`` (the sample itself is the same either way)."""
        self.job, self.W = job, len(trainer_parts)
        self.trainer_parts = [list(p) for p in trainer_parts]
        self.slices = slices or [{p: (0.0, 1.0) for p in ps} for ps in trainer_parts]
        total = sum(c["train"] for c in part_counts)
        self.K = max(1, math.ceil(total / (self.W * job.batch_size)))
        self.eval_batch = eval_batch_size or job.eval_batch_size
        self.capped: set[str] = set()  # phases evaluated on the job's sample

        def steps(name: str) -> int:
            counts = [sum(len(range(*_cut(part_counts[p][name], self.slices[w][p])))
                          for p in ps) for w, ps in enumerate(trainer_parts)]
            cap = job.eval_max_nodes
            if cap is not None and sum(c[name] for c in part_counts) > cap:
                self.capped.add(name)
                if eval_ids is not None:
                    ids = {p: eval_ids[p][name] for p in range(len(part_counts))}
                    counts = [len(m) for m in self._members(name, ids)[1]]
                else:
                    counts = [min(c, cap) for c in counts]
            most = max(counts)
            return max(1, math.ceil(most / self.eval_batch)) if most else 0

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

    def _members(self, name: str, ids: Mapping[int, np.ndarray]
                 ) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
        """Per trainer, its slice of every part of ``ids`` (per part, one phase's original
        ids; :func:`slice_of`) and the indices into their concatenation that it evaluates:
        all of them, or in a capped phase the members of the job's global sample."""
        cuts = [[slice_of(ids[p], self.slices[w][p], self.job.seed) for p in ps]
                for w, ps in enumerate(self.trainer_parts)]
        mine = [_cat([np.asarray(ids[p], np.int64)[c] for p, c in zip(ps, cuts[w])])
                for w, ps in enumerate(self.trainer_parts)]
        if name not in self.capped:
            return cuts, [np.arange(len(m)) for m in mine]
        every = [np.asarray(ids[p], np.int64) for p in sorted(ids)]
        limit = eval_threshold(every, self.job.eval_max_nodes, self.job.seed)
        return cuts, [np.flatnonzero(in_sample(m, limit, self.job.seed)) for m in mine]

    def set_nodes(self, splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]) -> None:
        """Per part ``{train|val|test: (ids, labels)}`` (every part) -> per trainer, sorted
        by node id (a capped phase: the members of the job's sample among its nodes)."""
        self.nodes = [{} for _ in self.trainer_parts]
        for name in PHASES:
            cuts, keep = self._members(name, {p: splits[p][name][0] for p in splits})
            steps = self.n_val if name == "val" else self.n_test
            for w, ps in enumerate(self.trainer_parts):
                ids = _cat([splits[p][name][0][c] for p, c in zip(ps, cuts[w])])[keep[w]]
                lab = _cat([splits[p][name][1][c] for p, c in zip(ps, cuts[w])])[keep[w]]
                if name in self.capped and len(ids) > steps * self.eval_batch:
                    raise RuntimeError(f"trainer {w} holds {len(ids)} {name} nodes of the "
                                       f"sample, more than its {steps} steps of "
                                       f"{self.eval_batch}: the eval_ids given to the "
                                       "schedule are not the partitions' own")
                order = np.argsort(ids, kind="stable")
                self.nodes[w][name] = (ids[order], lab[order])

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


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    """``arrays`` end to end as int64 (none: an empty array)."""
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


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
    """A seeded pseudo-random 64-bit key per node id (splitmix64's finalizer, a bijection of
    uint64, so distinct ids never share a key): the evaluation sample is the nodes with the
    smallest keys, whichever trainer holds them."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % (1 << 64))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def lowest_keys(ids: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """The at most ``cap`` smallest :func:`node_hash` keys of ``ids``, sorted: what a holder of
    some of a phase's nodes contributes to finding the global sample's threshold."""
    keys = node_hash(np.asarray(ids, np.int64), seed)
    if len(keys) > cap:
        keys = keys[np.argpartition(keys, cap - 1)[:cap]]
    return np.sort(keys)


def eval_threshold(parts: Sequence[np.ndarray], cap: int | None, seed: int,
                   keys: bool = False) -> np.uint64 | None:
    """The largest key in the job's sample of one phase, whose nodes are ``parts``
    (original ids, split any way; ``keys``: already :func:`lowest_keys` of each): the
    ``cap``-th smallest key over them all. None: no cap, or no more nodes than it (all are
    evaluated). A node is in the sample iff its key is at most this (:func:`in_sample`)."""
    if cap is None:
        return None
    got = [np.asarray(p, np.uint64) if keys else lowest_keys(p, cap, seed) for p in parts]
    every = np.concatenate(got) if got else np.zeros(0, np.uint64)
    if len(every) <= cap:
        return None
    return np.uint64(np.partition(every, cap - 1)[cap - 1])


def in_sample(ids: np.ndarray, threshold: np.uint64 | None, seed: int) -> np.ndarray:
    """Which of ``ids`` belong to the sample of :func:`eval_threshold` (None: all)."""
    if threshold is None:
        return np.ones(len(ids), dtype=bool)
    return node_hash(np.asarray(ids, np.int64), seed) <= threshold


def eval_ids_of(job: JobSpec, pset: Any) -> dict[int, dict[str, np.ndarray]] | None:
    """What :class:`Schedule` counts a capped phase's steps from: the partition set's split
    ids when the job samples its evaluation (None otherwise, or for a directory without
    them). The coordinator and the single-process reference both call this, so their steps,
    and with them every step's seeds, agree."""
    if job.eval_max_nodes is None:
        return None
    return pset.split_ids()


def part_counts(meta: dict[str, Any]) -> list[dict[str, int]]:
    """Per part, its train / val / test node counts from a partition set's metadata."""
    return [{k: int(p.get(k, 0)) for k in PHASES} for p in meta["parts"]]


__all__ = ["Item", "Schedule", "eval_ids_of", "eval_threshold", "in_sample", "lowest_keys", "part_counts"]
