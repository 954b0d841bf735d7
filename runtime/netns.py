"""Emulated cluster on one Linux box: a network namespace per host, NICs shaped with ``tc``.

Why: bandwidth is what placement and scheduling trade in, so the runtime must meet honest NIC
limits without a rack of machines. Per cluster ``C`` (names from the cluster file):

* ``gs-C`` -- the *switch* namespace: a bridge ``br0`` (non-blocking, like the brief's switch)
  and one veth port per host. A port's egress (traffic *toward* the host) is shaped with
  ``tbf`` to the host's **ingress** rate.
* ``gs-C-<host>`` -- one namespace per host: ``lo`` and ``eth0`` (the veth peer) with the host's
  address; ``eth0``'s egress is shaped with ``tbf`` to the host's **egress** rate, behind a
  ``netem`` delay of the cluster's ``latency_ms`` when it has one (one way, host to host),
  varied by ``jitter_ms`` and dropping ``loss_pct`` of the packets where the file says so
  (grey links: TCP retransmits, ZeroMQ's connections ride it out).
  TCP small queues are capped (``TSQ_BYTES``) so a bulk flow waits in the tbf queue instead of
  overflowing it: no local drops, goodput a steady ~95.6% of the wire rate at MTU 1500.
* optionally a *gateway* veth in the root namespace (link ``gs-C``, address ``x.y.z.254``), an
  unshaped switch port so processes left in the root namespace (the CLI, a coordinator) reach
  every host. Nothing routes further: namespaces have no default route.

With ``cgroups=True`` (``gnnsched cluster up``'s default) the cluster is a *scale model*
(``docs/scale-model.md``): every host also gets control groups (:mod:`.cgroups`) with a CPU
quota and a memory limit, and the whole cluster is slowed down by one dilation factor ``D``
(:func:`~.cgroups.choose_dilation`: its total compute, divided by D, fits the box's cores):
CPU quotas are the host's cores / D, NIC rates the file's / D, latency the file's x D; memory
limits are not dilated. ``D`` is in the state file (:func:`dilation`); a time measured on the
model, divided by D, is the real cluster's.

Everything created is listed in a state file (``/run/gnnsched/netns/C.json``) before it is
created, so :meth:`EmulatedCluster.down` -- from any process -- removes exactly that, also after
a crash half-way through :meth:`EmulatedCluster.up`. ``down_all`` removes every ``gs-*``
namespace and root link. Deleting a namespace deletes its veths, bridge and qdiscs with it.

Run a process on host ``h``: ``cluster.exec_prefix(h) + [sys.executable, ...]`` (needs root;
the environment, virtual environment included, is inherited).

This module is the cluster's lifecycle (up/down, measuring); the primitives it runs --
``ip``/``tc``, the tbf queue arithmetic, entering a namespace, ping -- are in
:mod:`.netns_ops`, the names and addresses in :mod:`.netns_addresses`, the state file and its
lock in :mod:`.netns_state`; all are importable from here as well.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gnnsched.runtime import cgroups as cg
from gnnsched.runtime.netns_addresses import (
    IFNAMSIZ,
    HostNet,
    _clean,
    _plan_addresses,
    _short,
    namespace_name,
)
from gnnsched.runtime.netns_ops import (
    _RECV,
    _SEND,
    PREFIX,
    TSQ_BYTES,
    NetnsError,
    _kill_namespace_pids,
    _run,
    _shape_args,
    _sysctl,
    _tbf_rate,
    entered,
    list_namespaces,
    list_root_links,
    ping,
    qdisc_available,
    shape_params,
    tsq_bytes,
)
from gnnsched.runtime.netns_state import (
    _lock,
    _state_dir,
    dilation,
    list_states,
    read_state,
    state_path,
)
from gnnsched.runtime.procs import signals_deferred
from gnnsched.runtime.qos import QosError, attach_classifier, attach_drop
from gnnsched.spec import ClusterSpec

BRIDGE = "br0"
HOST_IF = "eth0"
GATEWAY_PORT = "gw"

# --------------------------------------------------------------------------------------
# Privileges and availability


def _has_caps(*bits: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                return all(eff >> b & 1 for b in bits)
    except OSError:
        pass
    return False


def require_root() -> None:
    """Fail early with the fix, instead of an EPERM from deep inside ``ip``."""
    if os.geteuid() != 0 and not _has_caps(12, 21):  # CAP_NET_ADMIN, CAP_SYS_ADMIN
        raise NetnsError(
            "the netns launcher needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network "
            "namespaces, veths and tc qdiscs: run it as root (`sudo gnnsched cluster up "
            "--cluster C`, `sudo gnnsched train ... --launcher netns`), or run without "
            "namespaces with `--launcher local` (every role a process on 127.0.0.1, no NIC "
            "shaping)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetnsError(f"`{tool}` not found: the netns launcher needs iproute2 "
                             "(apt-get install iproute2), or use `--launcher local`")


def unavailable_reason() -> str | None:
    """Why an emulated cluster cannot be built here (None: it can); tests skip with this."""
    try:
        require_root()
    except NetnsError as exc:
        return str(exc)
    probe = f"{PREFIX}probe-{os.getpid()}"
    steps = [["ip", "netns", "add", probe],
             ["ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
             ["tc", "-n", probe, "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "10mbit",
              "burst", "16kb", "latency", "20ms"],
             ["ip", "-n", probe, "link", "add", BRIDGE, "type", "bridge"]]
    try:
        for argv in steps:
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode:
                return f"`{' '.join(argv)}` failed: {r.stderr.strip() or r.returncode}"
        return None
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


# --------------------------------------------------------------------------------------
# The emulated cluster


class EmulatedCluster:
    """A cluster file made real as network namespaces; ``up``/``down`` are idempotent.

    ``gateway`` adds an unshaped root-namespace port (``gateway_address``) so processes outside
    the namespaces can reach hosts. ``mtu`` is the NIC MTU: at 1500, as on a plain Ethernet
    NIC, TCP goodput is ~95% of the shaped (wire) rate, as on real hardware. ``payload_rates``
    raises the wire rate by the TCP/IP/Ethernet header share so that *goodput* equals the file's
    rate (for comparing with a simulator that divides bytes by bandwidth). ``queue_ms`` bounds
    every NIC's queue to that many milliseconds of its rate (default: :func:`shape_params`).
    ``bands`` gives every NIC queue three priority bands chosen by the sender's IP TOS, like a
    switch with QoS (:mod:`~gnnsched.runtime.qos`: gradients ahead of bulk graph data); where
    the kernel cannot, NICs keep one FIFO and ``queues`` says why. Default: one FIFO per NIC,
    a plain switch.

    The scale model: ``cgroups`` gives every host its control groups (:mod:`.cgroups`: CPU
    quota (cpus + device speeds) / D, memory limit memory_gb x ``memory_scale``); ``dilation``
    is D (default: with ``cgroups``, :func:`~.cgroups.choose_dilation` over ``cores``, the
    box's cores by default; without, 1). NICs are shaped to the file's rates / D and latency
    is the file's x D, so every time on the model is D times the real cluster's.
    """

    def __init__(self, cluster: ClusterSpec, *, gateway: bool = True, mtu: int = 1500,
                 payload_rates: bool = False, ignore_latency: bool = False,
                 queue_ms: float | None = None, bands: bool = False, cgroups: bool = False,
                 dilation: float | None = None, cores: float | None = None,
                 memory_scale: float = 1.0) -> None:
        if not 576 <= mtu <= 65535:
            raise NetnsError(f"mtu {mtu} out of range (576..65535)")
        if queue_ms is not None and not 1 <= queue_ms <= 1000:
            raise NetnsError(f"queue_ms {queue_ms} out of range (1..1000 ms)")
        if dilation is not None and not 1 <= dilation <= 1e6:
            raise NetnsError(f"dilation {dilation} out of range (1..1e6): the model can only "
                             "run slower than the real cluster")
        if not 0 < memory_scale <= 1e3:
            raise NetnsError(f"memory_scale {memory_scale} out of range (> 0 and <= 1000)")
        self.queue_ms = queue_ms
        self.bands = bands
        self.cgroups = bool(cgroups)
        self.compute_cores = cg.cluster_compute(cluster)
        self.box_cores = float(cores) if cores is not None else cg.box_cores()
        if dilation is not None:
            self.dilation = float(dilation)
        elif self.cgroups:
            self.dilation = cg.choose_dilation(cluster, self.box_cores)
        else:
            self.dilation = 1.0
        self.memory_scale = float(memory_scale)
        # the scale model's groups (resolved to directories by `up`, or by `attach` from the
        # state file); None without cgroups
        self.groups = (cg.ClusterGroups(cluster.name, cg.plan_shares(
            cluster, self.dilation, self.memory_scale), self.dilation) if self.cgroups else None)
        model = self.cgroups or self.dilation != 1 or self.memory_scale != 1
        self.options = {"gateway": gateway, "mtu": mtu, "payload_rates": payload_rates,
                        "ignore_latency": ignore_latency, "queue_ms": queue_ms, "bands": bands}
        if model:
            self.options.update(cgroups=self.cgroups, dilation=self.dilation,
                                memory_scale=self.memory_scale)
        self.queues = "fifo"  # what _create achieved: "tos bands" or "fifo" (and why)
        self._banding = bands  # _create: still banding (no queue has refused a band yet)
        self.spec = cluster
        self.name = _clean(cluster.name)
        self.mtu = mtu
        # Ethernet header 14 bytes; IPv4 20 + TCP 20 + timestamps 12 = 52 bytes per segment.
        self.wire_scale = (mtu + 14) / (mtu - 52) if payload_rates else 1.0
        self.switch_ns = namespace_name(self.name)
        addrs, self.gateway_address, plen = _plan_addresses(cluster, gateway)
        self.gateway_if = _short(f"{PREFIX}{self.name}", IFNAMSIZ) if gateway else None
        self.hosts: dict[str, HostNet] = {}
        for i, m in enumerate(cluster.machines):
            ns = namespace_name(self.name, m.name)
            if ns == self.switch_ns or any(h.ns == ns for h in self.hosts.values()):
                raise NetnsError(f"{cluster.source}: machines[{m.name}]: namespace name {ns} "
                                 "collides with another; rename the machine")
            port = _short(f"h{i}-{_clean(m.name)}", IFNAMSIZ)
            self.hosts[m.name] = HostNet(m.name, ns, addrs[m.name], plen,
                                         m.egress / self.dilation, m.ingress / self.dilation,
                                         port)
        self.latency = 0.0 if ignore_latency else cluster.latency * self.dilation
        self.jitter = 0.0 if ignore_latency else cluster.jitter * self.dilation
        self.loss = cluster.loss  # a share of packets: the same on the model
        self._has_netem = False  # set by up(): whether this kernel's netem delays and drops
        self.drops: str | None = None  # what drops ``loss``: "netem", "bpf" (None: nothing)
        self.fingerprint = hashlib.sha1(json.dumps(
            [cluster.to_dict(), gateway, mtu, payload_rates, ignore_latency]
            + ([queue_ms] if queue_ms is not None else []) + (["bands"] if bands else [])
            + ([["model", self.cgroups, self.dilation, self.memory_scale]] if model else []),
            sort_keys=True,
            default=str).encode()
        ).hexdigest()[:16]

    @classmethod
    def attach(cls, cluster: ClusterSpec) -> EmulatedCluster:
        """This cluster file's emulated cluster as it was brought up (``gnnsched cluster up
        --bands``, ``--queue-ms``, ... recorded in its state file), so a launcher uses it
        whatever the options; default options if none is up (``is_up`` then says so)."""
        state = read_state(_clean(cluster.name)) or {}
        opts = state.get("options")
        if isinstance(opts, dict):
            with contextlib.suppress(TypeError, NetnsError):
                ec = cls(cluster, **opts)
                if ec.fingerprint == state.get("fingerprint"):  # same file, same options
                    ec.queues = state.get("queues", ec.queues)
                    if isinstance(state.get("cgroups"), dict):  # the directories `up` made
                        ec.groups = cg.ClusterGroups.from_state(ec.name, state["cgroups"])
                    return ec
        return cls(cluster)

    # -- lookups the launcher uses

    def host(self, name: str) -> HostNet:
        try:
            return self.hosts[name]
        except KeyError:
            raise NetnsError(f"host {name!r} is not in cluster {self.spec.name!r} "
                             f"({', '.join(self.hosts)})") from None

    def exec_prefix(self, host: str) -> list[str]:
        """argv prefix running a command inside `host`'s namespace (as root)."""
        return ["ip", "netns", "exec", self.host(host).ns]

    def address(self, host: str) -> str:
        return self.host(host).address

    @property
    def namespaces(self) -> list[str]:
        return [self.switch_ns] + [h.ns for h in self.hosts.values()]

    @property
    def state_file(self) -> Path:
        return state_path(self.name)

    # -- lifecycle

    def is_up(self) -> bool:
        """True when this exact cluster (same file, options) is up and complete."""
        state = read_state(self.name)
        if not state or state.get("fingerprint") != self.fingerprint or not state.get("complete"):
            return False
        present = set(list_namespaces())
        if not all(ns in present for ns in self.namespaces):
            return False
        if self.cgroups:
            made = state.get("cgroups")
            if not isinstance(made, dict) or \
                    not cg.ClusterGroups.from_state(self.name, made).exists():
                return False
        return self.gateway_if is None or self.gateway_if in list_root_links()

    def up(self) -> EmulatedCluster:
        """Create namespaces, veths, bridge and qdiscs; on any failure remove all, then raise."""
        require_root()
        with _lock():
            if self.is_up():
                self.queues = (read_state(self.name) or {}).get("queues", self.queues)
                return self
            self._down_locked()
            present = set(list_namespaces())
            taken = [ns for ns in self.namespaces if ns in present]
            if taken:
                raise NetnsError(f"namespace(s) {', '.join(taken)} already exist and are not "
                                 f"this cluster's: run `gnnsched cluster down --all` or rename "
                                 f"cluster {self.spec.name!r}")
            if self.gateway_if and self.gateway_if in list_root_links():
                _run(["ip", "link", "del", self.gateway_if], check=False)
            self._check_routes()
            if self.groups is not None:
                self.groups.resolve()  # needs root and the controllers: says what is missing
            self._has_netem = bool(self.latency or self.jitter or self.loss) and \
                qdisc_available("netem")
            if (self.latency > 0 or self.jitter > 0) and not self._has_netem:
                raise NetnsError(
                    f"cluster {self.spec.name!r} has latency_ms "
                    f"{self.latency * 1e3:g} / jitter_ms {self.jitter * 1e3:g} but this "
                    "kernel has no netem qdisc (sch_netem) to delay packets: load it "
                    "(`modprobe sch_netem`), or run without the delay (`gnnsched cluster up "
                    "--ignore-latency`, EmulatedCluster(..., ignore_latency=True))")
            self._write_state(complete=False)  # before creating anything: `down` finds it all
            try:
                self._create()
                self._write_state(complete=True)
            except BaseException:
                self._down_locked()
                raise
        return self

    def down(self) -> list[str]:
        """Remove everything this cluster created (also half-built); returns what was removed.
        Stop signals wait until it is done (:func:`~.procs.signals_deferred`): a second
        Ctrl-C or ``kill`` must not leave half a cluster behind."""
        with signals_deferred(), _lock():
            return self._down_locked()

    def __enter__(self) -> EmulatedCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- internals

    def _check_routes(self) -> None:
        """A gateway must not shadow a route the box already uses (a real 10.77.x network)."""
        if not self.gateway_if:
            return
        ours = ipaddress.ip_network(f"{self.gateway_address}/{self._prefix}", strict=False)
        r = _run(["ip", "-j", "-4", "route", "show"], check=False)
        for route in json.loads(r.stdout or "[]"):
            dst = route.get("dst", "")
            if dst == "default" or not dst:
                continue
            with contextlib.suppress(ValueError):
                if ipaddress.ip_network(dst, strict=False).overlaps(ours):
                    raise NetnsError(
                        f"the root namespace already routes {dst} via {route.get('dev')}, which "
                        f"overlaps this cluster's {ours}: bring the other cluster down, give "
                        "the machines other addresses, or use gateway=False / --no-gateway")

    @property
    def _prefix(self) -> int:
        return next(iter(self.hosts.values())).prefix

    def _write_state(self, complete: bool) -> None:
        path = self.state_file
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "cluster": self.spec.name, "name": self.name, "source": self.spec.source,
            "fingerprint": self.fingerprint, "complete": complete, "pid": os.getpid(),
            "created": time.time(), "switch_ns": self.switch_ns, "mtu": self.mtu,
            "wire_scale": self.wire_scale, "queue_ms": self.queue_ms, "queues": self.queues,
            "options": self.options,
            "latency_s": self.latency, "jitter_s": self.jitter, "loss": self.loss,
            "gateway_if": self.gateway_if,
            "dilation": self.dilation, "compute_cores": self.compute_cores,
            "box_cores": self.box_cores, "memory_scale": self.memory_scale,
            "cgroups": self.groups.to_state() if self.groups is not None else None,
            "gateway_address": self.gateway_address,
            "hosts": [asdict(h) for h in self.hosts.values()],
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)

    def _create(self) -> None:
        sw = self.switch_ns
        self._banding = self.bands
        if self.groups is not None:
            self.groups.create()
        _run(["ip", "netns", "add", sw])
        _run(["ip", "-n", sw, "link", "set", "lo", "up"])
        _run(["ip", "-n", sw, "link", "add", BRIDGE, "mtu", str(self.mtu), "type", "bridge",
              "forward_delay", "0", "stp_state", "0"])
        _run(["ip", "-n", sw, "link", "set", BRIDGE, "up"])
        for h in self.hosts.values():
            _run(["ip", "netns", "add", h.ns])
            _run(["ip", "-n", h.ns, "link", "set", "lo", "up"])
            _sysctl(h.ns, "net/ipv4/tcp_limit_output_bytes",
                    tsq_bytes(h.egress * self.wire_scale, self.mtu, self.queue_ms))
            # Both veth ends are born inside namespaces: nothing appears in the root namespace.
            _run(["ip", "-n", sw, "link", "add", h.port, "mtu", str(self.mtu), "type", "veth",
                  "peer", "name", HOST_IF, "mtu", str(self.mtu), "netns", h.ns])
            _run(["ip", "-n", sw, "link", "set", h.port, "master", BRIDGE, "up"])
            _run(["ip", "-n", h.ns, "addr", "add", f"{h.address}/{h.prefix}", "dev", HOST_IF])
            _run(["ip", "-n", h.ns, "link", "set", HOST_IF, "up"])
            # Egress: the host's own NIC queue (plus the one-way latency, if any).
            egress = h.egress * self.wire_scale
            if self._netem():
                _run(["tc", "-n", h.ns, "qdisc", "replace", "dev", HOST_IF, "root", "handle",
                      "1:", "netem", *self._netem(), "limit", "100000"])
                _run(["tc", "-n", h.ns, "qdisc", "add", "dev", HOST_IF, "parent", "1:1",
                      "handle", "10:", *_shape_args(egress, self.mtu, self.queue_ms)])
                self._bands(h.ns, HOST_IF, "10:", egress)
            else:
                _run(["tc", "-n", h.ns, "qdisc", "replace", "dev", HOST_IF, "root", "handle",
                      "1:", *_shape_args(egress, self.mtu, self.queue_ms)])
                self._bands(h.ns, HOST_IF, "1:", egress)
            # Ingress: what the switch sends toward the host.
            ingress = h.ingress * self.wire_scale
            _run(["tc", "-n", sw, "qdisc", "replace", "dev", h.port, "root", "handle", "1:",
                  *_shape_args(ingress, self.mtu, self.queue_ms)])
            self._bands(sw, h.port, "1:", ingress)
        if self.gateway_if:
            _run(["ip", "link", "add", self.gateway_if, "mtu", str(self.mtu), "type", "veth",
                  "peer", "name", GATEWAY_PORT, "mtu", str(self.mtu), "netns", sw])
            _run(["ip", "-n", sw, "link", "set", GATEWAY_PORT, "master", BRIDGE, "up"])
            _run(["ip", "addr", "add", f"{self.gateway_address}/{self._prefix}", "dev",
                  self.gateway_if])
            _run(["ip", "link", "set", self.gateway_if, "up"])
        if self._banding:
            try:  # switch ports: re-derive each packet's priority from its TOS; host NICs:
                # the same mapping before their own queue, so unmarked traffic (gradients)
                # takes the top band there too, not the socket priority's middle one
                attach_classifier(sw, [h.port for h in self.hosts.values()])
                for h in self.hosts.values():
                    attach_classifier(h.ns, [HOST_IF], "egress")
                self.queues = "tos bands"
            except (QosError, OSError) as exc:  # host egress still bands; switch ports cannot
                self.queues = f"fifo at the switch ports ({exc})"
        if self.loss > 0 and not self._netem():
            try:  # no netem: the kernel's bpf drops the share, first of the NIC's filters
                for h in self.hosts.values():
                    attach_drop(h.ns, [HOST_IF], self.loss)
            except (QosError, OSError) as exc:
                raise NetnsError(f"cluster {self.spec.name!r} has loss_pct "
                                 f"{self.loss * 100:g} but this kernel can drop packets "
                                 f"neither with netem nor with a bpf filter ({exc}): run "
                                 "with loss_pct: 0") from exc
        self.drops = "netem" if self.loss > 0 and self._netem() else \
            ("bpf" if self.loss > 0 else None)

    def _netem(self) -> list[str]:
        """The netem arguments of every host's NIC: the one-way delay, its jitter and the
        packet loss (empty: no netem qdisc). Jitter reorders packets, as a real path can."""
        if not self._has_netem:
            return []  # (loss without netem: an eBPF filter drops, see _create)
        args = ["delay", f"{self.latency * 1e3:.3f}ms"]
        if self.jitter > 0:
            args.append(f"{self.jitter * 1e3:.3f}ms")
        if self.loss > 0:
            args += ["loss", f"{self.loss * 100:.4f}%"]
        return args

    def _bands(self, ns: str, dev: str, tbf: str, rate: float) -> None:
        """Give the tbf at handle ``tbf`` of ``dev`` Linux's classic three-band queue
        (``pfifo_fast``: band by the packet's priority; bulk, TOS ``BULK_TOS``, waits behind
        everything else), each band as deep in frames as the tbf's byte limit. Without
        ``bands``, or if the kernel has no pfifo_fast, the tbf stays one FIFO."""
        if not self._banding:
            return
        _burst, limit = shape_params(rate, self.mtu, self.queue_ms)
        _run(["ip", "-n", ns, "link", "set", dev, "txqueuelen",
              str(max(16, limit // (self.mtu + 14)))])
        r = _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", f"{tbf}1",
                  "pfifo_fast"], check=False)
        if r.returncode:
            self._banding = False
            self.queues = f"fifo (no pfifo_fast: {r.stderr.strip()})"

    def _down_locked(self) -> list[str]:
        state = read_state(self.name) or {}
        names = [h["ns"] for h in state.get("hosts", [])] + [h.ns for h in self.hosts.values()]
        names += [state.get("switch_ns") or self.switch_ns, self.switch_ns]
        links = [x for x in (state.get("gateway_if"), self.gateway_if) if x]
        removed = _remove(list(dict.fromkeys(names)), list(dict.fromkeys(links)))
        removed += cg.remove_cluster(self.name, state.get("cgroups"))
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        return removed

    # -- reporting and measuring

    def status(self, live: bool = True) -> list[dict[str, Any]]:
        """One row per host: namespace, address, the file's rates and the shaped ones (from the
        kernel when `live`: the file's / D), and with control groups the host's CPU quota
        (cores of this box), memory limit and usage (:meth:`.cgroups.ClusterGroups.usage`)."""
        present = set(list_namespaces()) if live else set()
        groups = self.groups
        if live and groups is not None and not groups.dirs:
            made = (read_state(self.name) or {}).get("cgroups")
            groups = cg.ClusterGroups.from_state(self.name, made) if made else None
        rows = []
        for h in self.hosts.values():
            m = self.spec.machine(h.name)
            row: dict[str, Any] = {"host": h.name, "namespace": h.ns, "address": h.address,
                                   "egress_Bps": m.egress, "ingress_Bps": m.ingress,
                                   "shaped_egress_Bps": h.egress,
                                   "shaped_ingress_Bps": h.ingress, "dilation": self.dilation}
            if groups is not None and h.name in groups.shares:
                row.update(_share_row(groups.shares[h.name]))
            if live:
                row["up"] = h.ns in present
                row["tc_egress_Bps"] = _tbf_rate(h.ns, HOST_IF) if row["up"] else None
                row["tc_ingress_Bps"] = (_tbf_rate(self.switch_ns, h.port)
                                         if self.switch_ns in present else None)
                if groups is not None and groups.dirs and h.name in groups.shares:
                    row["usage"] = groups.usage(h.name)
            rows.append(row)
        return rows

    def set_cut(self, host: str, cut: bool) -> None:
        """Cut ``host`` off from every other host (its switch port down: its processes live
        on, unreachable, as behind a failed link or switch port) or join it again."""
        h = self.hosts[host]
        _run(["ip", "-n", self.switch_ns, "link", "set", h.port, "down" if cut else "up"])

    def ping(self, src: str, dst: str, timeout: float = 2.0) -> float | None:
        """ICMP round-trip time in seconds from host `src` to host (or address) `dst`."""
        target = self.hosts[dst].address if dst in self.hosts else dst
        return ping(self.host(src).ns, target, timeout)

    def measure_rate(self, src: str, dst: str, nbytes: int, timeout: float = 60.0,
                     warmup: float = 0.1, tos: int = 0) -> dict[str, float]:
        """Bulk TCP from `src` to `dst` in real processes; steady bytes/s after `warmup` of bytes.
        ``tos``: the sender's IP type of service (``qos.BULK_TOS``: the bulk band).

        Only the two hosts' namespace addresses are used, so nothing leaves the cluster.
        """
        dst_addr = self.address(dst)
        recv = subprocess.Popen(
            self.exec_prefix(dst) + [sys.executable, "-c", _RECV, dst_addr, str(timeout),
                                     str(int(nbytes * warmup))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        send = None
        try:
            line = recv.stdout.readline() if recv.stdout else ""
            if not line.strip().isdigit():
                _, err = recv.communicate(timeout=5)
                raise NetnsError(f"receiver on {dst} did not start: {err.strip()}")
            send = subprocess.Popen(
                self.exec_prefix(src) + [sys.executable, "-c", _SEND, dst_addr, line.strip(),
                                         str(nbytes), str(timeout), str(int(tos))],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            out, err = recv.communicate(timeout=timeout)
            _, serr = send.communicate(timeout=timeout)
            if recv.returncode or send.returncode:
                raise NetnsError(f"transfer {src}->{dst} failed: {err.strip()} {serr.strip()}")
            result = json.loads(out.strip().splitlines()[-1])
        finally:
            for p in (recv, send):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        shaped = min(self.host(src).egress, self.host(dst).ingress)
        result["shaped_Bps"] = shaped
        result["ratio"] = result["rate_Bps"] / shaped
        return result

    def measure_priority(self, src: str, dst: str, bulk_from: str, tos: int,
                         seconds: float = 2.0, probes: int = 30) -> dict[str, float]:
        """Round trips of 64-byte messages ``src`` -> ``dst`` (best effort, like gradients and
        acknowledgements) while ``bulk_from`` sends bulk TCP with IP TOS ``tos`` into ``dst``:
        median and largest milliseconds, and the bulk flow's rate over the shaped one. With
        priority bands a ``BULK_TOS`` flow should leave the round trip near idle."""
        import statistics

        nbytes = int(min(self.host(bulk_from).egress, self.host(dst).ingress) * seconds)
        bulk: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: bulk.update(self.measure_rate(
            bulk_from, dst, nbytes, timeout=seconds * 10 + 10, tos=tos)), daemon=True)
        srv_ready, rtts = threading.Event(), []
        port: list[int] = []

        def echo() -> None:
            with entered(self.host(dst).ns):
                srv = socket.create_server((self.address(dst), 0))
            port.append(srv.getsockname()[1])
            srv_ready.set()
            conn, _ = srv.accept()
            with conn, srv:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while data := conn.recv(64):
                    conn.sendall(data)

        threading.Thread(target=echo, daemon=True).start()
        srv_ready.wait(10)
        with entered(self.host(src).ns):
            cli = socket.create_connection((self.address(dst), port[0]), timeout=10)
        with cli:
            cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            runner.start()
            time.sleep(seconds * 0.25)  # the bulk flow is up to speed
            for _ in range(probes):
                t = time.perf_counter()
                cli.sendall(b"p" * 64)
                got = 0
                while got < 64:
                    got += len(cli.recv(64 - got))
                rtts.append((time.perf_counter() - t) * 1e3)
                time.sleep(seconds * 0.5 / probes)
        runner.join(seconds * 10 + 15)
        return {"rtt_ms": statistics.median(rtts), "rtt_ms_max": max(rtts),
                "bulk_ratio": float(bulk.get("ratio", float("nan")))}


def _share_row(share: cg.HostShare) -> dict[str, Any]:
    return {"cpu_quota_cores": share.cores, "cpus_quota_cores": share.cpu_cores,
            "device_quota_cores": list(share.device_cores), "memory_limit": share.memory}


def _remove(namespaces: list[str], links: list[str]) -> list[str]:
    """Delete root links and namespaces that exist (killing what runs inside them first)."""
    removed: list[str] = []
    root = set(list_root_links())
    present = set(list_namespaces())
    if any(x in root for x in links) or any(ns in present for ns in namespaces):
        require_root()
    for link in links:
        if link in root:
            _run(["ip", "link", "del", link], check=False)
            removed.append(f"link {link}")
    stuck: dict[str, list[int]] = {}
    for ns in namespaces:
        if ns in present:
            if pids := _kill_namespace_pids(ns):
                stuck[ns] = pids
            _run(["ip", "netns", "del", ns])
            removed.append(f"netns {ns}")
    if stuck:
        raise NetnsError(f"processes survived SIGKILL ({stuck}); their namespaces are unnamed "
                         "but live on, with their veths, until those processes exit")
    return removed


def down_cluster(name: str) -> list[str]:
    """Remove cluster `name` as its state file records it (no cluster file needed)."""
    with _lock():
        state = read_state(name)
        if state is None:
            ns = namespace_name(name)
            hosts = [n for n in list_namespaces() if n.startswith(ns + "-")]
            removed = _remove(hosts + [ns], [_short(f"{PREFIX}{_clean(name)}", IFNAMSIZ)])
        else:
            removed = _remove([h["ns"] for h in state.get("hosts", [])] + [state["switch_ns"]],
                              [state["gateway_if"]] if state.get("gateway_if") else [])
        removed += cg.remove_cluster(_clean(name), (state or {}).get("cgroups"))
        with contextlib.suppress(FileNotFoundError):
            state_path(name).unlink()
        return removed


def down_all() -> list[str]:
    """Remove every ``gs-*`` namespace and root link and every state file (any cluster)."""
    with _lock():
        removed = _remove([n for n in list_namespaces() if n.startswith(PREFIX)],
                          [x for x in list_root_links() if x.startswith(PREFIX)])
        removed += cg.remove_all([s["cgroups"] for s in list_states()
                                  if isinstance(s.get("cgroups"), dict)])
        d = _state_dir()
        for p in list(d.glob("*.json")) if d.is_dir() else []:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    return removed


def dilated(spec: ClusterSpec, factor: float) -> ClusterSpec:
    """``spec`` as the scale model at dilation ``factor`` runs it (:meth:`ClusterSpec.dilated`)."""
    return spec.dilated(factor)


@contextlib.contextmanager
def emulated(cluster: ClusterSpec, **kwargs: Any) -> Iterator[EmulatedCluster]:
    """``with emulated(spec) as ec:`` -- up on entry, everything removed on exit (tests)."""
    ec = EmulatedCluster(cluster, **kwargs)
    try:
        yield ec.up()
    finally:
        ec.down()


__all__ = ["BRIDGE", "GATEWAY_PORT", "HOST_IF", "IFNAMSIZ", "PREFIX", "TSQ_BYTES",
           "EmulatedCluster", "HostNet", "NetnsError", "dilated", "dilation", "down_all",
           "down_cluster", "emulated",
           "entered", "list_namespaces", "list_root_links", "list_states", "namespace_name",
           "ping", "qdisc_available", "read_state", "require_root", "shape_params",
           "state_path", "tsq_bytes", "unavailable_reason"]
