"""An emulated cluster's names and addresses: namespace and interface names that stay legal
and unique however long the cluster file's names are, and every host's private address (from
the file, else one /24 per cluster name), checked before anything is created.

Pure computation (no ``ip``, no root): :mod:`.netns` builds the cluster from it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gnnsched.runtime.netns_ops import PREFIX, NetnsError
from gnnsched.spec import ClusterSpec

IFNAMSIZ = 15  # Linux interface names: at most 15 characters


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def _short(base: str, limit: int) -> str:
    """`base` if it fits, else a prefix plus a hash, so long names stay unique and legal."""
    if len(base) <= limit:
        return base
    digest = hashlib.sha1(base.encode()).hexdigest()[:6]
    return f"{base[:limit - 7]}-{digest}"


def namespace_name(cluster: str, host: str | None = None) -> str:
    """``gs-<cluster>`` (the switch) or ``gs-<cluster>-<host>``."""
    base = f"{PREFIX}{_clean(cluster)}" + (f"-{_clean(host)}" if host is not None else "")
    return _short(base, 64)


def _check_private(addr: ipaddress.IPv4Address, where: str) -> None:
    if not addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_multicast:
        raise NetnsError(f"{where}: address {addr} is not a private unicast address; the "
                         "emulated cluster only uses private ranges (e.g. 10.77.0.0/16) so no "
                         "traffic can leave the box")


def _plan_addresses(spec: ClusterSpec, gateway: bool) -> tuple[dict[str, str], str | None, int]:
    """Host addresses (from the file, else 10.77.X.Y), the gateway's, and the prefix length."""
    given: dict[str, ipaddress.IPv4Address] = {}
    for m in spec.machines:
        if m.address:
            try:
                addr = ipaddress.IPv4Address(m.address)
            except ValueError:
                raise NetnsError(f"{spec.source}: machines[{m.name}].address: {m.address!r} is "
                                 "not an IPv4 address (e.g. 10.77.0.1)") from None
            _check_private(addr, f"{spec.source}: machines[{m.name}].address")
            if addr in given.values():
                raise NetnsError(f"{spec.source}: machines[{m.name}].address: {addr} is used "
                                 "by two machines (each needs its own)")
            given[m.name] = addr
    if given:
        base = ipaddress.ip_network(f"{next(iter(given.values()))}/24", strict=False)
    else:  # a /24 per cluster name, so two auto-addressed clusters rarely overlap
        third = 100 + int(hashlib.sha1(spec.name.encode()).hexdigest(), 16) % 100
        base = ipaddress.ip_network(f"10.77.{third}.0/24")
    used = set(given.values())

    def fresh() -> Iterator[ipaddress.IPv4Address]:
        cur = int(base.network_address)
        while True:
            cur += 1
            addr = ipaddress.IPv4Address(cur)
            if cur & 0xFF in (0, 254, 255) or addr in used:
                continue
            if not addr.is_private:
                raise NetnsError(f"{spec.source}: ran out of private addresses for "
                                 f"{len(spec.machines)} machines; give each an `address`")
            yield addr

    gen = fresh()
    addrs = {m.name: given.get(m.name) or next(gen) for m in spec.machines}
    gw = None
    if gateway:
        gw = base.network_address + 254
        if gw in addrs.values():
            gw = next(gen)
    everything = [int(a) for a in addrs.values()] + ([int(gw)] if gw is not None else [])
    plen = min(24, 32 - (min(everything) ^ max(everything)).bit_length())
    net = ipaddress.ip_network(f"{ipaddress.IPv4Address(min(everything))}/{plen}", strict=False)
    if plen < 8 or not net.is_private:
        raise NetnsError(f"{spec.source}: machine addresses span {net}, too wide for one "
                         "emulated switch; keep them in one private /16 (e.g. 10.77.0.0/16)")
    for name, a in addrs.items():
        if a in (net.network_address, net.broadcast_address):
            raise NetnsError(f"{spec.source}: machines[{name}].address: {a} is the network or "
                             f"broadcast address of {net}")
    return {k: str(v) for k, v in addrs.items()}, (str(gw) if gw else None), plen


@dataclass(frozen=True)
class HostNet:
    """One emulated host: where its processes run and what its NIC is shaped to."""

    name: str
    ns: str  # network namespace
    address: str
    prefix: int
    egress: float  # bytes/s, shaped on eth0 in `ns` (the file's rate / the dilation)
    ingress: float  # bytes/s, shaped on `port` in the switch namespace (likewise)
    port: str  # the host's veth port on the switch


__all__ = ["IFNAMSIZ", "HostNet", "namespace_name"]
