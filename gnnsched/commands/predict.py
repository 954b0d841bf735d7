"""Apply a trained model to every node: distributed layer-wise full-neighbour inference.

One process per machine of ``--cluster`` that stores partitions (the same cluster file,
launchers, CURVE keys and fork servers as ``gnnsched train``) computes layer l for its own
partitions' nodes in chunks, from all their in-neighbours, and keeps the output in its store;
layer l+1 reads the neighbours' rows from the other hosts' stores, as training reads
features. ``--single-process`` runs the same maths in this process (the reference).

``--out`` (default ``RUN/predictions``) gets, per partition and in original node ids,
``partP-nodes.npy``, ``partP-pred.npy`` (predicted class), ``partP-probs.npy`` (class
probabilities) and, with ``--embeddings``, ``partP-emb.npy`` (the last hidden layer), plus
``manifest.json`` (the checkpoint, shapes, nodes per second, and the test metric on the full
test set with full neighbourhoods beside the sampled estimate train reported). The folder
appears complete or not at all. A run folder without checkpoints, a checkpoint of another
job or model, partitions that do not match, or an ``--out`` that already holds predictions
are refused before any work.
"""

from __future__ import annotations

import argparse
import json
import sys

from gnnsched.commands import input_dir, positive_int

HELP = "predict every node with a run's trained model (distributed full-neighbour inference)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gnnsched.commands.train import add_launcher_options

    p.add_argument("--run", required=True, help="run folder of gnnsched train (its --out)")
    p.add_argument("--cluster", default=None,
                   help="cluster file (YAML) the run was trained on (required unless "
                        "--single-process)")
    p.add_argument("--checkpoint", default=None,
                   help="a checkpoint of the run: a name in RUN/checkpoints (epoch-003.pt) or "
                        "a path (default: latest.pt)")
    p.add_argument("--out", default=None, help="folder to write (default: RUN/predictions)")
    p.add_argument("--embeddings", action="store_true",
                   help="also write the last hidden layer of every node (partP-emb.npy)")
    p.add_argument("--partitions", type=input_dir, default=None,
                   help="partition directory (default: the job's, else the cache)")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of .npz graphs (for the partition cache)")
    p.add_argument("--job", default=None,
                   help="job file the checkpoint must have been trained for (checked)")
    p.add_argument("--launcher", default="local",
                   help="where the processes run, as for gnnsched train (local, netns, ssh, "
                        "ray, or a plug-in)")
    p.add_argument("--chunk", type=positive_int, default=4096,
                   help="destination nodes per chunk (bounds each host's gathered rows)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="intra-op threads per process")
    p.add_argument("--request-timeout", type=float, default=120.0,
                   help="seconds a host waits for rows or the coordinator for a host")
    p.add_argument("--single-process", action="store_true",
                   help="the reference: the same inference in this process, no cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    add_launcher_options(p)


def _job(args: argparse.Namespace) -> dict | None:
    from gnnsched.spec import load_job

    return load_job(args.job).to_dict() if getattr(args, "job", None) else None


def run(args: argparse.Namespace) -> int:
    from gnnsched import api
    from gnnsched.spec import SpecError

    out = sys.stderr if args.json else sys.stdout

    def progress(kind: str = "log", **kw) -> None:
        if "msg" in kw:
            print(kw["msg"], file=out, flush=True)

    partitions = args.partitions
    if args.single_process:
        if partitions is None:
            raise SpecError("--partitions", "", "is needed with --single-process",
                            "the run's partition directory")
        res = api.predict_single(args.run, partitions, args.out, checkpoint=args.checkpoint,
                                 embeddings=args.embeddings, chunk=args.chunk, job=_job(args),
                                 progress=progress)
    else:
        if not args.cluster:
            raise SpecError("--cluster", "", "is required", "the cluster file the run was "
                            "trained on, or --single-process")
        try:
            res = api.predict(args.run, args.cluster, partitions=partitions, out=args.out,
                              checkpoint=args.checkpoint, embeddings=args.embeddings,
                              launcher=args.launcher,
                              launcher_options=api.launcher_kwargs(args.launcher, args),
                              chunk=args.chunk, threads=args.threads,
                              timeout_s=args.request_timeout, job=_job(args),
                              data_dir=args.data_dir, progress=progress)
        except (api.RunError, api.LaunchError, api.TransportError, api.MessageError) as exc:
            print(f"gnnsched predict: error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(res, default=str))
        return 0
    full, sampled = res["full"], res.get("sampled") or {}
    print(f"predicted {res['nodes']} nodes ({res['mode']}) in {res['seconds']:.2f} s: "
          f"{res['nodes_per_s']:.0f} node-layers/s")
    line = f"test {full['metric']} (full neighbourhoods, {full['test_nodes']} nodes): " \
           f"{full['test_metric']:.4f}"
    if sampled.get("test_metric") is not None:
        line += f"; sampled estimate from train: {sampled['test_metric']:.4f}"
    print(line)
    print(f"outputs: {res['out']} (manifest.json)")
    return 0
