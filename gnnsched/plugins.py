"""Plug-ins: placers, policies and launchers from other installed packages.

A researcher's package declares an entry point in one of the groups below, naming a class::

    [project.entry-points."gnnsched.placers"]
    mine = "my_pkg.placer:MyPlacer"

and ``gnnsched plan --placer mine`` finds it, with no change to gnnsched. The lookup itself is
:class:`gnnsched.registry.Registry`'s; this module names the groups and keeps
:func:`forget` where the docs have always put it.
"""

from __future__ import annotations

from gnnsched.registry import forget

PLACERS_GROUP = "gnnsched.placers"
POLICIES_GROUP = "gnnsched.policies"
LAUNCHERS_GROUP = "gnnsched.launchers"
GROUPS = (PLACERS_GROUP, POLICIES_GROUP, LAUNCHERS_GROUP)

__all__ = ["GROUPS", "LAUNCHERS_GROUP", "PLACERS_GROUP", "POLICIES_GROUP", "forget"]
