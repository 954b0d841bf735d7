"""Create a cluster's ZeroMQ CURVE key pair, so only its own processes can talk to each other.

Writes ``cluster.key`` (public) and ``cluster.key_secret`` (secret, mode 0600) into ``--out``
(default: the cluster file's ``keys_dir``, else ``keys/`` next to the cluster file). With
``curve: true`` and ``keys_dir`` in the cluster file, every socket of a run is encrypted and
authenticated with this pair: a process without the secret key cannot complete a handshake
with any store, trainer, relay or the coordinator. Every host needs the folder at the same
path (shared storage, or copy it). Existing keys are kept unless ``--force``: replacing them
while a run uses them would lock that run's processes out.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gnnsched.api import create_keys
from gnnsched.commands import output_dir

__all__ = ["create_keys"]  # the library's (gnnsched.api.create_keys), re-exported

HELP = "create the ZeroMQ CURVE keys that a cluster with `curve: true` requires"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, help="cluster file (YAML)")
    p.add_argument("--out", type=output_dir, default=None,
                   help="folder for the keys (default: the cluster's keys_dir, else "
                        "keys/ next to the cluster file)")
    p.add_argument("--force", action="store_true", help="replace existing keys")


def run(args: argparse.Namespace) -> int:
    from gnnsched.spec import load_cluster

    cluster = load_cluster(args.cluster)
    folder = args.out or cluster.keys_dir or str(Path(args.cluster).parent / "keys")
    pub, sec = create_keys(folder, args.force)
    print(f"wrote {pub} (public) and {sec} (secret, mode 0600)")
    if not cluster.curve or not cluster.keys_dir:
        print(f"to use them, set in {args.cluster}:\n  curve: true\n  keys_dir: "
              f"{os.path.relpath(folder, Path(args.cluster).parent)}")
    elif Path(cluster.keys_dir).resolve() != Path(folder).resolve():
        print(f"note: {args.cluster} has keys_dir {cluster.keys_dir}, not {folder}")
    return 0
