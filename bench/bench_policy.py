"""A/B online policies in real runs: one shape, one dataset, one plan, interleaved repeats.

Run: ``python bench/bench_policy.py [--shape mixedgen] [--dataset cora] [--policies fifo,gnnsched]
[--placer gnnsched] [--repeats 5] [--trace] [--out docs/bench/policy.json]`` (as root for the
emulated cluster; local processes otherwise). ``--trace`` also sets each policy's median run,
traced, beside the simulator calibrated on it (:mod:`gnnsched.trace`).

Why: the evaluation (``gnnsched bench``) runs each system three times among a dozen other
configurations, and this shared 2-core box drifts by more than the few percent a policy
changes. Here every repeat runs each policy back to back on the same plan, with the same job
seed (repeat r: seed r, as in the evaluation), so the *paired* ratio of a repeat compares two
runs minutes apart on the same mini-batches. The median of those ratios is the policy's
effect; their range says how far one repeat can be trusted. A researcher A/B-tests a policy
of their own the same way (``--policies fifo,mine`` after registering ``mine``; see
:mod:`gnnsched.policy`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsched.evaluation import config as be
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.measure import runtime_options

ROOT = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnsched.api import train
    from gnnsched.commands.bench import add_arguments
    from gnnsched.placement import get_placer
    from gnnsched.policy import get_policy

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        get_policy(p)  # unknown names fail here, naming the known ones
    if len(policies) < 2:
        raise SystemExit("bench_policy: --policies needs at least two names to compare")
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    work = Path(args.work)
    st = be.resolve(ap.parse_args(["--work", str(work), "--out", str(work / "out"),
                                   "--shapes", args.shape, "--datasets", args.dataset,
                                   "--launcher", args.launcher, "--epochs", str(args.epochs)]))
    ds = st.datasets[0]  # a .npz of the user's is keyed by its file stem
    ctx = Context(st)
    ctx.prepare(ds)
    cluster = be.load_shape(args.shape)
    prof = ctx.profiles[ds]
    job0 = st.job(ds)
    plan = be.canonical(get_placer(args.placer).place(
        cluster, job0, prof, seed=st.seed, budget=st.budget if args.placer == "gnnsched" else None))
    be.say(f"plan ({args.placer}): {be.plan_rows(plan)}")
    net = None
    if st.launcher == "netns":
        from gnnsched.runtime.netns import EmulatedCluster

        net = EmulatedCluster(cluster, payload_rates=True).up()
    times: dict[str, list[float]] = {p: [] for p in policies}
    runs: dict[str, list[Any]] = {p: [] for p in policies}
    opts = replace(runtime_options(), trace=args.trace)
    t0 = time.time()
    try:
        for rep in range(args.repeats):
            job = st.job(ds, st.seed + rep)
            for p in policies:
                res = train(cluster, job, plan, policy=p, launcher=st.launcher,
                            out_dir=work / f"{args.shape}-{ds}-{p}-{rep}",
                            partitions=ctx.parts[ds], profile=prof, options=opts,
                            launcher_options={"emulated": net} if net else None)
                times[p].append(float(res.epoch_time_s))
                runs[p].append(res)
                be.say(f"#{rep + 1} {p}: epoch {res.epoch_time_s:.3f} s")
    finally:
        if net is not None:
            net.down()
    base = policies[0]
    rows = []
    for p in policies:
        ratios = [a / b for a, b in zip(times[p], times[base])]
        rows.append({"policy": p, "median_s": statistics.median(times[p]), "epoch_s": times[p],
                     "paired_ratio_median": statistics.median(ratios),
                     "paired_ratio_min": min(ratios), "paired_ratio_max": max(ratios)})
        if args.trace:
            rows[-1]["timeline"] = timelines(runs[p], p, cluster, job0, plan, prof, st.seed)
    return {"shape": args.shape, "dataset": ds, "placer": args.placer,
            "plan": be.plan_rows(plan), "repeats": args.repeats, "epochs": st.epochs,
            "launcher": st.launcher, "launcher_reason": st.launcher_reason, "baseline": base,
            "rows": rows, "minutes": (time.time() - t0) / 60,
            "command": " ".join(["python", "bench/bench_policy.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def timelines(runs: list[Any], policy: str, cluster: Any, job: Any, plan: Any, prof: Any,
              seed: int) -> dict[str, Any]:
    """The median run's traced timeline beside the simulator's, calibrated on that run the
    way the evaluation calibrates (:func:`gnnsched.calibrate.insitu_profile`, here from the
    run directory as ``gnnsched profile --from-run`` does): does the simulator predict the
    epoch *and* the transfers, or the epoch for other reasons?"""
    from gnnsched.calibrate import from_run
    from gnnsched.evaluation.predict import steady_epoch
    from gnnsched.trace import load, summarize, summarize_sim

    times = [r.epoch_time_s for r in runs]
    res = runs[times.index(sorted(times)[len(times) // 2])]
    cal = from_run(res.run_dir, prof, cluster=cluster, job=job)
    steady, _, sim = steady_epoch(cluster, job, plan, cal, policy, seed, record=True)
    return {"run_dir": str(res.run_dir), "measured_s": float(res.epoch_time_s),
            "simulated_s": steady, "measured": summarize(load(res.run_dir)),
            "simulated": summarize_sim(sim)}


def _timeline_table(doc: dict[str, Any]) -> None:
    def pct(s: dict[str, Any], kind: str) -> str:
        p = s["transfers"].get(kind, {}).get("seconds")
        return "-" if not p else f"{1e3 * p['p50']:.0f} / {1e3 * p['p90']:.0f}"

    def busiest(s: dict[str, Any]) -> str:
        v = max(s["senders"].values(), key=lambda x: x["busy_fraction"], default=None)
        return "-" if v is None else f"{v['mean_in_flight']:.2f}"

    print(f"\nthe median run of each policy beside the simulator calibrated on it\n"
          f"{'policy':<14} {'epoch s (run / sim)':>20} {'feat ms p50/p90 run':>20} "
          f"{'sim':>10} {'in flight run / sim':>20}")
    for r in doc["rows"]:
        t = r["timeline"]
        m, s = t["measured"], t["simulated"]
        print(f"{r['policy']:<14} {t['measured_s']:>10.3f} / {t['simulated_s']:<7.3f} "
              f"{pct(m, 'feat'):>20} {pct(s, 'feat'):>10} "
              f"{busiest(m):>11} / {busiest(s):<7}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--shape", default="mixedgen", choices=list(be.SHAPES),
                    help="cluster shape of the evaluation (gnnsched/evaluation/shapes; "
                         "default: mixedgen)")
    ap.add_argument("--dataset", default="cora",
                    help=f"dataset of the evaluation: {', '.join(be.DATASETS)} or a path to a "
                         ".npz graph (default: cora)")
    ap.add_argument("--policies", default="fifo,gnnsched",
                    help="comma-separated registered policies; the first is the baseline of "
                         "the paired ratios (default: fifo,gnnsched)")
    ap.add_argument("--placer", default="gnnsched",
                    help="placer whose plan every policy runs (default: gnnsched)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="interleaved repeats; repeat r trains with job seed r (default: 5)")
    ap.add_argument("--epochs", type=int, default=8, help="epochs per run (default: 8)")
    ap.add_argument("--trace", action="store_true",
                    help="trace every run (gnnsched train --trace) and set each policy's "
                         "median run beside the simulator calibrated on it: transfer times "
                         "and how many transfers the busiest sender had in flight")
    ap.add_argument("--launcher", default="auto", choices=["auto", "netns", "local"],
                    help="netns (emulated cluster, root) or local processes (default: auto)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-policy"),
                    help="run directories (default: runs/bench-policy)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "policy.json"),
                    help="JSON written here (default: docs/bench/policy.json)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("bench_policy: --repeats must be >= 1")
    doc = run(args)
    print(f"\n{doc['shape']}/{doc['dataset']}, {doc['placer']} plan, {doc['repeats']} "
          f"interleaved repeats, {doc['launcher']} ({doc['minutes']:.1f} min)")
    print(f"{'policy':<14} {'median s':>9} {'paired ratio to ' + doc['baseline']:>26}  runs")
    for r in doc["rows"]:
        print(f"{r['policy']:<14} {r['median_s']:>9.3f} {r['paired_ratio_median']:>12.3f} "
              f"({r['paired_ratio_min']:.3f}..{r['paired_ratio_max']:.3f})  "
              + " ".join(f"{t:.3f}" for t in r["epoch_s"]))
    if args.trace:
        _timeline_table(doc)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
