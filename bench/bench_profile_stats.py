"""Profiles from graph statistics against measured profiles (issue 28, item 2).

Run: ``python bench/bench_profile_stats.py [--quick] [--out docs/bench/profile_stats.json]``

Generates the ``products`` preset graph (:data:`gnnsched.datasets.synthetic.PRESETS`: mean
degree 40, power-law propensities with exponent 2.5, 100-d features, 47 classes, 14% training
nodes) at a small reference size and at two larger sizes, partitions each with METIS into
``--parts`` (the partition cache, under ``runs/``), and profiles each with the project's
profiler (:func:`gnnsched.runtime.profiler.profile_partitions`, as ``gnnsched profile`` does).
The reference is also profiled at a half and a quarter of the batch, so sampled edges and
input nodes vary apart, and :class:`gnnsched.graphstats.CostReference` is fitted on those
mini-batches. For each larger size, :func:`gnnsched.profile.profile_from_stats` builds a profile
from the statistics alone -- the reference's locality and relative partition sizes, the
preset's degree law at the target's node count -- and its mean mini-batch (sampling + training
seconds, input nodes, feature bytes, sampled edges) is compared with the measured profile's.
Target: within 15% at both sizes. The estimated partition bytes (what placement's memory check
reads from the profile) are compared with the partition files' sizes as well.

Clock: the profiler times training with the wall clock; on a shared box other processes'
load inflates that by tens of percent from one minute to the next, so by default
(``--clock cpu``) the bench measures training in CPU seconds of the process (sampling already
is), what a dedicated core would show. Sizes are profiled in interleaved rounds either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gnnsched  # noqa: E402,F401  (before dgl: the compat stub)

GOAL = 0.15


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="small graphs and job (about a minute): 12k reference, 30k and 60k")
    p.add_argument("--reference-nodes", type=int, default=None, help="reference graph size")
    p.add_argument("--sizes", default=None, help="target sizes, comma separated")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--fanouts", default=None, help="e.g. 15,10,5 (the scale job's)")
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--samples", type=int, default=None, help="mini-batches per part per round")
    p.add_argument("--rounds", type=int, default=None, help="interleaved profiling rounds")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="how training seconds are timed (see the module docstring)")
    p.add_argument("--cache", default=str(ROOT / "runs" / "profile-stats" / "cache"),
                   help="partition cache (GNNSCHED_CACHE) for the generated graphs")
    p.add_argument("--out", default=None,
                   help="JSON to write (default: docs/bench/profile_stats.json, with --quick "
                        "runs/profile-stats/quick.json)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reuse", action="store_true",
                   help="fit and compare on the profiles a previous run saved beside the "
                        "cache (no profiling)")
    a = p.parse_args(argv)
    q = a.quick
    a.reference_nodes = a.reference_nodes or (12_000 if q else 50_000)
    a.sizes = [int(s) for s in (a.sizes or ("30000,60000" if q else "200000,400000")).split(",")]
    a.batch = a.batch or (256 if q else 1024)
    a.fanouts = tuple(int(f) for f in (a.fanouts or ("10,5,5" if q else "15,10,5")).split(","))
    a.hidden = a.hidden or (64 if q else 256)
    a.samples = a.samples or (2 if q else 4)
    a.rounds = a.rounds or (1 if q else 2)
    a.out = Path(a.out or (ROOT / "runs" / "profile-stats" / "quick.json" if q
                           else ROOT / "docs" / "bench" / "profile_stats.json"))
    return a


@contextlib.contextmanager
def clock(kind: str) -> Iterator[None]:
    """``cpu``: the profiler's training timer reads the process's CPU seconds."""
    from gnnsched.runtime import profiler

    if kind != "cpu":
        yield
        return
    orig = profiler.time
    profiler.time = types.SimpleNamespace(perf_counter=time.process_time,  # type: ignore
                                          process_time=time.process_time)
    try:
        yield
    finally:
        profiler.time = orig


def make_job(a: argparse.Namespace, nodes: int, batch: int | None = None) -> Any:
    from gnnsched.datasets.synthetic import preset
    from gnnsched.spec import JobSpec

    return JobSpec(name=f"products-{nodes}", dataset="synthetic",
                   synthetic=dict(preset("products", num_nodes=nodes)), num_parts=a.parts,
                   model="sage", hidden=a.hidden, fanouts=a.fanouts,
                   batch_size=batch or a.batch, seed=a.seed, trainers=a.parts)


def measured_stats(pset: Any, params: dict[str, Any]) -> Any:
    """The statistics of a partitioned generated graph: counts and partition sizes from the
    partition files, locality = 1 - the METIS edge cut, the degree law from the generator."""
    import numpy as np

    from gnnsched.graphstats import GraphStats

    P = pset.num_parts
    parts = np.bincount(np.asarray(pset.node_part), minlength=P)
    return replace(GraphStats.from_synthetic(params, P, locality=1.0 - float(pset.meta["edge_cut"]),
                                             part_nodes=[int(x) for x in parts]),
                   num_edges=int(pset.meta["num_edges"]))


def means(prof: Any) -> dict[str, float]:
    import numpy as np

    rows = [(float(pp.sample_s[i]), float(pp.train_s[i]), float(pp.edges[i]),
             float(pp.input_nodes[i].sum()),
             float(pp.input_nodes[i][list(pp.input_parts[i]).index(pp.part)]
                   if pp.part in pp.input_parts[i] else 0.0))
            for pp in prof.parts for i in range(pp.n)]
    s, t, e, n, own = (float(x) for x in np.mean(np.array(rows), axis=0))
    return {"sample_s": s, "train_s": t, "cost_s": s + t, "edges": e, "input_nodes": n,
            "feature_bytes": n * prof.feature_bytes, "local_share": own / max(n, 1e-9),
            "minibatches": len(rows)}


def merge(profs: list[Any]) -> Any:
    """Rounds of one profile as one: every partition's samples of every round."""
    import numpy as np

    from gnnsched.profile import PartProfile

    base = profs[0]
    parts = []
    for p in range(base.num_parts):
        pps = [pr.parts[p] for pr in profs]
        parts.append(PartProfile(p, pps[0].train_seeds,
                                 np.concatenate([x.sample_s for x in pps]),
                                 np.concatenate([x.train_s for x in pps]),
                                 np.concatenate([x.edges for x in pps]),
                                 sum((x.input_parts for x in pps), []),
                                 sum((x.input_nodes for x in pps), []),
                                 sum((x.edge_parts for x in pps), []),
                                 sum((x.edge_counts for x in pps), [])))
    return replace(base, parts=parts)


def _compare(a: argparse.Namespace, n: int, pset: Any, path: Path, measured: Any,
             ref_stats: Any, reference: Any, prep_s: float) -> tuple[dict[str, Any], list]:
    """One graph size: the statistics profile (from the reference's statistics, scaled to
    ``n`` nodes) against the measured one, and the estimated partition bytes against the
    files; its row and, away from the reference, its three targets."""
    from gnnsched.api import partition_bytes
    from gnnsched.graphstats import fanout_law, summary
    from gnnsched.profile import profile_from_stats

    ref_n = a.reference_nodes
    params = make_job(a, n).synthetic
    stats = ref_stats.scaled(n)  # the statistics, not the target's own partitioning
    pred = profile_from_stats(stats, batch_size=a.batch, fanouts=a.fanouts, model="sage",
                              hidden=a.hidden, reference=reference, seed=a.seed)
    meas = means(measured)
    law = means(pred)
    real_bytes = partition_bytes(path)
    est_bytes = stats.part_bytes(4 * pset.feature_dim)
    # partitions of two METIS runs are not the same partitions: the largest against the
    # largest (the one a memory check binds on), and so on down
    bytes_err = max(abs(e / r - 1) for e, r in zip(sorted(est_bytes), sorted(real_bytes)))
    own = measured_stats(pset, params)
    row = {"nodes": n, "role": "reference" if n == ref_n else "target",
           "directed_edges": int(pset.meta["num_edges"]),
           "measured": meas, "stats_profile": law,
           "error": {k: law[k] / meas[k] - 1 for k in
                     ("cost_s", "sample_s", "train_s", "input_nodes", "feature_bytes",
                      "edges")},
           "law": summary(fanout_law(stats, a.batch, a.fanouts)),
           "stats_used": stats.to_dict(),
           "partitioning_measured": {"locality": own.locality,
                                     "part_nodes": list(own.part_nodes)},
           "part_bytes": {"estimated": [round(x) for x in est_bytes],
                          "files": [round(x) for x in real_bytes],
                          "max_error": bytes_err},
           "prepare_s": prep_s}
    if n == ref_n:
        return row, []
    cfg = (f"products preset, {n:,} nodes, {a.parts} METIS parts, sage {a.hidden} hidden, "
           f"fan-outs {list(a.fanouts)}, batch {a.batch}; stats profile from the "
           f"{ref_n:,}-node reference")
    err = row["error"]
    targets = [{
        "target": f"stats profile's mini-batch cost within 15% of the measured one at "
                  f"{n:,} nodes",
        "config": cfg, "value": round(err["cost_s"], 4), "goal": GOAL,
        "met": abs(err["cost_s"]) <= GOAL,
        "why": (f"measured {1e3 * meas['cost_s']:.1f} ms (sampling "
                f"{1e3 * meas['sample_s']:.1f} + training {1e3 * meas['train_s']:.1f}, "
                f"{a.clock} clock) per mini-batch, the law's profile "
                f"{1e3 * law['cost_s']:.1f} ms ({1e3 * law['sample_s']:.1f} + "
                f"{1e3 * law['train_s']:.1f}); input nodes {meas['input_nodes']:,.0f} "
                f"measured, {law['input_nodes']:,.0f} by the law ({err['input_nodes']:+.1%}"
                f"), sampled edges {err['edges']:+.1%}")}, {
        "target": f"stats profile's input nodes (feature bytes) within 15% at {n:,} nodes",
        "config": cfg, "value": round(err["input_nodes"], 4), "goal": GOAL,
        "met": abs(err["input_nodes"]) <= GOAL,
        "why": f"{meas['input_nodes']:,.0f} measured, {law['input_nodes']:,.0f} by the "
               f"fan-out law; local share {meas['local_share']:.2f} measured, "
               f"{law['local_share']:.2f} by the law"}, {
        "target": f"estimated partition bytes within 15% of the files at {n:,} nodes",
        "config": cfg, "value": round(bytes_err, 4), "goal": GOAL, "met": bytes_err <= GOAL,
        "why": "the profile's meta.part_bytes (placement's memory check) against "
               "gnnsched.api.partition_bytes of the METIS partitions, sorted by size (the "
               "largest against the largest); the worst pair"}]
    return row, targets


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    os.environ["GNNSCHED_CACHE"] = str(a.cache)
    from gnnsched.datasets import open_partitions
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.graphstats import CostReference
    from gnnsched.runtime.profiler import profile_partitions

    t_start = time.perf_counter()
    sizes = [a.reference_nodes, *a.sizes]
    psets, paths, prep_s = {}, {}, {}
    for n in sizes:
        t0 = time.perf_counter()
        paths[n] = partitions_for(make_job(a, n), quiet=False)
        psets[n] = open_partitions(paths[n], verify=False)
        prep_s[n] = round(time.perf_counter() - t0, 1)
        print(f"graph {n:,} nodes: {paths[n]} ({prep_s[n]} s)", flush=True)

    ref_batches = [a.batch, max(1, a.batch // 2), max(1, a.batch // 4)]
    runs: list[tuple[int, int]] = [(a.reference_nodes, b) for b in ref_batches] + \
        [(n, a.batch) for n in a.sizes]
    got: dict[tuple[int, int], list[Any]] = {r: [] for r in runs}
    saved = Path(a.cache).parent / ("measured-quick" if a.quick else "measured")
    if a.reuse:
        from gnnsched.profile import CostProfile

        for n, b in runs:
            got[(n, b)] = [CostProfile.load(f) for f in
                           sorted(saved.glob(f"{n}-{b}-*.json"))]
    with clock(a.clock):
        for rnd in range(0 if a.reuse else a.rounds):
            for n, b in runs:
                t0 = time.perf_counter()
                got[(n, b)].append(profile_partitions(
                    psets[n], make_job(a, n, b), samples=a.samples, seed=a.seed + 1000 * rnd))
                saved.mkdir(parents=True, exist_ok=True)
                got[(n, b)][-1].save(saved / f"{n}-{b}-{rnd}.json")
                print(f"round {rnd + 1}/{a.rounds}: profiled {n:,} nodes, batch {b} "
                      f"({time.perf_counter() - t0:.1f} s)", flush=True)
    measured = {r: merge(v) for r, v in got.items()}

    ref_n = a.reference_nodes
    job = make_job(a, ref_n)
    ref_job = {"model": job.model, "feature_dim": psets[ref_n].feature_dim,
               "hidden": job.hidden, "num_classes": psets[ref_n].num_classes,
               "layers": len(a.fanouts), "fanouts": list(a.fanouts), "batch_size": a.batch}
    ref_stats = measured_stats(psets[ref_n], job.synthetic)
    reference = CostReference.fit(
        [measured[(ref_n, b)] for b in ref_batches], ref_stats, model="sage",
        dims=[ref_job["feature_dim"]] + [a.hidden] * (len(a.fanouts) - 1)
        + [ref_job["num_classes"]], job=ref_job,
        source=f"products preset at {ref_n:,} nodes, {a.parts} METIS parts, batches "
               f"{'/'.join(map(str, ref_batches))} (bench/bench_profile_stats.py)")

    rows, targets = [], []
    for n in sizes:
        row, tg = _compare(a, n, psets[n], paths[n], measured[(n, a.batch)], ref_stats,
                           reference, prep_s[n])
        rows.append(row)
        targets += tg

    out = {
        "bench": "profile_stats", "issue": 28, "item": 2,
        "command": " ".join(["python", "bench/bench_profile_stats.py", *(argv or sys.argv[1:])]),
        "settings": {"reference_nodes": ref_n, "sizes": a.sizes, "parts": a.parts,
                     "batch": a.batch, "reference_batches": ref_batches,
                     "fanouts": list(a.fanouts), "hidden": a.hidden, "model": "sage",
                     "samples_per_part_per_round": a.samples, "rounds": a.rounds,
                     "clock": a.clock, "seed": a.seed, "preset": "products"},
        "box": {"machine": platform.machine(), "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_avg": [round(x, 2) for x in os.getloadavg()]},
        "reference": reference.to_dict(), "rows": rows, "targets": targets,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(table(out))
    print(f"wrote {a.out}")
    return 0


def table(out: dict[str, Any]) -> str:
    lines = [f"{'nodes':>8} {'role':>9} {'cost ms':>15} {'err':>7} {'sample ms':>13} "
             f"{'train ms':>15} {'inputs':>17} {'err':>7} {'edges err':>9} {'bytes err':>9}"]
    for r in out["rows"]:
        m, s, e = r["measured"], r["stats_profile"], r["error"]
        lines.append(
            f"{r['nodes']:>8,} {r['role']:>9} {1e3 * m['cost_s']:>7.1f}/{1e3 * s['cost_s']:<7.1f}"
            f" {e['cost_s']:>+7.1%} {1e3 * m['sample_s']:>6.1f}/{1e3 * s['sample_s']:<6.1f}"
            f" {1e3 * m['train_s']:>7.1f}/{1e3 * s['train_s']:<7.1f}"
            f" {m['input_nodes']:>8,.0f}/{s['input_nodes']:<8,.0f} {e['input_nodes']:>+7.1%}"
            f" {e['edges']:>+9.1%} {r['part_bytes']['max_error']:>9.1%}")
    lines.append("(measured/stats profile; err = stats profile / measured - 1)")
    for t in out["targets"]:
        lines.append(f"{'MET ' if t['met'] else 'MISS'} {t['target']}: {t['value']:+.3f} "
                     f"(goal |x| <= {t['goal']})")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
