"""Online scheduling policies: the same object drives the simulator and the live runtime.

A policy is event-in / decision-out. It never sees a clock it does not get told about, never
looks at simulator internals, and knows the size of a mini-batch only once it was sampled.

Contract (what a driver — :mod:`gnnsched.simulator` or the runtime's coordinator — must do)
------------------------------------------------------------------------------------------
Trainers are numbered ``0..W-1`` in the order of ``plan.trainers``; machines by their index in
``cluster.machines``. ``now`` is seconds since the run started.

1. ``reset(ctx)`` once, before anything runs, with the static :class:`PolicyContext`.
2. ``prefetch(trainer) -> int``: read once per trainer after ``reset``. Batch ``k`` of a
   trainer may start sampling only once batch ``k - prefetch`` started training (so at most
   ``prefetch`` mini-batches are buffered ahead of the one on the device).
3. ``pick_batch(candidates, now) -> BatchKey``: whenever a CPU core of a machine is free and
   more than one sampler on it could start a mini-batch. ``candidates`` are the next batch of
   each trainer whose sampler there is idle and whose prefetch window is open, listed in
   arrival order (the order they became ready). With a single candidate the driver may skip
   the call. Samplers of one trainer always build its batches in iteration order.
4. ``priority(transfer) -> tuple``: once, when a transfer is queued on the network; a sort
   key, smaller is more urgent. It may use anything learnt from earlier events, but the
   driver caches it for the transfer's lifetime. ``order(queue, now)`` sorts a NIC's queue by
   it; a live sender calls ``order`` on its own queue whenever it picks what to send next.
5. ``sharing`` says how a NIC serves its queue: ``"fair"`` — everything at once, bandwidth
   shared max-min fairly (what TCP gives); ``"priority"`` — in ``order``, each transfer gets
   what is left of min(sender egress, receiver ingress) after the ones before it
   (work-conserving strict priority); ``"classes"`` — strict priority between classes given
   by the first element of the priority key, max-min fair within a class (DSCP-like queues).
   ``wire_levels`` (with ``"priority"``): the first element of the priority key is a level
   that windowed senders keep on the wire ("Wire levels" in :mod:`gnnsched.workload`).
6. Events, as they happen: ``on_sampled(batch, info, now)`` when a mini-batch's sampling
   finished (its sizes are now known; called before its transfers are queued),
   ``on_transfer_done(transfer, now)``, ``on_trained(batch, now)`` when a trainer finished
   forward/backward of a batch (before the all-reduce), ``on_barrier(iteration, now)`` when
   the all-reduce of an iteration finished on every trainer.

A researcher adds a policy as one class with ``@register("name")``; ``fifo`` and ``gnnsched``
are built in.

The ``gnnsched`` policy and what it guarantees
----------------------------------------------
Rules, in priority order: (1) lower iteration first, everywhere (cores and every NIC) — the
barrier makes the oldest iteration the critical one; a remote-hop transfer of a batch being
sampled ranks with the data of the iteration before it, since it is small and unlocks that
batch's feature traffic on other NICs (Johnson's rule: short first stage, long second stage
first); (2) within an iteration, the slowest path first: a transfer whose min(egress, ingress)
is low cannot fill a shared NIC alone, so it should run alongside the others rather than be left
alone at the end; (3) then the transfer whose mini-batch has the most work left after it (its
relay and its training on the trainer's own device — the "tail") first; (4) NICs send in that
order instead of sharing, leftover bandwidth going to the next transfer (work-conserving, so
later iterations' prefetch uses what the current one cannot); (5) prefetch depth bounded by the
buffer memory of the trainer's machine.

Why (3) and not Johnson's rule: a transfer on a shared NIC followed by training on the
trainer's *own* device is a two-stage flow shop whose second stage is dedicated per job, i.e.
1|q_j|C_max, where largest-tail-first (Jackson's rule) is optimal; Johnson's rule is the
optimum when the second stage is shared too (the sampling -> transfer pairs of rule 1). Within
one trainer the fetch -> train pairs are a flow shop in a fixed order (the barrier fixes the
iteration order), so no rule has a choice there.

Measured (``bench/bench_scheduler.py``, ``docs/bench/scheduler.json``): on 24 small instances
with uniform NIC speeds, within 1% of CP-SAT's optimum (mean 0.994, max 1.006; fifo: mean
1.08, max 1.44) and never worse than ``fifo``; on 200 random small instances with mixed NIC
speeds, 4.1% faster than ``fifo`` on average but worse on 5 of them (by at most 1.8%) — strict
priority cannot always beat fair sharing when paths differ in speed, which rule (2) mitigates
but does not remove. On 4-256-host scenarios with one fixed placement: ``fifo`` 1.10x slower
(geometric mean), gnnsched 1.05x its lower bound on average.

Guarantee (iteration isolation). Let ``B_k`` be the end of iteration ``k``'s all-reduce,
``A`` the all-reduce time, ``s_max`` the longest sampling task. Under ``gnnsched``, for every
``k`` (with ``B_-1 = 0``)::

    B_k - B_{k-1} <= A + s_max + max_w ( C_{w,k} + sum_{r in R(w)} L_{r,k} )

where ``C_{w,k}`` is trainer ``w``'s batch-``k`` chain at full rate (sampling, remote hops,
block / features / relay, latencies, training), ``R(w)`` the resources that chain uses and
``L_{r,k}`` the work on resource ``r`` (bytes / bandwidth, CPU seconds / cores) of iteration
``k`` plus the remote hops of iteration ``k + 1``. Proof sketch: at ``B_{k-1}`` every iteration
below ``k`` is finished, so only that work ranks at or above iteration ``k``'s, and strict
priority means no other transfer takes bandwidth from it. Walk back the chain of the last
trainer: at every instant a chain task either runs at its full rate, or one of its resources is
saturated by that work (a transfer gets less than its full rate only if its egress or ingress
is used up by more urgent flows), or — CPU only, which is not preemptive — it waits for a core
held by a later iteration, for at most ``s_max`` in all, since no core picks later work while
iteration-``k`` work waits on its machine. ``fifo`` has no such bound: prefetched iterations
share the NICs with the current one. :func:`gnnsched.bounds.isolation_bound` computes the
right-hand side; tests check it on every iteration of random instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from gnnsched.plugins import POLICIES_GROUP
from gnnsched.registry import Registry


class BatchKey(NamedTuple):
    """A mini-batch: iteration ``iteration`` of trainer ``trainer`` (hashable, ordered)."""

    trainer: int
    iteration: int


@dataclass(slots=True)
class Transfer:
    """One transmission queued on the network. ``kind``: struct | block | feat | relay."""

    batch: BatchKey
    kind: str
    src: int  # machine index
    dst: int  # machine index
    nbytes: float
    created: float = 0.0  # when it was queued (seconds)
    seq: int = 0  # arrival order, tie-breaker


@dataclass(frozen=True)
class BatchInfo:
    """What becomes known about a mini-batch when its sampling finishes."""

    feat_bytes: float  # feature bytes to gather (all stores together)
    block_bytes: float  # sampled structure sent to the trainer
    train_s: float  # expected forward+backward seconds on the trainer's device
    feat_from: tuple[tuple[int, float], ...] = ()  # (store machine, bytes)
    sampler: int = -1  # machine that sampled it


@dataclass
class PolicyContext:
    """What is known before the run starts (static facts, no mini-batch sizes)."""

    trainers: int
    iterations: int
    prefetch: int  # the job's buffer bound, in mini-batches per trainer
    train_s: list[float] = field(default_factory=list)  # expected train s per trainer (device)
    fetch_s: list[float] = field(default_factory=list)  # expected feature-gathering s per trainer
    sample_s: list[float] = field(default_factory=list)  # expected sampling s per trainer
    egress: list[float] = field(default_factory=list)  # bytes/s per machine
    ingress: list[float] = field(default_factory=list)
    trainer_machine: list[int] = field(default_factory=list)
    fetch_machine: list[int] = field(default_factory=list)
    buffer_batches: list[int] = field(default_factory=list)  # batches the buffer memory holds


class Policy:
    """Base class: arrival order everywhere. Subclasses override the decisions they care about."""

    name: ClassVar[str] = "base"
    sharing: ClassVar[str] = "fair"  # "fair" | "priority" | "classes" (see the contract)
    # whether priority keys start with a level the runtime's stores keep on the wire: no
    # chunk of a higher level while one of a lower level is unacknowledged at the sender or
    # unfinished at the receiver ("Wire levels" in gnnsched.workload)
    wire_levels: ClassVar[bool] = False

    def reset(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    # -------------------------------------------------------------- events
    def on_sampled(self, batch: BatchKey, info: BatchInfo, now: float) -> None:
        """A mini-batch was sampled; its sizes (and so its fetch work) are now known."""

    def on_transfer_done(self, transfer: Transfer, now: float) -> None:
        """A transfer finished."""

    def on_trained(self, batch: BatchKey, now: float) -> None:
        """A trainer finished training `batch` (before the all-reduce barrier)."""

    def on_barrier(self, iteration: int, now: float) -> None:
        """Every trainer finished the all-reduce of `iteration`."""

    # -------------------------------------------------------------- decisions
    def pick_batch(self, candidates: list[BatchKey], now: float) -> BatchKey:
        """Which of the ready mini-batches a free core samples next (default: first arrived)."""
        return candidates[0]

    def priority(self, transfer: Transfer) -> tuple:
        """Sort key of a queued transfer, smaller first (default: arrival order)."""
        return (transfer.seq,)

    def order(self, queue: list[Transfer], now: float) -> list[Transfer]:
        """The order in which a NIC serves its queued transfers."""
        return sorted(queue, key=self.priority)

    def prefetch(self, trainer: int) -> int:
        """Mini-batches a trainer may buffer ahead: the job's depth, capped by memory."""
        depth = self.ctx.prefetch
        if self.ctx.buffer_batches:
            depth = min(depth, self.ctx.buffer_batches[trainer])
        return max(1, depth)


POLICIES: Registry[Policy] = Registry("policy", Policy, group=POLICIES_GROUP, flag="--policy")
register = POLICIES.register  # class decorator: make a policy available as ``--policy name``


def policies() -> dict[str, type[Policy]]:
    """Every policy by name: the built-ins and those installed as plug-ins
    (:mod:`gnnsched.registry`, entry point group ``gnnsched.policies``)."""
    return dict(POLICIES.load())


def get_policy(name: str | Policy) -> Policy:
    """A fresh policy object by name (a Policy instance is passed through); an unknown name
    raises :class:`~gnnsched.registry.UnknownName` listing the installed ones."""
    return POLICIES.create(name)


def choose_sampling(candidates: list[tuple[float, int]], next_step: Sequence[int],
                    policy: Policy, now: float) -> int:
    """The trainer whose next mini-batch a free sampling core starts (contract rule 3).

    ``candidates`` are ``(ready_since, trainer)`` for the trainers with an idle sampler on the
    machine and an open prefetch window (a trainer may appear more than once); listed oldest
    ready first, a lone candidate is taken without asking the policy. The simulator and the
    runtime's coordinator both dispatch through this, so they cannot drift apart.
    """
    cands = sorted(candidates)
    if len(cands) == 1:
        return cands[0][1]
    keys = [BatchKey(w, next_step[w]) for _, w in cands]
    return policy.pick_batch(keys, now).trainer


def gradient_contenders(egress: Sequence[float], ingress: Sequence[float],
                        trainer_machines: Iterable[int],
                        senders: Iterable[int]) -> dict[int, list[int]]:
    """Gradients first: per trainer machine ``m``, the sender machines whose traffic into ``m``
    would slow its all-reduce, so the runtime holds it while the gradients are on the wire
    (the simulator models the same priority as a gradient rate reserved on trainer NICs).

    A sender contends when it all-reduces itself (its egress carries gradients too) or when
    its egress plus the ring's gradient rate (the slowest trainer NIC) exceeds ``m``'s ingress
    (they would share it). A slow sender feeding a fast NIC takes nothing from the gradients:
    held, it would only idle. Depends on the plan alone, so drivers compute it once.
    """
    trainers = sorted(set(trainer_machines))
    if not trainers:
        return {}
    ring = min(min(egress[t], ingress[t]) for t in trainers)
    ts, sources, out = set(trainers), set(senders), {}  # read once: any iterable will do
    for m in trainers:  # 1.001: a sum that exactly fills the ingress (rounding aside) fits
        out[m] = sorted(s for s in sources
                        if s != m and (s in ts or egress[s] + ring > ingress[m] * 1.001))
    return out


# ------------------------------------------------------------------------------ built-ins


@register("fifo")
class Fifo(Policy):
    """What TCP and DistDGL do: requests in arrival order, every transfer at once, fair share."""

    sharing = "fair"


@register("gnnsched")
class GnnSched(Policy):
    """Lowest iteration first; within it the largest tail first; NICs send in priority order."""

    sharing = "priority"
    wire_levels = True  # the key's first element is the iteration (rule 1), on every NIC

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._train: dict[BatchKey, float] = {}
        self._relay: dict[BatchKey, float] = {}

    def on_sampled(self, batch: BatchKey, info: BatchInfo, now: float) -> None:
        self._train[batch] = info.train_s
        w = batch.trainer
        ctx = self.ctx
        if ctx.fetch_machine and ctx.fetch_machine[w] != ctx.trainer_machine[w]:
            f, t = ctx.fetch_machine[w], ctx.trainer_machine[w]
            self._relay[batch] = info.feat_bytes / min(ctx.egress[f], ctx.ingress[t])

    def on_trained(self, batch: BatchKey, now: float) -> None:
        self._train.pop(batch, None)
        self._relay.pop(batch, None)

    def _tail(self, transfer: Transfer) -> float:
        """Seconds of work the batch still needs after this transfer, before its barrier."""
        b, w = transfer.batch, transfer.batch.trainer
        ctx = self.ctx
        if transfer.kind == "struct":  # still sampling: everything downstream remains
            return (ctx.fetch_s[w] if ctx.fetch_s else 0.0) + (ctx.train_s[w] if ctx.train_s
                                                                 else 0.0)
        train = self._train.get(b, ctx.train_s[w] if ctx.train_s else 0.0)
        if transfer.kind == "feat":
            return train + self._relay.get(b, 0.0)
        return train

    def priority(self, transfer: Transfer) -> tuple:
        """(level, stage, path rate, -tail, arrival).

        level: the iteration, except that a remote-hop (struct) transfer — sampling of a batch
        that will be prefetched — ranks with the data of the iteration before it: it is small
        and unlocks the next batch's feature traffic on other NICs (Johnson: short first stage,
        long second stage first). Then the slowest path first: a transfer whose
        min(egress, ingress) is low cannot fill a shared NIC alone, so starting it early leaves
        bandwidth for the rest instead of ending with it alone. Then the largest tail first.
        """
        level = transfer.batch.iteration
        struct = transfer.kind == "struct"
        if struct:
            level -= 1
        ctx = self.ctx
        rate = min(ctx.egress[transfer.src], ctx.ingress[transfer.dst]) if ctx.egress else 0.0
        return (level, 0 if struct else 1, rate, -self._tail(transfer), transfer.seq)

    def pick_batch(self, candidates: list[BatchKey], now: float) -> BatchKey:
        ctx = self.ctx

        def key(ib: tuple[int, BatchKey]) -> tuple:
            i, b = ib
            tail = (ctx.fetch_s[b.trainer] + ctx.train_s[b.trainer]) if ctx.train_s else 0.0
            return (b.iteration, -tail, i)

        return min(enumerate(candidates), key=key)[1]


__all__ = ["POLICIES", "choose_sampling", "policies", "BatchInfo", "BatchKey", "Fifo", "GnnSched", "Policy", "PolicyContext",
           "Transfer", "get_policy", "register"]
