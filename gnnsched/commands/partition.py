"""Partition a graph with METIS (seeded) or at random into DGL's distributed format.

The output directory holds DGL's ``NAME.json`` and per-part graph/feature files (so real
DistDGL loads the same partitions) plus ``gnnsched.json`` with the node-to-part map, edge cut,
balance, seed, feature scaling and checksums. The same input and ``--seed`` give the same
partitions.
"""

from __future__ import annotations

import argparse

from gnnsched.commands import (
    feature_dim_int,
    input_dir,
    nonneg_int,
    output_dir,
    parts_int,
    seed_int,
)
from gnnsched.spec import NORMALIZE

HELP = "partition a dataset (METIS or random) into DGL's distributed partition format"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="bundled name (cora), NAME of a file in --data-dir, a path "
                   "to an .npz of the shared schema, a folder in DGL's chunked graph format "
                   "(metadata.json + chunks; `gnnsched chunk` writes one), or 'synthetic'")
    p.add_argument("--parts", type=parts_int, required=True, help="number of partitions")
    p.add_argument("--out", type=output_dir, default=None,
                   help="output directory (default: parts/NAME-PARTS, NAME the dataset's "
                        "name or file stem)")
    p.add_argument("--method", choices=("metis", "random"), default="metis",
                   help="partitioning algorithm: metis (few cut edges, parts balanced in "
                   "nodes, training nodes and edges) or random (the worst-case baseline)")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of .npz graphs (default: $GNNSCHED_DATA_DIR, ../shared/datasets)")
    p.add_argument("--feature-dim", type=feature_dim_int, default=None,
                   help="project features to this width (seeded random projection)")
    p.add_argument("--split", type=nonneg_int, default=0, help="which of the dataset's splits")
    p.add_argument("--normalize", choices=NORMALIZE, default="none",
                   help="scale node features before they are written, as a job's "
                   "features.normalize: row divides each row by the sum of its absolute values "
                   "(raw counts become frequencies), standard gives each column zero mean and "
                   "unit variance; recorded in the partitions, so a job that asks for another "
                   "scaling is refused")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed for METIS and for random partitioning, and for --feature-dim's "
                   "projection: the same input and seed give the same partitions")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from gnnsched import api

    report = api.partition(args.dataset, args.parts, args.out, method=args.method,
                           data_dir=args.data_dir, feature_dim=args.feature_dim,
                           split=args.split, normalize=args.normalize, seed=args.seed)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.table())
    return 0
