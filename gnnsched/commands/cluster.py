"""Bring an emulated cluster up or down on this Linux box (needs root).

``up`` creates one network namespace per machine of the cluster file, each with a veth NIC
shaped by ``tc`` to the machine's egress and ingress bandwidth, joined by a bridge; ``down``
removes everything ``up`` created (``--all``: every ``gs-*`` namespace); ``status`` lists the
clusters that are up, with the rates the kernel actually enforces. Without root, train with
``--launcher local`` instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gnnsched.commands import milliseconds, mtu_int

HELP = "emulated cluster: network namespaces with tc-shaped NICs (up | down | status)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="create the namespaces, veths, bridge and qdiscs")
    up.add_argument("--cluster", required=True, help="cluster file (YAML)")
    up.add_argument("--no-gateway", action="store_true",
                    help="no root-namespace port: only processes inside the namespaces can "
                    "reach the hosts")
    up.add_argument("--mtu", type=mtu_int, default=1500, help="NIC MTU")
    up.add_argument("--payload-rates", action="store_true",
                    help="shape so TCP goodput (not wire rate) equals the file's bandwidth")
    up.add_argument("--ignore-latency", action="store_true",
                    help="do not emulate the file's latency_ms (e.g. no netem in the kernel)")
    up.add_argument("--queue-ms", type=milliseconds, default=None,
                    help="bound every NIC's queue to this many milliseconds of its rate "
                         "(default: ~20 ms, but at least two sockets' TCP small-queue budget: "
                         "88 ms on a 50 Mbit/s NIC)")
    up.add_argument("--bands", action="store_true",
                    help="give every NIC queue three priority bands by the sender's IP TOS, "
                         "like a switch with QoS: gradients and acknowledgements go ahead of "
                         "the bulk data gnnsched marks (default: one FIFO per NIC, a plain "
                         "switch)")
    up.add_argument("--check", action="store_true",
                    help="after up, ping every host from the first one")
    up.add_argument("--json", action="store_true", help="print the table as JSON")
    down = sub.add_parser("down", help="remove what `up` created")
    which = down.add_mutually_exclusive_group(required=True)
    which.add_argument("--cluster", help="cluster file, or the name of a cluster that is up")
    which.add_argument("--all", action="store_true",
                       help="remove every gs-* namespace and link (every cluster)")
    st = sub.add_parser("status", help="list emulated clusters that are up")
    st.add_argument("--cluster", default=None, help="only this cluster (file or name)")
    st.add_argument("--json", action="store_true", help="print as JSON")


def _mbit(bps: float | None) -> str:
    return "-" if bps is None else f"{bps * 8 / 1e6:.1f}"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ["host", "namespace", "address", "egress Mbit/s", "ingress Mbit/s", "tc egress",
            "tc ingress", "up"]
    body = [[r["host"], r["namespace"], r["address"], _mbit(r["egress_Bps"]),
             _mbit(r["ingress_Bps"]), _mbit(r.get("tc_egress_Bps")),
             _mbit(r.get("tc_ingress_Bps")), "yes" if r.get("up") else "no"] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in [head] + body]
    return "\n".join(lines)


def _spec_or_name(arg: str) -> tuple[Any, str]:
    """A path loads the cluster file; anything else is the name of a cluster that is up."""
    from gnnsched.spec import load_cluster

    if Path(arg).exists() or arg.endswith((".yaml", ".yml", ".json")):
        spec = load_cluster(arg)
        return spec, spec.name
    return None, arg


def _rows_from_state(state: dict[str, Any]) -> list[dict[str, Any]]:
    from gnnsched.runtime.netns import HOST_IF, _tbf_rate, list_namespaces

    present = set(list_namespaces())
    rows = []
    for h in state.get("hosts", []):
        up = h["ns"] in present
        rows.append({"host": h["name"], "namespace": h["ns"], "address": h["address"],
                     "egress_Bps": h["egress"], "ingress_Bps": h["ingress"], "up": up,
                     "tc_egress_Bps": _tbf_rate(h["ns"], HOST_IF) if up else None,
                     "tc_ingress_Bps": (_tbf_rate(state["switch_ns"], h["port"])
                                        if state["switch_ns"] in present else None)})
    return rows


def run(args: argparse.Namespace) -> int:
    from gnnsched.runtime import netns

    try:
        if args.action == "up":
            spec, _ = _spec_or_name(args.cluster)
            if spec is None:
                print(f"gnnsched cluster up: error: {args.cluster}: cluster file not found",
                      file=sys.stderr)
                return 2
            ec = netns.EmulatedCluster(spec, gateway=not args.no_gateway, mtu=args.mtu,
                                       payload_rates=args.payload_rates,
                                       ignore_latency=args.ignore_latency,
                                       queue_ms=args.queue_ms, bands=args.bands).up()
            rows = ec.status()
            if args.json:
                print(json.dumps({"cluster": spec.name, "gateway": ec.gateway_address,
                                  "latency_s": ec.latency, "queues": ec.queues, "hosts": rows},
                                 indent=1))
            else:
                print(f"cluster {spec.name} is up (switch namespace {ec.switch_ns}"
                      + (f", gateway {ec.gateway_address} on {ec.gateway_if}"
                         if ec.gateway_if else "")
                      + (f", latency {ec.latency * 1e3:g} ms one way" if ec.latency else "")
                      + f"; NIC queues: {ec.queues})")
                print(_table(rows))
                print(f"run a command on a host: ip netns exec {rows[0]['namespace']} CMD")
                fastest = max(max(h.egress, h.ingress) for h in ec.hosts.values())
                if fastest > 1e9 / 8:
                    print(f"note: shaped rates up to {_mbit(fastest)} Mbit/s; veths on a small "
                          "box are CPU-bound above ~1-2 Gbit/s (check with "
                          "bench/bench_netns.py --rates ...)")
            if args.check:
                first = next(iter(ec.hosts))
                bad = [h for h in ec.hosts if ec.ping(first, h) is None]
                if bad:
                    print(f"gnnsched cluster up: error: {first} cannot reach {', '.join(bad)}",
                          file=sys.stderr)
                    return 1
                print(f"{first} reaches every host", file=sys.stderr if args.json else sys.stdout)
            return 0
        if args.action == "down":
            if args.all:
                removed = netns.down_all()
            else:
                spec, name = _spec_or_name(args.cluster)
                removed = (netns.EmulatedCluster(spec).down() if spec is not None
                           else netns.down_cluster(name))
            print("removed: " + (", ".join(removed) if removed else "nothing (already down)"))
            return 0
        states = netns.list_states()
        if args.cluster:
            _, name = _spec_or_name(args.cluster)
            states = [s for s in states if s.get("cluster") == name or s.get("name") == name]
        out = [{"cluster": s["cluster"], "complete": s.get("complete"),
                "gateway": s.get("gateway_address"), "latency_s": s.get("latency_s"),
                "hosts": _rows_from_state(s)} for s in states]
        if args.json:
            print(json.dumps(out, indent=1))
        elif not out:
            print("no emulated cluster is up")
        for c in [] if args.json else out:
            note = "" if c["complete"] else " (INCOMPLETE: run `gnnsched cluster down`)"
            print(f"cluster {c['cluster']}{note}, gateway {c['gateway'] or '-'}")
            print(_table(c["hosts"]))
        return 0
    except netns.NetnsError as exc:
        print(f"gnnsched cluster {args.action}: error: {exc}", file=sys.stderr)
        return 2
