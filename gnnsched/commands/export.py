"""Export a run's trained model for DGL (``dgl.nn`` layers) and for plain PyTorch.

Writes into ``--out`` (default ``RUN/export``): ``dgl_state.pt``, the state dict of a
``torch.nn.ModuleList`` of ``dgl.nn.SAGEConv`` / ``GraphConv`` / ``GATConv`` layers, with
``model.json`` (each layer's class and arguments, the activation between layers);
``torch_state.pt`` + ``gnn_torch.py``, the runtime's own model as one torch-only file for GPU
users without DGL; and ``README.md``, how to load each in five lines. The checkpoint is the
run's ``checkpoints/latest.pt`` unless ``--checkpoint`` names another of the run's (or a
file); one of another job or model is refused, as is an ``--out`` that already holds files.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "export a run's trained model for dgl.nn and for plain PyTorch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run folder of gnnsched train (its --out)")
    p.add_argument("--out", default=None, help="folder to write (default: RUN/export)")
    p.add_argument("--checkpoint", default=None,
                   help="a checkpoint of the run: a name in RUN/checkpoints (epoch-003.pt) or "
                        "a path (default: latest.pt)")
    p.add_argument("--job", default=None,
                   help="job file the checkpoint must have been trained for (checked)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")


def run(args: argparse.Namespace) -> int:
    from gnnsched import api
    from gnnsched.spec import load_job

    job = load_job(args.job).to_dict() if getattr(args, "job", None) else None
    res = api.export_run(args.run, args.out, checkpoint=args.checkpoint, job=job)
    if args.json:
        print(json.dumps(res, default=str))
        return 0
    src = res["source"]
    print(f"exported {res['model']} {res['dims']} from {src['checkpoint']} "
          f"(step {src['seq']}) to {res['out']}:", file=sys.stdout)
    for name in res["files"]:
        print(f"  {name}")
    print(f"how to load it: {res['out']}/README.md")
    return 0
