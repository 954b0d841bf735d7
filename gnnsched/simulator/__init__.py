"""Discrete-event simulation of synchronous mini-batch GNN training under a placement.

Semantics (the costs themselves come from :class:`gnnsched.workload.Workload`):

* Every trainer runs ``K`` iterations; its mini-batch ``k`` is drawn (seeded) from the profiled
  samples of its partitions, in proportion to their training seeds (:class:`Instance`). The
  draws are keyed by the seed and the trainer's parts (:meth:`Workload.draws`), so a trainer's
  mini-batches do not change with its number in the plan or where it runs.
* **Sampling**: a sampler process of the trainer takes a CPU core of its machine for
  ``sample_s``, then waits (process held, core released) for the sampled edges of its remote
  hops, one transfer from every other store that owns a frontier. On the runtime's NICs
  (``nic_window_s``) those answers leave only after the hops' round trips: one per layer (a
  store of the seeds' partitions is asked in every layer, the others from the second), each
  request and answer waiting behind what the two machines' connections park in their FIFO NIC
  queues (up to ``nic_fifo_bytes`` each, :data:`gnnsched.workload.NIC_FIFO_BYTES`;
  ``_Epoch.hop_wait``). Fair sharing alone let a small answer through at once; on the
  held-out cluster (``tests/commands/test_heldout_cluster.py``) that missed samplers waiting
  4x longer than predicted on a busy store. A machine never runs more
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
  ``nic_window_s`` the NICs are the gnnsched runtime's instead: one TCP connection per
  (sender, receiver), each handed its next chunk (``NIC_CHUNK_S`` of the sender's egress) from
  the most urgent transfer in the policy's order while less than the runtime's per-receiver
  share of that window (``PEER_WINDOW_S`` of ``NIC_WINDOW_S``) is queued in it, connections
  sharing the NICs fairly (:class:`_WindowNet`); a transfer waiting
  behind a full window goes past it while the sender's NIC idles behind congested receivers
  (:data:`gnnsched.workload.CONSERVE_BELOW`); with the policy's ``wire_levels`` a sender
  hands no chunk of a later iteration while an earlier one's are in its connections, nor
  to a receiver with an earlier iteration unfinished from any sender (wire levels,
  :mod:`gnnsched.workload`), as the runtime's stores do.
* **Network model** of the user-facing prediction (:func:`gnnsched.api.simulate`, ``gnnsched
  simulate``): ``windowed`` by default, the runtime's NICs with the runtime's window
  (:data:`gnnsched.workload.NIC_WINDOW_S`); ``ideal`` is the policy's ``sharing`` above
  (:func:`network_window` maps the name to ``nic_window_s``). :func:`simulate` itself keeps
  ``nic_window_s=None`` (ideal) as its default: placement scores with it.
* **Training**: ``train_s / speed`` on the trainer's device once the block and the features
  arrived and the previous iteration's all-reduce finished. When every trainer finished
  batch ``k``, a ring all-reduce of ``Workload.allreduce_s`` runs; during it each trainer
  machine's NIC carries its gradient bytes at a reserved rate (ahead of all other traffic), so
  NIC loads match the lower bound's. A profile calibrated from a run may say trainers leave
  it apart (``barrier_skew_s``): each trainer's next step then waits its own draw of that.

Modules, in the order the data flows: :mod:`gnnsched.instance` draws the mini-batches of a
plan (:class:`Instance`, outside this package so that :mod:`gnnsched.bounds` needs no
simulator), :mod:`.network` shares the NICs among transfers (priority, fair, classes),
:mod:`.window` is the runtime's windowed NICs over those, :mod:`.engine` runs the events and
builds the :class:`SimResult`.

Completions sit in one heap with lazy invalidation; events at the same instant are coalesced
before rates are recomputed; ``record=False`` skips the timeline. Measured: 64 trainers x 500
iterations (256,500 events) in ~10 CPU-seconds with either policy, ~25k events/s
(``bench/bench_scheduler.py``). Placement search can pass ``iterations`` to simulate fewer and
extrapolate the epoch; a planner on a budget passes ``deadline`` (or ``max_events``), past
which a simulation stops with :class:`SimulationCut`, keeping the iterations it had done.

Output: :class:`SimResult` — epoch and steady-state iteration time, the instance's lower bound,
per-batch timestamps, per-resource utilisation, per-trainer stage times, the critical path and,
with ``record=True``, the timeline as :class:`Span` rows.
"""

from __future__ import annotations

from gnnsched.instance import Instance, workload_for
from gnnsched.simulator.engine import (
    KINDS,
    Segment,
    SimResult,
    SimulationCut,
    Span,
    critical_path,
    run,
    simulate,
)
from gnnsched.simulator.network import _FairNet, _Flow, _PriorityNet
from gnnsched.simulator.window import _WindowNet
from gnnsched.workload import NIC_WINDOW_S

# The network models a prediction can use, by name: what each means, for help texts and output.
NETWORKS = {
    "windowed": "the runtime's NICs: one TCP connection per store and receiver, "
                "each handed the store's next transfer for it, in the policy's order, while "
                "less than its send window of the store's egress is queued in it (past it "
                "while the store's NIC idles behind congested receivers), connections "
                "sharing the NICs fairly",
    "ideal": "ideal NICs that serve their queue as the policy's sharing says (strict priority "
             "or max-min fair), with no send window",
}
DEFAULT_NETWORK = "windowed"  # what the runtime does; `gnnsched simulate`'s and the API's default


def network_window(network: str | None = None, nic_window_s: float | None = None
                   ) -> tuple[str, float | None]:
    """The network model's name and the ``nic_window_s`` the engine takes for it.

    ``network`` None is :data:`DEFAULT_NETWORK`, unless a window is given (which only the
    windowed model has). ``windowed`` uses ``nic_window_s``, else the runtime's
    :data:`~gnnsched.workload.NIC_WINDOW_S`; ``ideal`` has no window, and refuses one.
    """
    if network is None:
        network = DEFAULT_NETWORK
    if network not in NETWORKS:
        raise ValueError(f"unknown network model {network!r} (valid: "
                         f"{', '.join(NETWORKS)})")
    if nic_window_s is not None and not nic_window_s > 0:
        raise ValueError(f"nic_window_s must be > 0 seconds or None, got {nic_window_s!r}")
    if network == "ideal":
        if nic_window_s is not None:
            raise ValueError("the ideal network has no send window: drop nic_window_s, or "
                             "use the windowed network")
        return network, None
    return network, NIC_WINDOW_S if nic_window_s is None else float(nic_window_s)


def network_name(nic_window_s: float | None) -> str:
    """The model a simulation used, from its ``meta["nic_window_s"]``."""
    return "ideal" if nic_window_s is None else "windowed"


__all__ = ["DEFAULT_NETWORK", "KINDS", "NETWORKS", "Instance", "Segment", "SimResult",
           "SimulationCut", "Span",
           "critical_path", "network_name", "network_window", "run", "simulate",
           "workload_for", "_FairNet", "_Flow", "_PriorityNet", "_WindowNet"]
