"""Launchers: start every role as a real OS process where the plan puts it, and reap them all.

One interface, three ways to reach a machine:

* :class:`LocalLauncher` (``local``): every role on this box, bound to 127.0.0.1;
* :class:`NetnsLauncher` (``netns``): each cluster host's roles inside that host's network
  namespace (``ip netns exec``; namespaces, shaped NICs and the root-namespace gateway come
  from :mod:`gnnsched.runtime.netns`, ``gnnsched cluster up``), bound to the host's address;
* :class:`SshLauncher` (``ssh``): the same command line run on the host with ``ssh``.

A launcher only builds command lines and owns processes; what the roles do is the
coordinator's business. Every child runs in its own session (process group), so ``stop``
can signal the whole group (a role and anything it forked), the terminal's Ctrl-C reaches only
the coordinator (which then stops roles in order), and nothing is left behind: ``terminate``
-> grace -> ``kill``. Roles also die with their parent (``PR_SET_PDEATHSIG``) and exit when
the coordinator goes silent (see :mod:`gnnsched.runtime.role`), which covers ``kill -9`` of the
coordinator and lost SSH sessions.

For recovery a launcher also answers whether a machine can still run processes
(:meth:`Launcher.reachable`: the ssh launcher asks the host, the netns launcher checks the
host's namespace) and stops a chosen subset of processes (:meth:`Launcher.stop`).
:meth:`Launcher.mark_down` emulates the death of a whole machine for fault injection: its
processes are killed and it stops being reachable, so the coordinator must re-plan around it.
Before anything starts, :meth:`Launcher.preflight` checks every host is reachable, so a dead
host is one clear error naming it, not a role that never says hello.

On a scale model (``gnnsched cluster up`` with control groups) the netns launcher starts every
role inside its host's control groups (:mod:`.netns_launcher` says how);
:attr:`Launcher.dilation` is the model's D (1.0 elsewhere): times measured on the model,
divided by D, are the real cluster's.

This module is the launchers' registry and the ``local`` launcher; the base class is in
:mod:`.launcher_base`, the processes and fork servers in :mod:`.role_process`, the others in
:mod:`.netns_launcher`, :mod:`.ssh_launcher` and :mod:`.ray_launcher`. Their names are
importable from here as well.
"""

from __future__ import annotations

from typing import Any

from gnnsched.plugins import LAUNCHERS_GROUP
from gnnsched.registry import Registry
from gnnsched.runtime.launcher_base import THREAD_VARS, Launcher
from gnnsched.runtime.netns_launcher import NetnsLauncher
from gnnsched.runtime.role_process import ForkedProcess, LaunchError, Process, RoleLaunch, Zygote
from gnnsched.runtime.ssh_launcher import (
    SSH_DEFAULTS,
    SSH_OPTIONS,
    SSH_OPTIONS_ENV,
    RemoteProcess,
    SshLauncher,
)
from gnnsched.spec import ClusterSpec


class LocalLauncher(Launcher):
    """Every role on this machine, on the loopback interface, forked from one fork server
    (``fork_server=False``: each role a fresh interpreter)."""

    name = "local"
    loopback = True

    def __init__(self, cluster: ClusterSpec, python: str | None = None,
                 fork_server: bool = True) -> None:
        super().__init__(cluster, python, fork_server)

    def zygote_key(self, machine: str) -> str:
        return "local"

    def coordinator_host(self) -> str:
        return "127.0.0.1"

    def host_of(self, machine: str) -> str:
        self.cluster.machine(machine)  # KeyError names the cluster if unknown
        return "127.0.0.1"

    def gloo_ifname(self, machine: str) -> str | None:
        return "lo"

def on_loopback(launcher: Any) -> bool:
    """Whether ``launcher``'s roles talk over loopback (:attr:`Launcher.loopback`). A
    stand-in object without the attribute (a test's namespace) is judged by its name."""
    flag = getattr(launcher, "loopback", None)
    return bool(flag) if flag is not None else getattr(launcher, "name", None) == "local"


LAUNCHERS: Registry[Launcher] = Registry(
    "launcher", Launcher, group=LAUNCHERS_GROUP, flag="--launcher",
    # ray is built in but imported lazily: a static import would be a cycle, and ray itself
    # loads only when the launcher is used
    modules=("gnnsched.runtime.ray_launcher",))
LAUNCHERS["local"], LAUNCHERS["netns"], LAUNCHERS["ssh"] = LocalLauncher, NetnsLauncher, SshLauncher


def launchers() -> dict[str, type[Launcher]]:
    """Every launcher by name: the built-ins and those installed as plug-ins
    (:mod:`gnnsched.registry`, entry point group ``gnnsched.launchers``)."""
    return dict(LAUNCHERS.load())


def get_launcher(name: str | Launcher, cluster: ClusterSpec, **kwargs: Any) -> Launcher:
    """A launcher for ``cluster`` by name (a Launcher instance is passed through); an unknown
    name raises :class:`~gnnsched.registry.UnknownName` listing the installed ones."""
    return LAUNCHERS.create(name, cluster, **kwargs)




__all__ = ["LAUNCHERS", "SSH_DEFAULTS", "SSH_OPTIONS", "SSH_OPTIONS_ENV", "THREAD_VARS",
           "ForkedProcess", "LaunchError", "Launcher", "LocalLauncher", "NetnsLauncher",
           "Process", "RemoteProcess", "RoleLaunch", "SshLauncher", "Zygote", "get_launcher",
           "launchers", "on_loopback"]
