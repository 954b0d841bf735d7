"""The data a run needs and what is measured on it: partitions, profiles, the reference, keys.

``gnnsched partition``, ``profile``, ``reference``, ``keys`` and ``demo`` do their work here
and only print: :func:`partition` writes a dataset's partitions, :func:`open_job_partitions`
opens a job's (partitioning it into the cache first when needed) for the profiler,
:func:`reference` trains a job in one process, and :func:`create_keys` writes a cluster's
CURVE key pair. The datasets and the runtime are imported on first use, so importing the API
stays light. Re-exported by :mod:`gnnsched.api`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsched.plan import Plan, seed_slices
from gnnsched.spec import JobSpec, SpecError

if TYPE_CHECKING:
    from gnnsched.datasets import PartitionReport, PartitionSet
    from gnnsched.runtime.reference import ReferenceResult


def partition_dir(dataset: str, parts: int) -> Path:
    """Where ``gnnsched partition`` writes by default: ``parts/NAME-PARTS``, NAME the
    dataset's name or its file's stem."""
    stem = Path(dataset).stem if dataset.endswith(".npz") else dataset
    return Path("parts") / f"{stem}-{parts}"


def partition(dataset: str, parts: int, out: str | Path | None = None, *,
              method: str = "metis", data_dir: str | None = None,
              feature_dim: int | None = None, split: int = 0, normalize: str = "none",
              seed: int = 0, synthetic: dict[str, Any] | None = None) -> PartitionReport:
    """Partition ``dataset`` (a bundled name, a NAME in ``data_dir``, an ``.npz`` path or
    ``synthetic`` with ``synthetic``'s generator parameters) into ``parts`` parts in DGL's
    distributed format under ``out`` (default :func:`partition_dir`); the same input and
    ``seed`` give the same partitions. Returns the report (edge cut, balance, timings)."""
    import time

    from gnnsched.datasets import load_dataset, partition_graph

    t0 = time.perf_counter()
    graph = load_dataset(dataset, data_dir=data_dir, split=split, feature_dim=feature_dim,
                         seed=seed, synthetic=synthetic or None, normalize=normalize)
    load_seconds = time.perf_counter() - t0
    report = partition_graph(graph, int(parts), out or partition_dir(dataset, parts),
                             method=method, seed=seed)
    report.load_seconds = load_seconds
    return report


def chunk(dataset: str, out: str | Path, chunks: int, *, data_dir: str | None = None
          ) -> dict[str, Any]:
    """``dataset`` written in DGL's chunked graph format into ``out`` (``gnnsched chunk``):
    what a reader of the folder sees (:class:`gnnsched.datasets.ChunkedGraph`, checked)."""
    from gnnsched.datasets import ChunkedGraph, load_dataset, write_chunked

    meta = write_chunked(load_dataset(dataset, data_dir=data_dir), out, chunks)
    g = ChunkedGraph.open(meta.parent)
    return {"metadata": str(meta), "num_nodes": g.num_nodes, "num_edges": g.num_edges,
            "feature_dim": g.feature_dim, "chunks": len(g.nodes_per_chunk)}


def open_job_partitions(job: JobSpec, partitions: str | Path | None = None,
                        data_dir: str | None = None, *, quiet: bool = False) -> PartitionSet:
    """The job's partitions, verified: ``partitions`` when given, else the job's
    ``partitions`` folder, else its dataset partitioned into the cache (once;
    :func:`gnnsched.datasets.cache.partitions_for`, which says so unless ``quiet``)."""
    from gnnsched.datasets import open_partitions
    from gnnsched.datasets.cache import partitions_for

    return open_partitions(partitions or partitions_for(job, data_dir, quiet=quiet))


def reference_split(job: JobSpec, partitions: str, plan: str | Path | None = None
                    ) -> list[list[int]]:
    """Each trainer's partitions for the reference: the plan's (checked against the job),
    else balanced contiguous runs by training-seed count."""
    from gnnsched.datasets import open_partitions

    if plan:
        p = Plan.load(plan)
        p.check_job(job, str(plan))
        return [list(t.parts) for t in p.trainers]
    from gnnsched.placement.splits import split_balanced

    meta = open_partitions(partitions, verify=False).meta
    seeds = [c["train"] for c in meta["parts"]]
    return split_balanced(list(range(len(seeds))), seeds, job.trainers)


def reference_slices(plan: str | Path | None) -> list[dict[int, tuple[float, float]]] | None:
    """Each trainer's slices of the partitions the plan splits (None: whole partitions, or
    no plan)."""
    if not plan:
        return None
    p = Plan.load(plan)
    if not any(t.shares for t in p.trainers):
        return None
    sl = seed_slices(p.trainers)
    return [sl[t.id] for t in p.trainers]


def reference(job: JobSpec, partitions: str | Path | None = None, *,
              plan: str | Path | None = None, data_dir: str | None = None,
              quiet: bool = False, progress: Any = None
              ) -> tuple[ReferenceResult, list[list[int]]]:
    """Train ``job`` in one process as its trainers would, synchronously
    (:func:`gnnsched.runtime.reference.reference_train`): the reference a distributed run
    must match. Trainers split the seeds as ``plan`` does (else :func:`reference_split`).
    Returns the result and each trainer's partitions."""
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.runtime.reference import reference_train

    parts = str(partitions or partitions_for(job, data_dir, quiet=quiet))
    split = reference_split(job, parts, plan)
    res = reference_train(job, parts, split, progress=progress, slices=reference_slices(plan))
    return res, split


def create_keys(folder: str | Path, force: bool = False) -> tuple[Path, Path]:
    """Write a cluster's ZeroMQ CURVE key pair into ``folder`` (the secret one mode 0600,
    never readable by others); returns (public, secret) paths. Existing keys are kept unless
    ``force``: processes holding the old ones would be locked out."""
    import zmq
    import zmq.auth

    from gnnsched.runtime.transport import KEY_NAME

    if not zmq.has("curve"):
        raise SpecError("gnnsched keys", "", "this libzmq was built without CURVE support",
                        "a pyzmq wheel with libsodium/tweetnacl (the default wheels have it)")
    out = Path(folder)
    public, secret = out / f"{KEY_NAME}.key", out / f"{KEY_NAME}.key_secret"
    if (public.exists() or secret.exists()) and not force:
        raise SpecError(str(out), "", "keys already exist", "--force to replace them "
                        "(processes holding the old keys will be locked out)")
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    old = os.umask(0o077)  # the secret is never readable by others, not even briefly
    try:
        pub, sec = zmq.auth.create_certificates(str(out), KEY_NAME)
    finally:
        os.umask(old)
    os.chmod(sec, 0o600)
    os.chmod(pub, 0o644)
    return Path(pub), Path(sec)


__all__ = ["chunk", "create_keys", "open_job_partitions", "partition", "partition_dir", "reference",
           "reference_slices", "reference_split"]
