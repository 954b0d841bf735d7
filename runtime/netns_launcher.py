"""The ``netns`` launcher: each cluster host's roles inside that host's network namespace
(``ip netns exec``; namespaces, shaped NICs and the root-namespace gateway come from
:mod:`gnnsched.runtime.netns`, ``gnnsched cluster up``), bound to the host's address.

On a scale model (``gnnsched cluster up`` with control groups, :mod:`gnnsched.runtime.cgroups`)
the netns launcher starts every role inside its host's groups: a trainer in its device's group
(CPU quota: the device's speed / D), any other role in a group of its own under the host's CPU
group (at most its threads' worth of the host's cores, each 1/D of a core of this box), all
under the host's memory limit. A host's fork server does its imports outside the groups (not
part of any measured time), then moves into its host's group; each role it forks is moved into
its own group before it runs a line of the role (it waits until it is there). A role started
without a fork server is inside its group before it execs. :attr:`Launcher.dilation` is D (1.0
elsewhere): times measured on the model, divided by D, are the real cluster's.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from gnnsched.runtime.launcher_base import Launcher
from gnnsched.runtime.procs import start_in_session
from gnnsched.runtime.role_process import ForkedProcess, LaunchError, Process, RoleLaunch, Zygote
from gnnsched.spec import ClusterSpec, SpecError


class NetnsLauncher(Launcher):
    """Each host's roles inside its network namespace (``gnnsched cluster up`` first), and
    inside its control groups when the cluster is a scale model (see the module's text)."""

    name = "netns"
    loopback = False

    def __init__(self, cluster: ClusterSpec, python: str | None = None,
                 emulated: Any = None, fork_server: bool = True) -> None:
        super().__init__(cluster, python, fork_server)
        from gnnsched.runtime import netns

        netns.require_root()
        self.net = emulated or netns.EmulatedCluster.attach(cluster)  # as `cluster up` made it
        if not self.net.is_up():
            raise SpecError(cluster.source, "", "the emulated cluster is not up",
                            f"run `gnnsched cluster up --cluster {cluster.source}` first")
        if not self.net.gateway_address:
            raise SpecError(cluster.source, "", "the emulated cluster has no gateway, so the "
                            "coordinator cannot reach its hosts", "bring it up with a gateway")
        groups = getattr(self.net, "groups", None)
        self.groups = groups if groups is not None and groups.dirs else None
        self.dilation = float(getattr(self.net, "dilation", 1.0))
        self.cpu_model = self.groups is not None  # a trainer's quota is its device's speed
        self.nic_bands = getattr(self.net, "queues", "") == "tos bands"
        self._placed: set[str] = set()  # fork servers moved into their host's group
        self._undo: dict[tuple[str, str], Any] = {}  # grey faults still on: (timer, undo)
        self._devices: dict[tuple[str, str], int] = {}  # (machine, trainer id) -> device
        self._oom0 = {h: self.groups.usage(h).get("oom_kills") or 0
                      for h in self.groups.shares} if self.groups else {}

    # ---------------------------------------------------------------- grey faults
    def cut_off(self, machine: str, seconds: float) -> str:
        """Its switch port down now and up again after ``seconds``, its processes left
        running."""
        self.net.set_cut(machine, True)
        self._for_a_while(("cut", machine), seconds, lambda: self.net.set_cut(machine, False))
        return f"machine {machine} cut off the network for {seconds:g} s (its switch port " \
               "down; its processes keep running)"

    def slow_down(self, machine: str, factor: float, seconds: float) -> str:
        """Its control groups' CPU quotas / ``factor`` now, as planned after ``seconds``."""
        if self.groups is None:
            return super().slow_down(machine, factor, seconds)
        groups = self.groups
        groups.throttle(machine, factor)
        self._for_a_while(("slow", machine), seconds, lambda: groups.throttle(machine, 1.0))
        return f"machine {machine} slowed to 1/{factor:g} of its CPU for {seconds:g} s (its " \
               "control groups' quotas)"

    def _for_a_while(self, key: tuple[str, str], seconds: float, undo: Any) -> None:
        """Run ``undo`` after ``seconds`` (a timer), or at :meth:`close` if sooner: a grey
        fault never outlives its run."""
        import threading

        def once() -> None:
            if self._undo.pop(key, None) is not None:
                undo()

        timer = threading.Timer(seconds, once)
        timer.daemon = True
        self._undo[key] = (timer, once)
        timer.start()

    def close(self) -> None:
        for timer, once in list(self._undo.values()):
            timer.cancel()
            once()
        super().close()

    # ---------------------------------------------------------------- control groups
    def group_for(self, launch: RoleLaunch) -> str | None:
        """The control group ``launch`` runs in (None: not a scale model): a trainer on a host
        with devices, its device's (``launch.device``; else its machine's trainers take the
        devices in the order they first start); any other role, a group of its own."""
        g = self.groups
        if g is None:
            return None
        ndev = len(g.shares[launch.machine].device_cores) if launch.machine in g.shares else 0
        if launch.role == "trainer" and ndev:
            key = (launch.machine, launch.id)
            if launch.device is not None:
                self._devices[key] = launch.device
            elif key not in self._devices:
                self._devices[key] = sum(1 for k in self._devices if k[0] == launch.machine)
            dev = self._devices[key]
            if 0 <= dev < ndev:
                return g.device_group(launch.machine, dev)
        return g.role(launch.machine, f"{launch.role}-{launch.id}", launch.threads)

    def _await(self, group: str) -> dict[str, Any]:
        assert self.groups is not None
        from gnnsched.runtime.cgroups import TOP

        return {"marker": f"/{TOP}/{self.groups.cluster}/{group}",
                "count": len(self.groups.procs_files(group)), "timeout": 30.0}

    def _place_zygote(self, key: str, timeout: float) -> None:
        """Once its imports are done, move ``key``'s fork server into its host's group."""
        z = self.zygotes.get(key)
        if self.groups is None or z is None or key in self._placed:
            return
        z.wait_ready(timeout)
        from gnnsched.runtime.cgroups import CgroupError

        try:
            self.groups.place(z.popen.pid, self.groups.zygote(key))
        except CgroupError as exc:
            raise LaunchError(f"cannot move the fork server of {key} into its control group: "
                              f"{exc}") from None
        self._placed.add(key)

    def _zygote(self, launch: RoleLaunch) -> Zygote:
        key = self.zygote_key(launch.machine)
        if key in self.zygotes and not self.zygotes[key].alive():
            self._placed.discard(key)
        return super()._zygote(launch)

    def prepare(self, launches: list[RoleLaunch]) -> None:
        super().prepare(launches)
        if self.fork_server:
            for key in list(self.zygotes):
                self._place_zygote(key, max((la.start_timeout for la in launches),
                                            default=300.0))

    def start(self, launch: RoleLaunch) -> Process:
        group = self.group_for(launch) if launch.machine not in self.down else None
        if group is None:
            return super().start(launch)
        assert self.groups is not None
        from gnnsched.runtime.cgroups import CgroupError

        launch.log.parent.mkdir(parents=True, exist_ok=True)
        if not self.fork_server:
            argv = self.groups.wrap(self.command(launch), group)
            proc = Process(launch, start_in_session(argv, {**os.environ,
                                                           **self.role_env(launch)},
                                                    launch.log))
            self.procs.append(proc)
            return proc
        z = self._zygote(launch)
        self._place_zygote(self.zygote_key(launch.machine), launch.start_timeout)
        pid = z.spawn(self.role_argv(launch)[3:], self.role_env(launch), launch.log,
                      launch.start_timeout, await_cgroup=self._await(group))
        try:
            self.groups.place(pid, group)
        except CgroupError as exc:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            raise LaunchError(f"cannot move {launch.name} into its control group: {exc}") \
                from None
        proc: Process = ForkedProcess(launch, pid, z)
        self.procs.append(proc)
        return proc

    def explain_exit(self, proc: Process) -> str | None:
        code = proc.poll()
        host = proc.launch.machine
        if self.groups is None or code is None or code != -int(signal.SIGKILL) \
                or host not in self.groups.shares:
            return None
        try:
            kills = self.groups.usage(host).get("oom_kills")
        except Exception:
            return None
        if not kills or kills <= self._oom0.get(host, 0):
            return None
        limit = self.groups.shares[host].memory
        return (f"{proc.name} on {host} was killed by the kernel: out of memory (the host's "
                f"limit is {limit / 1e9:.3g} GB, its memory_gb; {kills - self._oom0.get(host, 0)} "
                "process(es) killed there in this run). A plan must keep every host's roles "
                "within its memory")

    def usage(self) -> dict[str, dict[str, Any]]:
        if self.groups is None:
            return {}
        return {h: self.groups.usage(h) for h in self.groups.shares}

    def coordinator_host(self) -> str:
        return str(self.net.gateway_address)

    def host_of(self, machine: str) -> str:
        return str(self.net.address(machine))

    def gloo_ifname(self, machine: str) -> str | None:
        from gnnsched.runtime.netns import HOST_IF

        return HOST_IF

    def command(self, launch: RoleLaunch) -> list[str]:
        return [*self.net.exec_prefix(launch.machine), *self.role_argv(launch)]

    def prefix(self, machine: str) -> list[str]:
        return list(self.net.exec_prefix(machine))  # one fork server inside each host

    def reachable(self, machine: str, timeout: float = 5.0) -> bool:
        """The host's namespace still exists (``gnnsched cluster down`` or a crash removes it)."""
        from gnnsched.runtime.netns import list_namespaces

        if machine in self.down:
            return False
        try:
            return self.net.host(machine).ns in list_namespaces()
        except Exception:
            return False


__all__ = ["NetnsLauncher"]
