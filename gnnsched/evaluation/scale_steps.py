"""The scale tier's steps before the cluster runs: partition (cached), profile, the box's
compute limit and the single-process reference, each in a child process whose peak memory
and CPU are measured (``python -m gnnsched.evaluation.scale_steps STEP ARGS.json``), and
the timings of every step of a run."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import say
from gnnsched.evaluation.measure import GB, run_child
from gnnsched.evaluation.scale_config import ScaleSettings, graph_bytes, graph_params, make_job
from gnnsched.plan import split_owned, split_slices
from gnnsched.spec import JobSpec

# ------------------------------------------------------------------------------ child steps


def _job_of(a: dict[str, Any]) -> JobSpec:
    from gnnsched.spec import job_from_dict

    return job_from_dict(a["job"], "bench --scale")


def _c_partition(a: dict[str, Any]) -> dict[str, Any]:
    """The job's partitions through the cache: where, and the graph's size."""
    from gnnsched.datasets import open_partitions
    from gnnsched.datasets.cache import partitions_for

    path = partitions_for(_job_of(a), quiet=False)
    pset = open_partitions(path, verify=False)
    return {"path": str(path), "num_nodes": int(pset.num_nodes),
            "num_edges": int(pset.num_edges)}


def _c_limit(a: dict[str, Any]) -> dict[str, Any]:
    """The box's compute limit (:func:`gnnsched.api.pipeline_limit`) of the job's first
    mini-batches, on 1 thread and on ``threads``."""
    from gnnsched.api import pipeline_limit

    return pipeline_limit(_job_of(a), a["partitions"], a["split"], int(a["threads"]),
                          tuple(int(x) for x in a["batches"]))


def _c_reference(a: dict[str, Any]) -> dict[str, Any]:
    """Single-process training of gnnsched's seed split (the same mini-batches)."""
    from gnnsched.api import reference_train

    job = _job_of(a)
    marks: list[tuple[float, float]] = []

    def progress(msg: str) -> None:
        marks.append((time.perf_counter(), time.process_time()))
        print(f"    reference: {msg}", file=sys.stderr, flush=True)

    split_parts, slices = split_slices(a["split"])
    r = reference_train(job, a["partitions"], split_parts, slices=slices,
                        eval_batch_size=job.eval_batch_size,
                        progress=progress, threads=int(a.get("threads", 1)))
    cpu = [b[1] - a_[1] for a_, b in zip(marks, marks[1:])]
    return {"test_accuracy": r.test_accuracy, "metric": r.metric,
            "test_metric": r.test_metric, "epoch_times_s": list(r.epoch_time_s),
            "train_loss": list(r.train_loss), "seconds": r.seconds,
            "cpu_s_per_epoch_after_first": cpu}


REFERENCE_THREADS = 2  # the reference's second thread count (the box's cores)
STEPS = {"partition": _c_partition, "limit": _c_limit, "reference": _c_reference}


def child_main(step: str, argfile: str) -> int:
    """A child step: its arguments from ``argfile``, its JSON result to their ``result``."""
    a = json.loads(Path(argfile).read_text())
    out = STEPS[step](a)
    Path(a["result"]).write_text(json.dumps(out, default=float))
    return 0


def child_step(step: str, args: dict[str, Any], env: dict[str, str] | None = None
               ) -> dict[str, Any]:
    """Run one of this module's child steps (``python -m gnnsched.evaluation.scale_steps
    STEP``) and return its JSON result with the process's measurements under ``"process"``."""
    with tempfile.TemporaryDirectory(prefix="gnnsched-scale-") as tmp:
        argf, outf = Path(tmp) / "args.json", Path(tmp) / "out.json"
        argf.write_text(json.dumps({**args, "result": str(outf)}))
        m = run_child([sys.executable, "-m", "gnnsched.evaluation.scale_steps", step,
                       str(argf)], env)
        if m["rc"] != 0 or not outf.is_file():
            raise RuntimeError(f"the {step} step failed (exit {m['rc']}; its error is above)")
        out = json.loads(outf.read_text())
    out["process"] = m
    return out


def steady_seeds_per_s(seeds_per_epoch: float, epoch_times: list[float]) -> float | None:
    """Trained seeds per second in steady state (see :mod:`.scale`'s Method): the median
    epoch after the first, or the only one."""
    steady = epoch_times[1:] or epoch_times
    t = statistics.median(steady) if steady else 0.0
    return seeds_per_epoch / t if t > 0 else None


def split_seeds(parts: Path, split: list[list[int]]) -> int:
    """The training seeds a seed split trains per epoch (its shares of each part's seeds)."""
    from gnnsched.datasets import open_partitions

    meta = open_partitions(parts, verify=False).meta
    return round(sum(sh * int(meta["parts"][p].get("train", 0))
                     for g in split_owned(split) for p, sh in g))


# ------------------------------------------------------------------------------ steps


class Steps:
    """The scale run's steps, their timings and what they produced."""

    def __init__(self, st: ScaleSettings) -> None:
        self.st = st
        self.job = make_job(st)
        self.timings: dict[str, float] = {}
        self.doc: dict[str, Any] = {}

    def timed(self, name: str, what: str) -> Timer:
        return Timer(self, name, what)

    def partition(self) -> tuple[Path, dict[str, Any]]:
        """The job's partitions (cached), made in a child process whose peak RSS is the
        partitioning's peak memory; a cached directory reuses the measurement recorded when
        it was made (beside it), else partitions again into a scratch cache to measure."""
        from gnnsched.datasets.cache import cache_path

        job, params = self.job, graph_params(self.st)
        cached = cache_path(job)
        record = cached.with_name(cached.name + ".scale-measure.json")
        args = {"job": job.to_dict()}
        if (cached / "gnnsched.json").is_file() and record.is_file():
            m = json.loads(record.read_text())
            m["cached"] = True
            say(f"[scale] partition: cached in {cached} (made in {m['seconds']:.0f} s, peak "
                f"{m['peak_rss_bytes'] / GB:.2f} GB when measured)")
            return cached, m
        if (cached / "gnnsched.json").is_file():
            say(f"[scale] partition: {cached} is cached but its peak memory was not recorded: "
                "partitioning again in a scratch cache to measure it")
            with tempfile.TemporaryDirectory(prefix="gnnsched-scale-cache-") as tmp:
                out = child_step("partition", args, env={**os.environ, "GNNSCHED_CACHE": tmp})
        else:
            out = child_step("partition", args)
        p = out["process"]
        gb = graph_bytes(params, out["num_edges"])
        m = {"seconds": p["seconds"], "peak_rss_bytes": p["peak_rss_bytes"], "cpu_s": p["cpu_s"],
             "graph_bytes": gb, "num_nodes": out["num_nodes"], "num_edges": out["num_edges"],
             "made": time.strftime("%Y-%m-%d %H:%M"), "cached": False}
        record.write_text(json.dumps(m, indent=1) + "\n")
        return cached, m

    def profile(self, parts: Path, job_file: Path) -> tuple[Path, dict[str, Any]]:
        """``gnnsched profile`` in a child process: the cost profile and its peak memory."""
        from gnnsched.spec import fingerprint

        st = self.st
        key = fingerprint([self.job.profile_key(), st.samples, st.seed])
        path = st.work / "profiles" / f"scale-{st.nodes}-{st.samples}-{key}.json"
        if path.is_file():
            say(f"[scale] profile: loaded {path}")
            return path, {"cached": True, "file": str(path)}
        path.parent.mkdir(parents=True, exist_ok=True)
        m = run_child([sys.executable, "-m", "gnnsched", "profile", "--job", str(job_file),
                       "--partitions", str(parts), "--samples", str(st.samples),
                       "--seed", str(st.seed), "--out", str(path)])
        if m["rc"] != 0:
            raise RuntimeError(f"gnnsched profile failed (exit {m['rc']}; its error is above)")
        return path, {**m, "cached": False, "file": str(path)}

    def limit(self, parts: Path, split: list[list[int]]) -> dict[str, Any]:
        """The box's compute limit, in a child process (:func:`_c_limit`)."""
        with self.timed("limit", "the best single-process pipeline: the job's first "
                        "mini-batches sampled, gathered and trained in one process by the "
                        "fastest implementations, on 1 and on 2 threads (a child process)"):
            return child_step("limit", {"job": self.job.to_dict(), "partitions": str(parts),
                                        "split": split, "threads": 2,
                                        "batches": list(self.st.limit_batches)})

    def references(self, parts: Path, split: list[list[int]],
                   describe: Any) -> dict[str, Any]:
        """The single-process reference of ``split``, once per repeat (job seed SEED + r)
        on 1 thread (``runs``) and on :data:`REFERENCE_THREADS` (``runs_threads``: the same
        mini-batches, sampling on one thread, the gather and training on more), each in a
        child process; none with ``--no-reference``."""
        st = self.st
        refs: dict[str, Any] = {"split": split, "runs": [], "runs_threads": [],
                                "threads": REFERENCE_THREADS, "skipped": not st.reference}
        for rep in range(st.repeats if st.reference else 0):
            rjob = make_job(st, st.seed + rep)
            for n, key in ((1, "runs"), (REFERENCE_THREADS, "runs_threads")):
                name = f"reference #{rep + 1}" + ("" if n == 1 else f" ({n} threads)")
                with self.timed(name, f"single-process reference of split {split}, job seed "
                                f"{rjob.seed} (a child process, {n} thread(s))"):
                    r = self._reference(rjob, parts, split, n)
                refs[key].append(r)
                say(f"[scale] {name}: {describe(r)}")
        return refs

    @staticmethod
    def _reference(rjob: JobSpec, parts: Path, split: list[list[int]], threads: int = 1
                   ) -> dict[str, Any]:
        """One reference run, measured: seeds/s, CPU per seed, peak memory, box load."""
        load0 = os.getloadavg()[0]
        try:
            r = child_step("reference", {"job": rjob.to_dict(), "partitions": str(parts),
                                         "split": split, "threads": threads})
            r["threads"] = threads
            r["load_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            r["job_seed"] = rjob.seed
            r["seeds_per_epoch"] = split_seeds(parts, split)
            r["seeds_per_s"] = steady_seeds_per_s(r["seeds_per_epoch"], r["epoch_times_s"])
            cpu = r.get("cpu_s_per_epoch_after_first") or []
            r["cpu_s_per_seed"] = ((statistics.median(cpu) if cpu else
                                    r["epoch_times_s"][0]) / r["seeds_per_epoch"])
            r["peak_rss_bytes"] = r["process"]["peak_rss_bytes"]
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            r = {"error": f"{type(exc).__name__}: {exc}", "job_seed": rjob.seed}
        return r


class Timer:
    """A step's wall time, added to ``Steps.timings`` under its name (said as it goes)."""

    def __init__(self, steps: Steps, name: str, what: str) -> None:
        self.steps, self.name, self.what = steps, name, what

    def __enter__(self) -> Timer:
        say(f"[scale] {self.name}: {self.what} ...")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        dt = time.perf_counter() - self.t0
        self.steps.timings[self.name] = self.steps.timings.get(self.name, 0.0) + dt
        say(f"[scale] {self.name}: {'done' if kind is None else 'FAILED'} in {dt:.1f} s")


__all__ = ["STEPS", "Steps", "Timer", "child_main", "child_step", "split_seeds",
           "steady_seeds_per_s"]

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1], sys.argv[2]))
