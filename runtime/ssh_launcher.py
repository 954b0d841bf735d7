"""The ``ssh`` launcher: every role on its real host, started over ``ssh`` by one fork server
per host (:class:`SshLauncher` says how), after :mod:`.hostcheck` has checked every host.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gnnsched.registry import CliOption
from gnnsched.runtime.launcher_base import Launcher
from gnnsched.runtime.role_process import ForkedProcess, LaunchError, Process, RoleLaunch, Zygote
from gnnsched.spec import ClusterSpec, SpecError

SSH_OPTIONS_ENV = "GNNSCHED_SSH_OPTIONS"
SSH_DEFAULTS = ("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")


class RemoteProcess(ForkedProcess):
    """A role forked by a host's fork server over ssh: ``pid`` is the host's pid. Its exit
    status comes from the fork server's reports; when the fork server's ssh session is gone,
    the role is too (the fork server kills its children when its stdin closes, and they die
    with it). Signals go to the host over ssh (:meth:`SshLauncher.signal_remote`)."""

    def __init__(self, launch: RoleLaunch, pid: int, zygote: Zygote,
                 launcher: SshLauncher) -> None:
        super().__init__(launch, pid, zygote)
        self.launcher = launcher

    def poll(self) -> int | None:
        if self.code is None:
            self.zygote.poll()
            if self._pid in self.zygote.exits:
                self.code = self.zygote.exits.pop(self._pid)
            elif not self.zygote.alive():
                self.code = -int(signal.SIGKILL)  # its host's fork server (session) is gone
        return self.code

    def signal(self, sig: int) -> None:
        if self.poll() is None:
            self.launcher.signal_remote([self], sig)


SSH_OPTIONS = (
    CliOption("--coordinator-address", "coordinator_address",
              "this machine's address as the hosts reach it (default: this machine's address "
              "on the route to the first host; ray: the address Ray knows it by)"),
    CliOption("--remote-python", "remote_python", "remote python", default="python3"),
    CliOption("--remote-dir", "remote_dir", "the roles' working directory on the hosts "
              "(default: this one's path)"),
)


class SshLauncher(Launcher):
    """Roles on real hosts over SSH (``machines[*].ssh: user@host`` in the cluster file; a
    machine without ``ssh`` is reached at its ``address``).

    Every host runs one fork server (:mod:`gnnsched.runtime.zygote`) in one ssh session
    (``ssh -T``, JSON lines over its stdin/stdout): torch and DGL are imported once per host,
    roles start in milliseconds, and a recovery restarts them as fast as on one machine.
    Signals to a role (stop, fault injection) go to its process group on the host over a short
    ssh command. When the session ends -- the coordinator stops, dies or loses the host --
    the fork server's stdin closes and it kills every role it started; roles also exit on a
    silent coordinator. ``fork_server=False``: each role its own ``ssh -tt`` session instead
    (the remote side gets SIGHUP when the local ``ssh`` is stopped).

    The remote command runs in ``remote_dir`` with ``remote_python``; partitions and the run
    directory must be at the same paths on every host (shared storage, or copies of the
    partitions: docs/deployment.md). ssh options: ``ssh_options``, else
    ``$GNNSCHED_SSH_OPTIONS`` (e.g. ``-i KEY -o UserKnownHostsFile=FILE -p 2222``), then
    ``~/.ssh/config``; ``BatchMode=yes`` always (no prompt can hang a run).
    ``connect_timeout``: ssh's ``ConnectTimeout`` (unless the options set it).

    :meth:`preflight` runs :func:`gnnsched.runtime.hostcheck.check_hosts` on every host before
    any role starts: ssh, Python and package versions, the host's address, partitions, the
    run directory, ports and clocks; every problem at once, one line.
    """

    name = "ssh"
    cli_options = SSH_OPTIONS
    loopback = False

    def __init__(self, cluster: ClusterSpec, python: str | None = None, *,
                 coordinator_address: str | None = None, remote_python: str | None = None,
                 remote_dir: str | None = None, ssh: str = "ssh",
                 ssh_options: tuple[str, ...] | str | None = None,
                 connect_timeout: float = 10.0, fork_server: bool = True,
                 partitions: str | None = None, check: bool = True) -> None:
        super().__init__(cluster, python, fork_server)
        for i, m in enumerate(cluster.machines):
            if not m.ssh and not m.address:
                raise SpecError(cluster.source, f"machines[{i}].ssh",
                                f"machine {m.name!r} has neither ssh nor address",
                                "ssh: user@host (and address: the IP its roles bind)")
        self.coordinator_address = coordinator_address
        self.remote_python = remote_python or "python3"
        self.remote_dir = remote_dir or os.getcwd()
        if ssh_options is None:
            ssh_options = os.environ.get(SSH_OPTIONS_ENV, "")
        if isinstance(ssh_options, str):
            ssh_options = tuple(shlex.split(ssh_options))
        self.ssh, self.ssh_options = ssh, tuple(ssh_options)
        self.connect_timeout = connect_timeout
        self.partitions = partitions
        self.check = check
        self.ifnames: dict[str, str] = {}  # machine -> interface of its address (gloo)
        self.report: Any = None  # the last preflight's hostcheck.CheckReport

    # ---------------------------------------------------------------- where
    def coordinator_host(self) -> str:
        if self.coordinator_address:
            return self.coordinator_address
        import socket

        # this machine's address on the route to the first host that has one (nothing sent)
        for m in self.cluster.machines:
            try:
                target = socket.getaddrinfo(self.host_of(m.name), 9, socket.AF_INET,
                                            socket.SOCK_DGRAM)[0][4][0]
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.connect((target, 9))
                    return str(s.getsockname()[0])
            except OSError:
                continue
        raise LaunchError("no route from this machine to any host of the cluster: pass "
                          "--coordinator-address (this machine's address as the hosts reach "
                          "it), and check the hosts' ssh/address fields")

    def host_of(self, machine: str) -> str:
        m = self.cluster.machine(machine)
        if m.address:
            return m.address
        dest = (m.ssh or "").removeprefix("ssh://").rsplit("@", 1)[-1]
        if dest.startswith("["):  # [v6]:port
            return dest[1:].split("]", 1)[0]
        return dest.rsplit(":", 1)[0] if dest.count(":") == 1 else dest

    def destination(self, machine: str) -> str:
        m = self.cluster.machine(machine)
        return m.ssh or m.address or machine

    def gloo_ifname(self, machine: str) -> str | None:
        return self.ifnames.get(machine)

    # ---------------------------------------------------------------- ssh
    def ssh_argv(self, machine: str, remote: str, *, tty: bool = False,
                 connect_timeout: float | None = None) -> list[str]:
        """``ssh`` running ``remote`` (a shell command line) on ``machine``. For ssh the
        first value of an option wins: ``BatchMode=yes`` first (no prompt can hang a run),
        then the user's options, then our defaults."""
        t = self.connect_timeout if connect_timeout is None else connect_timeout
        return [self.ssh, "-o", "BatchMode=yes", *self.ssh_options, *SSH_DEFAULTS,
                "-o", f"ConnectTimeout={max(1, int(t))}", "-tt" if tty else "-T",
                self.destination(machine), remote]

    def probe(self, machine: str, timeout: float = 10.0) -> str | None:
        """Run ``true`` on the host over ssh; None when it answered, else why not."""
        argv = self.ssh_argv(machine, "true", connect_timeout=timeout)
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=timeout + 5)
        except FileNotFoundError:
            return f"ssh client {self.ssh!r} not found"
        except subprocess.TimeoutExpired:
            return f"no answer within {timeout:.0f} s"
        if res.returncode != 0:
            return (res.stderr.strip().splitlines() or [f"ssh exit code {res.returncode}"])[-1]
        return None

    def reachable(self, machine: str, timeout: float = 5.0) -> bool:
        return machine not in self.down and self.probe(machine, timeout) is None

    def preflight(self, machines: list[str], timeout: float = 10.0) -> None:
        """Check every host before any role starts (:mod:`.hostcheck`): one
        :class:`LaunchError` line naming every problem, its host and its fix; warnings (a
        clock skew, a numpy version) on stderr. ``check=False``: only that every host
        answers ssh."""
        machines = sorted(set(machines))
        if not self.check:
            with ThreadPoolExecutor(max_workers=min(16, len(machines) or 1)) as pool:
                why = dict(zip(machines, pool.map(lambda m: self.probe(m, timeout),
                                                  machines)))
            bad = [f"{m} ({self.destination(m)}): {w}" for m, w in why.items() if w]
            if bad:
                raise LaunchError("unreachable host(s) over ssh: " + "; ".join(bad))
            return
        from gnnsched.runtime.hostcheck import check_hosts

        self.report = report = check_hosts(
            self, machines, partitions=self.partitions,
            run_dir=str(Path(self.run_dir).resolve() / "logs") if self.run_dir else None,
            coordinator=self.endpoint, timeout=timeout)
        for h in report.hosts:
            if h.facts.get("interface"):
                self.ifnames[h.machine] = str(h.facts["interface"])
        for w in report.warnings:
            print(f"gnnsched: warning: {w}", file=sys.stderr)
        if report.problems:
            raise LaunchError(report.error_line())

    # ---------------------------------------------------------------- processes
    def _remote_shell(self, machine: str, argv: list[str], env: dict[str, str],
                      mkdir: Path | None = None) -> str:
        """``cd DIR && [mkdir -p LOGS &&] exec env VARS ARGV``. GLOO_SOCKET_IFNAME (gloo's
        interface): the one :meth:`preflight` found, else the one ``ip`` shows holding the
        host's address (nothing when there is none)."""
        pre = f"cd {shlex.quote(self.remote_dir)} && "
        if mkdir is not None:
            pre += f"mkdir -p {shlex.quote(str(mkdir))} && "
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        if "GLOO_SOCKET_IFNAME" not in env:  # one word or none: interface names have no spaces
            assigns += (" $(ip -o addr show 2>/dev/null | awk '$4 ~ \"^"
                        + self.host_of(machine).replace(".", "[.]")
                        + "/\" {print \"GLOO_SOCKET_IFNAME=\" $2; exit}')")
        return pre + f"exec env {assigns} " + shlex.join(argv)

    def command(self, launch: RoleLaunch) -> list[str]:
        """The role's own ``ssh -tt`` session (``fork_server=False``)."""
        argv = self.role_argv(launch)
        argv[0] = self.remote_python
        return self.ssh_argv(launch.machine, self._remote_shell(
            launch.machine, argv, self.role_env(launch)), tty=True)

    def _zygote(self, launch: RoleLaunch) -> Zygote:
        key = launch.machine
        z = self.zygotes.get(key)
        if z is None or not z.alive():
            env = self.role_env(launch)
            env.pop("GLOO_SOCKET_IFNAME", None)
            if self.ifnames.get(key):
                env["GLOO_SOCKET_IFNAME"] = self.ifnames[key]
            remote = self._remote_shell(key, [self.remote_python, "-m",
                                              "gnnsched.runtime.zygote"], env,
                                        mkdir=launch.log.parent.resolve())
            z = self.zygotes[key] = Zygote(self.ssh_argv(key, remote), dict(os.environ),
                                           launch.log.parent / f"zygote-{key}.log")
        return z

    def start(self, launch: RoleLaunch) -> Process:
        if not self.fork_server:
            return super().start(launch)
        if launch.machine in self.down:
            raise LaunchError(f"cannot start {launch.name} on {launch.machine}: the machine "
                              "is down")
        launch.log.parent.mkdir(parents=True, exist_ok=True)
        z = self._zygote(launch)
        env = self.role_env(launch)
        env.pop("GLOO_SOCKET_IFNAME", None)  # the fork server's (found on the host)
        pid = z.spawn(self.role_argv(launch)[3:], env, launch.log.resolve(),
                      launch.start_timeout)
        proc = RemoteProcess(launch, pid, z, self)
        self.procs.append(proc)
        return proc

    def signal_remote(self, procs: list[Process], sig: int, timeout: float = 10.0) -> list[str]:
        """Send ``sig`` to these roles' process groups on their hosts (one ssh command per
        host, all hosts at once); returns the machines that could not be reached."""
        by_host: dict[str, list[int]] = {}
        for p in procs:
            by_host.setdefault(p.launch.machine, []).append(p.pid)
        name = signal.Signals(sig).name[3:]

        def send(item: tuple[str, list[int]]) -> str | None:
            machine, pids = item
            groups = " ".join(f"-{pid}" for pid in pids)
            cmd = f"kill -s {name} -- {groups} 2>/dev/null"
            if sig == signal.SIGTERM:  # a frozen role must get it too
                cmd += f"; kill -s CONT -- {groups} 2>/dev/null"
            try:
                subprocess.run(self.ssh_argv(machine, cmd + "; true", connect_timeout=timeout),
                               stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout + 5, check=True)
            except (subprocess.SubprocessError, OSError):
                return machine
            return None

        if not by_host:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(by_host))) as pool:
            return [m for m in pool.map(send, by_host.items()) if m]

    def stop(self, procs: list[Process], grace: float = 2.0, kill_wait: float = 5.0
             ) -> list[str]:
        remote = [p for p in procs if isinstance(p, RemoteProcess)]
        names = super().stop([p for p in procs if not isinstance(p, RemoteProcess)], grace)
        live = [p for p in remote if p.poll() is None]
        lost: set[str] = set()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
            running = [p for p in live if p.poll() is None]
            if not running:
                break
            lost |= set(self.signal_remote(running, sig, timeout=min(10.0, max(2.0, wait))))
            end = time.monotonic() + wait
            for p in running:
                p.wait(max(0.0, end - time.monotonic()))
        for machine in {p.launch.machine for p in live if p.poll() is None} | lost:
            z = self.zygotes.pop(machine, None)  # the host does not answer: end its session
            if z is not None:
                z.close(0.0)
        return names + [p.name for p in live]

    def mark_down(self, machine: str) -> list[int]:
        """Fault injection: SIGKILL every role on ``machine`` (one ssh command), end its fork
        server's session, and refuse new processes there."""
        self.down.add(machine)
        procs = [p for p in self.procs if p.launch.machine == machine and p.poll() is None]
        self.signal_remote([p for p in procs if isinstance(p, RemoteProcess)], signal.SIGKILL)
        for p in procs:
            if not isinstance(p, RemoteProcess):
                p.signal(signal.SIGKILL)
        z = self.zygotes.pop(machine, None)
        if z is not None:
            z.close(0.0)
        return [p.pid for p in procs]


__all__ = ["SSH_DEFAULTS", "SSH_OPTIONS", "SSH_OPTIONS_ENV", "RemoteProcess", "SshLauncher"]
