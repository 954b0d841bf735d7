"""The coordinator: starts and watches a real run, drives the online policy live, collects
metrics, and recovers from dead processes and machines.

A package of small modules (start at :mod:`.core`, whose docstring maps the rest):
:mod:`.options` (what callers set and get back), :mod:`.schedule` (what is trained when),
:mod:`.core` (the :class:`Coordinator`), :mod:`.roles` (processes), :mod:`.driver` (the
policy), :mod:`.recovery` (failures) and :mod:`.advisor` (the planning side it is given).
The names below are what callers import from ``gnnsched.runtime.coordinator``.
"""

from gnnsched.runtime.coordinator.advisor import Advisor, StageTimes
from gnnsched.runtime.coordinator.core import Coordinator
from gnnsched.runtime.coordinator.options import (
    NIC_CHUNK_S,
    NIC_WINDOW_S,
    PEER_WINDOW_S,
    ROLE_ORDER,
    STAGES,
    Fault,
    RoleFailure,
    RunError,
    RunResult,
    RuntimeOptions,
)
from gnnsched.runtime.coordinator.recovery import Recovery, RecoveryHost
from gnnsched.runtime.coordinator.roles import RoleState, SamplerSlot
from gnnsched.runtime.coordinator.schedule import Item, Schedule, part_counts

_Role = RoleState  # the name tests and older callers use

__all__ = ["NIC_CHUNK_S", "NIC_WINDOW_S", "PEER_WINDOW_S", "ROLE_ORDER", "STAGES", "Advisor",
           "Coordinator", "Fault", "Item", "Recovery", "RecoveryHost", "RoleFailure",
           "RoleState", "RunError", "RunResult", "RuntimeOptions", "SamplerSlot", "Schedule",
           "StageTimes", "part_counts"]
