"""Train a job in one process: the single-process reference every distributed run is judged by.

It runs the job's mini-batches (same seeds, sampling, model initialisation and dropout seeds
as ``gnnsched train``) with the job's trainers emulated as synchronous data parallelism in this
process, on the job's partitions (its ``partitions:`` directory, ``--partitions``, or the
cache that ``profile`` and ``train`` use). Trainer ``w`` owns the seeds of the partitions a
plan gives it (``--plan``), else a contiguous, seed-balanced run of partitions. On any
dataset, including a user's own ``.npz``: ``gnnsched reference --job my-job.yaml``.
"""

from __future__ import annotations

import argparse
import json
import sys

from gnnsched.commands import epochs_int, input_dir

HELP = "train a job in one process (the reference a distributed run must match)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, help="job file (YAML)")
    p.add_argument("--plan", default=None,
                   help="plan.json whose trainers' partitions split the seeds (default: "
                        "contiguous, seed-balanced runs of partitions, one per trainer)")
    p.add_argument("--partitions", type=input_dir, default=None,
                   help="partition directory (default: the job's, else the cache)")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of .npz graphs (default: $GNNSCHED_DATA_DIR, ../shared/datasets)")
    p.add_argument("--epochs", type=epochs_int, default=None,
                   help="epochs (default: the job's)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from gnnsched import api
    from gnnsched.metrics import imbalance_note
    from gnnsched.spec import load_job

    job = load_job(args.job)
    if args.epochs is not None:
        job = replace(job, epochs=args.epochs)
    out = sys.stderr if args.json else sys.stdout
    res, split = api.reference(job, args.partitions, plan=args.plan, data_dir=args.data_dir,
                               quiet=args.json, progress=lambda msg: print(msg, file=out))
    note = imbalance_note(res.majority_rate, res.num_classes, res.metric)
    if note:
        print(f"gnnsched reference: warning: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps({"job": job.name, "trainer_parts": split, **res.to_dict()},
                         default=float))
    else:
        from gnnsched.commands.train import metric_line

        val = f"{res.val_accuracy[-1]:.4f}" if res.val_accuracy else "-"
        print(f"{metric_line(res)}; last validation accuracy {val}; "
              f"{len(split)} trainers emulated over partitions {split}; "
              f"{res.seconds:.1f} s")
    return 0
