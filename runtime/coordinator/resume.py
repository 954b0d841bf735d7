"""``gnnsched train --resume``: continue an interrupted run from its last checkpoint.

Everything needed is already in the run folder: ``metrics.jsonl`` holds every trained
mini-batch, every finished epoch and every checkpoint the trainers reported, and
``checkpoints/`` the model and optimizer states. The newest checkpoint whose step every
trainer finished (its barrier is in the records) and whose file is intact (its digest
matches: a newer corrupt one is skipped and said) is the one to go on from; the records up to it are restored as if this process had seen them, and training
starts at the next step (the steps after it run again, with the same seeds from the same
model state, so they compute the same thing; their first records stay in ``metrics.jsonl``,
which the resumed run appends to after a ``resume`` record, as a recovery's replay does).
The new process's clock continues from the checkpoint's time, so epoch times and curves read
as one run; the time between the interruption and the resume is not counted, the new
start-up is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnsched.runtime import checkpoints
from gnnsched.runtime.coordinator.options import RunError
from gnnsched.trace import records


@dataclass
class Earlier:
    """What an interrupted run left: the checkpoint to resume from (step, epoch, path), the
    records up to it, and the clock time at which that step's barrier fell."""

    seq: int
    epoch: int
    path: str
    time: float
    t_train: float
    trained: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[tuple[int, int, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # newer checkpoints that were corrupt


def earlier_run(run_dir: Path, trainers: int, record_seq: dict[int, int]) -> Earlier:
    """Read ``run_dir``'s records and pick the checkpoint to resume from; a run that
    finished, or has no usable checkpoint, is refused with what to do instead."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise RunError(f"--resume: {run_dir} holds no earlier run (no metrics.jsonl); "
                       "drop --resume to start one there")
    recs = records(metrics)
    if any(r.get("type") == "run" for r in recs):
        raise RunError(f"--resume: the run in {run_dir} finished; nothing to resume "
                       "(--force replaces it, another --out starts a new one)")
    batches: dict[int, dict[int, dict[str, Any]]] = {}
    for r in recs:
        if r.get("type") == "batch":
            batches.setdefault(int(r["seq"]), {})[int(r["trainer"])] = r
    done = {s for s, by in batches.items() if len(by) == trainers}
    ckpts = [(int(r["seq"]), int(r["epoch"]), str(r["path"])) for r in recs
             if r.get("type") == "checkpoint"]
    recorded = [c for c in ckpts if c[0] in done and all(s in done for s in range(c[0] + 1))
                and Path(c[2]).is_file()]
    usable, skipped = [], []
    for c in sorted(recorded, reverse=True):  # newest first: stop at the first intact one
        why = checkpoints.verify(Path(c[2]))
        if why is None:
            usable.append(c)
            break
        skipped.append(f"skipped the checkpoint of step {c[0]}: {why}")
    if not usable:
        why = "no checkpoint was written" if not ckpts else \
            "no checkpoint file is intact with every step before it recorded" + \
            (f" ({'; '.join(skipped)})" if skipped else "")
        raise RunError(f"--resume: {run_dir}: {why}; train again from the start with --force "
                       "(checkpoints are written at every epoch end and every "
                       "--checkpoint-every steps)")
    seq, epoch, path = max(usable)
    starts = [r["time"] for r in recs if r.get("type") == "training"]
    first = min(batches[0].values(), key=lambda b: b["time"])
    t_train = starts[0] if starts else first["time"] - first.get("train_s", 0.0) \
        - first.get("wait_s", 0.0)
    return Earlier(
        seq=seq, epoch=epoch, path=path,
        time=max(b["time"] for b in batches[seq].values()), t_train=float(t_train),
        trained={(w, s): b for s, by in batches.items() if s <= seq for w, b in by.items()},
        epochs=[r for r in recs if r.get("type") == "epoch"
                and record_seq.get(int(r["epoch"]), 1 << 62) <= seq],
        checkpoints=[c for c in ckpts if c[0] <= seq], skipped=skipped)


__all__ = ["Earlier", "earlier_run"]
