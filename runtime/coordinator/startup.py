"""What the roles are told at start-up: the ``config`` after ``hello``, the ``start`` after
``ready``.

Start-up (see :mod:`.core`): launch all roles -> ``hello`` -> ``config`` -> ``ready`` ->
``start``. Both messages are functions of the run's settings and of the plan being run (the
:class:`~.state.RunState`), built again after every recovery's relaunch: :func:`role_config`
(with the NIC chunk and window sizes of :func:`nic_sizes` and the plan's feature caches) and
:func:`start_message` (everyone's endpoints, once every role reported them).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnsched.memory import Floor, cache_bytes, floor, refuse_below
from gnnsched.policy import Policy
from gnnsched.runtime.coordinator.options import (
    NIC_CHUNK_S,
    NIC_WINDOW_S,
    PEER_WINDOW_S,
    RuntimeOptions,
)
from gnnsched.runtime.coordinator.state import RunState
from gnnsched.runtime.launcher import Launcher, on_loopback
from gnnsched.runtime.store import CHUNK_BYTES, PEER_WINDOW_BYTES, WINDOW_BYTES
from gnnsched.runtime.transport import Message, ctrl
from gnnsched.spec import ClusterSpec, JobSpec

if TYPE_CHECKING:
    from gnnsched.datasets.partition import PartitionSet
    from gnnsched.runtime.coordinator.roles import RoleState


def host_floors(cluster: ClusterSpec, plan: Any, specs: list[tuple[str, str, str]],
                part_bytes: list[float], row_bytes: float, num_nodes: int
                ) -> dict[str, Floor]:
    """Per machine that runs a role of ``specs`` ((role, id, machine), as
    :meth:`~.roles.RoleTable.role_specs` gives them), its memory floor: the roles, the
    partitions it stores and the plan's feature caches there (:mod:`gnnsched.memory`)."""
    roles: dict[str, Counter[str]] = {}
    for kind, _, machine in specs:
        roles.setdefault(machine, Counter())[kind] += 1
    gatherers: Counter[str] = Counter()
    for t in plan.trainers:
        if t.fetch_at == t.machine:
            gatherers[t.machine] += 1
    for relay in {t.fetch_at for t in plan.trainers if t.fetch_at != t.machine}:
        gatherers[relay] += 1
    caches = getattr(plan, "caches", None) or {}
    out = {}
    for m in cluster.machines:
        if m.name not in roles:
            continue
        stored = sum(part_bytes[p] for p in m.partitions if p < len(part_bytes))
        cache = cache_bytes(int(caches.get(m.name, 0) or 0), row_bytes, num_nodes,
                            gatherers[m.name])
        out[m.name] = floor(roles[m.name], stored, cache)
    return out


def check_host_memory(cluster: ClusterSpec, plan: Any, specs: list[tuple[str, str, str]],
                      pset: PartitionSet) -> None:
    """Refuse, before any role starts, a plan whose roles cannot fit a machine's memory_gb:
    a SpecError naming the machine, its floor and what the floor is made of (the number
    ``plan`` and ``cluster up`` refuse by)."""
    floors = host_floors(cluster, plan, specs, pset.part_bytes(), 4.0 * pset.feature_dim,
                         pset.num_nodes)
    refuse_below(cluster, floors, lambda f: (
        f"its roles of this plan need ({f.parts()}; gnnsched.memory); no role was started"),
        ", or a plan that runs less there")


def role_config(state: RunState, *, opts: RuntimeOptions, job: JobSpec, policy: Policy,
                launcher: Launcher, run_dir: Path, pset: PartitionSet,
                resume: dict[str, Any] | None) -> dict[str, Any]:
    """The ``config`` every role gets after ``hello``: the run's settings (``resume``: the
    checkpoint trainers load first)."""
    o, st = opts, state
    trainers = []
    for w, t in enumerate(st.plan.trainers):
        gpus = st.cluster.machine(t.machine).gpus
        trainers.append({"id": w, "machine": t.machine, "device": t.device,
                         "speed": gpus[t.device].speed if t.device < len(gpus) else 1.0,
                         "fetch_at": t.fetch_at, "parts": list(t.parts)})
    cpu_model = getattr(launcher, "cpu_model", False)
    return {
        "run_dir": str(run_dir.resolve()), "partitions": str(pset.root.resolve()),
        "node_part_file": str(pset.root.resolve() / pset.meta.get(
            "node_part", "node_part.npy")),
        "machines": st.names, "part_store": st.cluster.part_stores,
        "job": job.to_dict(), "feature_dim": pset.feature_dim,
        "num_classes": pset.num_classes, "feature_bytes": 4 * pset.feature_dim,
        "sharing": policy.sharing, **nic_sizes(o, st.cluster, st.net, launcher),
        "wire_levels": policy.wire_levels,
        "urgent_band": bool(getattr(launcher, "nic_bands", False) and o.urgent_band),
        "grad_first": o.grad_first and len(set(st.T)) > 1,
        "request_timeout": o.request_timeout * st.dilation,
        # on the scale model a slow device's trainer has a whole core's quota (/ D) and
        # stretches its compute by the compute's wall time, which the quota dilates
        "emulate_speed": o.emulate_speed if o.emulate_speed is not None else (
            True if cpu_model else None),
        "speed_clock": "wall" if cpu_model else "cpu",
        "verify_partitions": o.verify_partitions, "trace": o.trace,
        "checkpoint_every": o.checkpoint_every, "resume": resume,
        "trainers": trainers,
        "items": [[it.seq, it.epoch, it.phase, it.index] for it in st.items],
        **_caches(st, pset, run_dir),
    }


def _caches(state: RunState, pset: PartitionSet, run_dir: Path) -> dict[str, Any]:
    """The plan's feature caches as the gatherers read them: rows per machine index and the
    file of the order they fill in (computed once per partitioning)."""
    names = state.names
    caches = {str(names.index(m)): int(r) for m, r in state.plan.caches.items() if r}
    if not caches:
        return {}
    from gnnsched.datasets.hot import HOT_FILE, hot_order

    order = hot_order(pset)
    path = pset.root / HOT_FILE
    if not path.is_file():  # the partitions are read-only: a copy in the run
        path = run_dir / HOT_FILE
        np.save(path, order)
    return {"caches": caches, "hot_order_file": str(path.resolve())}


def nic_sizes(opts: RuntimeOptions, cluster: ClusterSpec, net: ClusterSpec,
              launcher: Any) -> dict[str, Any]:
    """Chunk and window sizes. On real or shaped links (netns, ssh) each store's chunk is
    ~8 ms of its own egress (16..256 KiB, ``nic_chunk_bytes``) and its windows cover
    150 / 120 ms of it (``nic_windows``); on loopback (local) large chunks keep the CPU
    cost low. ``chunk_bytes`` (~2 ms of the slowest NIC when shaped) is the fallback for
    a sender with no entry of its own. Sizes come from the real cluster's rates
    (``cluster``), not the scale model's dilated ones (``net``): a window is 150 ms of the
    cluster the model stands for, D x 150 ms of the model, so both move the same bytes per
    window and the model behaves like that cluster, only slower."""
    if opts.chunk_bytes:
        chunk = int(opts.chunk_bytes)
    elif on_loopback(launcher):
        chunk = CHUNK_BYTES
    else:
        slowest = min(min(m.egress, m.ingress) for m in cluster.machines)
        chunk = int(min(CHUNK_BYTES, max(16 << 10, slowest * 0.002)))
    out: dict[str, Any] = {
        "chunk_bytes": chunk,
        "window_bytes": int(opts.window_bytes or (WINDOW_BYTES if chunk == CHUNK_BYTES
                                                  else 4 * chunk)),
        "peer_window_bytes": int(opts.peer_window_bytes or (
            PEER_WINDOW_BYTES if chunk == CHUNK_BYTES else 2 * chunk))}
    if chunk != CHUNK_BYTES:
        # Shaped links: a window must cover the bandwidth-delay product of *its* NIC, or an
        # acknowledgement round trip through busy processes and the receiver's own queued
        # egress caps a sender below its rate. Per store: 150 ms (total) / 120 ms (per
        # receiver) of its egress, never less than the chunk-based floor. With 40 / 30 ms
        # a 50 Mbit/s store waited for acks ~60% of a hetero/Cora run (its ``waits_s``
        # stats) and the run was 11% slower than simulated; with 150 / 120 ms it never
        # waits and a priority transfer still overtakes within ~150 ms of that NIC.
        #
        # A store's chunk is ~8 ms of its own egress (16..256 KiB): each chunk costs the
        # sender and receiver a message, an ack and a scheduling decision in Python, so
        # chunks sized by the *slowest* NIC (16 KiB) kept a 50 Mbit/s store sending ~380
        # chunks a second, 3-4 s of its CPU per ~20 s hetero/Physics run (its ``waits_s``
        # "send"; ~1.6 s with 8 ms chunks), and a 200 Mbit/s one four times as many.
        # Priority and holds act at window granularity anyway.
        chunks = {} if opts.chunk_bytes else {
            m.name: int(min(CHUNK_BYTES, max(16 << 10, m.egress * NIC_CHUNK_S)))
            for m in cluster.machines if m.partitions}
        out["nic_chunk_bytes"] = chunks
        out["nic_windows"] = {
            m.name: [max(out["window_bytes"], 4 * chunks.get(m.name, chunk),
                         int(m.egress * NIC_WINDOW_S)),
                     max(out["peer_window_bytes"], 2 * chunks.get(m.name, chunk),
                         int(m.egress * PEER_WINDOW_S))]
            for m in cluster.machines if m.partitions}
        # each store's NIC rate on the run's clock (the scale model's dilated one): its
        # total window lets a transfer past while the NIC idles (CONSERVE_BELOW)
        out["nic_rates"] = {m.name: float(m.egress) for m in net.machines if m.partitions}
    return out


def start_message(state: RunState, roles: dict[str, RoleState],
                  launcher: Launcher) -> tuple[Message, str]:
    """The ``start`` every role gets once all are ready -- the stores', relays' and trainers'
    endpoints and the all-reduce's rendezvous -- and the all-reduce backend it names (NCCL
    when every trainer has a GPU of its own, else gloo)."""
    st = state
    stores = {str(st.cluster.machine_index(r.launch.machine)): r.info["endpoint"]
              for r in roles.values() if r.launch.role == "store"}
    urgent = {str(st.cluster.machine_index(r.launch.machine)): r.info["urgent_endpoint"]
              for r in roles.values()
              if r.launch.role == "store" and r.info.get("urgent_endpoint")}
    fetchers = {r.launch.machine: r.info["endpoint"] for r in roles.values()
                if r.launch.role == "fetcher"}
    trainers = []
    cuda = []
    for w, t in enumerate(st.plan.trainers):
        info = roles[f"trainer:{w}"].info
        relay = fetchers.get(t.fetch_at) if t.fetch_at != t.machine else None
        trainers.append({"id": w, "data": info["data"], "relay": relay,
                         "relay_machine": t.fetch_at if relay else None})
        cuda.append(info.get("cuda"))
    backend = "nccl" if all(cuda) and len(set(cuda)) == len(cuda) else "gloo"
    master = roles["trainer:0"].info.get("master_port")
    start = ctrl("start", stores=stores, urgent_stores=urgent, trainers=trainers,
                 backend=backend, master_addr=launcher.host_of(st.plan.trainers[0].machine),
                 master_port=master)
    return start, backend


__all__ = ["check_host_memory", "host_floors", "nic_sizes", "role_config", "start_message"]
