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
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnsched.registry import CliOption
from gnnsched.runtime.launcher import (
    LAUNCHERS,
    SSH_OPTIONS,
    Launcher,
    LaunchError,
    Process,
    RoleLaunch,
)
from gnnsched.spec import GB, ClusterSpec

HOST_RESOURCE = "gnnsched-host:"  # + machine name: the Ray resource naming a node's host
NAMESPACE = "gnnsched"  # Ray namespace of the roles' actors (``ray.get_actor(name, NAMESPACE)``)
ACTOR_SHARE = 0.001  # of its host's resource per actor: pins it, never the limit
DEFAULT_NIC_GBPS = 10.0  # plan --from-ray: a host's NIC when no cluster file says it
INSTALL = "pip install 'gnnsched[ray]'"


def host_resource(machine: str) -> str:
    """The custom resource that marks the Ray node of ``machine``."""
    return HOST_RESOURCE + machine


def import_ray() -> Any:
    """``ray``, imported only when a Ray launcher or ``plan --from-ray`` is used."""
    try:
        import ray
    except ImportError:
        raise LaunchError(f"this needs Ray, which is not installed here: {INSTALL}") from None
    return ray


# ---------------------------------------------------------------------- connecting


def _gcs_endpoint(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` of a GCS address (None: ``auto``, ``ray://`` or no port to probe)."""
    if address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def connect(address: str | None, namespace: str = NAMESPACE, timeout: float = 10.0) -> Any:
    """Connect this process to the Ray cluster at ``address`` (``$RAY_ADDRESS``, else
    ``auto``: the cluster started on this machine) and return ``ray``. A wrong address is a
    :class:`LaunchError` within ``timeout`` (Ray itself retries for a minute), and so is a Ray
    or Python version other than the cluster's, with the fix."""
    ray = import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if ray.is_initialized():
        return ray  # one connection per process: an embedding program (a test) made it
    end = _gcs_endpoint(address)
    if end is not None:
        try:
            socket.create_connection(end, timeout=timeout).close()
        except OSError as exc:
            raise LaunchError(
                f"no Ray cluster at {address} ({exc.strerror or exc}): start one there (`ray "
                f"start --head --port {end[1]}` on the head node) or pass --ray-address "
                "HEAD:PORT as `ray start --head` printed it") from None
    try:
        ray.init(address=address, namespace=namespace, log_to_driver=False,
                 logging_level="ERROR", configure_logging=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError
        text = " ".join(str(exc).split())
        if "version mismatch" in text.lower():
            raise LaunchError(
                f"Ray at {address} runs another Ray or Python version than this machine (Ray "
                f"{ray.__version__}, Python {sys.version.split()[0]}): {text[:300]}; install "
                "the cluster's Ray version here (or the same one on every node, e.g. "
                f"{INSTALL})") from None
        raise LaunchError(f"cannot connect to the Ray cluster at {address}: {text[:300]}; "
                          "check --ray-address (the head's HOST:PORT, as `ray start --head` "
                          "printed it) or start Ray there") from None
    return ray


@dataclass
class RayNode:
    """A live Ray node and the gnnsched host it carries."""

    machine: str
    node_id: str
    address: str  # NodeManagerAddress: what the node's roles bind to
    hostname: str
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def ray_nodes(ray: Any) -> tuple[dict[str, RayNode], list[str]]:
    """Every live node carrying a ``gnnsched-host:NAME`` resource, by NAME, and the problems
    (two nodes claiming one host). A node label ``gnnsched-host: NAME`` names it as well."""
    out: dict[str, RayNode] = {}
    problems = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = dict(n.get("Resources") or {})
        labels = {str(k): str(v) for k, v in (n.get("Labels") or {}).items()}
        names = {k[len(HOST_RESOURCE):] for k in res if k.startswith(HOST_RESOURCE)}
        if labels.get(HOST_RESOURCE[:-1]):
            names.add(labels[HOST_RESOURCE[:-1]])
        for name in sorted(names):
            node = RayNode(name, str(n["NodeID"]), str(n["NodeManagerAddress"]),
                           str(n.get("NodeManagerHostname") or n["NodeManagerAddress"]), res,
                           labels)
            if name in out:
                problems.append(f"{name}: two Ray nodes carry {host_resource(name)} "
                                f"({out[name].address} and {node.address}); fix: give the "
                                "resource to one node only")
            out[name] = node
    return out, problems


# ---------------------------------------------------------------------- on the nodes


def node_facts(args: dict[str, Any]) -> dict[str, Any]:
    """Run on a node as a Ray task: hostcheck's facts (versions, digest, interface,
    partitions, run directory) plus Ray's version, memory, GPUs and whether the coordinator's
    port answers from there."""
    from gnnsched.runtime.hostcheck import local_facts

    out = local_facts(args)
    try:
        import ray

        out["ray"] = ray.__version__
    except ImportError:  # pragma: no cover - it runs inside Ray
        out["ray"] = None
    with contextlib.suppress(OSError, ValueError):
        out["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    out["gpus"] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        res = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10)
        for line in res.stdout.splitlines() if res.returncode == 0 else []:
            name, _, mib = line.rpartition(",")
            if mib.strip().isdigit():
                out["gpus"].append([name.strip(), int(mib) * 2**20])
    if args.get("work_dir"):
        out["work_dir_ok"] = os.path.isdir(args["work_dir"])
    coord = args.get("coordinator")
    if coord:
        host, _, port = coord.replace("tcp://", "").rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
            out["coordinator_error"] = None
        except OSError as exc:
            out["coordinator_error"] = str(exc)
    return out


def node_ping() -> str:
    """Run on a node as a Ray task: it answers (its node id) while the node is alive."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


class RoleSupervisor:
    """A Ray actor that runs one role process on its node and reports its exit.

    The role is started from a thread of its own that lives exactly as long as the role, so
    ``PR_SET_PDEATHSIG`` (set by the role for its parent thread) fires only when the actor
    dies, never because a pool thread ended."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen | None = None
        self.code: int | None = None
        self.log: str | None = None
        self.ended = threading.Event()

    def start(self, argv: list[str], env: dict[str, str], log: str, cwd: str) -> dict[str, Any]:
        """Start ``python ARGV`` with this node's interpreter; returns its pid and node."""
        import ray

        full = {**os.environ, **env}
        if not full.get("CUDA_VISIBLE_DEVICES"):
            full.pop("CUDA_VISIBLE_DEVICES", None)  # Ray hides GPUs from a 0-GPU actor
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        ready = threading.Event()
        err: list[str] = []

        def run() -> None:
            try:
                with open(log, "ab") as fh:
                    self.popen = subprocess.Popen(
                        [sys.executable, *argv], env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                        stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                err.append(str(exc))
                self.code = 127
                self.ended.set()
                return
            finally:
                ready.set()
            self.code = self.popen.wait()
            self.ended.set()

        threading.Thread(target=run, name="role", daemon=True).start()
        ready.wait()
        if err:
            raise RuntimeError(f"cannot start {sys.executable}: {err[0]}")
        assert self.popen is not None
        return {"pid": self.popen.pid, "node_id": ray.get_runtime_context().get_node_id(),
                "python": sys.executable}

    def wait(self) -> int:
        """Block until the role exits; its exit status (negative: killed by that signal)."""
        self.ended.wait()
        return int(self.code if self.code is not None else 1)

    def signal(self, sig: int) -> None:
        """Signal the role's whole process group (a frozen one also gets SIGCONT)."""
        if self.popen is None or self.ended.is_set():
            return
        for s in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, s)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(Path(self.log or "").read_text(errors="replace")
                             .splitlines()[-lines:])
        except OSError:
            return ""


_REMOTE: dict[str, Any] = {}


def _remote(ray: Any, what: str) -> Any:
    """The Ray remote versions of :class:`RoleSupervisor` and :func:`node_facts`, made once."""
    if what not in _REMOTE:
        _REMOTE["actor"] = ray.remote(num_cpus=0, max_concurrency=4)(RoleSupervisor)
        _REMOTE["facts"] = ray.remote(num_cpus=0, max_retries=0)(node_facts)
        _REMOTE["ping"] = ray.remote(num_cpus=0, max_retries=0)(node_ping)
    return _REMOTE[what]


# ---------------------------------------------------------------------- the driver's side


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


# ---------------------------------------------------------------------- plan --from-ray


def cluster_from_ray(address: str | None, base: dict[str, Any] | None = None, *,
                     num_parts: int | None = None, timeout: float = 30.0
                     ) -> tuple[dict[str, Any], list[str]]:
    """A cluster file's dict from what the Ray cluster says, and notes for the user.

    Every node with a ``gnnsched-host:NAME`` resource is machine NAME: ``cpus`` from its CPU
    resource, ``memory_gb`` from its physical memory (a probe task; Ray's ``memory`` resource
    when that fails), GPUs from its GPU resource (kind from ``accelerator_type:``, memory from
    ``nvidia-smi``). ``base`` (a cluster file's dict) gives NICs, partitions, GPU kinds and
    speeds, addresses and everything else; its hosts with no Ray node are an error. Without
    it, NICs are :data:`DEFAULT_NIC_GBPS` and the ``num_parts`` partitions are spread over
    the hosts (storage: shared), each said in a note."""
    ray = connect(address)
    nodes, problems = ray_nodes(ray)
    notes: list[str] = []
    where = address or os.environ.get("RAY_ADDRESS") or "auto"
    if not nodes:
        problems.append(f"no Ray node at {where} carries a {HOST_RESOURCE}NAME resource; fix: "
                        f"start each host's node with --resources '{{\"{HOST_RESOURCE}h0\": "
                        "1}' (its machine name)")
    given = {str(m.get("name")): m for m in (base or {}).get("machines", [])
             if isinstance(m, dict)}
    lost = [n for n in given if n not in nodes]
    if lost:
        problems.append(f"host(s) {', '.join(lost)} of the cluster file have no Ray node "
                        f"({', '.join(host_resource(n) for n in lost)}); fix: start Ray "
                        "there with that resource, or remove them from the file")
    if problems:
        raise LaunchError("cannot read the cluster from Ray: " + " | ".join(problems))
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    facts_fn = _remote(ray, "facts")
    refs = {n: facts_fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node.node_id, soft=False)).remote({"dists": [], "digest": []})
        for n, node in nodes.items()}
    facts: dict[str, dict[str, Any]] = {}
    for n, ref in refs.items():
        try:
            facts[n] = ray.get(ref, timeout=timeout)
        except Exception as exc:
            notes.append(f"{n}: the probe failed ({type(exc).__name__}); memory from Ray's "
                         "memory resource, GPU memory 16 GB")
            facts[n] = {}
    order = list(given) + sorted(n for n in nodes if n not in given)
    machines = []
    for n in order:
        node, f = nodes[n], facts[n]
        m = dict(given.get(n, {"name": n}))
        res = node.resources
        m["cpus"] = max(1, int(res.get("CPU", 1)))
        mem = f.get("memory_bytes") or res.get("memory", 0)
        m["memory_gb"] = round(float(mem) / GB, 2)
        ngpu = int(res.get("GPU", 0))
        kinds = [k.split(":", 1)[1].lower() for k in res if k.startswith("accelerator_type:")]
        old = m.get("gpus") if isinstance(m.get("gpus"), list) else []
        seen = f.get("gpus") or []
        gpus = []
        for i in range(ngpu):
            g = dict(old[min(i, len(old) - 1)]) if old else {}
            g.pop("count", None)
            g.setdefault("kind", kinds[0] if kinds else "gpu")
            if i < len(seen):
                g["memory_gb"] = round(seen[i][1] / GB, 2)
            g.setdefault("memory_gb", 16)
            gpus.append(g)
        if gpus:
            m["gpus"] = gpus
        else:
            m.pop("gpus", None)
        if n not in given:
            m["nic_gbps"] = DEFAULT_NIC_GBPS
            notes.append(f"{n}: NIC {DEFAULT_NIC_GBPS:g} Gbit/s assumed (no cluster file "
                         "entry): pass --cluster with its nic to plan for the real rate")
        machines.append(m)
    out = {k: v for k, v in (base or {}).items() if k != "machines"}
    out.setdefault("name", "ray")
    out["machines"] = machines
    if not any(m.get("partitions") for m in machines):
        if not num_parts:
            raise LaunchError("cannot read the cluster from Ray: no host stores a partition "
                              "and the number of partitions is unknown; fix: pass --cluster "
                              "with each host's partitions")
        hosts = sorted(machines, key=lambda m: (-float(m["memory_gb"]), m["name"]))
        for p in range(num_parts):
            hosts[p % len(hosts)].setdefault("partitions", []).append(p)
        out["storage"] = "shared"
        notes.append(f"partitions 0..{num_parts - 1} spread over "
                     f"{min(num_parts, len(hosts))} host(s) by memory (storage: shared, every "
                     "host reads them); pass --cluster to say where they are stored")
    return out, notes


LAUNCHERS["ray"] = RayLauncher  # built in; the registry imports this module lazily


__all__ = ["HOST_RESOURCE", "NAMESPACE", "RayLauncher", "RayNode", "RayProcess",
           "RoleSupervisor", "cluster_from_ray", "connect", "host_resource", "import_ray",
           "node_facts", "ray_nodes"]
