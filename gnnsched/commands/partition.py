"""Partition a graph with METIS (DGL's built-in) or at random into DGL's distributed format.

The output directory holds DGL's ``NAME.json`` and per-part graph/feature files (so real
DistDGL loads the same partitions) plus ``gnnsched.json`` with the node-to-part map, edge cut,
balance and checksums.
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

HELP = "partition a dataset (METIS or random) into DGL's distributed partition format"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="bundled name (cora), NAME of a file in --data-dir, a path "
                   "to an .npz of the shared schema, or 'synthetic'")
    p.add_argument("--parts", type=parts_int, required=True, help="number of partitions")
    p.add_argument("--out", type=output_dir, required=True, help="output directory")
    p.add_argument("--method", choices=("metis", "random"), default="metis",
                   help="partitioning algorithm")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of .npz graphs (default: $GNNSCHED_DATA_DIR, ../shared/datasets)")
    p.add_argument("--feature-dim", type=feature_dim_int, default=None,
                   help="project features to this width (seeded random projection)")
    p.add_argument("--split", type=nonneg_int, default=0, help="which of the dataset's splits")
    p.add_argument("--seed", type=seed_int, default=0, help="seed for random partitioning")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from gnnsched.datasets.partition import run_partition

    return int(run_partition(args) or 0)
