"""Benchmark the online scheduler: gnnsched vs fifo in simulation, against bounds and optima.

Run: ``python bench/bench_scheduler.py [--quick] [--out docs/bench/scheduler.json]``

1. Scenarios (seeded, built programmatically): 4 to 256 machines; scarce and plentiful
   bandwidth; mixed GPU generations and NIC speeds; skewed partitions. One fixed, simple
   placement per scenario (trainers on GPUs, each owning a contiguous block of partitions,
   samplers on the store of its first partition, features gathered at the trainer), so only
   the online policy differs. Printed: epoch time of each policy, the lower bound of the same
   mini-batches (bounds.instance_bound), each policy's ratio to it, fifo / gnnsched, and the
   simulator's speed (events per CPU-second).
2. Exact: small instances (tests/exact_schedules.small_instance, the family tests/test_bounds.py checks) solved
   by CP-SAT; each policy's makespan over the optimum.
3. Sweep: many random small instances with mixed NIC speeds (no CP-SAT): how often and by how
   much gnnsched loses to fifo.
4. Speed: 64 trainers x 500 iterations, events per second of each policy.

Writes the JSON and a PNG (``--png``, default next to the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.bounds import instance_bound
from gnnsched.instance import Instance, workload_for
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import synthetic_profile
from gnnsched.simulator import run
from gnnsched.spec import GB, GBIT, GPU, ClusterSpec, JobSpec, Machine

# The exact schedules are test code (tests/exact_schedules.py), not the product's.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from exact_schedules import exact_schedule, small_instance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

POLICIES = ("fifo", "gnnsched")
KINDS = {"a100": 4.0, "v100": 2.0, "t4": 1.0}


@dataclass
class Scenario:
    name: str
    what: str
    cluster: ClusterSpec
    job: JobSpec
    plan: Plan
    skew: float = 0.0
    seeds_per_part: int = 2000
    iterations: int | None = None


def _cluster(name: str, stores: int, parts: int, store_gbps: float,
             hosts: list[tuple[str, int, float]], *, store_gpu: str | None = None,
             store_cpus: int = 16, host_cpus: int = 8) -> ClusterSpec:
    """`stores` store hosts (partitions in contiguous blocks), then GPU hosts (kind, count,
    NIC Gbit/s)."""
    ms = []
    per = [parts // stores + (1 if i < parts % stores else 0) for i in range(stores)]
    p = 0
    for i in range(stores):
        gpus = (GPU(store_gpu, KINDS[store_gpu]),) if store_gpu else ()
        ms.append(Machine(f"s{i:03d}", store_cpus, 128 * GB, store_gbps * GBIT,
                          store_gbps * GBIT, gpus, tuple(range(p, p + per[i]))))
        p += per[i]
    for i, (kind, count, gbps) in enumerate(hosts):
        ms.append(Machine(f"g{i:03d}", host_cpus, 128 * GB, gbps * GBIT, gbps * GBIT,
                          tuple(GPU(kind, KINDS[kind], 40 * GB) for _ in range(count))))
    return ClusterSpec(name, tuple(ms))


def simple_plan(cluster: ClusterSpec, trainers: int, samplers: int = 2) -> Plan:
    """Fastest GPUs first; trainer w owns a contiguous block of partitions; its samplers run
    on the store of its first partition and it gathers its own features."""
    gpus = sorted(((m.name, d, g.speed) for m in cluster.machines for d, g in enumerate(m.gpus)
                   if not m.partitions), key=lambda x: -x[2])
    gpus += [(m.name, d, g.speed) for m in cluster.machines for d, g in enumerate(m.gpus)
             if m.partitions]
    P = cluster.num_parts
    out = []
    for w in range(trainers):
        lo, hi = w * P // trainers, (w + 1) * P // trainers
        host, dev, _ = gpus[w]
        store = cluster.machines[cluster.store_of(lo)].name
        out.append(TrainerPlan(w, host, dev, tuple(range(lo, hi)), ((store, samplers),), host))
    return Plan("simple", cluster.name, cluster.fingerprint(), tuple(out))


def _job(parts: int, trainers: int, batch: int = 1024) -> JobSpec:
    return JobSpec(name="bench", dataset="synthetic", num_parts=parts, trainers=trainers,
                   batch_size=batch, fanouts=(10, 15), prefetch=2, hidden=256)


def scenarios(quick: bool) -> list[Scenario]:
    out = []

    def add(name: str, what: str, cl: ClusterSpec, trainers: int, **kw: Any) -> None:
        job = _job(cl.num_parts, trainers, kw.pop("batch", 1024))
        out.append(Scenario(name, what, cl, job, simple_plan(cl, trainers), **kw))

    for gbps, label in ((0.1, "scarce"), (10.0, "plentiful")):
        cl = _cluster(f"lab4-{label}", 2, 4, gbps, [("t4", 1, gbps)] * 2, store_cpus=4,
                      host_cpus=2)
        add(f"lab4-{label}", f"4 hosts, GPU-less stores, {gbps:g} Gbit/s", cl, 2, batch=256,
            seeds_per_part=1500)
    hosts16 = [("a100", 1, 25.0)] * 4 + [("v100", 1, 5.0)] * 4
    add("hetero16", "16 hosts, A100@25G + V100@5G, stores @10G",
        _cluster("hetero16", 8, 8, 10.0, hosts16), 8, seeds_per_part=20000)
    add("hetero16-skew", "same, 32 Zipf-skewed partitions (1.0), 4 per trainer",
        _cluster("hetero16s", 8, 32, 10.0, hosts16), 8, skew=1.0, seeds_per_part=5000)
    if not quick:
        for gbps, label in ((2.0, "scarce"), (25.0, "plentiful")):
            add(f"m48-{label}", f"48 hosts: 32 stores @{gbps:g}G, 16x4 A100 @25G",
                _cluster(f"m48-{label}", 32, 64, gbps, [("a100", 4, 25.0)] * 16), 64,
                seeds_per_part=16000)
        mixed = [("a100", 4, 100.0)] * 6 + [("v100", 4, 25.0)] * 5 + [("t4", 4, 10.0)] * 5
        add("m48-mixed", "48 hosts: stores @10G, 16x4 GPUs A100/V100/T4 @100/25/10G",
            _cluster("m48-mixed", 32, 64, 10.0, mixed), 64, skew=0.5, seeds_per_part=16000)
        hosts256 = ([("a100", 4, 100.0)] * 22 + [("v100", 4, 25.0)] * 21
                    + [("t4", 4, 10.0)] * 21)
        add("scale256", "256 hosts: 192 stores @10G (1024 parts), 64x4 GPUs, skew 0.5",
            _cluster("scale256", 192, 1024, 10.0, hosts256), 256, skew=0.5,
            seeds_per_part=4000)
    return out


def run_scenario(sc: Scenario, seed: int = 0) -> dict[str, Any]:
    prof = synthetic_profile(sc.cluster.num_parts, batch_size=sc.job.batch_size,
                             fanouts=sc.job.fanouts, hidden=sc.job.hidden,
                             seeds_per_part=sc.seeds_per_part, skew=sc.skew, seed=seed)
    wl = workload_for(sc.cluster, sc.job, prof)
    sc.plan.validate(sc.cluster, sc.job)
    inst = Instance(wl, sc.plan, seed=seed, iterations=sc.iterations)
    lb = instance_bound(inst)
    row: dict[str, Any] = {"scenario": sc.name, "what": sc.what,
                           "machines": len(sc.cluster.machines), "trainers": inst.W,
                           "iterations": inst.K, "lower_bound_s": lb.epoch_s,
                           "bottleneck": lb.bottleneck, "plan_bound_s": wl.bound(sc.plan).epoch_s}
    for pol in POLICIES:
        c0 = time.process_time()
        res = run(inst, pol)
        cpu = time.process_time() - c0
        row[pol] = {"epoch_s": res.makespan_s, "iteration_s": res.iteration_time_s,
                    "ratio_to_bound": res.makespan_s / lb.epoch_s, "events": res.events,
                    "cpu_s": cpu, "events_per_cpu_s": res.events / max(cpu, 1e-9),
                    "critical_share": {k: v / res.makespan_s
                                       for k, v in res.critical_share.items()}}
    row["fifo_over_gnnsched"] = row["fifo"]["epoch_s"] / row["gnnsched"]["epoch_s"]
    return row


def exact_suite(n: int, uniform: bool, time_limit: float) -> dict[str, Any]:
    rows = []
    for seed in range(n):
        inst = small_instance(seed, 3, uniform_nics=uniform)
        opt = exact_schedule(inst, time_limit=time_limit)
        r = {"seed": seed, "machines": inst.M, "trainers": inst.W, "batches": inst.W * inst.K,
             "status": opt.status, "optimum_s": opt.makespan_s, "cp_bound_s": opt.bound_s,
             "cp_wall_s": opt.wall_s, "lower_bound_s": instance_bound(inst).epoch_s}
        for pol in POLICIES:
            r[pol] = run(inst, pol).makespan_s / opt.makespan_s
        rows.append(r)
    g = np.array([r["gnnsched"] for r in rows])
    f = np.array([r["fifo"] for r in rows])
    return {"uniform_nics": uniform, "instances": n, "rows": rows,
            "proved_optimal": sum(r["status"] == "OPTIMAL" for r in rows),
            "gnnsched_over_opt": {"mean": float(g.mean()), "max": float(g.max())},
            "fifo_over_opt": {"mean": float(f.mean()), "max": float(f.max())},
            "gnnsched_worse_than_fifo": int((g > f * (1 + 1e-9)).sum())}


def sweep(n: int) -> dict[str, Any]:
    ratios = []
    for seed in range(1000, 1000 + n):
        inst = small_instance(seed, 8, max_trainers=3, uniform_nics=False)
        ratios.append(run(inst, "gnnsched").makespan_s / run(inst, "fifo").makespan_s)
    r = np.array(ratios)
    return {"instances": n, "gnnsched_over_fifo_mean": float(r.mean()),
            "gnnsched_over_fifo_max": float(r.max()),
            "worse_than_fifo": int((r > 1 + 1e-9).sum()),
            "worse_by_more_than_1pct": int((r > 1.01).sum())}


def speed(iterations: int) -> dict[str, Any]:
    """64 trainers (16 hosts x 4 A100 @25G) fed by 32 stores @10G."""
    cl = _cluster("speed64", 32, 64, 10.0, [("a100", 4, 25.0)] * 16)
    job = _job(64, 64)
    prof = synthetic_profile(64, batch_size=1024, fanouts=(10, 15), hidden=256,
                             seeds_per_part=4000)
    plan = simple_plan(cl, 64)
    inst = Instance(workload_for(cl, job, prof), plan, iterations=iterations)
    out: dict[str, Any] = {"trainers": 64, "iterations": iterations}
    for pol in POLICIES:
        c0, w0 = time.process_time(), time.perf_counter()
        res = run(inst, pol)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        out[pol] = {"events": res.events, "cpu_s": cpu, "wall_s": wall,
                    "events_per_cpu_s": res.events / cpu, "epoch_s": res.makespan_s}
    return out


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["scenarios"]
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    ax = axes[0]
    x = np.arange(len(rows))
    for i, (pol, col) in enumerate((("fifo", "#c44e52"), ("gnnsched", "#4c72b0"))):
        ax.bar(x + (i - 0.5) * 0.38, [r[pol]["ratio_to_bound"] for r in rows], 0.38,
               label=pol, color=col)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([r["scenario"] for r in rows], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("epoch time / lower bound")
    lo = min(1.0, min(r["gnnsched"]["ratio_to_bound"] for r in rows))
    ax.set_ylim(lo * 0.95, max(r["fifo"]["ratio_to_bound"] for r in rows) * 1.05)
    ax.set_title("same placement, two online policies (lower is better)", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    for suite, mk in zip(data["exact"], ("o", "^")):
        pts = suite["rows"]
        label = "uniform NICs" if suite["uniform_nics"] else "mixed NICs"
        ax.scatter([r["fifo"] for r in pts], [r["gnnsched"] for r in pts], marker=mk,
                   label=f"{label} ({suite['proved_optimal']}/{suite['instances']} proved)",
                   alpha=0.75)
    lim = [0.8, max(1.45, max(r["fifo"] for s in data["exact"] for r in s["rows"]) + 0.02)]
    ax.plot(lim, lim, color="grey", lw=0.8, ls="--")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(1.1, color="#c44e52", lw=0.6, ls=":")
    ax.set_xlim(lim)
    ax.set_ylim(0.8, max(1.15, lim[1] * 0.8))
    ax.set_xlabel("fifo / CP-SAT optimum")
    ax.set_ylabel("gnnsched / CP-SAT optimum")
    ax.set_title("small instances vs the exact schedule", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small scenarios only")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "scheduler.json"))
    ap.add_argument("--png", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    data: dict[str, Any] = {
        "what": "online scheduling: gnnsched vs fifo in simulation",
        "command": "python bench/bench_scheduler.py" + (" --quick" if args.quick else ""),
        "host": {"python": platform.python_version(), "machine": platform.machine(),
                 "cpus": os.cpu_count()},
        "scenarios": [], "exact": [], "sweep": None, "speed": None,
    }
    head = (f"{'scenario':<16}{'hosts':>6}{'W':>5}{'K':>5}{'fifo s':>10}{'gnnsched s':>12}"
            f"{'bound s':>10}{'fifo/lb':>9}{'gn/lb':>8}{'fifo/gn':>9}{'ev/s fifo':>11}"
            f"{'ev/s gn':>10}  bottleneck")
    print(head)
    for sc in scenarios(args.quick):
        r = run_scenario(sc, args.seed)
        data["scenarios"].append(r)
        print(f"{r['scenario']:<16}{r['machines']:>6}{r['trainers']:>5}{r['iterations']:>5}"
              f"{r['fifo']['epoch_s']:>10.3f}{r['gnnsched']['epoch_s']:>12.3f}"
              f"{r['lower_bound_s']:>10.3f}{r['fifo']['ratio_to_bound']:>9.3f}"
              f"{r['gnnsched']['ratio_to_bound']:>8.3f}{r['fifo_over_gnnsched']:>9.3f}"
              f"{r['fifo']['events_per_cpu_s']:>11,.0f}{r['gnnsched']['events_per_cpu_s']:>10,.0f}"
              f"  {r['bottleneck']}", flush=True)
    n_exact = 8 if args.quick else 24
    for uniform in (True, False):
        s = exact_suite(n_exact, uniform, 5.0)
        data["exact"].append(s)
        print(f"\nexact, {'uniform' if uniform else 'mixed'} NICs: {s['instances']} instances "
              f"({s['proved_optimal']} proved optimal): gnnsched/opt mean "
              f"{s['gnnsched_over_opt']['mean']:.3f} max {s['gnnsched_over_opt']['max']:.3f}; "
              f"fifo/opt mean {s['fifo_over_opt']['mean']:.3f} max "
              f"{s['fifo_over_opt']['max']:.3f}; gnnsched worse than fifo on "
              f"{s['gnnsched_worse_than_fifo']}", flush=True)
    data["sweep"] = sweep(40 if args.quick else 200)
    sw = data["sweep"]
    print(f"sweep, mixed NICs, {sw['instances']} instances: gnnsched/fifo mean "
          f"{sw['gnnsched_over_fifo_mean']:.3f}, worst {sw['gnnsched_over_fifo_max']:.3f}; "
          f"worse than fifo on {sw['worse_than_fifo']} ({sw['worse_by_more_than_1pct']} by "
          "more than 1%)", flush=True)
    data["speed"] = sp = speed(50 if args.quick else 500)
    print(f"speed, {sp['trainers']} trainers x {sp['iterations']} iterations: " + "; ".join(
        f"{p} {sp[p]['events']:,} events in {sp[p]['cpu_s']:.1f} CPU-s "
        f"({sp[p]['events_per_cpu_s']:,.0f} events/s, wall {sp[p]['wall_s']:.1f} s)"
        for p in POLICIES))
    rows = data["scenarios"]
    data["headline"] = {
        "fifo_over_gnnsched_geomean": math.exp(np.mean([math.log(r["fifo_over_gnnsched"])
                                                        for r in rows])),
        "gnnsched_ratio_to_bound_mean": float(np.mean([r["gnnsched"]["ratio_to_bound"]
                                                       for r in rows])),
        "fifo_ratio_to_bound_mean": float(np.mean([r["fifo"]["ratio_to_bound"] for r in rows])),
    }
    data["wall_s"] = time.perf_counter() - t0
    h = data["headline"]
    print(f"\nheadline: fifo/gnnsched geomean {h['fifo_over_gnnsched_geomean']:.3f}; mean ratio "
          f"to the bound gnnsched {h['gnnsched_ratio_to_bound_mean']:.3f}, fifo "
          f"{h['fifo_ratio_to_bound_mean']:.3f}  ({data['wall_s']:.0f} s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, default=float) + "\n")
    png = Path(args.png) if args.png else out.with_suffix(".png")
    plot(data, png)
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
