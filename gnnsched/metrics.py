"""The task's metric: which one a job is scored by, and its value over evaluated nodes.

Accuracy alone hides a model that learned nothing on an imbalanced task (a binary graph with
22% positives scores 0.78 by predicting "negative" everywhere), so a job names its metric
(``metric:`` in the job file): ``accuracy``, ``macro_f1`` or ``roc_auc`` (binary tasks), or
``auto`` -- ROC-AUC for a binary task, accuracy otherwise. The values come from
scikit-learn, computed once over every evaluated node (not averaged over mini-batches, which
would be wrong for F1 and AUC). Accuracy is always reported too, beside the majority-class
rate, so a constant predictor is visible at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnsched.spec import METRICS, SpecError

__all__ = ["METRICS", "EvalTally", "imbalance_note", "majority_rate", "resolve", "score"]

IMBALANCED = 0.7  # majority-class share from which accuracy alone is misleading


def resolve(metric: str, num_classes: int, source: str = "<job>") -> str:
    """The metric a job with ``num_classes`` classes is scored by (``auto`` made concrete);
    ROC-AUC on a multi-class task is refused by name."""
    if metric not in METRICS:
        raise SpecError(source, "metric", f"unknown metric {metric!r}", ", ".join(METRICS))
    if metric == "auto":
        return "roc_auc" if num_classes == 2 else "accuracy"
    if metric == "roc_auc" and num_classes != 2:
        raise SpecError(source, "metric", f"roc_auc needs a binary task; this dataset has "
                        f"{num_classes} classes", "accuracy or macro_f1 (or auto)")
    return metric


def score(metric: str, y: np.ndarray, pred: np.ndarray, prob: np.ndarray | None = None) -> float:
    """``metric`` over labels ``y``, predicted classes ``pred`` and, for ROC-AUC, the
    positive class's probability ``prob``. NaN where it is undefined (no nodes, or ROC-AUC
    on nodes of one class only)."""
    from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

    y = np.asarray(y)
    if not len(y):
        return float("nan")
    if metric == "accuracy":
        return float(accuracy_score(y, pred))
    if metric == "macro_f1":
        return float(f1_score(y, pred, average="macro", zero_division=0))
    if metric == "roc_auc":
        if prob is None or len(np.unique(y)) < 2:
            return float("nan")
        return float(roc_auc_score(y, prob))
    raise ValueError(f"unknown metric {metric!r} (valid: {', '.join(METRICS[1:])})")


def majority_rate(labels: np.ndarray) -> float:
    """The accuracy of always predicting the most common label (NaN without labels)."""
    labels = np.asarray(labels)
    if not len(labels):
        return float("nan")
    return float(np.bincount(labels.astype(np.int64)).max() / len(labels))


def imbalance_note(rate: float | None, num_classes: int, metric: str) -> str | None:
    """A warning when the evaluated labels are so imbalanced (the commonest class holds
    ``rate`` of them) that ``metric`` -- accuracy -- says little, naming the better choice;
    None otherwise."""
    if metric != "accuracy" or rate is None or not rate >= IMBALANCED:
        return None
    better = "roc_auc" if num_classes == 2 else "macro_f1"
    return (f"the most common class holds {rate:.0%} of the evaluated nodes: predicting it "
            f"everywhere scores accuracy {rate:.3f}. Set `metric: {better}` in the job file "
            "for a score that sees the minority classes")


@dataclass
class EvalTally:
    """Evaluated nodes collected per (phase, epoch) from many mini-batches (and trainers):
    labels, predicted classes and, for a binary task, the positive class's probability."""

    metric: str
    parts: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = \
        field(default_factory=dict)

    def add(self, key: tuple[int, int], y, pred, prob=None) -> None:
        self.parts.setdefault(key, []).append(
            (np.asarray(y, np.int64), np.asarray(pred, np.int64),
             None if prob is None else np.asarray(prob, np.float64)))

    def arrays(self, key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        got = self.parts.get(key, [])
        if not got:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), None
        y = np.concatenate([g[0] for g in got])
        pred = np.concatenate([g[1] for g in got])
        probs = [g[2] for g in got]
        prob = None if any(p is None for p in probs) else np.concatenate(probs)
        return y, pred, prob

    def value(self, key: tuple[int, int]) -> float:
        """The job's metric over every node collected under ``key``."""
        return score(self.metric, *self.arrays(key))

    def accuracy(self, key: tuple[int, int]) -> float:
        y, pred, _ = self.arrays(key)
        return score("accuracy", y, pred)

    def nodes(self, key: tuple[int, int]) -> int:
        return int(sum(len(g[0]) for g in self.parts.get(key, [])))
