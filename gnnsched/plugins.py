"""Plug-ins: placers, policies and launchers from other installed packages.

A researcher's package declares an entry point in one of the groups below, naming a class::

    [project.entry-points."gnnsched.placers"]
    mine = "my_pkg.placer:MyPlacer"

and ``gnnsched plan --placer mine`` finds it, with no change to gnnsched. Each registry
(``PLACERS``, ``POLICIES``, ``LAUNCHERS``) is merged with its group the first time it is
asked for a name or for the list of choices. A built-in name wins over a plug-in of the same
name; a plug-in that fails to load is reported once on stderr and left out, so one broken
package does not take the CLI down.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from typing import TypeVar

T = TypeVar("T")

PLACERS_GROUP = "gnnsched.placers"
POLICIES_GROUP = "gnnsched.policies"
LAUNCHERS_GROUP = "gnnsched.launchers"
GROUPS = (PLACERS_GROUP, POLICIES_GROUP, LAUNCHERS_GROUP)

_merged: set[tuple[str, int]] = set()


def merge(group: str, registry: dict[str, T], base: type | None = None) -> dict[str, T]:
    """Add ``group``'s installed entry points to ``registry`` (once per registry) and return it.

    An entry point's name is the name users type; its value is the class. With ``base``, a
    value that is not a subclass of it is refused (reported, left out).
    """
    key = (group, id(registry))
    if key in _merged:
        return registry
    _merged.add(key)
    for ep in entry_points(group=group):
        if ep.name in registry:
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plug-in must not break the built-ins
            print(f"gnnsched: plug-in {ep.name!r} ({ep.value}) in {group} failed to load: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if base is not None and not (isinstance(obj, type) and issubclass(obj, base)):
            print(f"gnnsched: plug-in {ep.name!r} ({ep.value}) in {group} is not a "
                  f"{base.__name__} subclass; left out", file=sys.stderr)
            continue
        if isinstance(obj, type) and "name" not in vars(obj):
            obj.name = ep.name  # the name users type, not an inherited built-in's
        registry[ep.name] = obj
    return registry


def forget() -> None:
    """Look the entry points up again on the next call (after installing a plug-in)."""
    _merged.clear()


__all__ = ["GROUPS", "LAUNCHERS_GROUP", "PLACERS_GROUP", "POLICIES_GROUP", "forget", "merge"]
