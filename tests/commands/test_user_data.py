"""A user's own graph, first hour: the job file means what it says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gnnsched.datasets import load_dataset, open_partitions, partition_graph
from gnnsched.datasets.cache import partitions_for
from gnnsched.spec import SpecError, job_from_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_splits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cora with a second, reshuffled split: a ``[2, N]`` mask file like the Coauthor ones."""
    z = dict(np.load(ROOT / "datasets" / "data" / "cora.npz", allow_pickle=False))
    rng = np.random.default_rng(0)
    perm = rng.permutation(int(z["num_nodes"]))
    for key in ("train_mask", "val_mask", "test_mask"):
        z[key] = np.stack([z[key], z[key][perm]])
    path = tmp_path_factory.mktemp("own") / "mine.npz"
    np.savez_compressed(path, **z)
    return path


def _job(dataset: Path, **fields: object):
    return job_from_dict({"dataset": str(dataset), "num_parts": 2, "trainers": 2,
                          "batch_size": 64, **fields}, source="job.yaml")


def test_split_picks_other_test_nodes(two_splits: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))
    a, b = load_dataset(str(two_splits), split=0), load_dataset(str(two_splits), split=1)
    assert not np.array_equal(a.test_mask, b.test_mask)
    pa = open_partitions(partitions_for(_job(two_splits, split=0), quiet=True))
    pb = open_partitions(partitions_for(_job(two_splits, split=1), quiet=True))
    assert pa.meta["split"] == 0 and pb.meta["split"] == 1
    tests = [sum(c["test"] for c in p.meta["parts"]) for p in (pa, pb)]
    assert tests[0] > 0 and tests[1] > 0
    with pytest.raises(SpecError, match=r"split 5 is out of range"):
        load_dataset(str(two_splits), split=5)


def test_split_of_a_partition_directory_is_enforced(two_splits: Path, tmp_path: Path) -> None:
    """With ``partitions:`` the directory fixes the split: a job asking for another one is
    refused, naming the job file, the field and both ways out (it was silently ignored)."""
    out = tmp_path / "parts"
    partition_graph(load_dataset(str(two_splits), split=0), 2, out, method="random", seed=0)
    job = _job(two_splits, partitions=str(out), split=1)
    with pytest.raises(SpecError) as exc:
        partitions_for(job, quiet=True)
    text = str(exc.value)
    assert "job.yaml" in text and "split" in text and "partitioned with split 0" in text
    assert "--split 1" in text
    assert partitions_for(replace(job, split=0), quiet=True) == out
    with pytest.raises(SpecError, match="holds 1433-d features"):
        partitions_for(replace(job, split=0, feature_dim=64), quiet=True)


def test_learning_curve_png_beside_metrics(tmp_path: Path) -> None:
    import json

    from gnnsched.learning_curve import draw_curve, read_curve

    recs = [{"type": "batch", "phase": "train", "seq": s, "loss": 2.0 / (s + 1)}
            for s in range(6)]
    recs += [{"type": "batch", "phase": "val", "seq": 6}]  # not a training loss
    recs += [{"type": "epoch", "epoch": e, "train_loss": 1.0 / (e + 1), "val_accuracy": 0.5 + e / 10}
             for e in range(2)] + [{"type": "test", "accuracy": 0.61}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps(r) for r in recs) + '\n{"type": "ba')  # torn tail
    c = read_curve(metrics)
    assert c["batch_step"] == list(range(6)) and c["val"] == [0.5, 0.6] and c["test"] == [0.61]
    png = draw_curve(metrics)
    assert png == tmp_path / "curve.png" and png.read_bytes()[:4] == b"\x89PNG"
    empty = tmp_path / "empty" / "metrics.jsonl"
    empty.parent.mkdir()
    empty.write_text("")
    assert draw_curve(empty) is None


def test_progress_is_plain_off_a_terminal() -> None:
    """A pipe or a log file gets the epoch lines, not carriage-return bar updates."""
    import io

    from gnnsched.commands.train import _Progress

    p = _Progress(quiet=False)
    p.out = buf = io.StringIO()
    p("epoch_start", epoch=0, total=3, epochs=1)
    for _ in range(3):
        p("batch", seeds=10)
    p("epoch_end", record={"epoch": 0, "epoch_time_s": 1.0, "throughput_seeds_s": 30.0,
                           "train_loss": 0.5, "val_accuracy": 0.7, "stages": {}})
    p.close()
    text = buf.getvalue()
    assert "\r" not in text and "epoch 1: 1.000 s" in text


def test_features_normalize_is_a_job_field(two_splits: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``features: {normalize: row | standard | none}``: rows of raw counts sum to 1, columns
    standardised; the partitions hold what the job asked for, and a mismatch is refused."""
    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))
    job = _job(two_splits, features={"normalize": "row"})
    assert job.normalize == "row"
    raw = load_dataset(str(two_splits))
    row = load_dataset(str(two_splits), normalize="row")
    sums = row.features.sum(axis=1)
    nonzero = raw.features.sum(axis=1) > 0
    assert np.allclose(sums[nonzero], 1.0, atol=1e-5) and not np.allclose(raw.features, row.features)
    std = load_dataset(str(two_splits), normalize="standard", feature_dim=32)
    assert np.allclose(std.features.mean(axis=0), 0, atol=1e-4)
    assert np.allclose(std.features.std(axis=0), 1, atol=1e-3)
    parts = partitions_for(job, quiet=True)
    assert open_partitions(parts).meta["dataset_meta"]["normalize"] == "row"
    with pytest.raises(SpecError, match="features.normalize: is none but .* normalised 'row'"):
        partitions_for(_job(two_splits, partitions=str(parts)), quiet=True)
    with pytest.raises(SpecError, match=r"features.normalize: unknown value 'l2'"):
        _job(two_splits, features={"normalize": "l2"})
    with pytest.raises(SpecError, match=r"features.scale: unknown field"):
        _job(two_splits, features={"scale": 2})


def test_reference_from_the_cli_on_own_data(two_splits: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    import json

    import yaml

    from gnnsched.cli import main as cli_main

    monkeypatch.setenv("GNNSCHED_CACHE", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"dataset": str(two_splits), "num_parts": 2, "trainers": 2,
                                   "batch_size": 128, "epochs": 1, "fanouts": [5, 5],
                                   "features": {"normalize": "row"}}))
    assert cli_main(["reference", "--job", str(job), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["trainer_parts"] == [[0], [1]]
    assert 0.0 < out["test_accuracy"] <= 1.0 and len(out["train_loss"]) == 1


def test_partition_writes_beside_the_user_without_out(two_splits: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's quick path: ``gnnsched partition my.npz --parts 2`` (no ``--out``) writes
    ``parts/my-2`` in the working directory, the job's ``normalize`` recorded, and a job
    asking for other scaling is told the exact command that would fit it."""
    from gnnsched.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    assert cli_main(["partition", str(two_splits), "--parts", "2", "--method", "random",
                     "--normalize", "row", "--json"]) == 0
    out = tmp_path / "parts" / "mine-2"
    assert open_partitions(out).meta["dataset_meta"]["normalize"] == "row"
    with pytest.raises(SpecError, match=r"--normalize standard --out DIR"):
        partitions_for(_job(two_splits, partitions=str(out),
                            features={"normalize": "standard"}), quiet=True)


def test_help_is_plain_text(capsys: pytest.CaptureFixture) -> None:
    """``--help`` shows the verb's docstring without reST literals or roles (``--any-job``
    read as a different flag from the one the parser knows)."""
    from gnnsched.cli import VERBS, build_parser

    for verb in VERBS:
        with pytest.raises(SystemExit):
            build_parser(only=verb).parse_args([verb, "--help"])
        text = capsys.readouterr().out
        assert "``" not in text and ":func:" not in text and ":mod:" not in text, verb
