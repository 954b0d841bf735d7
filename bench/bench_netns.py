"""Benchmark the emulated cluster: achieved TCP rate vs the shaped rate, and up/down time.

Run (as root): ``python bench/bench_netns.py [--quick] [--seconds 2] [--out docs/bench/netns.json]``

Why: every runtime number on the emulated cluster is only as honest as its NIC shaping. For
each rate a 2-host cluster is brought up, a bulk TCP transfer runs between two real processes
in the hosts' namespaces, and the steady goodput (after the first 10% of bytes) is compared
with the shaped rate -- at wire rates (default: goodput ~95%, as a real NIC's) and with
``payload_rates`` (goodput should match the file). Asymmetric egress/ingress, the time to
bring clusters of 4 and 16 hosts up and down, and the NIC queues' priority bands (a small
round trip behind a bulk flow marked ``BULK_TOS`` or not) are measured too. Traffic stays inside the
namespaces this script creates.

It also times gloo's all-reduce (``torch.distributed``, what the trainers run) between two idle
100 Mbit/s hosts, for the gradients of the evaluation's models (GraphSAGE, 128 hidden: Cora's
1,433 input features, 1.5 MB; Physics projected to 128, 137 KB): the all-reduce's cost on the
emulated NICs with nothing else on them, against which ``gnnsched bench`` reports the one in
its runs (``allreduce_measured_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _spec(name: str, hosts: dict[str, tuple[float, float]]) -> Any:
    from gnnsched.spec import cluster_from_dict

    machines = [{"name": h, "cpus": 1, "memory_gb": 1,
                 "nic": {"egress_gbps": eg / 1e3, "ingress_gbps": ing / 1e3}}
                for h, (eg, ing) in hosts.items()]
    machines[0]["partitions"] = [0]
    return cluster_from_dict({"name": name, "machines": machines}, "<bench>")


def _transfer(name: str, hosts: dict[str, tuple[float, float]], src: str, dst: str,
              seconds: float, **opts: Any) -> dict[str, Any]:
    from gnnsched.runtime.netns import emulated

    spec = _spec(name, hosts)
    shaped = min(hosts[src][0], hosts[dst][1])  # Mbit/s
    nbytes = int(shaped * 1e6 / 8 * seconds)
    with emulated(spec, gateway=False, **opts) as ec:
        r = ec.measure_rate(src, dst, nbytes)
    return {"src": src, "dst": dst, "egress_mbit": hosts[src][0], "ingress_mbit": hosts[dst][1],
            "shaped_mbit": shaped, "measured_mbit": r["rate_Bps"] * 8 / 1e6,
            "ratio": r["ratio"], "bytes": r["bytes"], "seconds": r["seconds"],
            "payload_rates": bool(opts.get("payload_rates"))}


def _fan(name: str, kind: str, rate: float, seconds: float) -> dict[str, Any]:
    """Two concurrent flows through one shaped NIC: into it (incast) or out of it (outcast)."""
    import threading

    from gnnsched.runtime.netns import emulated

    fast = rate * 2
    if kind == "incast":  # a, b -> c: c's ingress is the bottleneck
        hosts = {"a": (fast, fast), "b": (fast, fast), "c": (fast, rate)}
        pairs = [("a", "c"), ("b", "c")]
    else:  # a -> b, a -> c: a's egress is the bottleneck
        hosts = {"a": (rate, fast), "b": (fast, fast), "c": (fast, fast)}
        pairs = [("a", "b"), ("a", "c")]
    nbytes = int(rate * 1e6 / 8 * seconds / 2)
    results: list[dict[str, float]] = []
    with emulated(_spec(name, hosts), gateway=False) as ec:
        threads = [threading.Thread(target=lambda s=s, d=d: results.append(
            ec.measure_rate(s, d, nbytes))) for s, d in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    span = max(r["t_last"] for r in results) - min(r["t_first"] for r in results)
    total = sum(r["bytes"] for r in results) / span * 8 / 1e6  # aggregate, first byte to last
    return {"kind": kind, "flows": len(pairs), "shaped_mbit": rate, "measured_mbit": total,
            "per_flow_steady_mbit": [r["rate_Bps"] * 8 / 1e6 for r in results],
            "ratio": total / rate}


def _priority(name: str, seconds: float) -> list[dict[str, Any]]:
    """A best-effort round trip a -> b (what gradients and acknowledgements are) while a
    400 Mbit/s host c floods b's 100 Mbit/s ingress with bulk TCP: unmarked and marked
    ``BULK_TOS``, with and without the NICs' priority bands."""
    from gnnsched.runtime.netns import emulated
    from gnnsched.runtime.qos import BULK_TOS

    hosts = {"a": (100.0, 100.0), "b": (100.0, 100.0), "c": (400.0, 400.0)}
    out = []
    for bands in (True, False):
        with emulated(_spec(f"{name}{int(bands)}", hosts), gateway=False, bands=bands) as ec:
            for tos in (0, BULK_TOS):
                r = ec.measure_priority("a", "b", "c", tos=tos, seconds=seconds)
                out.append({"queues": ec.queues, "bulk_tos": tos, **r})
    return out


ALLREDUCE_MODELS = {"cora": (1433, 7), "physics": (128, 5)}  # (input features, classes)


def _allreduce(name: str, rate: float, reps: int) -> list[dict[str, Any]]:
    """gloo all-reduce of each model's gradients between two idle hosts at ``rate`` Mbit/s:
    median seconds over ``reps`` calls (after 3 warm-up calls) against bytes / rate, where a
    2-trainer ring sends each trainer's whole gradient once."""
    import subprocess

    from gnnsched.runtime.model import build_model
    from gnnsched.runtime.netns import HOST_IF, emulated

    floats = {m: sum(p.numel() for p in build_model("sage", f, 128, c, 2).parameters())
              for m, (f, c) in ALLREDUCE_MODELS.items()}
    out = []
    with emulated(_spec(name, {"a": (rate, rate), "b": (rate, rate)}), gateway=False) as ec:
        env = {**os.environ, "GLOO_SOCKET_IFNAME": HOST_IF, "OMP_NUM_THREADS": "1"}
        for k, (model, n) in enumerate(floats.items()):
            argv = [sys.executable, __file__, "--allreduce-worker", ec.address("a"),
                    str(29500 + k), str(n), str(reps)]
            procs = [subprocess.Popen([*ec.exec_prefix(h), *argv, str(r)], env=env, text=True,
                                      stdout=subprocess.PIPE) for r, h in enumerate("ab")]
            try:
                got = [p.communicate(timeout=120)[0] for p in procs]
            finally:  # a rank that failed or hung leaves no process in the namespaces
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            if any(p.returncode for p in procs):
                raise RuntimeError(f"all-reduce workers failed: {[p.returncode for p in procs]}")
            times = sorted(json.loads(got[0]))
            wire = n * 4 / (rate * 1e6 / 8)
            med = times[len(times) // 2]
            out.append({"model": model, "bytes": n * 4, "mbit": rate, "median_s": med,
                        "min_s": times[0], "wire_s": wire, "ratio": med / wire})
    return out


def _allreduce_worker(addr: str, port: str, n: str, reps: str, rank: str) -> int:
    """One rank of :func:`_allreduce`: rank 0 prints its call times (JSON) on stdout."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=int(rank),
                            world_size=2, timeout=timedelta(seconds=60))
    x, times = torch.ones(int(n)), []
    for i in range(3 + int(reps)):
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(x)
        if i >= 3:
            times.append(time.perf_counter() - t)
        x.div_(2)
    dist.destroy_process_group()
    if rank == "0":
        print(json.dumps(times))
    return 0


def _updown(name: str, n: int) -> dict[str, Any]:
    from gnnsched.runtime.netns import EmulatedCluster

    ec = EmulatedCluster(_spec(name, {f"h{i}": (100, 100) for i in range(n)}))
    t0 = time.perf_counter()
    try:
        ec.up()
        t_up = time.perf_counter() - t0
        reach = all(ec.ping("h0", f"h{i}") is not None for i in range(n))
    finally:
        t1 = time.perf_counter()
        ec.down()
    return {"hosts": n, "up_s": t_up, "down_s": time.perf_counter() - t1, "all_reachable": reach}


def main(argv: list[str] | None = None) -> int:
    from gnnsched.cli import stop_cleanly_on_signals

    stop_cleanly_on_signals()  # a kill still takes the emulated cluster down
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--allreduce-worker"]:  # a rank of _allreduce, inside its namespace
        return _allreduce_worker(*argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rates, shorter transfers")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each transfer")
    ap.add_argument("--rates", type=float, nargs="*", default=None, help="Mbit/s to test")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "netns.json"))
    args = ap.parse_args(argv)
    from gnnsched.runtime.netns import unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"bench_netns: cannot build an emulated cluster here: {reason}", file=sys.stderr)
        return 2
    rates = args.rates or ([50, 200] if args.quick else [10, 50, 100, 200, 500, 1000])
    seconds = 1.0 if args.quick else args.seconds
    tag = f"b{os.getpid() % 10000}"
    rows: list[dict[str, Any]] = []
    for rate in rates:
        for payload in (False, True):
            rows.append(_transfer(f"{tag}r", {"a": (rate, rate), "b": (rate, rate)}, "a", "b",
                                  seconds, payload_rates=payload))
            r = rows[-1]
            print(f"  {rate:7.0f} Mbit/s  payload_rates={payload!s:5}  "
                  f"measured {r['measured_mbit']:8.2f}  ratio {r['ratio']:.3f}", flush=True)
    asym = {"a": (40.0, 80.0), "b": (100.0, 60.0)}  # a->b egress-bound, b->a ingress-bound
    for src, dst in (("a", "b"), ("b", "a")):
        rows.append(_transfer(f"{tag}a", asym, src, dst, seconds))
    fans = [_fan(f"{tag}f", kind, 100.0, seconds) for kind in ("incast", "outcast")]
    updown = [_updown(f"{tag}u{n}", n) for n in ((4,) if args.quick else (4, 16))]
    prio = _priority(f"{tag}p", seconds)
    allreduce = _allreduce(f"{tag}g", 100.0, 10 if args.quick else 25)

    print()
    print(f"{'src->dst':9} {'egress':>7} {'ingress':>7} {'shaped':>7} {'measured':>9} "
          f"{'ratio':>6}  goodput basis")
    for r in rows:
        print(f"{r['src'] + '->' + r['dst']:9} {r['egress_mbit']:7.0f} {r['ingress_mbit']:7.0f} "
              f"{r['shaped_mbit']:7.0f} {r['measured_mbit']:9.2f} {r['ratio']:6.3f}  "
              f"{'payload' if r['payload_rates'] else 'wire'}")
    print("(Mbit/s; ratio = measured TCP goodput / shaped rate)")
    for f in fans:
        print(f"{f['kind']:8} {f['flows']} concurrent flows through one {f['shaped_mbit']:.0f} "
              f"Mbit/s NIC: {f['measured_mbit']:.2f} Mbit/s together, ratio {f['ratio']:.3f}")
    for u in updown:
        print(f"{u['hosts']:3d} hosts: up {u['up_s']:.2f} s, down {u['down_s']:.2f} s, "
              f"all reachable: {u['all_reachable']}")
    print("priority: round trip a->b while c floods b's ingress with bulk TCP")
    for p in prio:
        print(f"  queues {p['queues']:10}  bulk TOS {p['bulk_tos']:#04x}: round trip "
              f"{p['rtt_ms']:.2f} ms median ({p['rtt_ms_max']:.2f} max), bulk at "
              f"{p['bulk_ratio']:.3f} of the link")
    print("gloo all-reduce between two idle hosts (2 trainers' ring)")
    for g in allreduce:
        print(f"  {g['model']:8} {g['bytes'] / 1e6:6.3f} MB at {g['mbit']:.0f} Mbit/s: "
              f"{1e3 * g['median_s']:6.1f} ms median ({1e3 * g['min_s']:.1f} min), bytes / rate "
              f"{1e3 * g['wire_s']:.1f} ms, ratio {g['ratio']:.2f}")
    out = {"bench": "netns", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "machine": {"kernel": platform.release(), "cpus": os.cpu_count(),
                       "python": platform.python_version()},
           "seconds_per_transfer": seconds, "mtu": 1500, "transfers": rows, "fan": fans,
           "updown": updown, "priority": prio, "allreduce": allreduce,
           "within_10pct": all(0.9 <= r["ratio"] <= 1.1 for r in rows + fans)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
