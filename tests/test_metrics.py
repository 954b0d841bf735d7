"""The task's metric: chosen by the job, computed by scikit-learn over every evaluated node,
reported by the distributed run and the single-process reference alike, with a warning when
accuracy alone would hide a model that learned nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score, roc_auc_score

from gnnsched import metrics
from gnnsched.spec import SpecError, job_from_dict, load_cluster

ROOT = Path(__file__).resolve().parents[1]


def test_auto_is_roc_auc_for_binary_and_accuracy_otherwise() -> None:
    assert metrics.resolve("auto", 2) == "roc_auc"
    assert metrics.resolve("auto", 7) == "accuracy"
    assert metrics.resolve("macro_f1", 7) == "macro_f1"
    with pytest.raises(SpecError, match=r"job.yaml: metric: roc_auc needs a binary task; "
                                        r"this dataset has 7 classes.*accuracy or macro_f1"):
        metrics.resolve("roc_auc", 7, "job.yaml")


def test_job_field_metric() -> None:
    assert job_from_dict({}).metric == "auto"
    assert job_from_dict({"metric": "roc_auc"}).metric == "roc_auc"
    job = job_from_dict({"metric": "macro_f1"})
    assert job_from_dict(job.to_dict()).metric == "macro_f1"  # round trip
    with pytest.raises(SpecError, match=r"metric: unknown value 'auc'.*roc_auc"):
        job_from_dict({"metric": "auc"}, source="job.yaml")


def test_scores_are_scikit_learns_over_the_whole_phase() -> None:
    """Macro-F1 and ROC-AUC over the concatenated batches, not a mean over batches."""
    rng = np.random.default_rng(0)
    y = (rng.random(300) < 0.2).astype(np.int64)
    prob = np.clip(0.3 * y + rng.random(300) * 0.7, 0, 1)
    pred = (prob > 0.5).astype(np.int64)
    tally = metrics.EvalTally("roc_auc")
    for lo in range(0, 300, 64):  # mini-batches
        tally.add((2, 0), y[lo:lo + 64], pred[lo:lo + 64], prob[lo:lo + 64])
    assert tally.value((2, 0)) == pytest.approx(roc_auc_score(y, prob))
    assert tally.nodes((2, 0)) == 300
    assert metrics.score("macro_f1", y, pred) == pytest.approx(f1_score(y, pred, average="macro"))
    assert np.isnan(metrics.score("roc_auc", np.zeros(5, int), np.zeros(5, int), np.ones(5)))
    assert metrics.majority_rate(y) == pytest.approx(1 - y.mean())


def test_imbalance_warns_only_where_accuracy_misleads() -> None:
    note = metrics.imbalance_note(0.78, 2, "accuracy")
    assert note and "78%" in note and "metric: roc_auc" in note
    assert "macro_f1" in (metrics.imbalance_note(0.9, 5, "accuracy") or "")
    assert metrics.imbalance_note(0.78, 2, "roc_auc") is None  # the metric already sees it
    assert metrics.imbalance_note(0.3, 7, "accuracy") is None  # Cora: balanced enough


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Cora made a binary task with ~15% positives (class 2 against the rest), in 2 random
    partitions: the imbalanced case a user met, where accuracy equals the majority rate."""
    from gnnsched.datasets import load_dataset, partition_graph

    z = dict(np.load(ROOT / "datasets" / "data" / "cora.npz", allow_pickle=False))
    z["y"] = (z["y"] == 2).astype(np.int64)
    d = tmp_path_factory.mktemp("binary")
    np.savez_compressed(d / "binary.npz", **z)
    partition_graph(load_dataset(str(d / "binary.npz"), normalize="row"), 2, d / "parts",
                    method="random", seed=0)
    return d / "binary.npz", d / "parts"


@pytest.mark.slow
def test_distributed_and_reference_report_the_same_roc_auc(binary, tmp_path: Path) -> None:
    from gnnsched.commands.train import metric_line, train
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.runtime.reference import reference_train

    npz, parts = binary
    cluster = load_cluster(ROOT / "examples" / "lab4" / "cluster.yaml")
    cluster = replace(cluster, machines=tuple(
        replace(m, partitions=(i,) if i < 2 else ()) for i, m in enumerate(cluster.machines)))
    # evaluation settings of their own: fan-outs, batch, a capped sample, only after the end
    job = job_from_dict({"dataset": str(npz), "num_parts": 2, "trainers": 2, "batch_size": 64,
                         "epochs": 2, "fanouts": [5, 5], "features": {"normalize": "row"},
                         "eval_every": 0,
                         "evaluation": {"fanouts": [-1, 3], "batch_size": 50, "max_nodes": 300}},
                        source="job.yaml")
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0,), (("store0", 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (1,), (("store1", 1),), "gpu1")))
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10))
    ref = reference_train(job, str(parts), [[0], [1]])
    assert res.metric == ref.metric == "roc_auc"
    assert 0.5 < res.test_metric <= 1.0
    assert res.test_metric == pytest.approx(ref.test_metric, abs=1e-6)  # same nodes, same model
    assert res.val_metric == pytest.approx(ref.val_metric, abs=1e-6) and len(res.val_metric) == 1
    events = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    test = [e for e in events if e["type"] == "test"][0]
    assert 300 <= test["nodes"] <= 302  # the cap (each trainer's share rounded up)
    assert max(e["n"] for e in events if e["type"] == "batch" and e["phase"] != "train") <= 50
    assert res.majority_rate == pytest.approx(ref.majority_rate) and res.majority_rate > 0.8
    line = metric_line(res)
    assert "majority-class rate" in line and "test roc_auc" in line

    # the same task scored by accuracy: the run warns that accuracy says little here
    acc = replace(job, metric="accuracy")
    res = train(cluster, acc, plan, out_dir=tmp_path / "acc", partitions=parts,
                options=RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10))
    assert res.metric == "accuracy" and res.test_metric == res.test_accuracy
    log = (tmp_path / "acc" / "logs" / "coordinator.log").read_text()
    assert "warning: the most common class holds" in log and "metric: roc_auc" in log
