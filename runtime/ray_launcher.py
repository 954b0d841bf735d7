"""Ray as a launcher: every role of a plan on a Ray cluster the user already runs.

Ray only places, starts, watches and stops; the data plane stays ZeroMQ (CURVE included) as
with every other launcher. The mapping from the cluster file's machine names to Ray nodes is a
custom resource on each node, ``gnnsched-host:NAME`` (``ray start ... --resources
'{"gnnsched-host:h0": 1}'``), so the user says once which node is which host and a plan's
placement is honoured exactly:

* :meth:`RayLauncher.preflight` connects (``ray.init(address=...)``), finds the node of every
  planned host, and runs one probe task on each (:func:`node_facts`: the node's Python,
  versions of gnnsched, torch, dgl, pyzmq and Ray, gnnsched's source digest, the partitions,
  the run directory, the coordinator's port). Every problem -- an address with no Ray behind
  it, a host with no node, a version mismatch, missing partitions -- is one
  :class:`~.launcher.LaunchError` naming the host and the fix, before any role starts. Then
  it creates one placement group with one bundle per planned host, ``{"gnnsched-host:NAME":
  1}``: bundle *i* can only land on host *i*'s node, and the run holds that host while it
  lasts (a second run planned on it waits, then says so).
* A role is a process supervised by one actor (:class:`RoleSupervisor`, in its host's
  bundle, zero CPUs: the plan, not Ray, decides what a host runs). The actor starts ``python
  -m gnnsched.runtime.role`` with the node's own interpreter, in its own session, and reports
  its exit status; the role dies with the actor (``PR_SET_PDEATHSIG`` and its parent-pid
  watchdog), so a killed actor is a killed role, which the coordinator recovers as it does on
  every launcher. Fault injection's SIGKILL of a role kills its actor (``ray.kill``). A host
  is reachable while its node runs a task within seconds (:meth:`RayLauncher.reachable`); a
  lost node is re-planned around.
* :meth:`RayLauncher.stop_all` stops roles (SIGTERM, grace, then ``ray.kill``), kills every
  actor and removes the placement group: ``ray status`` shows nothing held afterwards. When
  the coordinator itself dies, Ray's ownership does the same (actors and groups belong to the
  driver's job).

Addresses: roles bind to their node's address as Ray knows it (``NodeManagerAddress``), and
the coordinator to this driver's; several raylets on one box share one address and each role
binds its own ephemeral port, as on the local launcher. ``ray`` is imported only when this
launcher is used (``pip install 'gnnsched[ray]'``).

This module is the driver's side (:class:`RayLauncher`, :class:`RayProcess`); connecting, the
nodes' hosts and ``plan --from-ray`` are in :mod:`.ray_cluster`, what runs on the nodes in
:mod:`.ray_node`; their names are importable from here as well.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from gnnsched.registry import CliOption
from gnnsched.runtime.launcher import LAUNCHERS
from gnnsched.runtime.launcher_base import Launcher
from gnnsched.runtime.ray_cluster import (
    ACTOR_SHARE,
    HOST_RESOURCE,
    INSTALL,
    NAMESPACE,
    RayNode,
    cluster_from_ray,
    connect,
    host_resource,
    import_ray,
    ray_nodes,
)
from gnnsched.runtime.ray_node import RoleSupervisor, _remote, node_facts
from gnnsched.runtime.role_process import LaunchError, Process, RoleLaunch
from gnnsched.runtime.ssh_launcher import SSH_OPTIONS
from gnnsched.spec import ClusterSpec


class RayProcess(Process):
    """A role run by a :class:`RoleSupervisor` actor. Its exit status is the actor's
    ``wait`` result; an actor that died (killed, its node lost) is a role killed by SIGKILL."""

    def __init__(self, launch: RoleLaunch, launcher: RayLauncher, actor: Any, pid: int,
                 node_id: str) -> None:
        self.launch, self.name, self.log = launch, launch.name, launch.log
        self.launcher, self.actor, self._pid, self.node_id = launcher, actor, pid, node_id
        self.done = actor.wait.remote()
        self.code: int | None = None
        self.actor_died = False
        self._next = 0.0

    @property
    def pid(self) -> int:
        return self._pid

    def poll(self) -> int | None:
        if self.code is None and time.monotonic() >= self._next:
            self._next = time.monotonic() + 0.02  # the coordinator polls in a tight loop
            self._settle(0.0)
        return self.code

    def _settle(self, timeout: float) -> None:
        ray = self.launcher.ray
        ready, _ = ray.wait([self.done], timeout=timeout)
        if ready:
            try:
                self.code = int(ray.get(self.done))
            except Exception:  # RayActorError: killed, or its node is gone
                self.code, self.actor_died = -int(signal.SIGKILL), True

    def wait(self, timeout: float) -> int | None:
        if self.code is None:
            self._settle(max(0.0, timeout))
        return self.code

    def signal(self, sig: int) -> None:
        """SIGKILL kills the actor (and with it the role): what a lost role looks like on Ray.
        Other signals go to the role's process group through the actor."""
        if self.poll() is not None:
            return
        if sig == signal.SIGKILL:
            self.launcher.kill_actor(self.actor)
        else:
            self.actor.signal.remote(int(sig))

    def log_tail(self, lines: int = 15) -> str:
        if self.log.is_file():
            return super().log_tail(lines)
        with contextlib.suppress(Exception):  # not on shared storage: ask its node
            return str(self.launcher.ray.get(self.actor.tail.remote(lines), timeout=5))
        return ""


class RayLauncher(Launcher):
    """Each role in a Ray actor's process on the node of its host (see the module's text).

    ``ray_address``: the cluster (``HOST:PORT`` of the head, ``ray://...``; default
    ``$RAY_ADDRESS``, else ``auto``). ``coordinator_address``: this machine's address as the
    nodes reach it (default: the address Ray knows this driver by). ``work_dir``: the roles'
    working directory on the nodes (default: this one's path; partitions and the run directory
    must be at the same paths everywhere, as for ssh). ``check=False``: skip the version,
    partition and port probes (the hosts' nodes must still exist)."""

    name = "ray"
    cli_options = (
        CliOption("--ray-address", "ray_address", "the Ray cluster (the head's HOST:PORT; "
                  "default $RAY_ADDRESS, else auto); each host's node carries the resource "
                  "gnnsched-host:NAME (docs/deployment.md)", metavar="ADDR"),
        SSH_OPTIONS[0],  # --coordinator-address
        CliOption("--remote-dir", "work_dir", SSH_OPTIONS[2].help),
    )

    def __init__(self, cluster: ClusterSpec, python: str | None = None, *,
                 ray_address: str | None = None, coordinator_address: str | None = None,
                 work_dir: str | None = None, namespace: str = NAMESPACE,
                 connect_timeout: float = 10.0, check: bool = True,
                 fork_server: bool = False) -> None:
        super().__init__(cluster, python, fork_server=False)
        self.address = ray_address or os.environ.get("RAY_ADDRESS") or "auto"
        self.coordinator_address = coordinator_address
        self.work_dir = work_dir or os.getcwd()
        self.namespace, self.connect_timeout, self.check = namespace, connect_timeout, check
        self.ray: Any = None
        self.nodes: dict[str, RayNode] = {}
        self.driver_ip: str | None = None
        self.groups: list[Any] = []  # placement groups (the run's, then one per late host)
        self.bundles: dict[str, tuple[Any, int]] = {}  # machine -> (group, bundle index)
        self.ifnames: dict[str, str] = {}
        self.token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._pending: dict[str, tuple[Any, Any]] = {}  # ident -> (actor, start ref)
        self.actors: list[Any] = []

    # ---------------------------------------------------------------- where
    def _connect(self) -> Any:
        if self.ray is None:
            self.ray = connect(self.address, self.namespace, self.connect_timeout)
            self.driver_ip = self.ray.util.get_node_ip_address()
            self._refresh()
        return self.ray

    def _refresh(self) -> list[str]:
        self.nodes, problems = ray_nodes(self.ray)
        return problems

    @property
    def loopback(self) -> bool:  # type: ignore[override]
        """Every host on this box (raylets sharing this driver's address): unshaped links,
        large chunks, as on the local launcher."""
        addrs = {n.address for m, n in self.nodes.items() if m in self._names()}
        return bool(addrs) and addrs <= {self.driver_ip, "127.0.0.1"}

    def _names(self) -> set[str]:
        return {m.name for m in self.cluster.machines}

    def coordinator_host(self) -> str:
        if self.coordinator_address:
            return self.coordinator_address
        self._connect()
        return str(self.driver_ip)

    def host_of(self, machine: str) -> str:
        self.cluster.machine(machine)  # KeyError names the cluster if unknown
        self._connect()
        node = self.nodes.get(machine)
        if node is None:
            raise LaunchError(self._missing([machine]))
        return node.address

    def gloo_ifname(self, machine: str) -> str | None:
        return self.ifnames.get(machine)

    def _missing(self, machines: list[str]) -> str:
        have = ", ".join(sorted(self.nodes)) or "none"
        return ("no Ray node carries the host resource of " + ", ".join(
            f"{m} ({host_resource(m)})" for m in machines) + f" at {self.address} (hosts "
            f"found: {have}); fix: on each such host run `ray start --address {self.address} "
            f"--resources '{{\"{host_resource(machines[0])}\": 1}}'` (or name it in "
            "the head's --resources)")

    # ---------------------------------------------------------------- checks
    def reachable(self, machine: str, timeout: float = 5.0) -> bool:
        """The host's node is alive in Ray and runs a task within ``timeout`` (Ray marks a
        lost node dead only after its health checks fail, seconds later): a node that does
        not answer is re-planned around, as an ssh host that does not answer is."""
        if machine in self.down:
            return False
        try:
            ray = self._connect()
            self._refresh()
            node = self.nodes.get(machine)
            if node is None:
                return False
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            ref = _remote(ray, "ping").options(scheduling_strategy=(
                NodeAffinitySchedulingStrategy(node.node_id, soft=False))).remote()
            # never ray.cancel it: cancelling a task as it completes aborts this process
            # (Ray 2.60: "Tried to complete task that was not pending")
            return bool(ray.get(ref, timeout=timeout) == node.node_id)
        except Exception:
            return False

    def preflight(self, machines: list[str], timeout: float = 30.0) -> None:
        """Before any role starts: the cluster answers, every host has its node, the nodes
        run the same versions and see the partitions, the run directory and the coordinator;
        then the placement group is made. One :class:`LaunchError` with every problem."""
        machines = sorted(set(machines))
        self._connect()
        problems = self._refresh()
        missing = [m for m in machines if m not in self.nodes]
        if missing:
            problems.append(self._missing(missing))
        present = [m for m in machines if m in self.nodes]
        if self.check and present:
            problems += self._probe(present, timeout)
        if problems:
            raise LaunchError(f"Ray cluster check failed before any role started "
                              f"({len(problems)} problem{'s' * (len(problems) != 1)}): "
                              + " | ".join(problems))
        self._place(machines, timeout)
        print(f"gnnsched: Ray cluster {self.address}: placement group "
              f"gnnsched/{self.token}: " + ", ".join(
                  f"{m} on node {self.nodes[m].node_id[:8]} ({self.nodes[m].address})"
                  for m in machines), file=sys.stderr)

    def _probe(self, machines: list[str], timeout: float) -> list[str]:
        """Run :func:`node_facts` on every host's node; compare with this machine's."""
        from gnnsched.runtime.hostcheck import DIGEST_PACKAGES, DISTS, local_facts

        ray = self.ray
        base = {"dists": list(DISTS), "digest": list(DIGEST_PACKAGES)}
        local = local_facts(dict(base))
        meta = None
        if self.partitions and (Path(self.partitions) / "gnnsched.json").is_file():
            meta = (Path(self.partitions) / "gnnsched.json").read_bytes()
        facts_fn = _remote(ray, "facts")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        refs = {}
        for m in machines:
            node = self.nodes[m]
            args = dict(base, address=node.address, coordinator=self.endpoint,
                        work_dir=self.work_dir)
            if self.partitions:
                args.update(partitions=str(Path(self.partitions).resolve()), files=[])
            if self.run_dir:
                args.update(run_dir=str(Path(self.run_dir).resolve() / "logs"),
                            marker=f".raycheck-{m}-{self.token}")
            refs[m] = facts_fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node.node_id, soft=False)).remote(args)
        problems = []
        deadline = time.monotonic() + timeout
        for m, ref in refs.items():
            where = f"{m} (Ray node {self.nodes[m].address})"
            try:
                f = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except Exception as exc:
                text = " ".join(str(exc).split())
                if "GetTimeoutError" in type(exc).__name__ or "timed out" in text.lower():
                    problems.append(f"{where}: no answer within {timeout:.0f} s; fix: check "
                                    "the node (`ray status`)")
                elif "gnnsched" in text and ("ModuleNotFound" in text or "No module" in text):
                    problems.append(f"{where}: the node's Python cannot import gnnsched; fix: "
                                    f"{INSTALL} in the environment `ray start` runs from")
                else:
                    problems.append(f"{where}: the probe failed ({text[:200]}); fix: check "
                                    "the node's Python environment")
                continue
            problems += [f"{where}: {p}" for p in self._compare(f, local, meta)]
            mark = (f.get("run_dir") or {}).get("marker")
            if mark:
                Path(mark).unlink(missing_ok=True)
            if f.get("interface"):
                self.ifnames[m] = str(f["interface"])
        return problems

    def _compare(self, f: dict[str, Any], local: dict[str, Any], meta: bytes | None
                 ) -> list[str]:
        """What would stop a role on a node whose facts are ``f``, each with its fix."""
        import hashlib

        from gnnsched.runtime.hostcheck import DISTS

        out = []
        env = f"{f.get('executable', 'its Python')}"
        fix_env = ("install the same versions into the environment the node's `ray start` "
                   f"runs from ({INSTALL}, or a checkout of the same commit: pip install -e .)")
        if f.get("gnnsched_error"):
            out.append(f"{env} cannot import gnnsched ({f['gnnsched_error']}); fix: {fix_env}")
        here, there = local.get("versions", {}), f.get("versions", {})
        for d in DISTS:
            if there.get(d) != here.get(d):
                out.append(f"{d} {there.get(d) or 'missing'} in {env}, this machine has "
                           f"{here.get(d)}; fix: {fix_env}")
        ray_here = self.ray.__version__
        if f.get("ray") != ray_here:
            out.append(f"Ray {f.get('ray')} on the node, {ray_here} here; fix: the same Ray "
                       "on every node and here")
        if str(f.get("python", "")).split(".")[:2] != sys.version.split()[0].split(".")[:2]:
            out.append(f"Python {f.get('python')} there, {sys.version.split()[0]} here; fix: "
                       "the same Python minor version on every node")
        if not f.get("gnnsched_error") and there.get("gnnsched") == here.get("gnnsched") and \
                f.get("digest") and local.get("digest") and f["digest"] != local["digest"]:
            out.append(f"gnnsched's source there ({f.get('gnnsched_file')}) differs from this "
                       "machine's (same version, other code); fix: install the same commit "
                       "on every node (or share one checkout)")
        if f.get("work_dir_ok") is False:
            out.append(f"the working directory {self.work_dir} does not exist there (relative "
                       "paths resolve in it); fix: the same path on every node (a shared or "
                       "identical checkout), or --remote-dir")
        p = f.get("partitions")
        if p is not None:
            if p.get("missing"):
                out.append(f"partitions missing at {self.partitions}; fix: copy the "
                           "partition folder to the same path on the host, or put it on "
                           "storage every node mounts there")
            elif p.get("meta_error"):
                out.append(f"no readable gnnsched.json in {self.partitions} "
                           f"({p['meta_error']}); fix: copy the partition folder again")
            elif meta is not None and p.get("meta_sha256") != hashlib.sha256(meta).hexdigest():
                out.append(f"the partitions at {self.partitions} are not this machine's "
                           "(gnnsched.json differs); fix: copy them there again")
        r = f.get("run_dir")
        if r is not None:
            if r.get("error"):
                out.append(f"cannot write the run directory ({r['error']}); fix: make it "
                           "writable there, or choose another --out")
            elif r.get("marker") and not Path(r["marker"]).is_file():
                out.append("the run directory is not shared with this machine (logs and "
                           "checkpoints written there would be lost to the coordinator); "
                           "fix: put --out on storage every node mounts at the same path")
        if f.get("coordinator_error"):
            out.append(f"cannot connect to the coordinator at {self.endpoint} "
                       f"({f['coordinator_error']}); fix: pass --coordinator-address with an "
                       "address of this machine the nodes reach, or open its port")
        return out

    # ---------------------------------------------------------------- placement
    def _place(self, machines: list[str], timeout: float) -> None:
        """One placement group, one bundle per host not yet placed, each pinned to its
        host's node by the host's resource; wait until Ray has reserved all of them."""
        todo = [m for m in machines if m not in self.bundles and m not in self.down]
        if not todo:
            return
        ray = self._connect()
        from ray.util.placement_group import placement_group, remove_placement_group

        pg = placement_group([{host_resource(m): 1.0} for m in todo], strategy="SPREAD",
                             name=f"gnnsched/{self.token}/{len(self.groups)}")
        self.groups.append(pg)
        try:
            ray.get(pg.ready(), timeout=timeout)
        except Exception:
            remove_placement_group(pg)
            self.groups.remove(pg)
            raise LaunchError(
                f"Ray could not reserve the host(s) {', '.join(todo)} within {timeout:.0f} s "
                f"(placement group of {', '.join(host_resource(m) for m in todo)}): another "
                "run holds them, or their nodes are gone; fix: wait for it to end (`ray "
                "status` shows what is held) or stop it") from None
        for i, m in enumerate(todo):
            self.bundles[m] = (pg, i)

    # ---------------------------------------------------------------- processes
    def _submit(self, launch: RoleLaunch) -> None:
        """Create the role's actor in its host's bundle and ask it to start the role."""
        if launch.ident in self._pending:
            return
        if launch.machine in self.down:
            raise LaunchError(f"cannot start {launch.name} on {launch.machine}: the machine "
                              "is down")
        ray = self._connect()
        if launch.machine not in self.bundles:
            self._place([launch.machine], launch.start_timeout)
        pg, index = self.bundles[launch.machine]
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor = _remote(ray, "actor").options(
            name=f"{self.token}/{launch.ident}", namespace=self.namespace,
            resources={host_resource(launch.machine): ACTOR_SHARE},
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=index)).remote()
        self.actors.append(actor)
        env = self.role_env(launch)
        argv = self.role_argv(launch)[1:]  # the node's own interpreter runs it
        self._pending[launch.ident] = (actor, actor.start.remote(
            argv, env, str(launch.log.resolve()), self.work_dir))

    def prepare(self, launches: list[RoleLaunch]) -> None:
        """Create every actor at once (Ray starts their workers in parallel)."""
        for launch in launches:
            if launch.machine not in self.down:
                self._submit(launch)

    def start(self, launch: RoleLaunch) -> Process:
        self._submit(launch)
        actor, ref = self._pending.pop(launch.ident)
        try:
            got = self.ray.get(ref, timeout=launch.start_timeout)
        except Exception as exc:
            self.kill_actor(actor)
            text = " ".join(str(exc).split())[:300]
            raise LaunchError(f"Ray could not start {launch.name} on {launch.machine}: "
                              f"{text}") from None
        proc = RayProcess(launch, self, actor, int(got["pid"]), str(got["node_id"]))
        self.procs.append(proc)
        return proc

    def kill_actor(self, actor: Any) -> None:
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)

    def stop(self, procs: list[Process], grace: float = 2.0, kill_wait: float = 5.0
             ) -> list[str]:
        """SIGTERM the roles (through their actors), wait ``grace``, then kill the actors of
        every one of ``procs`` (a role that ended leaves an idle actor). Returns the names
        that were still running."""
        ray_procs = [p for p in procs if isinstance(p, RayProcess)]
        live = [p for p in ray_procs if p.poll() is None]
        for p in live:
            p.signal(signal.SIGTERM)
        end = time.monotonic() + grace
        for p in live:
            p.wait(max(0.0, end - time.monotonic()))
        for p in ray_procs:
            self.kill_actor(p.actor)
        end = time.monotonic() + kill_wait
        for p in ray_procs:
            p.wait(max(0.0, end - time.monotonic()))
        return [p.name for p in live]

    def stop_all(self, grace: float = 5.0) -> list[str]:
        """Stop every role, kill every actor, remove the placement groups."""
        if self.ray is None:
            return []
        names = self.stop(self.procs, grace)
        for actor, _ in self._pending.values():
            self.kill_actor(actor)
        self._pending = {}
        for actor in self.actors:
            self.kill_actor(actor)
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.groups, self.bundles = [], {}
        return names

    def mark_down(self, machine: str) -> list[int]:
        """Fault injection: kill every actor (and so every role) on ``machine``; refuse new
        ones there."""
        self.down.add(machine)
        killed = []
        for p in self.procs:
            if p.launch.machine == machine and p.poll() is None and isinstance(p, RayProcess):
                self.kill_actor(p.actor)
                killed.append(p.pid)
        return killed


LAUNCHERS["ray"] = RayLauncher  # built in; the registry imports this module lazily


__all__ = ["HOST_RESOURCE", "NAMESPACE", "RayLauncher", "RayNode", "RayProcess",
           "RoleSupervisor", "cluster_from_ray", "connect", "host_resource", "import_ray",
           "node_facts", "ray_nodes"]
