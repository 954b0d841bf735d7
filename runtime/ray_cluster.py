"""The Ray cluster as gnnsched sees it: connecting to it, which node carries which host (the
``gnnsched-host:NAME`` resource), and a cluster file's dict read from it (``plan
--from-ray``). ``ray`` is imported only when one of these is called.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

from gnnsched.runtime.ray_node import _remote
from gnnsched.runtime.role_process import LaunchError
from gnnsched.spec import GB

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


__all__ = ["ACTOR_SHARE", "DEFAULT_NIC_GBPS", "HOST_RESOURCE", "INSTALL", "NAMESPACE",
           "RayNode", "cluster_from_ray", "connect", "host_resource", "import_ray",
           "ray_nodes"]
