"""What a traced run's timeline says: transfer times, how many shared each NIC, the pipeline.

``gnnsched train --trace`` writes, besides the per-batch records, one ``transfer`` record per
NIC transfer and a ``dispatch`` / ``sampled`` record per mini-batch, all on the
coordinator's clock. Transfers are of the simulator's kinds (:data:`KINDS`): ``struct`` and
``feat`` from a store (queued in its NIC queue, last chunk acknowledged), ``block`` from a
sampler to its trainer (sampled, received) and ``relay`` from a relay to its trainer
(gathered, received); same-machine ones are no NIC transfers and are not recorded. :func:`summarize` turns them into the numbers one sets beside a
simulation of the same plan (the simulator's flows: ``SimResult.timeline``): is a slow epoch
long transfers, many at once, or a pipeline that starts too late? Steady state only: training
steps of epochs after the first.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

# transfer kinds in pipeline order, as gnnsched.simulator.KINDS names them, with their route
KINDS = ("struct", "block", "feat", "relay")
ROUTES = {"struct": "store > sampler", "block": "sampler > trainer",
          "feat": "store > fetch site", "relay": "relay > trainer"}


def records(metrics: str | Path) -> list[dict[str, Any]]:
    """Every record of a ``metrics.jsonl`` that parses, unchecked: what a reader of a run that
    may have been interrupted mid-write needs (its torn last line is skipped). :func:`load`
    is the strict reader."""
    out = []
    with open(metrics) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the torn last line of an interrupted write
            if isinstance(rec, dict):
                out.append(rec)
    return out


def load(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl``, checked (SpecError naming ``file:line`` and
    the field: a line that is not JSON, not a record, of an unknown type, or a record without
    a field this module reads)."""
    from gnnsched.spec import SpecError

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise SpecError(str(path), "", "not found", "a run directory of `gnnsched train`, "
                        "which has one")
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "not a UTF-8 text file",
                        "the metrics.jsonl of `gnnsched train`") from None
    out: list[tuple[int, Any]] = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except (json.JSONDecodeError, RecursionError) as exc:
                msg = getattr(exc, "msg", "nested too deeply")
                raise SpecError(f"{path}:{i}", "", f"not JSON ({msg})",
                                "one JSON object per line") from None
    for i, rec in out:
        check_record(rec, f"{path}:{i}")
    return [rec for _, rec in out]


# Per record type, the fields this module (and gnnsched.calibrate) read, by kind: a
# record may carry more. ``time`` of a batch record is optional (older runs, hand-made
# files); code that reads it checks for it.
_INT, _NUM, _STR = "an integer", "a number", "a string"
RECORD_FIELDS: dict[str, dict[str, str]] = {
    "batch": {"trainer": _INT, "epoch": _INT, "phase": _STR},
    "transfer": {"trainer": _INT, "seq": _INT, "kind": _STR, "src": _STR, "bytes": _NUM,
                 "queued": _NUM, "done": _NUM},
    "dispatch": {"trainer": _INT, "seq": _INT, "t": _NUM},
    "sampled": {"trainer": _INT, "seq": _INT, "t": _NUM},
    "epoch": {"epoch": _INT},
    "test": {}, "run": {}, "fault": {}, "recovery": {}, "caught_up": {}, "checkpoint": {},
}
OPTIONAL_FIELDS: dict[str, dict[str, str]] = {
    "batch": {"seq": _INT, "time": _NUM, "train_s": _NUM, "sample_s": _NUM,
              "sample_wait_s": _NUM, "allreduce_s": _NUM, "barrier_at": _NUM},
    "transfer": {"dst": _STR},
}


def _ok(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == _INT:
        return isinstance(value, int)
    if kind == _NUM:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, str)


def check_record(rec: Any, where: str) -> None:
    """One metrics record: a JSON object with a ``type``; a known type's fields have their
    kinds (records of types this version does not know are left to whoever wrote them)."""
    from gnnsched.spec import SpecError

    if not isinstance(rec, dict):
        raise SpecError(where, "", f"not a record: {type(rec).__name__}",
                        "a JSON object with a \"type\"")
    kind = rec.get("type")
    if not isinstance(kind, str):
        problem = "is missing (required)" if "type" not in rec else f"must be a string, got " \
            f"{kind!r}"
        raise SpecError(where, "type", problem, ", ".join(RECORD_FIELDS))
    if kind not in RECORD_FIELDS:  # a newer version's record: nothing here reads it
        return
    required = RECORD_FIELDS[kind]
    if kind == "batch" and rec.get("phase") == "train":
        required = {**required, "seq": _INT}  # training steps are keyed by (trainer, seq)
    for name, want in required.items():
        if name not in rec:
            raise SpecError(where, name, f"is missing from a {kind!r} record (required)",
                            want)
        if not _ok(rec[name], want):
            raise SpecError(where, name, f"must be {want}, got {rec[name]!r}")
    for name, want in OPTIONAL_FIELDS.get(kind, {}).items():
        if rec.get(name) is not None and not _ok(rec[name], want):
            raise SpecError(where, name, f"must be {want} or absent, got {rec[name]!r}")


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


def steady_batches(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's per-batch records of its training steps after the first epoch (the steady
    ones: the first epoch fills the pipeline and warms every process up)."""
    return [r for r in records if r.get("type") == "batch" and r.get("phase") == "train"
            and r.get("epoch", 0) >= 1]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Steady-state transfer and pipeline statistics of a traced run (seconds)."""
    steady = {(r["trainer"], r["seq"]): r for r in steady_batches(records)}
    moves = [r for r in records if r.get("type") == "transfer"
             and (r["trainer"], r["seq"]) in steady]
    if not moves and not any(r.get("type") == "dispatch" for r in records):
        raise ValueError("no trace records: run `gnnsched train --trace` (or "
                         "RuntimeOptions(trace=True)) to write them")
    kinds: dict[str, Any] = {}
    for kind in _ordered({r["kind"] for r in moves}):
        rs = [r for r in moves if r["kind"] == kind]
        kinds[kind] = {"seconds": percentiles(r["done"] - r["queued"] for r in rs),
                       "bytes": percentiles(r["bytes"] for r in rs)}
    by_src: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in moves:
        by_src[r["src"]].append((r["queued"], r["done"], r["kind"]))
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
        if d and b.get("time") is not None:  # recorded after its step and all-reduce
            d2t.append(b["time"] - (b.get("train_s") or 0.0) - (b.get("allreduce_s") or 0.0)
                       - d["t"])
    return {"transfers": kinds, "senders": _senders(by_src),
            "receivers": wire_order(moves),
            "pipeline": {"dispatch_to_sampled": percentiles(d2s),
                         "sampled_to_features": percentiles(s2f),
                         "dispatch_to_train": percentiles(d2t)},
            "batches": len(steady)}


def wire_order(moves: list[dict[str, Any]]) -> dict[str, Any]:
    """Per receiving machine: of its transfers that were on the wire together (each queued
    before the other finished) and that the policy ranked apart, the share that finished out
    of the policy's order -- how far the bytes crossing the receiver's NIC, where several
    senders meet, departed from the order the policy chose. The order is each transfer's
    recorded priority key (``key``), else its iteration."""
    by_dst: dict[str, list[tuple[float, float, list]]] = defaultdict(list)
    for r in moves:
        key = r.get("key")
        by_dst[r["dst"]].append((r["queued"], r["done"], list(key) if key else [r["seq"]]))
    out = {}
    for dst, ms in sorted(by_dst.items()):
        pairs = inverted = 0
        for i, (qa, da, ka) in enumerate(ms):
            for qb, db, kb in ms[i + 1:]:
                if ka == kb or qa >= db or qb >= da:
                    continue  # ranked equal, or never on the wire together
                pairs += 1
                inverted += (da < db) != (ka < kb)
        out[dst] = {"overlapping_pairs": pairs,
                    "out_of_order": inverted / pairs if pairs else 0.0}
    return out


def _ordered(kinds: Iterable[str]) -> list[str]:
    """Transfer kinds in pipeline order (:data:`KINDS`), any other after them by name."""
    kinds = set(kinds)
    return [k for k in KINDS if k in kinds] + sorted(kinds - set(KINDS))


def _senders(by_src: dict[str, list[tuple[float, float, str]]]) -> dict[str, Any]:
    """Per sending machine: its transfers of every kind together (they share its NIC)."""
    out = {}
    for src, moves in sorted(by_src.items()):
        spans = [(a, b) for a, b, _ in moves]
        busy = _busy(spans)
        span = max(b for _, b in spans) - min(a for a, _ in spans)
        count: dict[str, int] = defaultdict(int)
        for _, _, kind in moves:
            count[kind] += 1
        out[src] = {"transfers": len(spans), "busy_fraction": busy / span if span else 1.0,
                    "mean_in_flight": sum(b - a for a, b in spans) / busy if busy else 0.0,
                    "kinds": {k: count[k] for k in _ordered(count)}}
    return out


def summarize_sim(result: Any) -> dict[str, Any]:
    """The same numbers from a simulation recorded with ``record=True``: its flows (first
    to last byte, plus the latency) and its batches' times, after the first tenth of the
    iterations (at least one: the pipeline filling)."""
    if result.timeline is None:
        raise ValueError("the simulation was not recorded (simulate(..., record=True))")
    times = result.times
    W, K = times["sample_start"].shape
    warm = max(1, K // 10)
    flows: dict[tuple, list[float]] = {}
    for sp in result.timeline:
        if (sp.resource.startswith("egress:") and sp.iteration >= warm
                and sp.stage in KINDS):
            key = (sp.resource[len("egress:"):], sp.stage, sp.trainer, sp.iteration)
            f = flows.setdefault(key, [sp.start, sp.end])
            f[0], f[1] = min(f[0], sp.start), max(f[1], sp.end)
    kinds: dict[str, Any] = {}
    for kind in _ordered({k[1] for k in flows}):
        kinds[kind] = {"seconds": percentiles(b - a for k, (a, b) in flows.items()
                                              if k[1] == kind), "bytes": None}
    by_src: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for k, (a, b) in flows.items():
        by_src[k[0]].append((a, b, k[1]))
    steady = np.s_[:, warm:]

    def gap(a: str, b: str) -> dict[str, float] | None:
        d = (times[b] - times[a])[steady].ravel()
        return percentiles(d[np.isfinite(d)])

    return {"transfers": kinds, "senders": _senders(by_src),
            "pipeline": {"dispatch_to_sampled": gap("sample_start", "sampled"),
                         "sampled_to_features": gap("sampled", "feat_at_fetch"),
                         "dispatch_to_train": gap("sample_start", "train_start")},
            "batches": int(W * (K - warm))}


def format_summary(s: dict[str, Any], title: str) -> str:
    """The summary as the three small tables ``gnnsched trace`` prints."""
    def ms(p: dict | None) -> str:
        return "-" if not p else (f"{1e3 * p['p10']:6.0f} {1e3 * p['p50']:6.0f} "
                                  f"{1e3 * p['p90']:6.0f}")

    lines = [f"{title}: {s['batches']} steady-state training steps", "",
             f"{'transfer':<8} {'from > to':<20} {'n':>5} {'KB p50':>8}   ms p10    p50    p90"]
    for kind, k in s["transfers"].items():
        kb = f"{k['bytes']['p50'] / 1e3:.0f}" if k["bytes"] else "-"
        lines.append(f"{kind:<8} {ROUTES.get(kind, ''):<20} {k['seconds']['n']:>5} {kb:>8}   "
                     f"{ms(k['seconds'])}")
    lines += ["", f"{'sender':<12} {'transfers':>9} {'busy':>6} {'in flight':>10}   of which"]
    for src, v in s["senders"].items():
        of = ", ".join(f"{k} {n}" for k, n in v.get("kinds", {}).items())
        lines.append(f"{src:<12} {v['transfers']:>9} {v['busy_fraction']:>6.0%} "
                     f"{v['mean_in_flight']:>10.2f}   {of}".rstrip())
    if s.get("receivers"):
        lines += ["", f"{'receiver':<12} {'overlapping':>11} {'out of the policy order':>24}"]
        for dst, v in s["receivers"].items():
            lines.append(f"{dst:<12} {v['overlapping_pairs']:>11} {v['out_of_order']:>24.0%}")
    lines += ["", f"{'per mini-batch':<24}   ms p10    p50    p90"]
    for name, p in s["pipeline"].items():
        lines.append(f"{name.replace('_', ' '):<24} {ms(p)}")
    return "\n".join(lines)


__all__ = ["KINDS", "RECORD_FIELDS", "check_record", "format_summary", "load", "percentiles", "steady_batches", "summarize",
           "summarize_sim", "wire_order"]
