"""The learning curve of a run: training loss per mini-batch and epoch, validation and test
metric per epoch, drawn from its ``metrics.jsonl`` as one PNG beside it (``curve.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnnsched.trace import records


def read_curve(metrics: str | Path) -> dict[str, list[Any]]:
    """Loss per trained batch (by step), loss and the validation metric per epoch, the test
    result; ``metric`` names the job's metric (accuracy in runs from before it was recorded)."""
    out: dict[str, list[Any]] = {"batch_step": [], "batch_loss": [], "epoch": [],
                                 "epoch_loss": [], "val": [], "test": [], "metric": []}
    for rec in records(metrics):  # a torn last line of an interrupted run is skipped
        kind = rec.get("type")
        if kind == "batch" and rec.get("phase") == "train" and "loss" in rec:
            out["batch_step"].append(rec.get("seq", len(out["batch_step"])))
            out["batch_loss"].append(rec["loss"])
        elif kind == "epoch":
            out["epoch"].append(rec["epoch"] + 1)
            out["epoch_loss"].append(rec.get("train_loss"))
            out["val"].append(rec.get("val_metric", rec.get("val_accuracy")))
            out["metric"][:] = [rec.get("metric", "accuracy")]
        elif kind == "test":
            out["test"].append(rec.get("value", rec.get("accuracy")))
    return out


def _epoch_ends(c: dict[str, list[Any]]) -> list[float]:
    """Step at which each epoch ended, spread evenly when the batches were not recorded."""
    n, steps = len(c["epoch"]), c["batch_step"]
    if not steps:
        return list(range(1, n + 1))
    per = (max(steps) + 1) / n
    return [per * (i + 1) - 1 for i in range(n)]


def draw_curve(metrics: str | Path, png: str | Path | None = None) -> Path | None:
    """Write the curve of ``metrics`` (default: ``curve.png`` beside it); None when the run
    recorded no epoch yet."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = Path(metrics)
    c = read_curve(metrics)
    if not c["epoch"] and not c["batch_loss"]:
        return None
    png = Path(png) if png else metrics.with_name("curve.png")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    if c["batch_loss"]:
        ax1.plot(c["batch_step"], c["batch_loss"], lw=0.6, alpha=0.5, label="mini-batch")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.set_title("loss")
    if c["epoch"]:  # an epoch's mean loss sits at the step that ended it
        ends = _epoch_ends(c)
        ax1.plot(ends, c["epoch_loss"], marker="o", color="C1", label="epoch mean")
    if c["batch_loss"] or c["epoch"]:
        ax1.legend(loc="upper right", fontsize=8)
    val = [(e, v) for e, v in zip(c["epoch"], c["val"]) if v is not None]
    if val:
        ax2.plot(*zip(*val), marker="o", label="validation")
    if c["test"] and c["test"][-1] is not None and c["epoch"]:
        ax2.axhline(c["test"][-1], color="C3", ls="--", lw=1,
                    label=f"test {c['test'][-1]:.3f}")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel((c["metric"] or ["accuracy"])[0])
    ax2.set_title("metric")
    if val or c["test"]:
        ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


__all__ = ["draw_curve", "read_curve"]
