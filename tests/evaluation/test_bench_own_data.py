"""`gnnsched bench` on a user's own graph (``--datasets my.npz``) and without the shared data.

A file is checked with the dataset loader, named by its stem in the tables and the JSON, and
compared like Cora: gnnsched beside colocation and DistDGL (or why DistDGL cannot run), each
run beside single-process training of its seed split. Without ``../shared`` the default
evaluation runs on the bundled Cora and says so; a dataset asked for by name that is not at
hand, or a path that does not exist, is one line naming what to pass.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import gnnsched.datasets as datasets_pkg
from gnnsched.cli import main
from gnnsched.commands.bench import add_arguments
from gnnsched.evaluation import config, data, runs
from gnnsched.spec import SpecError


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def write_graph(path: Path, nodes: int = 400, seed: int = 1, splits: int = 1) -> Path:
    """A small seeded graph in the .npz schema (docs/fields.md), counts as features."""
    g = datasets_pkg.generate(nodes, avg_degree=8, num_classes=4, feature_dim=24, seed=seed,
                              train_frac=0.25, val_frac=0.1)
    order = np.lexsort((g.dst, g.src))
    x = sp.csr_matrix(np.round(np.abs(g.features) * 3))  # non-negative counts
    masks = {k: getattr(g, k) for k in ("train_mask", "val_mask", "test_mask")}
    if splits > 1:
        rng = np.random.default_rng(seed)
        perms = [np.arange(nodes)] + [rng.permutation(nodes) for _ in range(splits - 1)]
        masks = {k: np.stack([m[p] for p in perms]) for k, m in masks.items()}
    np.savez_compressed(
        path, num_nodes=np.int64(nodes),
        edge_index=np.stack([g.src[order], g.dst[order]]).astype(np.int64),
        x_indptr=x.indptr.astype(np.int64), x_indices=x.indices.astype(np.int32),
        x_data=x.data.astype(np.float32), x_shape=np.array(x.shape, dtype=np.int64),
        y=g.labels.astype(np.int64), **masks)
    return path


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_file_is_a_dataset_named_by_its_stem(tmp_path: Path, cache: Path) -> None:
    f = write_graph(tmp_path / "mygraph.npz", splits=2)
    st = config.resolve(_args("--datasets", str(f), "cora", "--launcher", "local"))
    assert st.datasets == ["mygraph", "cora"] and list(st.own_datasets) == ["mygraph"]
    d = st.dataset("mygraph")
    assert d.label == "mygraph" and d.normalize == config.OWN_NORMALIZE == "row"
    assert d.batch_size == 8 and d.feature_dim is None  # 100 seeds; 24 features kept
    job = st.job("mygraph")
    assert job.normalize == "row" and job.split == 0 and job.batch_size == 8
    assert Path(job.dataset).read_bytes() == f.read_bytes()  # content-keyed, in the cache
    assert st.job("cora").normalize == "none"  # the published evaluation's setting
    # the job's split and normalisation from the bench's flags; results.json keeps them
    st = config.resolve(_args("--datasets", str(f), "--split", "1", "--normalize", "standard",
                              "--launcher", "local"))
    job = st.job("mygraph")
    assert job.split == 1 and job.normalize == "standard"
    assert json.loads(json.dumps(st.to_dict()))["own_datasets"]["mygraph"]["file"] == str(
        f.resolve())
    # an edited file is another dataset for the partition cache
    before = job.dataset
    write_graph(f, seed=2)
    assert config.resolve(_args("--datasets", str(f), "--launcher", "local")).job(
        "mygraph").dataset != before


def test_bad_files_and_names_fail_in_one_line(tmp_path: Path, cache: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope" / "mygraph.npz"
    with pytest.raises(SystemExit) as exc:
        main(["bench", "eval", "--datasets", str(missing), "--out", str(tmp_path / "o")])
    text = str(exc.value.code)
    assert str(missing) in text and "does not exist" in text and "\n" not in text
    with pytest.raises(SystemExit, match=r"unknown dataset 'mygraph' \(valid: cora, physics, products, "
                                         r"or a path to a \.npz"):
        config.resolve(_args("--datasets", "mygraph", "--launcher", "local"))
    (tmp_path / "junk.npz").write_text("not a graph")
    assert main(["bench", "eval", "--datasets", str(tmp_path / "junk.npz"), "--launcher",
                 "local", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gnnsched bench: error:") and "junk.npz" in err and "\n" not in err
    assert "Traceback" not in err
    f = write_graph(tmp_path / "g.npz")
    with pytest.raises(SpecError, match="train_mask: split 3 is out of range"):
        config.resolve(_args("--datasets", str(f), "--split", "3", "--launcher", "local"))
    (tmp_path / "other").mkdir()
    g = write_graph(tmp_path / "other" / "g.npz")
    with pytest.raises(SystemExit, match="two datasets named 'g'"):
        config.resolve(_args("--datasets", str(f), str(g), "--launcher", "local"))


def test_without_the_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A checkout not beside ../shared (no --data-dir, an empty $GNNSCHED_DATA_DIR): the
    default evaluation runs on the bundled Cora with a note; Physics by name is one line.
    (The session's cache keeps its Cora partitions; Physics' seeded copy there is hidden.)"""
    monkeypatch.setattr(datasets_pkg, "_REPO_SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(data, "_split_copy", lambda d: tmp_path / "no-copy.npz")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("GNNSCHED_DATA_DIR", str(tmp_path / "empty"))
    st = config.resolve(_args("--launcher", "local"))
    assert st.datasets == ["cora"] and len(st.notes) == 1
    assert "Coauthor Physics" in st.notes[0] and "--data-dir" in st.notes[0]
    with pytest.raises(SystemExit) as exc:
        config.resolve(_args("--datasets", "physics", "--launcher", "local"))
    text = str(exc.value.code)
    assert "coauthor_physics.npz" in text and "--data-dir" in text
    assert "GNNSCHED_DATA_DIR" in text and "\n" not in text
    # the whole command, planned and simulated only: it says what it skipped and runs
    out = tmp_path / "out"
    assert main(["bench", "eval", "--no-real", "--no-scale", "--shapes", "gpuless", "--samples", "2",
                 "--systems", "colocation+fifo", "--launcher", "local", "--out", str(out),
                 "--work", str(tmp_path / "work")]) == 0
    said = capsys.readouterr()
    assert "note: skipped Coauthor Physics" in said.out and "Traceback" not in said.err
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["datasets"]) == ["cora"] and doc["settings"]["notes"] == st.notes
    assert "Note: skipped Coauthor Physics" in (out / "report.md").read_text()


class _Result:  # a runtime result before the task metric (no fields)
    test_accuracy = 0.5


class _Scored(_Result):
    metric, test_metric, val_metric, majority_rate = "macro_f1", 0.25, [0.1, 0.2], 0.3


def test_task_metric_read_with_a_fallback() -> None:
    assert config.metric_fields(_Result()) == {}
    got = config.metric_fields(_Scored())
    assert got == {"metric": "macro_f1", "test_metric": 0.25, "val_metric": 0.2,
                   "majority_rate": 0.3}
    assert config.metric_fields({"metric": "accuracy", "test_metric": float("nan")})[
        "test_metric"] is None
    reps = [{**got, "epoch_time_s": 1.0, "epoch_times_s": [1.0, 1.0], "test_accuracy": 0.5},
            {**got, "test_metric": 0.35, "epoch_time_s": 2.0, "epoch_times_s": [2.0, 2.0],
             "test_accuracy": 0.6}]
    agg = runs._repeats(reps)
    assert agg["metric"] == "macro_f1" and agg["test_metric"] == pytest.approx(0.3)
    assert "metric" not in runs._repeats([{k: v for k, v in r.items() if k not in got}
                                          for r in reps])
    line = runs.describe({"ok": True, "epoch_time_s": 1.0, "test_accuracy": 0.55, **agg,
                          "reference_metric": 0.3})
    assert "acc 0.550" in line and "macro_f1 0.300 (ref 0.300)" in line
    assert "accuracy" not in runs.describe({"ok": True, "test_accuracy": 0.5,
                                            "metric": "accuracy", "test_metric": 0.5})


@pytest.mark.slow
def test_bench_runs_on_a_users_graph(tmp_path: Path, cache: Path) -> None:
    """The side-by-side comparison on a file: DistDGL (infeasible on the GPU-less shape, with
    the reason), colocation and gnnsched, each beside the single-process reference."""
    f = write_graph(tmp_path / "mygraph.npz")
    out = tmp_path / "out"
    rc = main(["bench", "eval", "--quick", "--datasets", str(f), "--no-scale", "--launcher", "local",
               "--shapes", "gpuless", "--systems", "distdgl", "colocation+fifo", "gnnsched+gnnsched",
               "--samples", "4", "--budget", "1", "--out", str(out),
               "--work", str(tmp_path / "work")])
    doc = json.loads((out / "results.json").read_text())
    assert rc == 0, [i for i in doc["invariants"] if not i["ok"]]
    info = doc["datasets"]["mygraph"]
    assert info["label"] == "mygraph" and info["file"] == str(f.resolve())
    assert info["normalize"] == "row" and info["num_nodes"] == 400
    (c,) = doc["configs"]
    assert c["dataset"] == "mygraph"
    dd = c["systems"]["distdgl"]
    assert dd["feasible"] is False and "GPU" in dd["reason"]
    for name in ("colocation+fifo", "gnnsched+gnnsched"):
        r = c["systems"][name]
        assert r["ok"] and r["epoch_time_s"] > 0 and r["test_accuracy"] is not None
        assert r["reference_accuracy"] == pytest.approx(r["test_accuracy"], abs=0.01)
        if "metric" in r:  # a runtime that scores the task's metric
            assert r["test_metric"] is not None and "reference_metric" in r
    assert {ref["dataset"] for ref in doc["references"]} == {"mygraph"}
    report = (out / "report.md").read_text()
    assert "| gpuless | mygraph | infeasible |" in report
    assert f"mygraph (`{f.resolve()}`, split 0)" in report


def test_quick_on_your_own_data_shows_distdgl(tmp_path: Path, cache: Path) -> None:
    """gpuless alone has no GPU on its stores, where DistDGL cannot run: your own graph's quick
    evaluation adds the plentiful shape, and says so; Cora's CI run and a chosen shape stay."""
    f = write_graph(tmp_path / "mygraph.npz")
    st = config.resolve(_args("--quick", "--datasets", str(f), "--launcher", "local"))
    assert st.shapes == ["gpuless", "plentiful"] and "distdgl" in st.systems
    assert any("DistDGL" in n and "plentiful" in n for n in st.notes)
    assert config.resolve(_args("--quick", "--launcher", "local")).shapes == ["gpuless"]
    assert config.resolve(_args("--quick", "--datasets", str(f), "--shapes", "hetero",
                                "--launcher", "local")).shapes == ["hetero"]


def _config(accs: dict[str, float], majority: float = 0.3, **extra: object) -> dict:
    return {"shape": "gpuless", "dataset": "mygraph",
            "systems": {n: {"ok": True, "test_accuracy": a, "majority_rate": majority, **extra}
                        for n, a in accs.items()}}


def test_the_invariants_fail_when_the_model_did_not_learn() -> None:
    from gnnsched.evaluation.judging.evaluation import learned

    ok, detail = learned([_config({"colocation+fifo": 0.78, "gnnsched+gnnsched": 0.79})], 2)
    assert ok and "2 runs checked" in detail
    # 0.3 + 20% of 0.7 = 0.44: an untrained model's 0.33 fails, named with its numbers
    ok, detail = learned([_config({"colocation+fifo": 0.33, "gnnsched+gnnsched": 0.79})], 2)
    assert not ok and "colocation+fifo: test accuracy 0.3300" in detail
    assert "needs >= 0.4400" in detail and "after 2 epochs" in detail
    assert "gnnsched+gnnsched" not in detail
    # an imbalanced binary job may pass on its ROC-AUC, not on accuracy against 0.9
    auc = _config({"gnnsched+gnnsched": 0.9}, majority=0.9, metric="roc_auc", test_metric=0.8)
    assert learned([auc], 2)[0]
    auc["systems"]["gnnsched+gnnsched"]["test_metric"] = 0.52
    assert not learned([auc], 2)[0]
    # results without the rate (older runs) say what was not checked
    ok, detail = learned([{"shape": "s", "dataset": "d", "systems": {"x": {"ok": True,
                                                                          "test_accuracy": 0.1}}}], 2)
    assert ok and detail.startswith("not checked")
