"""The memory floor of a host: the one number ``plan``, ``cluster up`` and ``train`` refuse by.

A host that runs gnnsched's processes needs at least

    fork server + sum of its roles' fixed costs + PARTITION_PEAK x its partitions + its caches

(:func:`host_floor`). The fixed costs are measured, not guessed: on this project's box (torch
2.x, DGL 2.x, CPU) a lab4 run on the emulated cluster (Cora, ``gnnsched train --launcher
netns``) was read mid-training with ``psutil`` (USS, PSS) and the hosts' memory cgroups. The
fork server (:mod:`gnnsched.runtime.zygote`) holds the interpreter, torch and DGL once per host
(the host's PSS total minus its roles' unique pages: 297-300 MiB; 380 MiB resident on its own),
shared copy-on-write by every role it forks; a role then adds its unique pages (USS): a store
32-49 MiB (with its Cora partitions), a sampler 25-28, a relay (fetcher) 32, a trainer 52-61;
the memory cgroup of a host running one trainer peaked at 64-68 MiB (the fork server's growth
after its imports included). The constants below round those up. A store loading its partitions holds the files' tensors and
the feature table built from them at once: its peak grew by 1.3-1.8 bytes per byte of partition
files (a 300,000-node synthetic graph, 2 x 73 MB per store), hence ``PARTITION_PEAK`` = 2.
Feature caches are what placement sizes them at: every gatherer on the host holds its rows and a
node -> row map (:func:`cache_bytes`).

Mini-batch buffers (prefetched batches, blocks, relay messages) depend on the profile; placement
adds them on top of this floor. On an emulated cluster the kernel charges a host less than the
floor: the fork server is moved into its host's control group only after its imports, so their
pages stay charged to the launcher's group. The floor is what a real host needs, so a plan
accepted here is never killed by either.

Pure: no torch, no DGL, no runtime import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20
FORK_SERVER_BYTES = 320 * MIB  # per host that runs any role: interpreter + torch + DGL, shared
ROLE_BYTES: dict[str, int] = {  # what each role process adds to its host (unique pages)
    "store": 48 * MIB, "sampler": 32 * MIB, "fetcher": 40 * MIB, "trainer": 80 * MIB}
PARTITION_PEAK = 2.0  # a store's peak per byte of the partition files it loads
NODE_MAP_BYTES = 4  # per graph node, in every gatherer holding a cache (node -> row)
# a cluster file's role names -> the process that role runs (what a host may be given)
PROCESS_OF = {"store": "store", "sample": "sampler", "fetch": "fetcher", "train": "trainer"}


@dataclass(frozen=True)
class Floor:
    """A host's floor and what it is made of (bytes), for a refusal that explains itself."""

    roles: dict[str, int] = field(default_factory=dict)  # process kind -> count
    fork_server: int = 0
    processes: int = 0  # the roles' fixed costs, summed
    partitions: float = 0.0  # PARTITION_PEAK x the partition files' bytes
    caches: float = 0.0

    @property
    def total(self) -> int:
        return int(self.fork_server + self.processes + self.partitions + self.caches + 0.5)

    def parts(self) -> str:
        """``fork server 336 MB + store 50 MB + 2 x sampler 67 MB + ...``: the sum, spelled."""
        out = [f"fork server {fmt(self.fork_server)}"] if self.fork_server else []
        for kind, n in sorted(self.roles.items()):
            if n:
                out.append(f"{f'{n} x ' if n > 1 else ''}{kind} {fmt(n * ROLE_BYTES[kind])}")
        if self.partitions:
            out.append(f"partitions {fmt(self.partitions)} ({PARTITION_PEAK:g} x their files "
                       "while loading)")
        if self.caches:
            out.append(f"feature caches {fmt(self.caches)}")
        return " + ".join(out) or "nothing"


def floor(roles: Mapping[str, int], partition_bytes: float = 0.0,
          cache: float = 0.0) -> Floor:
    """The :class:`Floor` of a host running ``roles`` (process kind -> count: ``store``,
    ``sampler``, ``fetcher``, ``trainer``), storing partitions whose files hold
    ``partition_bytes`` and caching ``cache`` bytes of features (:func:`cache_bytes`)."""
    bad = sorted(set(roles) - set(ROLE_BYTES))
    if bad:
        raise ValueError(f"unknown role kind(s) {bad}; valid: {sorted(ROLE_BYTES)}")
    counts = {k: int(n) for k, n in roles.items() if n}
    return Floor(counts, FORK_SERVER_BYTES if counts else 0,
                 sum(n * ROLE_BYTES[k] for k, n in counts.items()),
                 PARTITION_PEAK * float(partition_bytes), float(cache))


def host_floor(roles: Mapping[str, int], partition_bytes: float = 0.0,
               cache: float = 0.0) -> int:
    """Bytes a host needs to run ``roles`` with its partitions and caches (:func:`floor`)."""
    return floor(roles, partition_bytes, cache).total


def cache_bytes(rows: int, row_bytes: float, num_nodes: int, gatherers: int) -> float:
    """A host's feature caches: each of its ``gatherers`` (trainers fetching in their own
    process, one relay) holds ``rows`` rows of ``row_bytes`` and a node -> row map."""
    if rows <= 0 or gatherers <= 0:
        return 0.0
    return float(gatherers * (rows * row_bytes + NODE_MAP_BYTES * num_nodes))


def machine_floor(roles: tuple[str, ...], stores: bool) -> Floor:
    """The least a cluster file's machine can need, before any plan or partition size is
    known (``cluster up``): a store host runs its store; any other host, if it runs anything,
    at least the cheapest role its ``roles`` allow."""
    if stores:
        return floor({"store": 1})
    kinds = [PROCESS_OF[r] for r in roles if r in PROCESS_OF and r != "store"]
    if not kinds:
        return floor({})
    return floor({min(kinds, key=lambda k: ROLE_BYTES[k]): 1})


def refuse_below(cluster: Any, floors: Mapping[str, Floor], need: Callable[[Floor], str],
                 fix: str = "") -> None:
    """Raise a SpecError naming the first machine whose ``memory_gb`` is below its floor: the
    floor, ``need(floor)`` (what needs it, of what it is made), and the ``memory_gb`` that
    holds it (``fix``: another way out). One wording for ``plan`` and ``train``."""
    from gnnsched.spec import SpecError

    for i, m in enumerate(cluster.machines):
        f = floors.get(m.name)
        if f is None or m.memory >= f.total:
            continue
        raise SpecError(cluster.source, f"machines[{i}].memory_gb",
                        f"{m.name} has memory_gb: {m.memory / 1e9:g} ({fmt(m.memory)}), below "
                        f"the {fmt(f.total)} {need(f)}",
                        f"memory_gb: {gb_up(f.total)} or more on {m.name}{fix}")


def fmt(b: float) -> str:
    """Bytes for a person: MB or GB (decimal, as ``memory_gb`` is)."""
    if b >= 1e9:
        return f"{b / 1e9:.2f} GB"
    return f"{b / 1e6:.0f} MB"


def gb_up(b: float) -> str:
    """``memory_gb`` that holds ``b`` bytes, rounded up to 0.01 GB (what a fix suggests)."""
    return f"{-(-b // 1e7) / 100:.2f}"


__all__ = ["FORK_SERVER_BYTES", "Floor", "refuse_below", "MIB", "NODE_MAP_BYTES", "PARTITION_PEAK",
           "PROCESS_OF", "ROLE_BYTES", "cache_bytes", "floor", "fmt", "gb_up", "host_floor",
           "machine_floor"]
