"""The partitions of a job: the job's own ``partitions`` directory, or a cached one made once.

Commands that need partitions (profile, train, demo) call :func:`partitions_for`; a job that
names no directory gets its dataset partitioned into a cache keyed by everything that changes
the result, so the same job never partitions twice and two jobs never share by accident.
"""

from __future__ import annotations

import os
from pathlib import Path

from gnnsched.spec import JobSpec, SpecError, fingerprint


def cache_root() -> Path:
    return Path(os.environ.get("GNNSCHED_CACHE", Path.home() / ".cache" / "gnnsched"))


def check_made_for(job: JobSpec, path: Path, meta: dict) -> None:
    """A partition directory fixes the job's split (which nodes train, validate, test) and
    feature width when it is written: a job that asks for others is refused, not silently
    trained on the directory's."""
    redo = (f"re-partition: `gnnsched partition {job.dataset} --parts {job.num_parts} "
            f"--split {job.split}" + (f" --feature-dim {job.feature_dim}"
                                      if job.feature_dim else "")
            + (f" --normalize {job.normalize}" if job.normalize != "none" else "")
            + " --out DIR`")
    held = int(meta.get("split", 0) or 0)
    if held != job.split:
        raise SpecError(job.source, "split",
                        f"is {job.split} but {path} was partitioned with split {held}",
                        f"split: {held}, or {redo}")
    scaled = (meta.get("dataset_meta") or {}).get("normalize", "none")
    if scaled != job.normalize:
        raise SpecError(job.source, "features.normalize",
                        f"is {job.normalize} but {path} holds features normalised {scaled!r}",
                        f"normalize: {scaled}, or {redo}")
    width = meta.get("feature_dim")
    if job.feature_dim is not None and width is not None and int(width) != job.feature_dim:
        raise SpecError(job.source, "feature_dim",
                        f"is {job.feature_dim} but {path} holds {width}-d features",
                        f"feature_dim: {width}, or {redo}")


PARTITIONER = "gnnsched-writer-1"  # bump when the same job would be partitioned otherwise


def cache_path(job: JobSpec) -> Path:
    """Where :func:`partitions_for` keeps the partitions of a job without ``partitions:``:
    named by every field the partitioning depends on."""
    fields = {k: v for k, v in job.to_dict().items()
              if k in ("dataset", "num_parts", "part_method", "feature_dim", "split",
                       "synthetic", "seed")
              or k == "features"}  # present only when not "none": old keys stay
    # partitions from another partitioner (DGL's writer, unsampled METIS) are not reused
    key = fingerprint({**fields, "partitioner": PARTITIONER})
    name = Path(job.dataset).stem if job.dataset.endswith(".npz") else job.dataset
    return cache_root() / "parts" / f"{name}-{job.num_parts}{job.part_method[0]}-{key}"


def partitions_for(job: JobSpec, data_dir: str | None = None, *, quiet: bool = False) -> Path:
    """Directory of the job's partitions, partitioning its dataset first if needed."""
    from gnnsched.datasets import load_dataset, open_partitions, partition_graph

    if job.partitions:
        path = Path(job.partitions)
        if not path.is_dir():
            raise SpecError(job.source, "partitions", f"directory {path} does not exist",
                            f"run `gnnsched partition {job.dataset} --parts {job.num_parts} "
                            f"--out {path}` first, or remove the field to use a cache")
        pset = open_partitions(path)
        if pset.num_parts != job.num_parts:
            raise SpecError(job.source, "num_parts",
                            f"is {job.num_parts} but {path} holds {pset.num_parts} partitions")
        check_made_for(job, path, pset.meta)
        return path
    path = cache_path(job)
    if (path / "gnnsched.json").is_file():
        try:
            open_partitions(path)
            return path
        except SpecError:
            pass  # corrupt cache: rebuild below
    try:
        graph = load_dataset(job.dataset, data_dir=data_dir, split=job.split,
                             normalize=job.normalize,
                             feature_dim=job.feature_dim, seed=job.seed,
                             synthetic=job.synthetic or None)
    except SpecError as exc:  # an unknown name: the job file is what the user must fix
        if exc.source != job.dataset or exc.field != "dataset":
            raise
        raise SpecError(job.source, "dataset", f"{job.dataset!r}: {exc.problem}",
                        exc.valid) from None
    if not quiet:
        print(f"partitioning {graph.summary()} into {job.num_parts} ({job.part_method}) "
              f"-> {path}")
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    partition_graph(graph, job.num_parts, tmp, method=job.part_method, seed=job.seed)
    if path.exists():
        import shutil

        shutil.rmtree(path)
    tmp.rename(path)
    return path
