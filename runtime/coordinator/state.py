"""Where a run stands: the state the coordinator's components share.

The :class:`~.core.Coordinator` owns one :class:`RunState` and hands it to its components
(:class:`~.roles.RoleTable`, :class:`~.driver.PolicyDriver`, :class:`~.recovery.Recovery`),
so each reads the plan being run and the run's progress from one place instead of through
the coordinator's ``self``. Recovery rebinds it to a new cluster and plan (:meth:`bind`) and
rolls ``last_barrier`` back; the core advances the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gnnsched.plan import Plan
from gnnsched.runtime.coordinator.schedule import Item
from gnnsched.spec import ClusterSpec


@dataclass
class RunState:
    """The plan being run (machine indices included) and how far training got."""

    cluster: ClusterSpec
    plan: Plan
    items: list[Item]  # every step of the run, in order (the schedule's)
    dilation: float = 1.0  # the scale model's D (1.0: real hosts, or an undilated emulation)
    net: ClusterSpec = field(init=False)  # the cluster as its NICs really run: rates / D
    names: list[str] = field(init=False)  # machine index -> name
    T: list[int] = field(init=False)  # trainer -> machine index
    F: list[int] = field(init=False)  # trainer -> machine index of its feature gathering
    W: int = field(init=False)  # trainers (a re-plan keeps them: seeds stay pinned)
    t0: float = 0.0  # monotonic time the run's clock counts from
    training: bool = False  # between the start of training and the end (or a failure)
    last_barrier: int = -1  # the last step every trainer finished
    trained: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.W = len(self.plan.trainers)
        self.bind(self.cluster, self.plan, self.dilation)

    def bind(self, cluster: ClusterSpec, plan: Plan, dilation: float) -> None:
        """Adopt a (new) cluster and plan: machine indices and where trainers run."""
        self.cluster, self.plan, self.dilation = cluster, plan, dilation
        self.net = cluster.dilated(dilation)
        self.names = [m.name for m in cluster.machines]
        idx = cluster.machine_index
        self.T = [idx(t.machine) for t in plan.trainers]
        self.F = [idx(t.fetch_at) for t in plan.trainers]


__all__ = ["RunState"]
