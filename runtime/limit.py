"""The box's compute limit for a job: its mini-batches sampled, gathered and trained in one
process, each stage by the fastest implementation at hand.

What a distributed run on this box is judged against (``gnnsched bench scale``): the job's
own mini-batches (the runtime's :class:`~gnnsched.runtime.coordinator.Schedule`: the same
seeds per trainer and step) sampled by DGL's C++ sampler on the whole graph or by gnnsched's
sampler on every partition in process (the faster), their input features gathered, and
forward, backward and the optimizer step by gnnsched's model or by ``dgl.nn.SAGEConv`` (the
faster), gathered by torch's indexing or by ``np.take`` into a kept buffer as gnnsched's stores
do (the faster). Measured on 1 thread for each stage's CPU seconds, then on ``threads`` threads for
the wall clock; the limit is the higher of the CPU bound (every core busy at the 1-thread
CPU-seconds per seed) and the wall clock. Call :func:`pipeline_limit` in a process of its
own: it sets torch's and DGL's thread counts.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gnnsched.plan import split_slices
from gnnsched.spec import JobSpec

STAGE_IMPLS = (("dgl", "DGL"), ("ours", "gnnsched"), ("sageconv", "dgl.nn.SAGEConv"))
# the gather's implementations: torch's indexing (``feat[idx]``, a fresh tensor) and the one
# gnnsched's stores and caches use (``np.take`` into a buffer kept between batches)
GATHER_IMPLS = (("torch", "torch indexing"), ("take", "np.take into a kept buffer"))


def set_threads(n: int) -> None:
    """torch's and DGL's intra-op threads (older DGL: OpenMP's default)."""
    import torch

    from gnnsched.compat import dgl

    torch.set_num_threads(n)
    try:
        dgl.utils.set_num_threads(n)
    except Exception:  # noqa: BLE001 - older DGL: OpenMP's default
        pass


def _clock(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall seconds and its CPU seconds (this process)."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    """A stage's median over the timed batches: robust to a batch slowed by other work on
    the box."""
    vals = [r.get(key) for r in rows]
    return float(np.median(vals)) if vals and all(v is not None for v in vals) else None


def _fastest(rows: list[dict[str, Any]], kind: str, suffix: str,
             impls: tuple[tuple[str, str], ...] = STAGE_IMPLS) -> tuple[float, str]:
    """The fastest implementation of stage ``kind`` (its median) and its name."""
    opts = [(_median(rows, f"{kind}_{impl}_{suffix}"), name) for impl, name in impls]
    return min((v, n) for v, n in opts if v is not None)


class _Probe:
    """The job's graph, schedule, models and samplers, loaded once; times one batch."""

    def __init__(self, job: JobSpec, partitions: str, split: list[Any]) -> None:
        import torch

        from gnnsched.compat import dgl
        from gnnsched.datasets import open_partitions
        from gnnsched.runtime.coordinator import Schedule, part_counts
        from gnnsched.runtime.model import build_model

        self.job = job
        t0 = time.perf_counter()
        pset = open_partitions(partitions, verify=False)
        graph = pset.full_graph()
        self.g = graph.to_dgl().formats(["csc"])
        self.node_part = np.asarray(pset.node_part)
        self.sched = self._schedule(job, pset, graph, split, Schedule, part_counts)
        self.feat_np = np.ascontiguousarray(graph.features, dtype=np.float32)
        self.feat = torch.from_numpy(self.feat_np)
        self.buf = np.empty((0, self.feat_np.shape[1]), np.float32)  # the take's kept buffer
        del graph
        self.sampler = dgl.dataloading.NeighborSampler(list(job.fanouts))
        self.own_sampler = self._own_sampler(partitions, pset.num_parts)
        self.load_s = time.perf_counter() - t0
        torch.manual_seed(job.seed)
        self.ours = build_model(job.model, pset.feature_dim, job.hidden, pset.num_classes,
                                job.layers, job.dropout)
        self.opt = torch.optim.Adam(self.ours.parameters(), lr=job.lr)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.theirs = self.opt2 = None
        if job.model == "sage":
            from gnnsched.runtime.distdgl_role import build_model as distdgl_model

            self.theirs = distdgl_model(pset.feature_dim, job.hidden, pset.num_classes,
                                        job.layers, job.dropout)
            self.opt2 = torch.optim.Adam(self.theirs.parameters(), lr=job.lr)

    @staticmethod
    def _schedule(job: JobSpec, pset: Any, graph: Any, split: list[Any], schedule: Any,
                  part_counts: Any) -> Any:
        """The runtime's schedule of ``split``, with every partition's seeds and labels."""
        from gnnsched.runtime.coordinator.schedule import eval_ids_of

        masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
        node_part = np.asarray(pset.node_part)
        splits = {}
        for p in range(pset.num_parts):
            splits[p] = {}
            for k, m in masks.items():
                ids = np.nonzero(m & (node_part == p))[0]
                splits[p][k] = (ids, graph.labels[ids])
        split_parts, slices = split_slices(split)
        sched = schedule(job, split_parts, part_counts(pset.meta), None, slices,
                         eval_ids_of(job, pset))
        sched.set_nodes(splits)
        return sched

    @staticmethod
    def _own_sampler(partitions: str, num_parts: int) -> Any:
        """gnnsched's sampler over every partition in this process (what the reference
        runs), or None where it cannot load: DGL's sampler still gives the limit."""
        try:
            from gnnsched.runtime.sampler import local_sampler
            from gnnsched.runtime.store import load_parts

            return local_sampler(load_parts(partitions, list(range(num_parts))))
        except Exception as exc:  # noqa: BLE001 - DGL's sampler still gives the limit
            print(f"gnnsched's sampler not timed: {exc}", file=sys.stderr, flush=True)
            return None

    def steps(self, n: int) -> list[tuple[int, Any]]:
        """The first ``n`` non-empty (trainer, item) steps of the first epoch."""
        sched = self.sched
        steps = [(w, it) for it in sched.items if it.phase == 0 for w in range(sched.W)]
        return [x for x in steps if len(sched.batch(*x)[0])][:n]

    def one(self, w: int, it: Any, every: bool) -> dict[str, Any]:
        """One batch: DGL's sampling, the gather, gnnsched's and SAGEConv's training step
        and (``every``) gnnsched's sampling, each timed."""
        import torch

        from gnnsched.runtime.model import Block
        from gnnsched.runtime.step import forward_backward

        job = self.job
        seeds, labels = self.sched.batch(w, it)
        y = torch.from_numpy(labels)
        row: dict[str, Any] = {"seeds": int(len(seeds))}
        (inp, _, blocks), row["sample_dgl_s"], row["sample_dgl_cpu"] = _clock(
            lambda: self.sampler.sample_blocks(self.g, torch.from_numpy(seeds)))
        row["input_nodes"] = int(len(inp))
        x, row["gather_torch_s"], row["gather_torch_cpu"] = _clock(lambda: self.feat[inp])
        idx = inp.numpy()
        if len(self.buf) < len(idx):  # grown outside the clock, as a store sizes its buffer
            self.buf = np.empty((max(len(idx), 2 * len(self.buf)), self.buf.shape[1]),
                                np.float32)
        out = self.buf[:len(idx)]
        _, row["gather_take_s"], row["gather_take_cpu"] = _clock(
            lambda: np.take(self.feat_np, idx, axis=0, out=out))
        assert np.array_equal(out, x.numpy()), "the two gathers disagree"
        mine = []
        for b in blocks:  # DGL's block as gnnsched's (edges grouped by destination): untimed
            u, v = b.edges()
            order = torch.argsort(v, stable=True)
            mine.append(Block(u[order], v[order], int(b.num_src_nodes()),
                              int(b.num_dst_nodes())))

        def train_ours() -> None:
            forward_backward(self.ours, mine, x, y, self.opt, self.loss_fn, job.seed, w, it.seq)
            self.opt.step()

        _, row["train_ours_s"], row["train_ours_cpu"] = _clock(train_ours)
        if self.theirs is not None:
            _, row["train_sageconv_s"], row["train_sageconv_cpu"] = _clock(
                lambda: self._train_theirs(blocks, x, y))
        if every and self.own_sampler is not None:
            from gnnsched.runtime.sampler import sample_blocks

            _, row["sample_ours_s"], row["sample_ours_cpu"] = _clock(
                lambda: sample_blocks(seeds, list(job.fanouts), self.node_part, job.seed, w,
                                      it.seq, self.own_sampler))
        return row

    def _train_theirs(self, blocks: Any, x: Any, y: Any) -> None:
        assert self.theirs is not None and self.opt2 is not None
        self.theirs.train()
        loss = self.loss_fn(self.theirs(blocks, x), y)
        self.opt2.zero_grad()
        loss.backward()
        self.opt2.step()


def _phase(probe: _Probe, steps: list[tuple[int, Any]], threads: int,
           warm: int) -> dict[str, Any]:
    """Every step timed on ``threads`` threads: the per-batch seconds of the fastest stages
    (CPU seconds on 1 thread, wall seconds on more) over the steps after ``warm``."""
    set_threads(threads)
    rows = []
    for i, (w, it) in enumerate(steps):
        try:
            rows.append(probe.one(w, it, threads == 1))
        except Exception as exc:  # noqa: BLE001 - gnnsched's sampler may fail: DGL's
            print(f"    compute limit: {exc}", file=sys.stderr, flush=True)
            probe.own_sampler = None
            rows.append(probe.one(w, it, False))
        r = rows[-1]
        print(f"    compute limit, {threads} thread(s): batch {i + 1}/{len(steps)}: "
              + ", ".join(f"{k.removesuffix('_s')} {v:.3f} s" for k, v in r.items()
                          if k.endswith("_s")), file=sys.stderr, flush=True)
    rows_t = rows[warm:] or rows
    suffix = "cpu" if threads == 1 else "s"
    sample, s_by = _fastest(rows_t, "sample", suffix)
    train, t_by = _fastest(rows_t, "train", suffix)
    gather, g_by = _fastest(rows_t, "gather", suffix, GATHER_IMPLS)
    return {
        "batches": rows, "seeds_per_batch": float(np.median([r["seeds"] for r in rows_t])),
        "seconds_per_batch": sample + gather + train, "sample_by": s_by, "train_by": t_by,
        "gather_by": g_by,
        "stage_s_per_batch": {k: _median(rows_t, k) for k in rows_t[0] if k.endswith("_s")},
        "stage_cpu_s_per_batch": {k.removesuffix("_cpu") + "_s": _median(rows_t, k)
                                  for k in rows_t[0] if k.endswith("_cpu")},
        "input_nodes": float(np.mean([r["input_nodes"] for r in rows_t]))}


def pipeline_limit(job: JobSpec, partitions: str, split: list[Any], threads: int = 2,
                   batches: tuple[int, int] = (2, 6)) -> dict[str, Any]:
    """The box's compute limit for ``job`` (see the module docstring): ``batches`` = (warm-up,
    timed) mini-batches of seed split ``split`` on the partitions in ``partitions``, on 1
    thread and on ``threads``. Returns the per-batch stage times of both (``phases``), the
    CPU-seconds per seed, the CPU bound and the wall-clock throughput in seeds/s, and
    ``seeds_per_s``, the higher of the two (``by``: which)."""
    probe = _Probe(job, partitions, split)
    warm, timed = (int(x) for x in batches)
    steps = probe.steps(warm + timed)
    phases = {str(n): _phase(probe, steps, n, warm) for n in (1, int(threads))}
    one_t, two_t = phases["1"], phases[str(int(threads))]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu_per_seed = one_t["seconds_per_batch"] / one_t["seeds_per_batch"]
    by_cpu = (cores or 1) / cpu_per_seed
    by_wall = two_t["seeds_per_batch"] / two_t["seconds_per_batch"]
    return {"threads": int(threads), "cores": cores, "load_s": probe.load_s, "warm": warm,
            "timed": len(steps) - warm, "phases": phases, "cpu_s_per_seed": cpu_per_seed,
            "cpu_bound_seeds_per_s": by_cpu, "wall_seeds_per_s": by_wall,
            "seeds_per_s": max(by_cpu, by_wall),
            "by": "CPU" if by_cpu >= by_wall else "wall",
            "input_nodes": one_t["input_nodes"]}


__all__ = ["pipeline_limit", "set_threads"]
