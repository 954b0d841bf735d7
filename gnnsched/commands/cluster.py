"""Bring an emulated cluster up or down on this Linux box (needs root).

``up`` creates one network namespace per machine of the cluster file, each with a veth NIC
shaped by ``tc`` to the machine's egress and ingress bandwidth, joined by a bridge, and control
groups giving each machine its own CPU quota and memory limit: a *scale model* of the cluster,
slowed down by one dilation factor D so that its total compute fits this box (NIC rates / D,
latency x D; see docs/scale-model.md). ``down`` removes everything ``up`` created (``--all``:
every ``gs-*`` namespace and ``gnnsched`` control group); ``status`` lists the clusters that
are up, with the rates the kernel actually enforces, each host's quota, limit and usage.
Without root, train with ``--launcher local`` instead.

``calibrate`` measures what a profile cannot know about this box: one short colocation + fifo
run of the job on a small calibration cluster of its own (two hosts, on the scale model, with
the NICs ``up`` gives), read as factors of the profile's costs (training, sampling, the
all-reduce's overhead, wire bytes, barrier jitter) in the real cluster's seconds. It writes
them beside the cluster file (``NAME.calibration.json`` for ``NAME.yaml``, one entry per
dataset), and ``plan`` and ``simulate`` then predict with them by default and say so.

``check`` probes real hosts before a run (machines with ``ssh:``, each over one ssh session):
ssh reachability, the remote Python and the versions of gnnsched, torch, dgl and pyzmq
against this machine's, the host's address, the partitions at the path the run will use, the
run directory, ports (each host to the coordinator's address and to every other host) and
clock skew. It reports every problem at once, one line each naming the host and the fix, and
exits 2; 0 when every host is ready. ``gnnsched train --launcher ssh`` runs the same checks
before any role starts (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gnnsched.commands import milliseconds, mtu_int, number, port_int, seconds

HELP = ("emulated cluster: network namespaces with tc-shaped NICs and per-host control groups "
        "(up | down | status); calibrate this box's runtime costs for plan and simulate "
        "(calibrate); check real hosts before a run (check)")
dilation_factor = number(1, 1e6, what="a dilation factor")
core_count = number(0, 1e5, lo_open=True, what="cores")
memory_factor = number(0, 1e3, lo_open=True, what="a memory scale")


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
    up.add_argument("--no-cgroups", action="store_true",
                    help="no control groups: hosts share the box's CPU and memory (only NICs "
                         "are emulated) and nothing is dilated unless --dilation says so")
    up.add_argument("--dilation", type=dilation_factor, default=None, metavar="D",
                    help="slow the whole cluster down by D: every host's CPU quota is its "
                         "cores / D, NIC rates the file's / D, latency x D; times measured "
                         "on it, divided by D, are the real cluster's (default: the smallest D "
                         "at which every host's quota fits --cores; 1 with --no-cgroups)")
    up.add_argument("--cores", type=core_count, default=None,
                    help="cores of this box the hosts' quotas may fill when D is chosen "
                         "(default: every core this process may use; give fewer to leave "
                         "room for the coordinator and the kernel's networking)")
    up.add_argument("--memory-scale", type=memory_factor, default=1.0, metavar="X",
                    help="each host's memory limit is its memory_gb x X (memory is not "
                         "dilated; use X < 1 where the hosts' memory adds up to more than "
                         "this box has, and scale the data alike)")
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
    add_calibrate_arguments(sub.add_parser(
        "calibrate", help="measure this box's runtime costs for a job (one short run on the "
        "scale model) and keep them beside the cluster file, for plan and simulate"))
    ck = sub.add_parser("check", help="probe every host before a run: ssh, Python and package "
                        "versions, partitions, ports, clock skew; every problem at once")
    ck.add_argument("--cluster", required=True, help="cluster file (YAML)")
    ck.add_argument("--job", default=None,
                    help="job file: check its partitions (the job's partitions: folder, else "
                         "where gnnsched train caches them)")
    ck.add_argument("--partitions", default=None,
                    help="partition folder the run will use (as gnnsched train --partitions)")
    ck.add_argument("--verify", action="store_true",
                    help="also hash every partition file on every host against gnnsched.json "
                         "(reads all the data; default: presence and gnnsched.json's sha256)")
    ck.add_argument("--remote-python", default="python3",
                    help="the Python on the hosts, as gnnsched train --remote-python")
    ck.add_argument("--remote-dir", default=None,
                    help="working directory on the hosts, as gnnsched train --remote-dir "
                         "(default: this one's path)")
    ck.add_argument("--coordinator-address", default=None,
                    help="this machine's address as the hosts reach it (default: its address "
                         "on the route to the first host)")
    ck.add_argument("--port", type=port_int, default=None,
                    help="the coordinator port you will pin with gnnsched train --port "
                         "(default: a port of the role range 20000-60000)")
    ck.add_argument("--out", default=None,
                    help="run directory (or its parent) the run will write; checked writable "
                         "and shared on every host (default: ./runs)")
    ck.add_argument("--timeout", type=seconds, default=10.0,
                    help="ssh connect timeout per host (seconds)")
    ck.add_argument("--json", action="store_true", help="print the report as JSON")


def add_calibrate_arguments(cal: argparse.ArgumentParser) -> None:
    """``gnnsched cluster calibrate``'s flags: what to calibrate, and the NICs and scale model
    to calibrate on (``up``'s flags and defaults)."""
    from gnnsched.commands import epochs_int, input_dir, positive_int

    cal.add_argument("--cluster", required=True,
                     help="cluster file (YAML) whose calibration this is: it goes beside it")
    cal.add_argument("--job", required=True, help="job file (YAML): its dataset, model, "
                     "fan-outs and batch size are what is measured")
    cal.add_argument("--cost", default=None, help="the cost profile to calibrate "
                     "(`gnnsched profile`; default: profile the job's partitions now)")
    cal.add_argument("--partitions", default=None,
                     help="partition directory (default: the job's, or its dataset "
                          "partitioned into the cache)")
    cal.add_argument("--data-dir", type=input_dir, default=None, help="folder of .npz graphs")
    cal.add_argument("--samples", type=positive_int, default=16,
                     help="mini-batches profiled per partition when --cost is not given")
    cal.add_argument("--epochs", type=epochs_int, default=3,
                     help="epochs of the calibration run (the first is a warm-up)")
    cal.add_argument("--repeats", type=positive_int, default=1,
                     help="calibration runs (the median is kept)")
    cal.add_argument("--out", default=None, metavar="FILE",
                     help="where the calibration goes (default: CLUSTER.calibration.json "
                          "beside the cluster file, where plan and simulate look)")
    cal.add_argument("--work", default="runs/calibrate",
                     help="folder for the calibration run's files")
    cal.add_argument("--payload-rates", action="store_true",
                     help="as `up --payload-rates` (calibrate on the NICs you will train on)")
    cal.add_argument("--bands", action="store_true", help="as `up --bands`")
    cal.add_argument("--queue-ms", type=milliseconds, default=None, help="as `up --queue-ms`")
    cal.add_argument("--mtu", type=mtu_int, default=1500, help="as `up --mtu`")
    cal.add_argument("--dilation", type=dilation_factor, default=None, metavar="D",
                     help="D of the calibration cluster's scale model (default: the smallest "
                          "that fits --cores); its times / D are the real cluster's")
    cal.add_argument("--cores", type=core_count, default=None,
                     help="cores of this box the hosts' quotas may fill (as `up --cores`)")
    cal.add_argument("--json", action="store_true", help="print the calibration as JSON")


def _calibrate(args: argparse.Namespace) -> int:
    """``gnnsched cluster calibrate``: :func:`gnnsched.evaluation.box.calibrate_cluster` on
    the job's partitions and profile, then where it went and what it says."""
    from gnnsched import api
    from gnnsched.calibrate import dataset_key
    from gnnsched.evaluation.box import calibrate_cluster, calibration_cluster
    from gnnsched.profile import CostProfile
    from gnnsched.spec import load_cluster, load_job

    why = api.netns_unavailable_reason()
    if why is not None:
        print(f"gnnsched cluster calibrate: error: {why}. Calibration measures the runtime on "
              "the emulated cluster's scale model (root, network namespaces): on local "
              "processes the plan's NICs do not exist, so nothing there calibrates against "
              "them", file=sys.stderr)
        return 2
    load_cluster(args.cluster)  # a bad cluster file is named before anything runs
    job = load_job(args.job)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    pset = api.open_job_partitions(job, args.partitions, args.data_dir, quiet=args.json)
    if args.cost:
        prof = CostProfile.load(args.cost)
        prof.check_job(job, args.cost)
        how = f"the profile {args.cost}"
    else:
        prof = api.profile_partitions(pset, job, samples=args.samples, seed=job.seed)
        how = f"a profile of {args.samples} mini-batches per partition measured now"
    cal = calibration_cluster(job)
    say(f"calibrating {dataset_key(job)} on this box: colocation + fifo, {args.epochs} epochs "
        f"(the first a warm-up), on a calibration cluster of {len(cal.machines)} hosts (the "
        f"scale model), against {how}")
    nic = {"payload_rates": args.payload_rates, "bands": args.bands,
           "queue_ms": args.queue_ms, "mtu": args.mtu}
    import contextlib

    # the run's progress lines go to stderr with --json, so stdout holds only the JSON
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        path, box = calibrate_cluster(args.cluster, job, prof, Path(pset.root),
                                      work=Path(args.work), epochs=args.epochs,
                                      repeats=args.repeats, nic=nic, dilation=args.dilation,
                                      cores=args.cores, out=args.out)
    if args.json:
        print(json.dumps({"file": str(path), "dataset": dataset_key(job),
                          **{k: v for k, v in box.to_dict().items() if k != "barrier_skew_s"}},
                         default=float))
        return 0
    print(f"calibration of {dataset_key(job)}: {box.describe()}; the calibration run's epoch "
          f"{box.epoch_time_s:.3f} s of the real cluster, simulated with these factors "
          f"{box.meta.get('simulated_epoch_s', float('nan')):.3f} s")
    print(f"wrote {path}: `gnnsched plan --cluster {args.cluster}` and `simulate` now predict "
          "with it (--no-calibration: without)")
    return 0


def _mbit(bps: float | None) -> str:
    return "-" if bps is None else f"{bps * 8 / 1e6:.1f}"


def _gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f}"


def _cores(r: dict[str, Any]) -> str:
    if r.get("cpu_quota_cores") is None:
        return "-"
    devs = r.get("device_quota_cores") or []
    text = f"{r['cpu_quota_cores']:.3g}"
    return text + (f" ({r['cpus_quota_cores']:.3g}+" + "+".join(f"{d:.3g}" for d in devs) + ")"
                   if devs else "")


def _table(rows: list[dict[str, Any]]) -> str:
    groups = any(r.get("cpu_quota_cores") is not None for r in rows)
    head = ["host", "namespace", "address", "egress Mbit/s", "ingress Mbit/s", "tc egress",
            "tc ingress"]
    if groups:
        head += ["cpu quota (cores)", "mem limit GB", "cpu used s", "mem peak GB", "oom kills"]
    head.append("up")
    body = []
    for r in rows:
        line = [r["host"], r["namespace"], r["address"], _mbit(r["egress_Bps"]),
                _mbit(r["ingress_Bps"]), _mbit(r.get("tc_egress_Bps")),
                _mbit(r.get("tc_ingress_Bps"))]
        if groups:
            u = r.get("usage") or {}
            line += [_cores(r), _gb(r.get("memory_limit")),
                     "-" if u.get("cpu_s") is None else f"{u['cpu_s']:.1f}",
                     _gb(u.get("memory_peak")),
                     "-" if u.get("oom_kills") is None else str(u["oom_kills"])]
        line.append("yes" if r.get("up") else "no")
        body.append(line)
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


def _model_line(ec: Any) -> str:
    """How the scale model was made: D, and what it means for the times measured on it."""
    if ec.groups is None and ec.dilation == 1:
        return ("no control groups: every host shares this box's CPU and memory; only NICs "
                "are emulated")
    why = (f"cluster compute {ec.compute_cores:g} cores / {ec.box_cores:g} cores of this box"
           if ec.groups is not None and ec.dilation == max(1.0, ec.compute_cores / ec.box_cores)
           else "as given")
    what = "NICs at the file's rates / D, latency x D"
    if ec.groups is not None:
        scale = f" x {ec.memory_scale:g}" if ec.memory_scale != 1 else ""
        what += f", CPU quotas the hosts' cores / D, memory limits memory_gb{scale} (not dilated)"
    else:
        what += ", no control groups (CPU not dilated)"
    return (f"scale model: dilation D = {ec.dilation:.4g} ({why}): {what}; "
            f"real-cluster time = measured time / {ec.dilation:.4g}")


def _notes(ec: Any) -> list[str]:
    notes = []
    if ec.groups is not None:
        quota = sum(s.cores for s in ec.groups.shares.values())
        if quota > ec.box_cores * 1.001:
            notes.append(f"note: the hosts' CPU quotas add up to {quota:.3g} cores, more than "
                         f"the {ec.box_cores:g} cores of this box (D {ec.dilation:g} < "
                         f"{ec.compute_cores / ec.box_cores:.3g}): hosts will not always get "
                         "their share, and times are not the real cluster's x D")
        memory = sum(s.memory for s in ec.groups.shares.values())
        try:
            box = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            box = 0
        if box and memory > box:
            notes.append(f"note: the hosts' memory limits add up to {memory / 1e9:.1f} GB, more "
                         f"than this box's {box / 1e9:.1f} GB: a host may run out before it "
                         "reaches its limit (--memory-scale X scales every limit)")
    return notes


def _check(args: argparse.Namespace) -> int:
    """``gnnsched cluster check`` (see the module text; the probing: api.check_cluster)."""
    from gnnsched import api

    err = sys.stderr
    try:
        found = api.check_cluster(args.cluster, job=args.job, partitions=args.partitions,
                                  verify=args.verify, remote_python=args.remote_python,
                                  remote_dir=args.remote_dir,
                                  coordinator_address=args.coordinator_address, port=args.port,
                                  out=args.out, timeout=args.timeout)
    except api.LaunchError as exc:
        print(f"gnnsched cluster check: error: {exc}", file=err)
        return 2
    spec, parts, problems, report = found.cluster, found.partitions, found.problems, found.report
    if report is None:
        print(f"cluster {spec.name}: no machine has ssh:, so its hosts run on this machine "
              "(--launcher local, or --launcher netns in network namespaces): one Python "
              "environment, one filesystem, one clock; the ssh, version, port and clock "
              "checks do not apply")
        print(f"emulated cluster {spec.name}: " + (
            "up (--launcher netns can run)" if found.emulated_up else
            "not up (--launcher netns needs `gnnsched cluster up --cluster "
            f"{args.cluster}` first, as root; --launcher local needs nothing)"))
        if parts:
            print(f"partitions {parts}: " + ("problem" if problems else "ok"))
        for p in problems:
            print(f"gnnsched cluster check: error: {p}", file=err)
        return 2 if problems else 0
    if args.json:
        print(json.dumps({
            "cluster": spec.name, "remote_python": found.remote_python,
            "remote_dir": found.remote_dir, "partitions": parts, "run_dir": str(found.run_dir),
            "coordinator": report.coordinator, "local": report.local,
            "hosts": [{"machine": h.machine, "ssh": h.destination, "facts": h.facts,
                       "clock_skew_s": h.skew_s, "rtt_s": h.rtt_s, "ports": h.ports,
                       "problems": [str(p) for p in h.problems], "warnings": h.warnings}
                      for h in report.hosts],
            "problems": problems, "warnings": report.warnings}, indent=1))
    else:
        _print_hosts(found)
    for w in report.warnings:
        print(f"gnnsched cluster check: warning: {w}", file=err)
    for p in problems:
        print(f"gnnsched cluster check: error: {p}", file=err)
    if not problems and not args.json:
        print(f"ok: all {len(report.hosts)} hosts are ready for gnnsched train --launcher ssh"
              + (f" --remote-python {found.remote_python}"
                 if found.remote_python != "python3" else ""))
    return 2 if problems else 0


def _print_hosts(found: Any) -> None:
    """The check's table: this machine's versions, then one line per host."""
    report = found.report
    v = report.local.get("versions", {})
    print(f"checking {len(report.hosts)} hosts over ssh: remote python "
          f"{found.remote_python} in {found.remote_dir}; this machine: python "
          f"{report.local.get('python')}, "
          + ", ".join(f"{d} {v.get(d)}" for d in found.dists))
    print(f"partitions {found.partitions or '- (give --job or --partitions to check them)'}; "
          f"run directory {found.run_dir}; {report.coordinator or 'coordinator: -'}")
    width = max(len(h.machine) for h in report.hosts)
    for h in report.hosts:
        state = "ok" if not h.problems else (
            f"{len(h.problems)} problem" + "s" * (len(h.problems) != 1))
        print(f"  {h.machine.ljust(width)}  {state.ljust(10)}  {h.destination}: "
              + (h.summary() if h.facts else "no answer (see below)"))


def run(args: argparse.Namespace) -> int:
    from gnnsched import api

    if args.action == "check":
        return _check(args)
    if args.action == "calibrate":
        try:
            return _calibrate(args)
        except (api.NetnsError, api.RunError, api.LaunchError, api.CgroupError) as exc:
            print(f"gnnsched cluster calibrate: error: {exc}", file=sys.stderr)
            return 2
    try:
        if args.action == "up":
            return _up(args)
        if args.action == "down":
            if args.all:
                removed = api.cluster_down_all()
            else:
                spec, name = _spec_or_name(args.cluster)
                removed = api.cluster_down(spec if spec is not None else name)
            print("removed: " + (", ".join(removed) if removed else "nothing (already down)"))
            return 0
        out = api.cluster_status(_spec_or_name(args.cluster)[1] if args.cluster else None)
        if args.json:
            print(json.dumps(out, indent=1))
        elif not out:
            print("no emulated cluster is up")
        for c in [] if args.json else out:
            note = "" if c["complete"] else " (INCOMPLETE: run `gnnsched cluster down`)"
            model = (f", dilation D = {c['dilation']:.4g} (real-cluster time = measured / D)"
                     if c["cgroups"] or c["dilation"] != 1 else "")
            print(f"cluster {c['cluster']}{note}, gateway {c['gateway'] or '-'}{model}"
                  + ("" if c["cgroups"] else ", no control groups"))
            print(_table(c["hosts"]))
        return 0
    except api.NetnsError as exc:
        print(f"gnnsched cluster {args.action}: error: {exc}", file=sys.stderr)
        return 2


def _up(args: argparse.Namespace) -> int:
    """``gnnsched cluster up`` (api.cluster_up), then what is up and how it was scaled."""
    from gnnsched import api

    spec, _ = _spec_or_name(args.cluster)
    if spec is None:
        print(f"gnnsched cluster up: error: {args.cluster}: cluster file not found",
              file=sys.stderr)
        return 2
    ec = api.cluster_up(spec, gateway=not args.no_gateway, mtu=args.mtu,
                        payload_rates=args.payload_rates, ignore_latency=args.ignore_latency,
                        queue_ms=args.queue_ms, bands=args.bands, cgroups=not args.no_cgroups,
                        dilation=args.dilation, cores=args.cores,
                        memory_scale=args.memory_scale)
    rows = ec.status()
    if args.json:
        print(json.dumps({"cluster": spec.name, "gateway": ec.gateway_address,
                          "latency_s": ec.latency, "queues": ec.queues,
                          "dilation": ec.dilation, "compute_cores": ec.compute_cores,
                          "box_cores": ec.box_cores, "cgroups": ec.groups is not None,
                          "memory_scale": ec.memory_scale, "hosts": rows},
                         indent=1))
    else:
        print(f"cluster {spec.name} is up (switch namespace {ec.switch_ns}"
              + (f", gateway {ec.gateway_address} on {ec.gateway_if}"
                 if ec.gateway_if else "")
              + (f", latency {ec.latency * 1e3:g} ms one way" if ec.latency else "")
              + f"; NIC queues: {ec.queues})")
        print(_model_line(ec))
        print(_table(rows))
        for note in _notes(ec):
            print(note)
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
