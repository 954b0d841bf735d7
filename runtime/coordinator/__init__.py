"""The coordinator: starts and watches a real run, drives the online policy live, collects
metrics, and recovers from dead processes and machines.

A package of small modules (start at :mod:`.core`, whose docstring maps the rest):
:mod:`.options` (what callers set and get back), :mod:`.schedule` (what is trained when),
:mod:`.core` (the :class:`Coordinator` and its message loop), and the components it owns,
which share a :class:`RunState` (:mod:`.state`) and talk through a :class:`Messenger`
(:mod:`.messenger`): :mod:`.roles` (the processes, :class:`RoleTable`), :mod:`.driver` (the
policy, :class:`PolicyDriver`) and :mod:`.recovery` (failures); :mod:`.startup` (what roles
are told at start-up), :mod:`.resume` (``--resume``) and :mod:`.advisor` (the planning side
it is given). The names below are what callers import from ``gnnsched.runtime.coordinator``.
"""

from gnnsched.runtime.coordinator.advisor import Advisor, StageTimes
from gnnsched.runtime.coordinator.core import Coordinator
from gnnsched.runtime.coordinator.driver import PolicyDriver
from gnnsched.runtime.coordinator.messenger import Messenger
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
from gnnsched.runtime.coordinator.roles import RoleState, RoleTable, SamplerSlot
from gnnsched.runtime.coordinator.schedule import Item, Schedule, part_counts
from gnnsched.runtime.coordinator.state import RunState

_Role = RoleState  # the name tests and older callers use

__all__ = ["NIC_CHUNK_S", "NIC_WINDOW_S", "PEER_WINDOW_S", "ROLE_ORDER", "STAGES", "Advisor",
           "Coordinator", "Fault", "Item", "Messenger", "PolicyDriver", "Recovery",
           "RecoveryHost", "RoleFailure", "RoleState", "RoleTable", "RunError", "RunResult",
           "RunState", "RuntimeOptions", "SamplerSlot", "Schedule", "StageTimes", "part_counts"]
