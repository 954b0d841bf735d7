"""Control groups for an emulated cluster: every host gets its own share of the box's CPU and
its own memory limit, so a "16-core storage host" and "a 2-core host with a fast GPU" differ in
real runs, not only in the cluster file (see ``docs/scale-model.md``).

Layout, mirrored in every hierarchy used (cgroup v1: ``cpu``, ``cpuacct``, ``memory``; v2: the
unified one with the ``cpu`` and ``memory`` controllers)::

    <base>/gnnsched/<cluster>/                  the cluster (no limits of its own)
        <host>/                                 memory limit: memory_gb x memory_scale
                                                CPU quota: (cpus + sum of device quotas) / D
            cpu/                                CPU quota: cpus / D (stores, samplers, fetchers)
                <role>-<id>/                    CPU quota: min(threads, cpus) / D (one process)
                zygote/                         the host's fork server, once its imports are done
            dev<i>/                             CPU quota: max(1, speed of device i) / D

``D`` is the cluster's *dilation factor* (:func:`choose_dilation`). A per-process leaf caps one
process at its own threads' worth of emulated cores (each 1/D of a box core), as on a real host
a single-threaded sampler cannot use more than one core however many the host has; the host's
``cpu`` group caps all of them together at the host's cores. A device of ``speed`` s >= 1 is
given s / D of a box core: the profile's reference device (``speed: 1.0``) trains as fast as one
core of this box. A slower device's trainer gets 1 / D and stretches its compute by sleeping,
so its CPU-side work keeps the host's speed (:func:`device_quota`).

``<base>`` is the cgroup of the process that creates the groups (the root on most boxes, as in
``/sys/fs/cgroup/cpu/gnnsched/<cluster>/<host>``), so groups stay inside whatever the caller was
given (cgroup delegation); ``GNNSCHED_CGROUP_PARENT`` (a path inside each hierarchy, e.g. ``/``)
overrides it. Every directory made is derived from the cluster's name and recorded in the
emulated cluster's state file, so :meth:`ClusterGroups.remove` -- from any process -- removes
them all, killing what still runs inside first.

Needs root. :func:`unavailable_reason` says what is missing (not root, no cpu or memory
controller, no CFS bandwidth control) and :class:`CgroupError` names the fix.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnnsched.memory import fmt, gb_up, machine_floor
from gnnsched.runtime.netns_ops import NetnsError

TOP = "gnnsched"
MIN_QUOTA_US = 1000  # the kernel refuses a CFS quota below 1 ms
MIN_PERIOD_US, MAX_PERIOD_US = 10_000, 1_000_000
ZYGOTE = "zygote"
PARENT_ENV = "GNNSCHED_CGROUP_PARENT"


class CgroupError(NetnsError):
    """Control groups cannot be made, used or removed; the message names what is missing."""


# --------------------------------------------------------------------------------------
# The dilation factor and each host's share


def device_quota(speed: float) -> float:
    """The cores (before / D) a device's trainer gets: ``max(1, speed)``. A ``speed: 1.0``
    device trains as fast as one core of this box, the profile's reference, so a faster one
    gets ``speed`` cores. A slower one still gets a whole core: on a real host its trainer's
    CPU-side work (decoding blocks, the I/O thread, gloo's all-reduce) runs on the host's
    CPUs at their speed, not at the device's; the trainer stretches only its compute to the
    device's speed, by sleeping (:mod:`gnnsched.runtime.trainer`). A quota of ``speed`` / D
    slowed that CPU-side work too: on a speed-0.25 device a Physics step took 19-25 ms of the
    real cluster against the 11 ms predicted."""
    return max(1.0, float(speed))


def host_compute(machine: Any) -> float:
    """A host's compute in cores of this box: its CPUs plus, for every device, its trainer's
    quota (:func:`device_quota`)."""
    return float(machine.cpus) + sum(device_quota(g.speed) for g in machine.gpus)


def cluster_compute(spec: Any) -> float:
    """The cluster's total compute in cores of this box (:func:`host_compute` summed)."""
    return sum(host_compute(m) for m in spec.machines)


def box_cores() -> float:
    """Cores this process may run on (its CPU affinity; ``os.cpu_count()`` without one)."""
    with contextlib.suppress(AttributeError, OSError):
        return float(len(os.sched_getaffinity(0)))
    return float(os.cpu_count() or 1)


def choose_dilation(spec: Any, cores: float | None = None) -> float:
    """D = max(1, cluster compute / the box's cores): the smallest slow-down at which every
    host's share fits the box at once (``cores``: the cores to fill, default :func:`box_cores`;
    give fewer to leave some for the coordinator and the kernel's networking)."""
    cores = box_cores() if cores is None else float(cores)
    if not cores > 0:
        raise CgroupError(f"cores must be > 0, got {cores}")
    return max(1.0, cluster_compute(spec) / cores)


@dataclass(frozen=True)
class HostShare:
    """What one emulated host gets: CPU quotas in cores of this box, a memory limit in bytes."""

    host: str
    cpus: int
    speeds: tuple[float, ...]  # its devices' speeds
    cores: float  # the whole host: (cpus + sum of device quotas) / D
    cpu_cores: float  # its CPUs: cpus / D
    device_cores: tuple[float, ...]  # each device: max(1, speed) / D (device_quota)
    memory: int  # bytes (memory_gb x memory_scale; never dilated)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "cpus": self.cpus, "speeds": list(self.speeds),
                "cores": self.cores, "cpu_cores": self.cpu_cores,
                "device_cores": list(self.device_cores), "memory": self.memory}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostShare:
        return cls(str(d["host"]), int(d["cpus"]), tuple(float(x) for x in d["speeds"]),
                   float(d["cores"]), float(d["cpu_cores"]),
                   tuple(float(x) for x in d["device_cores"]), int(d["memory"]))


def plan_shares(spec: Any, dilation: float, memory_scale: float = 1.0) -> dict[str, HostShare]:
    """Every host's :class:`HostShare` at dilation ``dilation``."""
    if not dilation >= 1:
        raise CgroupError(f"dilation must be >= 1, got {dilation}")
    if not memory_scale > 0:
        raise CgroupError(f"memory_scale must be > 0, got {memory_scale}")
    out = {}
    for m in spec.machines:
        speeds = tuple(float(g.speed) for g in m.gpus)
        memory = int(m.memory * memory_scale)
        least = machine_floor(tuple(m.roles), bool(m.partitions))
        if memory < least.total:
            kind = "a store host" if m.partitions else "a host running one role"
            raise CgroupError(
                f"{spec.source}: machines[{m.name}].memory_gb: {m.memory / 1e9:g} GB"
                + (f" x memory scale {memory_scale:g}" if memory_scale != 1 else "")
                + f" is below the {fmt(least.total)} floor of {kind} ({least.parts()}"
                + (", before its partitions" if m.partitions else "") + "; "
                f"gnnsched.memory); give the host memory_gb: {gb_up(least.total / memory_scale)}"
                " or more, or raise --memory-scale")
        out[m.name] = HostShare(m.name, int(m.cpus), speeds, host_compute(m) / dilation,
                                m.cpus / dilation,
                                tuple(device_quota(s) / dilation for s in speeds), memory)
    return out


def choose_period(shares: Iterable[HostShare], dilation: float) -> int:
    """CFS period (us): 10 ms (short, so a throttled role waits at most a few ms), longer only
    where the smallest share (one core / D, or the slowest device) would be under 1 ms."""
    smallest = min([1.0 / dilation] + [c for s in shares for c in s.device_cores])
    return int(min(MAX_PERIOD_US, max(MIN_PERIOD_US, math.ceil(MIN_QUOTA_US / smallest))))


# --------------------------------------------------------------------------------------
# Finding the hierarchies


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy and the directory our groups go under (``base``)."""

    version: int
    controllers: tuple[str, ...]
    mount: str
    base: str


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount point, root inside the hierarchy, super options) of cgroup mounts."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            f, r = left.split(), right.split()
            if len(f) >= 5 and len(r) >= 3 and r[0] in ("cgroup", "cgroup2"):
                out.append((r[0], f[4].replace("\\040", " "), f[3], set(r[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``{"cpu,cpuacct": "/x", "": "/y" (v2)}``."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                out[parts[1]] = parts[2]
    return out


def _base(mount: str, root: str, own: str | None) -> str:
    override = os.environ.get(PARENT_ENV)
    path = override if override is not None else (own or "/")
    if override is None and root not in ("/", "") and path.startswith(root):
        path = path[len(root):]  # a mount of a sub-tree (a container's view)
    return str(Path(mount) / path.lstrip("/"))


def discover() -> dict[str, Hierarchy]:
    """The hierarchies to use, by controller: v2 (``{"cpu", "memory"}`` -> the unified one)
    when its root delegates both controllers, else v1 (``cpu``, ``cpuacct``, ``memory``).
    Raises :class:`CgroupError` naming what is missing."""
    mounts = _mounts()
    own = _own_paths()
    for fstype, mount, root, _opts in mounts:
        if fstype != "cgroup2":
            continue
        try:
            ctrls = set(Path(mount, "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if {"cpu", "memory"} <= ctrls:
            h = Hierarchy(2, ("cpu", "memory"), mount, _base(mount, root, own.get("")))
            return {"cpu": h, "memory": h}
    found: dict[str, Hierarchy] = {}
    for fstype, mount, root, opts in mounts:
        if fstype != "cgroup":
            continue
        ctrls = tuple(sorted(c for c in ("cpu", "cpuacct", "memory") if c in opts))
        if not ctrls:
            continue
        mine = next((p for k, p in own.items() if set(k.split(",")) >= set(ctrls)
                     and k and not k.startswith("name=")), None)
        h = Hierarchy(1, ctrls, mount, _base(mount, root, mine))
        for c in ctrls:
            found.setdefault(c, h)
    missing = [c for c in ("cpu", "memory") if c not in found]
    if missing:
        have = sorted({c for h in found.values() for c in h.controllers})
        raise CgroupError(
            f"no cgroup hierarchy with the {' and '.join(missing)} controller"
            f"{'s' if len(missing) > 1 else ''} is mounted (cgroup v1 has: "
            f"{', '.join(have) or 'none'}; cgroup v2: "
            f"{'not mounted' if not any(m[0] == 'cgroup2' for m in mounts) else 'cpu or memory not delegated'}"
            f"): mount them (e.g. `mount -t cgroup -o {missing[0]} cgroup "
            f"/sys/fs/cgroup/{missing[0]}`), or bring the cluster up without control groups "
            "(`gnnsched cluster up --no-cgroups`: no CPU or memory model, every host shares "
            "the box)")
    if not Path(found["cpu"].mount, "cpu.cfs_quota_us").exists():
        raise CgroupError(f"the cpu controller at {found['cpu'].mount} has no cpu.cfs_quota_us: "
                          "this kernel lacks CFS bandwidth control (CONFIG_CFS_BANDWIDTH), so no "
                          "CPU quota can be set; use `gnnsched cluster up --no-cgroups`")
    return found


def require() -> dict[str, Hierarchy]:
    """The hierarchies, after checking we may write them (root); else :class:`CgroupError`."""
    if os.geteuid() != 0:
        raise CgroupError("per-host control groups need root, to create groups under "
                          "/sys/fs/cgroup and move processes into them: run `sudo gnnsched "
                          "cluster up ...`, or `gnnsched cluster up --no-cgroups` (no CPU or "
                          "memory model: every host shares the box)")
    found = discover()
    for h in {h.mount: h for h in found.values()}.values():
        if not os.access(h.base, os.W_OK):
            raise CgroupError(f"cannot write {h.base} ({'/'.join(h.controllers)} "
                              f"hierarchy): is it mounted read-only? Set {PARENT_ENV} to a "
                              "writable group inside it, or use --no-cgroups")
    return found


def unavailable_reason() -> str | None:
    """Why per-host control groups cannot be made here (None: they can); tests skip with it."""
    try:
        require()
    except CgroupError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------------------
# Files


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def _write(path: Path, value: object) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    """``key N`` from a flat-keyed file (memory.oom_control, cpu.stat, memory.events)."""
    for line in (_read(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].lstrip("-").isdigit():
            return int(parts[1])
    return None


def _pids(d: Path) -> list[int]:
    return [int(x) for x in (_read(d / "cgroup.procs") or "").split() if x.isdigit()]


def _tree(d: Path) -> list[Path]:
    """``d`` and every group below it, deepest first (the order rmdir needs)."""
    if not d.is_dir():
        return []
    out = []
    for sub in sorted(p for p in d.iterdir() if p.is_dir()):
        out += _tree(sub)
    return out + [d]


# --------------------------------------------------------------------------------------
# One cluster's groups


class ClusterGroups:
    """The control groups of one emulated cluster: make, place processes, read, remove.

    ``dirs``: the cluster's directory in each hierarchy, by controller (filled by
    :meth:`resolve` from :func:`require`, or from a state file by :meth:`from_state`).
    Groups are named by their path below the cluster directory (``"store0/cpu/sampler-3"``).
    """

    def __init__(self, cluster: str, shares: dict[str, HostShare], dilation: float,
                 period_us: int | None = None, dirs: dict[str, str] | None = None,
                 version: int | None = None) -> None:
        self.cluster = _clean(cluster)
        self.shares = shares
        self.dilation = float(dilation)
        self.period_us = int(period_us or choose_period(shares.values(), dilation))
        self.dirs: dict[str, str] = dict(dirs or {})
        self.version = version
        self._planned: dict[str, dict[Path, int | None]] = {}  # throttled: the plan's

    # -- where

    def resolve(self) -> ClusterGroups:
        """Find the hierarchies (needs root) unless known already; returns self."""
        if not self.dirs:
            found = require()
            self.dirs = {c: str(Path(h.base, TOP, self.cluster)) for c, h in found.items()}
            self.version = next(iter(found.values())).version
        return self

    def _roots(self) -> list[Path]:
        """The cluster directory in each hierarchy, once each; memory first (so a moved
        process's next allocation is charged to its host before it can use more CPU)."""
        order = sorted(self.dirs, key=lambda c: (c != "memory", c))
        return list(dict.fromkeys(Path(self.dirs[c]) for c in order))

    def _dir(self, controller: str, group: str = "") -> Path | None:
        d = self.dirs.get(controller)
        return Path(d, group) if d else None

    def host_group(self, host: str) -> str:
        self._share(host)
        return _clean(host)

    def cpu_group(self, host: str) -> str:
        return f"{self.host_group(host)}/cpu"

    def device_group(self, host: str, device: int) -> str:
        share = self._share(host)
        if not 0 <= device < len(share.device_cores):
            raise CgroupError(f"host {host!r} has {len(share.device_cores)} device(s); no "
                              f"device {device}")
        return f"{self.host_group(host)}/dev{device}"

    def role_group(self, host: str, name: str) -> str:
        return f"{self.cpu_group(host)}/{_clean(name)}"

    def _share(self, host: str) -> HostShare:
        try:
            return self.shares[host]
        except KeyError:
            raise CgroupError(f"host {host!r} has no control group in cluster "
                              f"{self.cluster!r} ({', '.join(self.shares)})") from None

    def procs_files(self, group: str) -> list[str]:
        """The ``cgroup.procs`` file of ``group`` in every hierarchy (memory first)."""
        self.resolve()
        return [str(r / group / "cgroup.procs") for r in self._roots()]

    # -- make

    def _quota(self, d: Path, cores: float | None) -> None:
        """CPU quota of ``cores`` (None: no quota of its own) and a proportional weight."""
        if self.version == 2:
            q = "max" if cores is None else str(max(MIN_QUOTA_US,
                                                    round(cores * self.period_us)))
            _write(d / "cpu.max", f"{q} {self.period_us}")
            if cores is not None:
                _write(d / "cpu.weight", min(10_000, max(1, round(100 * cores))))
            return
        _write(d / "cpu.cfs_period_us", self.period_us)
        _write(d / "cpu.cfs_quota_us", -1 if cores is None
               else max(MIN_QUOTA_US, round(cores * self.period_us)))
        if cores is not None:
            _write(d / "cpu.shares", max(2, round(1024 * cores)))

    def _memory(self, d: Path, limit: int) -> None:
        if self.version == 2:
            _write(d / "memory.max", limit)
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", 0)
            return
        _write(d / "memory.limit_in_bytes", limit)
        if (d / "memory.memsw.limit_in_bytes").exists():  # memory + swap: no swapping out
            _write(d / "memory.memsw.limit_in_bytes", limit)
        elif (d / "memory.swappiness").exists():
            with contextlib.suppress(CgroupError):
                _write(d / "memory.swappiness", 0)

    def _mkdir(self, d: Path) -> None:
        try:
            d.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create control group {d}: {exc.strerror or exc}") \
                from None

    def _make(self, group: str, cores: float | None, memory: int | None = None,
              subtree: bool = True) -> None:
        for root in self._roots():
            d = root / group
            self._mkdir(d)
            if self.version == 2 and subtree:
                _write(d / "cgroup.subtree_control", "+cpu +memory")
            if self._has(root, "memory") and memory is not None:
                self._memory(d, memory)
            if self._has(root, "cpu"):
                self._quota(d, cores)

    def _has(self, root: Path, controller: str) -> bool:
        d = self.dirs.get(controller)
        return d is not None and Path(d) == root

    def create(self) -> list[str]:
        """Make every host's groups (removing a leftover of this cluster first)."""
        self.resolve()
        self.remove()
        for root in self._roots():
            top = root.parent
            for d in (top.parent, top):
                if not d.exists():
                    self._mkdir(d)
                if self.version == 2:
                    try:
                        _write(d / "cgroup.subtree_control", "+cpu +memory")
                    except CgroupError as exc:  # v2: no controllers below a group with tasks
                        raise CgroupError(
                            f"{exc}: cgroup v2 cannot give {d}'s children the cpu and memory "
                            "controllers while processes live in it; run `cluster up` from a "
                            "delegated group (e.g. `systemd-run --scope -p Delegate=yes "
                            f"gnnsched cluster up ...`), or set {PARENT_ENV} to an empty "
                            "group") from None
            if self._has(root, "memory") and self.version == 1:
                if _read_int(top / "memory.use_hierarchy") == 0:  # limits must reach children
                    with contextlib.suppress(CgroupError):
                        _write(top / "memory.use_hierarchy", 1)
            self._mkdir(root)
            if self.version == 2:
                _write(root / "cgroup.subtree_control", "+cpu +memory")
            if self.version == 1 and self._has(root, "memory") \
                    and _read_int(root / "memory.use_hierarchy") == 0:
                raise CgroupError(f"{root}: memory.use_hierarchy is 0, so a host's memory limit "
                                  "would not cover its processes; set it to 1 on "
                                  f"{top.parent} (or use --no-cgroups)")
        for host, s in self.shares.items():
            self._make(self.host_group(host), s.cores, s.memory)
            self._make(self.cpu_group(host), s.cpu_cores)
            for i, c in enumerate(s.device_cores):
                self._make(self.device_group(host, i), c, subtree=False)
        return [f"cgroup {r}" for r in self._roots()]

    def throttle(self, host: str, factor: float = 1.0) -> None:
        """Every CPU quota of ``host``'s groups divided by ``factor`` (1: as they were before
        the first throttle): a straggler made by the kernel, every role of the host slowed
        alike. Children first when lowering and parents first when raising, as cgroup v1
        refuses a child a quota above its parent's."""
        self.resolve()
        d = self._dir("cpu", self.host_group(host))
        if d is None or not d.is_dir():
            raise CgroupError(f"host {host!r} has no cpu group to throttle")
        saved = self._planned.setdefault(host, {})
        dirs = _tree(d)  # deepest first
        if factor <= 1.0:
            dirs = dirs[::-1]
        for g in dirs:
            if g not in saved:
                saved[g] = self._read_quota(g)
            q = saved[g]
            if q is not None:
                self._write_quota(g, q if factor <= 1.0 else max(MIN_QUOTA_US,
                                                                 round(q / factor)))
        if factor <= 1.0:
            self._planned.pop(host, None)

    def _read_quota(self, d: Path) -> int | None:
        """A group's CPU quota in microseconds per period (None: none of its own)."""
        if self.version == 2:
            q = (_read(d / "cpu.max") or "max").split()[0]
            return None if q == "max" else int(q)
        q = _read_int(d / "cpu.cfs_quota_us")
        return None if q is None or q < 0 else q

    def _write_quota(self, d: Path, quota_us: int) -> None:
        if self.version == 2:
            _write(d / "cpu.max", f"{quota_us} {self.period_us}")
        else:
            _write(d / "cpu.cfs_quota_us", quota_us)

    def role(self, host: str, name: str, threads: int = 1) -> str:
        """The leaf of one process on ``host`` (made if missing): at most ``threads`` emulated
        cores, each 1/D of a box core, and never more than the host's CPUs."""
        share = self._share(host)
        group = self.role_group(host, name)
        self.resolve()
        self._make(group, min(max(1, threads), share.cpus) / self.dilation, subtree=False)
        return group

    def zygote(self, host: str) -> str:
        """The leaf of ``host``'s fork server: the host's CPU quota, no cap of its own."""
        group = self.role_group(host, ZYGOTE)
        self.resolve()
        self._make(group, None, subtree=False)
        return group

    # -- use

    def place(self, pid: int, group: str) -> None:
        """Move process ``pid`` (all its threads) into ``group`` in every hierarchy. A process
        that is already gone is no error (its exit is reported elsewhere)."""
        for f in self.procs_files(group):
            try:
                Path(f).write_text(f"{pid}\n")
            except ProcessLookupError:
                return
            except OSError as exc:
                if not Path(f).parent.is_dir():
                    raise CgroupError(f"control group {Path(f).parent} does not exist (is "
                                      "the cluster up with control groups?)") from None
                if not Path(f"/proc/{pid}").exists():
                    return
                raise CgroupError(f"cannot move pid {pid} into {Path(f).parent}: "
                                  f"{exc.strerror or exc}") from None

    def wrap(self, argv: list[str], group: str) -> list[str]:
        """``argv`` preceded by a shell that moves itself into ``group`` and then execs it, so
        the command is inside its group before its first instruction (same pid)."""
        script = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; '
                  'shift; exec "$@"')
        return ["sh", "-c", script, "gnnsched-cgroup", *self.procs_files(group), "--", *argv]

    def group_of(self, pid: int) -> dict[str, str | None]:
        """``pid``'s group below this cluster's directory, per controller (``"store0/cpu/
        sampler-0"``; None where the process is outside the cluster's groups)."""
        self.resolve()
        lines = _own_paths_of(pid)
        out: dict[str, str | None] = {}
        for c in self.dirs:
            path = next((p for k, p in lines.items()
                         if (k == "" if self.version == 2 else c in k.split(","))), None)
            out[c] = _below(self.cluster, path) if path is not None else None
        return out

    def usage(self, host: str, group: str | None = None) -> dict[str, Any]:
        """A host's (or one of its groups') CPU seconds used, seconds throttled, memory in use
        and its peak, limit, and how many processes the kernel killed for memory."""
        self.resolve()
        group = group or self.host_group(host)
        out: dict[str, Any] = {"cpu_s": None, "throttled_s": None, "memory": None,
                               "memory_peak": None, "oom_kills": None,
                               "memory_limit": self._share(host).memory}
        cpu, acct, mem = (self._dir(c, group) for c in ("cpu", "cpuacct", "memory"))
        if self.version == 2 and cpu is not None:
            usec = _keyed(cpu / "cpu.stat", "usage_usec")
            thr = _keyed(cpu / "cpu.stat", "throttled_usec")
            out["cpu_s"] = usec / 1e6 if usec is not None else None
            out["throttled_s"] = thr / 1e6 if thr is not None else None
        else:
            if acct is not None and (ns := _read_int(acct / "cpuacct.usage")) is not None:
                out["cpu_s"] = ns / 1e9
            if cpu is not None and (thr := _keyed(cpu / "cpu.stat", "throttled_time")) \
                    is not None:
                out["throttled_s"] = thr / 1e9
        if mem is not None:
            if self.version == 2:
                out["memory"] = _read_int(mem / "memory.current")
                out["memory_peak"] = _read_int(mem / "memory.peak")
                out["oom_kills"] = _keyed(mem / "memory.events", "oom_kill")
            else:
                out["memory"] = _read_int(mem / "memory.usage_in_bytes")
                out["memory_peak"] = _read_int(mem / "memory.max_usage_in_bytes")
                # v1 counts a kill in the victim's own group only: add up the sub-tree
                kills = [_keyed(d / "memory.oom_control", "oom_kill") for d in _tree(mem)]
                out["oom_kills"] = (sum(k for k in kills if k is not None)
                                    if any(k is not None for k in kills) else None)
        return out

    def pids(self) -> list[int]:
        """Every process in any of this cluster's groups."""
        out: set[int] = set()
        for root in self._roots():
            for d in _tree(root):
                out.update(_pids(d))
        return sorted(out)

    def exists(self) -> bool:
        return bool(self.dirs) and all(
            (r / self.host_group(h)).is_dir() for r in self._roots() for h in self.shares)

    # -- remove

    def remove(self, grace: float = 1.0) -> list[str]:
        """Kill what still runs in the cluster's groups (SIGTERM, ``grace``, SIGKILL), move
        anything that survives (or this process) back to the base group, remove every group
        of the cluster, and the ``gnnsched`` directory too when no other cluster uses it."""
        if not self.dirs:
            return []
        return _remove_dirs(self._roots(), grace)

    # -- state

    def to_state(self) -> dict[str, Any]:
        return {"version": self.version, "dirs": self.dirs, "period_us": self.period_us,
                "dilation": self.dilation,
                "hosts": {h: s.to_dict() for h, s in self.shares.items()}}

    @classmethod
    def from_state(cls, cluster: str, state: dict[str, Any]) -> ClusterGroups:
        shares = {h: HostShare.from_dict(d) for h, d in state.get("hosts", {}).items()}
        return cls(cluster, shares, float(state.get("dilation", 1.0)),
                   int(state.get("period_us") or MIN_PERIOD_US), state.get("dirs") or {},
                   state.get("version"))


def _own_paths_of(pid: int) -> dict[str, str]:
    out = {}
    for line in (_read(Path(f"/proc/{pid}/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def _below(cluster: str, path: str) -> str | None:
    """``path`` (a cgroup path as /proc/PID/cgroup shows it) relative to the directory of
    ``cluster``, when it lies below it."""
    marker = f"/{TOP}/{cluster}"
    if not (path + "/").count(marker + "/"):
        return None
    return path.split(marker, 1)[1].strip("/") or "."


def _remove_dirs(roots: list[Path], grace: float = 1.0) -> list[str]:
    removed: list[str] = []
    roots = [r for r in roots if r.is_dir()]
    if not roots:
        return removed
    me = os.getpid()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        live = sorted({p for r in roots for d in _tree(r) for p in _pids(d)} - {me})
        for pid in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while live and time.monotonic() < end:
            time.sleep(0.05)
            live = sorted({p for r in roots for d in _tree(r) for p in _pids(d)} - {me})
        if not live:
            break
    for root in roots:
        base = root.parent.parent  # <base>/gnnsched/<cluster>
        for d in _tree(root):
            for pid in _pids(d):  # survivors (or ourselves): back to the base group
                with contextlib.suppress(OSError):
                    (base / "cgroup.procs").write_text(f"{pid}\n")
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last exits are being reaped
                    time.sleep(0.02)
        if root.exists():
            raise CgroupError(f"control group {root} could not be removed: processes "
                              f"{_pids(root) or '?'} are still in it")
        removed.append(f"cgroup {root}")
        with contextlib.suppress(OSError):
            root.parent.rmdir()  # gnnsched/, when no other cluster has groups there
    return removed


def candidate_dirs(cluster: str | None = None) -> list[Path]:
    """Where groups of ``cluster`` (None: of every cluster) could be without a state file:
    ``gnnsched/<cluster>`` under this process's group and under each hierarchy's root."""
    try:
        found = discover()
    except CgroupError:
        return []
    out: list[Path] = []
    for h in {h.mount: h for h in found.values()}.values():
        for base in dict.fromkeys([Path(h.base), Path(h.mount)]):
            top = base / TOP
            if cluster is not None:
                out.append(top / _clean(cluster))
            elif top.is_dir():
                out += sorted(p for p in top.iterdir() if p.is_dir())
    return [p for p in dict.fromkeys(out) if p.is_dir()]


def remove_cluster(cluster: str, state: dict[str, Any] | None = None) -> list[str]:
    """Remove the groups of ``cluster``: those its state records, and any found by name."""
    roots: list[Path] = []
    if state and state.get("dirs"):
        roots += [Path(d) for d in state["dirs"].values()]
    roots += candidate_dirs(cluster)
    roots = list(dict.fromkeys(roots))
    if any(r.is_dir() for r in roots) and os.geteuid() != 0:
        raise CgroupError("removing control groups needs root: `sudo gnnsched cluster down`")
    return _remove_dirs(roots)


def remove_all(states: Iterable[dict[str, Any]] = ()) -> list[str]:
    """Remove every cluster's groups (those the states record, and any ``gnnsched/*``)."""
    roots = [Path(d) for s in states for d in (s.get("dirs") or {}).values()]
    roots += candidate_dirs(None)
    return _remove_dirs(list(dict.fromkeys(roots)))


__all__ = ["TOP", "CgroupError", "ClusterGroups", "HostShare", "Hierarchy",
           "box_cores", "choose_dilation", "choose_period", "cluster_compute", "device_quota",
           "discover", "host_compute", "plan_shares", "remove_all", "remove_cluster", "require",
           "unavailable_reason"]
