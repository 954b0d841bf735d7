"""What the coordinator asks of the planning side, as an interface passed in.

The runtime runs a plan; it does not make one. Two questions need the cost model or a placer,
and the coordinator asks them through an :class:`Advisor` it is given (``gnnsched.api.train``
passes :class:`gnnsched.advisor.PlanAdvisor`), so the runtime imports neither the simulator
nor the placement package, and a test or a plug-in can answer differently:

* :meth:`Advisor.reference` -- the policy's expected stage times for the plan, exactly what
  the simulator gives the same policy (only asked when the run has a cost profile; without one
  the coordinator learns them from measurements);
* :meth:`Advisor.replan` -- a new placement when recovery lost a machine (or ``replan:
  always``). The coordinator then pins each trainer to its old seeds and validates the plan.
"""

from __future__ import annotations

from typing import Any, Protocol

from gnnsched.plan import Plan
from gnnsched.spec import ClusterSpec, JobSpec

# Per trainer: expected train, fetch and sample seconds per mini-batch, and how many
# mini-batches its buffer memory holds (PolicyContext's train_s, fetch_s, sample_s,
# buffer_batches).
StageTimes = tuple[list[float], list[float], list[float], list[int]]


class Advisor(Protocol):
    """The planning side as the coordinator sees it (see the module docstring)."""

    def reference(self, cluster: ClusterSpec, job: JobSpec, plan: Plan,
                  profile: Any) -> StageTimes:
        """Expected stage times of ``plan`` under ``profile`` (a cost profile)."""
        ...

    def replan(self, cluster: ClusterSpec, job: JobSpec, plan: Plan, profile: Any, *,
               placer: str | None, budget: float, part_counts: list[dict[str, int]],
               feature_dim: int, num_classes: int) -> tuple[Plan, str]:
        """A plan for ``cluster`` (usually the old one without a lost machine) and the name
        of the placer that made it. ``plan`` is the one being replaced, ``placer`` the one
        to use (None: the old plan's own if it is known, else a default), ``budget`` the
        planning seconds. ``profile`` may be None: then ``part_counts`` (per part, its train /
        val / test node counts), ``feature_dim`` and ``num_classes`` describe the data well
        enough for a rough one -- a re-plan only has to place the lost tasks sensibly, now."""
        ...


__all__ = ["Advisor", "StageTimes"]
