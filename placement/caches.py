"""Feature caches for a placed plan: how many remote feature rows each gatherer host keeps.

A cache is worth its memory where its machine gathers features (a trainer fetching in its
own process, or a relay) and the rows it saves would otherwise cross a NIC. The rule is
simple on purpose: every gathering machine gives its caches ``share`` of the memory the plan
leaves free there (after stored partitions, processes and buffers: :func:`usage`), up to
every node it does not store. A host too small for its partition has no free memory, so no
cache; a host with memory to spare replicates the hottest rows first (in-degree order,
:mod:`gnnsched.datasets.hot`). The simulator and the bounds charge what a cache saves from
the profile's measured coverage curve (:meth:`gnnsched.workload.Workload.cache_hit`).
"""

from __future__ import annotations

import math

from gnnsched.placement.feasibility import gatherers, usage
from gnnsched.placement.problem import Problem
from gnnsched.plan import Plan

DEFAULT_SHARE = 0.5  # of a gathering host's free memory


def size_caches(problem: Problem, plan: Plan, share: float = DEFAULT_SHARE) -> Plan:
    """``plan`` with a cache on every gathering machine: ``share`` of its free memory (0:
    no caches), at most every node it does not store. Needs the profile's node count."""
    if not 0 <= share <= 1:
        raise ValueError(f"cache share must be in [0, 1], got {share!r}")
    wl = problem.wl
    if share == 0 or wl.num_nodes <= 0:
        return plan.with_caches({})
    free = usage(problem, plan.with_caches({}))
    row = float(problem.profile.feature_bytes)
    caches: dict[str, int] = {}
    for name, n in gatherers(plan).items():
        m = problem.cluster.machine_index(name)
        spare = problem.cluster.machines[m].memory - float(free.memory[m])
        budget = share * spare / n - 4.0 * wl.num_nodes  # per gatherer, less its row map
        if budget <= row:
            continue
        remote = wl.num_nodes
        if wl.part_nodes is not None:
            remote -= int(wl.part_nodes[wl.store == m].sum())
        rows = min(int(remote), math.floor(budget / row))
        if rows > 0:
            caches[name] = rows
    return plan.with_caches(caches)


__all__ = ["DEFAULT_SHARE", "size_caches"]
