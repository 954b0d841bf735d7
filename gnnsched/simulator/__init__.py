"""Discrete-event simulation of synchronous mini-batch GNN training under a placement.

Semantics (the costs themselves come from :class:`gnnsched.workload.Workload`):

* Every trainer runs ``K`` iterations; its mini-batch ``k`` is drawn (seeded) from the profiled
  samples of its partitions, in proportion to their training seeds (:class:`Instance`). The
  draws are keyed by the seed and the trainer's parts (:meth:`Workload.draws`), so a trainer's
  mini-batches do not change with its number in the plan or where it runs.
* **Sampling**: a sampler process of the trainer takes a CPU core of its machine for
  ``sample_s``, then waits (process held, core released) for the sampled edges of its remote
  hops, one transfer from every other store that owns a frontier. A machine never runs more
  sampling tasks than it has cores; a trainer never more than it has sampler processes there.
  A trainer's batches are dispatched in iteration order; batch ``k`` may start once batch
  ``k - prefetch`` started training (bounded buffer).
* **Transfers** after sampling: the block sampler -> trainer, features store -> ``fetch_at``
  for every store with input nodes, then — when ``fetch_at`` is not the trainer's machine —
  one relay ``fetch_at`` -> trainer. Same-machine transfers are free; each network transfer
  is delayed by the cluster's one-way latency after its last byte.
* **NICs**: a transfer uses its sender's egress and its receiver's ingress; its rate is limited
  by both. ``fair`` policies share them max-min fairly; ``priority`` policies serve flows in
  the policy's order, each taking what is left of min(egress, ingress) — work-conserving;
  ``classes`` is strict priority between classes and max-min fair within one. With
  ``nic_window_s`` the NICs are the gnnsched runtime's instead: a sender hands transfers to
  its kernel, in the policy's order, while less than that many seconds of its egress are
  queued there, and the kernel sends them over one TCP connection per receiver, in that
  order, connections sharing the NICs fairly (:class:`_WindowNet`).
* **Training**: ``train_s / speed`` on the trainer's device once the block and the features
  arrived and the previous iteration's all-reduce finished. When every trainer finished
  batch ``k``, a ring all-reduce of ``Workload.allreduce_s`` runs; during it each trainer
  machine's NIC carries its gradient bytes at a reserved rate (ahead of all other traffic), so
  NIC loads match the lower bound's. A profile calibrated from a run may say trainers leave
  it apart (``barrier_skew_s``): each trainer's next step then waits its own draw of that.

Modules, in the order the data flows: :mod:`gnnsched.instance` draws the mini-batches of a
plan (:class:`Instance`, outside this package so that :mod:`gnnsched.bounds` needs no
simulator), :mod:`.network` shares the NICs among transfers, :mod:`.engine` runs the events
and builds the :class:`SimResult`.

Completions sit in one heap with lazy invalidation; events at the same instant are coalesced
before rates are recomputed; ``record=False`` skips the timeline. Measured: 64 trainers x 500
iterations (256,500 events) in ~10 CPU-seconds with either policy, ~25k events/s
(``bench/bench_scheduler.py``). Placement search can pass ``iterations`` to simulate fewer and
extrapolate the epoch.

Output: :class:`SimResult` — epoch and steady-state iteration time, the instance's lower bound,
per-batch timestamps, per-resource utilisation, per-trainer stage times, the critical path and,
with ``record=True``, the timeline as :class:`Span` rows.
"""

from gnnsched.instance import Instance, workload_for
from gnnsched.simulator.engine import (
    KINDS,
    Segment,
    SimResult,
    Span,
    critical_path,
    run,
    simulate,
)
from gnnsched.simulator.network import _FairNet, _Flow, _PriorityNet, _WindowNet

__all__ = ["KINDS", "Instance", "Segment", "SimResult", "Span", "critical_path", "run",
           "simulate", "workload_for", "_FairNet", "_Flow", "_PriorityNet", "_WindowNet"]
