"""Peak memory of the scale bench's partition step, stage by stage (issue 26, item 4).

Run: ``python bench/bench_partition.py [--nodes 1000000] [--parts 4] [--writer gnnsched]
[--out docs/bench/partition.json]``

The step is what ``gnnsched bench scale`` measures (``Steps.partition``): one child process
generates the ``products`` preset graph at ``--nodes`` nodes (the scale job's parameters,
:func:`gnnsched.evaluation.scale_config.make_job`) and partitions it through the partition cache
(:func:`gnnsched.datasets.cache.partitions_for`, into a scratch cache), and its peak RSS is the
``ru_maxrss`` that ``wait4`` reports, as the scale bench reads it. The goal is that peak <= 4x
the graph's in-memory size (``graph_bytes``: 16 bytes per directed edge plus the node arrays).

Stages: the child marks them (generation, then the ``gnnsched.partition`` stage records:
METIS, edge order, each part written, statistics, checksums) and a thread samples VmRSS
every 5 ms; a stage's peak is the kernel's VmHWM where that rose during the stage (exact),
else the highest sample. Nothing resets VmHWM, so the total stays the true peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOAL_X = 4.0


def _status(field: str) -> int:
    """A size field of /proc/self/status in bytes (0 where absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class StageWatch(logging.Handler):
    """Per-stage seconds and peak RSS from ``gnnsched.partition`` stage records."""

    def __init__(self, interval: float = 0.005) -> None:
        super().__init__(level=logging.DEBUG)
        self.stages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self, first: str) -> None:
        self._open(first)
        self._thread.start()

    def _open(self, name: str) -> None:
        now, hwm = time.perf_counter(), _status("VmHWM")
        with self._lock:
            if self.stages:
                self._close(self.stages[-1], now, hwm)
            self.stages.append({"stage": name, "t0": now, "hwm0": hwm,
                                "sampled": _status("VmRSS")})

    @staticmethod
    def _close(st: dict[str, Any], now: float, hwm: int) -> None:
        st["seconds"] = now - st.pop("t0")
        hwm0 = st.pop("hwm0")
        sampled = st.pop("sampled")
        st["peak_rss_bytes"] = hwm if hwm > hwm0 else sampled
        st["exact"] = hwm > hwm0

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            rss = _status("VmRSS")
            with self._lock:
                if self.stages and "seconds" not in self.stages[-1]:
                    self.stages[-1]["sampled"] = max(self.stages[-1]["sampled"], rss)

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "stage", None)
        if name:
            self._open(str(name))

    def finish(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._close(self.stages[-1], time.perf_counter(), _status("VmHWM"))
        return self.stages


def _settings(nodes: int, seed: int) -> Any:
    from gnnsched.evaluation.scale_config import ScaleSettings

    return ScaleSettings(quick=False, nodes=nodes, degree=40.0, epochs=1, out=Path("."),
                         work=Path("."), launcher="local", launcher_reason="", shapes=[],
                         systems=[], seed=seed, budget=0.0, samples=0, repeats=1)


def child(args: argparse.Namespace) -> None:
    """The measured step: generate + partition through the cache, as the scale step does."""
    watch = StageWatch()
    watch.start("imports")
    log = logging.getLogger("gnnsched.partition")
    log.setLevel(logging.DEBUG)
    log.addHandler(watch)
    log.propagate = False
    from gnnsched.datasets import open_partitions, partition_graph
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.evaluation.scale_config import make_job

    job = make_job(_settings(args.nodes, args.seed))
    if args.parts != job.num_parts:
        job = dataclasses.replace(job, num_parts=args.parts)
    if args.writer != "gnnsched":  # partitions_for's own call, with DGL's writer
        from gnnsched import datasets

        datasets.partition_graph = functools.partial(partition_graph, writer=args.writer)
    watch._open("generate")
    path = partitions_for(job, quiet=True)
    stages = watch.finish()
    pset = open_partitions(path, verify=False)
    Path(args.result).write_text(json.dumps({
        "stages": stages, "num_nodes": pset.num_nodes, "num_edges": pset.num_edges,
        "params": dict(job.synthetic), "edge_cut": pset.meta["edge_cut"],
        "balance": pset.meta["balance"], "metis": pset.meta.get("metis")}))


def _mem_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnsched.evaluation.scale_config import graph_bytes

    with tempfile.TemporaryDirectory(prefix="gnnsched-bench-partition-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--nodes",
                str(args.nodes), "--parts", str(args.parts), "--seed", str(args.seed),
                "--writer", args.writer, "--result", str(result)]
        env = {**os.environ, "GNNSCHED_CACHE": str(Path(tmp) / "cache"),
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        if rc != 0 or not result.is_file():
            raise SystemExit(f"the partition step failed (exit {rc})")
        out = json.loads(result.read_text())
    gb = graph_bytes(out["params"], out["num_edges"])
    peak = int(ru.ru_maxrss) * 1024
    for st in out["stages"]:
        st["ratio"] = st["peak_rss_bytes"] / gb
    return {
        "command": "python bench/bench_partition.py " + " ".join(args.argv),
        "made": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpus": os.cpu_count(), "mem_total_bytes": _mem_total(),
                    "python": platform.python_version()},
        "writer": args.writer, "num_parts": args.parts, "preset": "products",
        "num_nodes": out["num_nodes"], "num_edges": out["num_edges"],
        "feature_dim": int(out["params"].get("feature_dim", 0)),
        "graph_bytes": gb, "peak_rss_bytes": peak, "ratio": peak / gb, "goal_x": GOAL_X,
        "within_goal": peak / gb <= GOAL_X, "seconds": seconds,
        "cpu_s": ru.ru_utime + ru.ru_stime, "edge_cut": out["edge_cut"],
        "balance": out["balance"], "metis": out["metis"], "stages": out["stages"],
    }


def table(doc: dict[str, Any]) -> str:
    gb = 1e9
    lines = [f"partition step: {doc['num_nodes']:,} nodes, {doc['num_edges']:,} edges, "
             f"{doc['feature_dim']} features -> {doc['num_parts']} parts ({doc['writer']} "
             f"writer); graph {doc['graph_bytes'] / gb:.2f} GB",
             f"{'stage':<18} {'seconds':>8} {'peak RSS GB':>12} {'x graph':>8}"]
    lines.append("-" * len(lines[-1]))
    for st in doc["stages"]:
        mark = "" if st["exact"] else " ~"
        lines.append(f"{st['stage']:<18} {st['seconds']:>8.1f} "
                     f"{st['peak_rss_bytes'] / gb:>12.2f} {st['ratio']:>8.2f}{mark}")
    lines.append(f"{'whole step':<18} {doc['seconds']:>8.1f} {doc['peak_rss_bytes'] / gb:>12.2f} "
                 f"{doc['ratio']:>8.2f}   (goal <= {doc['goal_x']:.0f}x: "
                 f"{'met' if doc['within_goal'] else 'NOT met'})")
    lines.append("~: sampled every 5 ms (the stage did not raise the process's peak)")
    metis = doc.get("metis") or {}
    if metis.get("entries"):
        lines.append(f"edge cut {doc['edge_cut']:.1%}; METIS got {metis['entries_used']:,} of "
                     f"{metis['entries']:,} adjacency entries")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--writer", choices=("gnnsched", "dgl"), default="gnnsched")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "partition.json"),
                    help="JSON file to write ('' for none)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    raw = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(raw)
    if args.child:
        child(args)
        return 0
    args.argv = raw
    doc = run(args)
    print(table(doc))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
