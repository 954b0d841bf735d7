"""The base :class:`Launcher`: what every launcher does the same way (the role's command line
and environment, fork servers, starting, stopping, fault injection), and the hooks a launcher
overrides to say how it reaches a machine (:mod:`.launcher` lists the built-in ones).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, ClassVar

from gnnsched.registry import CliOption
from gnnsched.runtime.procs import start_in_session, stop_groups
from gnnsched.runtime.role_process import ForkedProcess, LaunchError, Process, RoleLaunch, Zygote
from gnnsched.spec import ClusterSpec

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

class Launcher:
    """Base launcher: subclasses say how to reach a machine (prefix, addresses, env).

    ``loopback``: every role talks over this box's loopback interface, so links are not
    shaped and stores send large chunks; a launcher of real or emulated hosts leaves it False
    (the coordinator then sizes chunks and windows by each NIC's bandwidth)."""

    name = "base"
    # the flags `gnnsched train` adds for this launcher; their values reach the constructor
    # as keyword arguments (``CliOption.kwarg``), so a plug-in declares its own
    cli_options: ClassVar[tuple[CliOption, ...]] = ()
    loopback = False
    dilation = 1.0  # the scale model's D: measured times / D are the real cluster's
    cpu_model = False  # roles run under their host's CPU quotas (device speed included)
    nic_bands = False  # the NICs band packets by IP TOS (runtime.qos): an urgent band exists
    partitions: str | None = None  # set by bind_run: what preflight checks on the hosts
    run_dir: str | Path | None = None
    endpoint: str | None = None

    def __init__(self, cluster: ClusterSpec, python: str | None = None,
                 fork_server: bool = False) -> None:
        self.cluster = cluster
        self.python = python or sys.executable
        self.procs: list[Process] = []
        self.down: set[str] = set()  # machines declared dead (fault injection or probes)
        self.fork_server = fork_server
        self.zygotes: dict[str, Zygote] = {}

    # ---------------------------------------------------------------- where
    def coordinator_host(self) -> str:
        """The address the coordinator binds; every role must reach it."""
        raise NotImplementedError

    def host_of(self, machine: str) -> str:
        """The address roles on ``machine`` bind their data sockets to."""
        raise NotImplementedError

    def gloo_ifname(self, machine: str) -> str | None:
        """Network interface gloo (torch.distributed) should use on ``machine``."""
        return None

    # ---------------------------------------------------------------- how
    def role_argv(self, launch: RoleLaunch) -> list[str]:
        """The role's own command line (the same for every launcher)."""
        argv = [self.python, "-m", "gnnsched.runtime.role", launch.role, "--id", launch.id,
                "--machine", launch.machine, "--host", self.host_of(launch.machine),
                "--coordinator", launch.coordinator, "--threads", str(launch.threads),
                "--orphan-timeout", f"{launch.orphan_timeout:g}",
                "--start-timeout", f"{launch.start_timeout:g}",
                "--gen", str(launch.gen), "--heartbeat", f"{launch.heartbeat_s:g}"]
        if launch.curve_keys:
            argv += ["--curve-keys", str(launch.curve_keys)]
        return argv

    def role_env(self, launch: RoleLaunch) -> dict[str, str]:
        """Variables the role needs (thread pinning, unbuffered logs, gloo's interface)."""
        env = {v: str(launch.threads) for v in THREAD_VARS}
        env.update(PYTHONUNBUFFERED="1", DGLBACKEND="pytorch")
        ifname = self.gloo_ifname(launch.machine)
        if ifname:
            env["GLOO_SOCKET_IFNAME"] = ifname
        env.update(launch.env)
        return env

    def command(self, launch: RoleLaunch) -> list[str]:
        return self.role_argv(launch)

    def prefix(self, machine: str) -> list[str]:
        """What runs a command on ``machine`` (fork servers are started through it)."""
        return []

    def zygote_key(self, machine: str) -> str:
        """Machines sharing one fork server (the local launcher: all of them, one box)."""
        return machine

    def _zygote(self, launch: RoleLaunch) -> Zygote:
        key = self.zygote_key(launch.machine)
        z = self.zygotes.get(key)
        if z is None or not z.alive():
            env = {**os.environ, **self.role_env(launch)}
            for var in ("GLOO_SOCKET_IFNAME",):
                env.pop(var, None)  # per role, not per fork server
            argv = [*self.prefix(launch.machine), self.python, "-m", "gnnsched.runtime.zygote"]
            z = self.zygotes[key] = Zygote(argv, env, launch.log.parent /
                                           f"zygote-{key}.log")
        return z

    def prepare(self, launches: list[RoleLaunch]) -> None:
        """Start the fork servers these roles need, all at once, and wait until every one
        has done its imports: spawning is then instant, so no role started early waits
        (unanswered) while the next host's imports run."""
        if not self.fork_server:
            return
        servers = {}
        for launch in launches:
            if launch.machine not in self.down:
                servers[self.zygote_key(launch.machine)] = self._zygote(launch)
        for z in servers.values():
            z.wait_ready(max((la.start_timeout for la in launches), default=300.0))

    def start(self, launch: RoleLaunch) -> Process:
        if launch.machine in self.down:
            raise LaunchError(f"cannot start {launch.name} on {launch.machine}: the machine "
                              "is down")
        launch.log.parent.mkdir(parents=True, exist_ok=True)
        if self.fork_server:
            z = self._zygote(launch)
            argv = self.role_argv(launch)[3:]  # after `python -m gnnsched.runtime.role`
            pid = z.spawn(argv, self.role_env(launch), launch.log, launch.start_timeout)
            proc: Process = ForkedProcess(launch, pid, z)
            self.procs.append(proc)
            return proc
        env = {**os.environ, **self.role_env(launch)}
        proc = Process(launch, start_in_session(self.command(launch), env, launch.log))
        self.procs.append(proc)
        return proc

    def close_fork_servers(self) -> None:
        """End every fork server: all are told at once (their stdin closed), then each is
        waited for, so they exit in parallel."""
        for z in self.zygotes.values():
            z.hang_up()
        for z in self.zygotes.values():
            z.close()
        self.zygotes = {}

    def stop(self, procs: list[Process], grace: float = 2.0) -> list[str]:
        """SIGTERM these process groups (with SIGCONT: a frozen one must get it), wait
        ``grace``, SIGKILL what is left; reap them (:func:`~.procs.stop_groups`). Returns the
        names that were signalled."""
        live = stop_groups(procs, grace)
        for p in procs:
            p.wait(0.0)
        return [p.name for p in live]

    def stop_all(self, grace: float = 5.0) -> list[str]:
        """SIGTERM every live process group, wait ``grace``, SIGKILL the rest; reap all.

        Returns the names of processes that had to be signalled. Fork servers go last."""
        names = self.stop(self.procs, grace)
        self.close_fork_servers()
        return names

    def reachable(self, machine: str, timeout: float = 5.0) -> bool:
        """Can ``machine`` still run processes? (Recovery re-plans around it when not.)"""
        return machine not in self.down

    def mark_down(self, machine: str) -> list[int]:
        """Emulate the death of ``machine``: SIGKILL its processes, refuse new ones there.
        Returns the pids killed (fault injection)."""
        self.down.add(machine)
        killed = []
        for p in self.procs:
            if p.launch.machine == machine and p.poll() is None:
                p.signal(signal.SIGKILL)
                killed.append(p.pid)
        z = self.zygotes.get(self.zygote_key(machine))
        if z is not None and self.zygote_key(machine) == machine:
            z.close(0.0)  # its own fork server dies with it
            del self.zygotes[machine]
        return killed

    def cut_off(self, machine: str, seconds: float) -> str:
        """Cut ``machine`` off the network for ``seconds``, its processes alive (a grey
        fault); only an emulated cluster can (:class:`~.netns_launcher.NetnsLauncher`)."""
        raise LaunchError(f"cutting machine {machine} off needs the emulated cluster "
                          f"(--launcher netns); the {self.name} launcher cannot")

    def slow_down(self, machine: str, factor: float, seconds: float) -> str:
        """Divide ``machine``'s CPU by ``factor`` for ``seconds`` (a straggler); only a scale
        model's control groups can (:class:`~.netns_launcher.NetnsLauncher`)."""
        raise LaunchError(f"slowing machine {machine} down needs the scale model (--launcher "
                          f"netns on a cluster up with control groups); the {self.name} "
                          "launcher cannot")

    def explain_exit(self, proc: Process) -> str | None:
        """Why ``proc`` ended, where the launcher knows more than its exit code (the netns
        launcher: killed by the kernel for exceeding its host's memory limit); else None."""
        return None

    def usage(self) -> dict[str, dict[str, Any]]:
        """Per machine: CPU seconds, memory peak, OOM kills (:meth:`.cgroups.ClusterGroups.
        usage`) where the launcher runs hosts in control groups; else empty."""
        return {}

    def bind_run(self, *, partitions: str | None = None, run_dir: str | Path | None = None,
                 endpoint: str | None = None) -> None:
        """What the run uses -- its partition folder, run directory and the coordinator's
        bound endpoint -- for :meth:`preflight` to check where the roles will run (the
        coordinator calls this before :meth:`preflight`)."""
        if partitions:
            self.partitions = str(partitions)
        if run_dir is not None:
            self.run_dir = run_dir
        if endpoint is not None:
            self.endpoint = endpoint

    def preflight(self, machines: list[str], timeout: float = 10.0) -> None:
        """Raise :class:`LaunchError` naming every machine that cannot run processes."""
        bad = [m for m in machines if not self.reachable(m, timeout)]
        if bad:
            raise LaunchError(f"machine(s) {', '.join(bad)} cannot be reached by the "
                              f"{self.name} launcher")

    def close(self) -> None:
        self.stop_all()


__all__ = ["THREAD_VARS", "Launcher"]
