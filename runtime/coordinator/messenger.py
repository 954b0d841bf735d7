"""How the coordinator's components talk to the run: the :class:`Messenger` protocol.

A component (:class:`~.roles.RoleTable`, :class:`~.driver.PolicyDriver`,
:class:`~.recovery.Recovery`) sends roles messages, writes the coordinator's log and
``metrics.jsonl`` and reads the run's clock only through a messenger -- the
:class:`~.core.Coordinator` in a run, a stand-in in a test -- so none of them imports the
coordinator.
"""

from __future__ import annotations

from typing import Any, Protocol

from gnnsched.runtime.transport import Message


class Messenger(Protocol):
    """The coordinator's outputs as a component sees them."""

    def send(self, name: str, msg: Message) -> None:
        """Send role ``name`` a message (an unreachable live role is a failure)."""
        ...

    def log(self, msg: str) -> None:
        """A line in ``logs/coordinator.log`` and on the user's progress output."""
        ...

    def event(self, record: dict[str, Any]) -> None:
        """One record in ``metrics.jsonl``."""
        ...

    def now(self) -> float:
        """Seconds since the run started (the clock of every record)."""
        ...


__all__ = ["Messenger"]
