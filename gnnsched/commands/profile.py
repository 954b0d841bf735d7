"""Measure a cost profile from real DGL sampling and training on real partitions, or derive
one from a finished run (``--from-run``).

Per partition, mini-batches of the job's batch size are sampled with the job's fan-outs; the
profile records sampling CPU seconds, sampled edges, input nodes owned by each partition (so
the bytes every (store, trainer) pair moves follow) and a real forward/backward's seconds on
this machine. The simulator and placer read the resulting cost.json.

``--from-run RUN`` writes the profile a run of ``gnnsched train`` implies instead: the base
profile (``--cost``, else the one the run's plan was made with) with the costs the run
measured in place of the profiler's -- training and sampling seconds as the run's processes
took them on its machines, the all-reduce's own overhead, how far apart trainers left each
barrier (gnnsched.calibrate.from_run). A run on the scale model (``gnnsched cluster up``)
records its dilation D, and its times are divided by it: the profile holds the real
cluster's costs, as every prediction does. Planning again with it plans for what the
cluster really did: ``gnnsched plan --cost cost.json``.
"""

from __future__ import annotations

import argparse

from gnnsched.calibrate import summarize
from gnnsched.commands import input_dir, output_file, positive_int, seed_int

HELP = "profile per-mini-batch costs on real partitions, or from a finished run (cost.json)"
__all__ = ["summarize", "table"]  # summarize is gnnsched.calibrate's, re-exported


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", default=None,
                   help="job file (YAML); required unless --from-run, where it defaults to "
                        "the job file the run's plan records")
    p.add_argument("--from-run", type=input_dir, default=None, metavar="RUN",
                   help="derive the profile from this finished run directory of `gnnsched "
                        "train` (its metrics.jsonl and plan.json) instead of profiling")
    p.add_argument("--cluster", default=None,
                   help="with --from-run: the cluster file (YAML) the run ran on (default: "
                        "the one its plan records)")
    p.add_argument("--cost", default=None,
                   help="with --from-run: the profile to calibrate (default: the one the "
                        "run's plan was made with)")
    p.add_argument("--partitions", default=None,
                   help="partition directory (default: the job's, or partition it into a cache)")
    p.add_argument("--out", type=output_file, default="cost.json", help="where to write the profile")
    p.add_argument("--samples", type=positive_int, default=16, help="mini-batches profiled per partition")
    p.add_argument("--data-dir", type=input_dir, default=None, help="folder of .npz graphs")
    p.add_argument("--seed", type=seed_int, default=0, help="seed for drawing mini-batches")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


def table(summary: dict) -> str:
    lines = [f"{'part':>4} {'seeds':>6} {'sample ms':>9} {'train ms':>8} {'edges':>8} "
             f"{'inputs':>7} {'local':>6} {'feat KB':>8}"]
    for r in summary["parts"]:
        lines.append(f"{r['part']:>4} {r['train_seeds']:>6} {r['sample_ms']:>9.2f} "
                     f"{r['train_ms']:>8.2f} {r['edges']:>8.0f} {r['input_nodes']:>7.0f} "
                     f"{r['local_frac']:>6.0%} {r['feat_kb']:>8.1f}")
    lines.append(f"feature row {summary['feature_bytes']} B, gradients "
                 f"{summary['grad_bytes'] / 1e6:.2f} MB, reference device: "
                 f"{summary['reference']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import json

    from gnnsched import api
    from gnnsched.commands.progress import bar
    from gnnsched.spec import SpecError, load_job

    if args.from_run:
        return from_run(args)
    if args.job is None:
        raise SpecError("--job", "", "is required to profile", "--job JOB.yaml, or "
                        "--from-run RUN to derive a profile from a finished run")
    for flag, value in (("--cluster", args.cluster), ("--cost", args.cost)):
        if value is not None:
            raise SpecError(flag, "", "only goes with --from-run", "drop it, or add --from-run")
    job = load_job(args.job)
    pset = api.open_job_partitions(job, args.partitions, args.data_dir, quiet=args.json)
    with bar(pset.num_parts, "profiling", "part", quiet=args.json) as shown:
        prof = api.profile_partitions(pset, job, samples=args.samples, seed=args.seed,
                                      progress=lambda _: shown.update())
    prof.save(args.out)
    s = summarize(prof)
    if args.json:
        print(json.dumps({"out": str(args.out), **s}))
    else:
        print(table(s))
        print(f"wrote {args.out}")
    return 0


def from_run(args: argparse.Namespace) -> int:
    """``--from-run``: the profile the run implies (:func:`gnnsched.calibrate.calibrate_run`),
    saved to ``--out``, with the factors it applied."""
    import json

    from gnnsched.calibrate import calibrate_run

    prof, factors = calibrate_run(args.from_run, args.cost, cluster=args.cluster, job=args.job)
    prof.save(args.out)
    s = summarize(prof)
    if args.json:
        print(json.dumps({"out": str(args.out), "run": str(args.from_run),
                          "dilation": ((prof.meta or {}).get("calibrated") or {}).get(
                              "dilation", 1.0), "factors": factors, **s}))
        return 0
    print(table(s))
    ar = factors["allreduce_measured_s"]
    d = float(((prof.meta or {}).get("calibrated") or {}).get("dilation") or 1.0)
    model = (f" (a scale-model run, D = {d:.3g}: its times / D, the real cluster's)"
             if d != 1 else "")
    print(f"calibrated on {args.from_run}{model}: CPU steps x{factors['cpu']:.2f}, sampling x"
          + "/".join(f"{f:.2f}" for f in factors["sample"]) + " per part, all-reduce "
          + (f"{1e3 * ar:.0f} ms measured against {1e3 * factors['allreduce_model_s']:.0f} ms "
             f"for its bytes (+{1e3 * factors['allreduce_overhead_s']:.0f} ms overhead)"
             if ar is not None else "not measured"))
    print(f"wrote {args.out}")
    return 0
