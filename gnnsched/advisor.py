"""The planning side of a real run: reference stage times and re-plans for the coordinator.

:class:`PlanAdvisor` answers the runtime coordinator's two questions
(``gnnsched.runtime.coordinator.Advisor``) with the cost model, the simulator's mini-batch
draws and the placers. It lives here, in pure logic, so that the runtime never imports the
simulator or the placement package: ``gnnsched.api.train`` hands it to the coordinator.
This module must never import ``gnnsched.runtime``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnsched.plan import Plan
from gnnsched.spec import ClusterSpec, JobSpec

DEFAULT_REPLACER = "greedy"  # re-plans with this when the plan's own placer is not registered


class PlanAdvisor:
    """Reference times from the simulator's view of a plan; re-plans with a registered placer."""

    def reference(self, cluster: ClusterSpec, job: JobSpec, plan: Plan,
                  profile: Any) -> tuple[list[float], list[float], list[float], list[int]]:
        """The stage times the simulator gives the policy for ``plan`` (its
        :class:`~gnnsched.policy.PolicyContext`), so a live run plans with the same numbers."""
        from gnnsched.simulator import Instance, workload_for

        inst = Instance(workload_for(cluster, job, profile), plan, iterations=1)
        ref = inst.context(job.prefetch)
        return ref.train_s, ref.fetch_s, ref.sample_s, ref.buffer_batches

    def replan(self, cluster: ClusterSpec, job: JobSpec, plan: Plan, profile: Any, *,
               placer: str | None, budget: float, part_counts: list[dict[str, int]],
               feature_dim: int, num_classes: int) -> tuple[Plan, str]:
        """A placement on ``cluster`` by ``placer`` (None: ``plan``'s own if registered, else
        greedy) within ``budget`` seconds; without a ``profile``, a synthetic one shaped by the
        real partitions (:func:`rough_profile`)."""
        from gnnsched.placement import PLACERS, get_placer

        get_placer(DEFAULT_REPLACER)  # importing registers every placer
        name = placer or (plan.placer if plan.placer in PLACERS else DEFAULT_REPLACER)
        if profile is None:
            profile = rough_profile(job, part_counts, feature_dim, num_classes)
        new = get_placer(name).place(cluster, job, profile, seed=job.seed, budget=budget)
        return new, name


def rough_profile(job: JobSpec, part_counts: list[dict[str, int]], feature_dim: int,
                  num_classes: int) -> Any:
    """Without a cost profile, a synthetic one shaped by the real partitions: a re-plan
    only has to place the lost tasks sensibly, now, not optimally."""
    from gnnsched.profile import synthetic_profile

    return synthetic_profile(
        len(part_counts), batch_size=job.batch_size, fanouts=job.fanouts,
        seeds_per_part=max(1, int(np.mean([c["train"] for c in part_counts]))),
        feature_dim=feature_dim, hidden=job.hidden, num_classes=num_classes, seed=job.seed)


__all__ = ["PlanAdvisor", "rough_profile"]
