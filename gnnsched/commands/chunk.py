"""Write a graph in DGL's chunked graph format (``metadata.json`` plus edge and node-data
chunks), the input DistDGL's distributed pre-processing reads and ``gnnsched partition``
accepts as a dataset folder. Converts a small graph; a large one is made in chunks by its
own pipeline (the folder is read chunk by chunk, checked before any work)."""

from __future__ import annotations

import argparse

from gnnsched.commands import input_dir, output_dir, parts_int

HELP = "write a graph in DGL's chunked graph format (metadata.json + chunks)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="bundled name (cora), NAME of a file in --data-dir, or a "
                   "path to an .npz of the shared schema")
    p.add_argument("--chunks", type=parts_int, required=True,
                   help="number of chunks (DGL's pipeline wants one per partition)")
    p.add_argument("--out", type=output_dir, required=True,
                   help="folder to write (refused if it holds a metadata.json)")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of .npz graphs (default: $GNNSCHED_DATA_DIR, ../shared/datasets)")


def run(args: argparse.Namespace) -> int:
    from gnnsched import api

    g = api.chunk(args.dataset, args.out, args.chunks, data_dir=args.data_dir)
    print(f"wrote {g['metadata']}: {g['num_nodes']:,} nodes, {g['num_edges']:,} directed "
          f"edges, {g['feature_dim']}-d features in {g['chunks']} chunks (`gnnsched partition "
          f"{args.out} --parts N` reads it)")
    return 0
