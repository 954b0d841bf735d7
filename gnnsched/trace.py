"""What a traced run's timeline says: transfer times, how many shared each NIC, the pipeline.

``gnnsched train --trace`` writes, besides the per-batch records, one ``transfer`` record per
NIC transfer (queued, acknowledged: coordinator clock) and a ``dispatch`` / ``sampled``
record per mini-batch. :func:`summarize` turns them into the numbers one sets beside a
simulation of the same plan (the simulator's flows: ``SimResult.timeline``): is a slow epoch
long transfers, many at once, or a pipeline that starts too late? Steady state only: training
steps of epochs after the first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


def load(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (ValueError naming the file and line)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: not found (a run directory of `gnnsched train` has one)")
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: not JSON ({exc.msg})") from None
    return out


def percentiles(values: Iterable[float]) -> dict[str, float] | None:
    """p10 / p50 / p90 (None for no values)."""
    a = np.asarray(list(values), dtype=float)
    if not len(a):
        return None
    p10, p50, p90 = np.percentile(a, [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90), "n": int(len(a))}


def _busy(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``spans``."""
    total, end = 0.0, -np.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Steady-state transfer and pipeline statistics of a traced run (seconds)."""
    steady = {(r["trainer"], r["seq"]): r for r in records
              if r.get("type") == "batch" and r.get("phase") == "train" and r.get("epoch", 0) >= 1}
    moves = [r for r in records if r.get("type") == "transfer"
             and (r["trainer"], r["seq"]) in steady]
    if not moves and not any(r.get("type") == "dispatch" for r in records):
        raise ValueError("no trace records: run `gnnsched train --trace` (or "
                         "RuntimeOptions(trace=True)) to write them")
    kinds: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in moves}):
        rs = [r for r in moves if r["kind"] == kind]
        kinds[kind] = {"seconds": percentiles(r["done"] - r["queued"] for r in rs),
                       "bytes": percentiles(r["bytes"] for r in rs)}
    senders: dict[str, Any] = {}
    by_src: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in moves:
        by_src[r["src"]].append((r["queued"], r["done"]))
    for src, spans in sorted(by_src.items()):
        busy = _busy(spans)
        senders[src] = {"transfers": len(spans),
                        "busy_fraction": busy / (max(b for _, b in spans)
                                                 - min(a for a, _ in spans) or 1.0),
                        "mean_in_flight": sum(b - a for a, b in spans) / busy if busy else 0.0}
    at = {(r["type"], r["trainer"], r["seq"]): r for r in records
          if r.get("type") in ("dispatch", "sampled")}
    done: dict[tuple[int, int], float] = {}
    for r in moves:
        if r["kind"] == "feat":
            key = (r["trainer"], r["seq"])
            done[key] = max(done.get(key, -np.inf), r["done"])
    d2s, s2f, d2t = [], [], []
    for key, b in steady.items():
        d, s = at.get(("dispatch", *key)), at.get(("sampled", *key))
        if d and s:
            d2s.append(s["t"] - d["t"])
        if s and key in done:
            s2f.append(done[key] - s["t"])
        if d:  # the batch record arrives after its step and all-reduce
            d2t.append(b["time"] - b.get("train_s", 0.0) - b.get("allreduce_s", 0.0) - d["t"])
    return {"transfers": kinds, "senders": senders,
            "pipeline": {"dispatch_to_sampled": percentiles(d2s),
                         "sampled_to_features": percentiles(s2f),
                         "dispatch_to_train": percentiles(d2t)},
            "batches": len(steady)}


__all__ = ["load", "percentiles", "summarize"]
