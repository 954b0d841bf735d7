"""The cost profile: measured from real sampling, bytes add up, and it is tied to its job."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gnnsched.profile import CostProfile, profile_for, synthetic_profile
from gnnsched.spec import SpecError, load_job


@pytest.fixture(scope="module")
def cora_profile(examples: Path) -> tuple:
    from gnnsched.datasets import open_partitions
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.runtime.profiler import profile_partitions

    job = replace(load_job(examples / "lab4" / "job.yaml"), batch_size=32)
    pset = open_partitions(partitions_for(job, quiet=True))
    return job, pset, profile_partitions(pset, job, samples=4, seed=1)


def test_bytes_add_up_to_input_features(cora_profile: tuple) -> None:
    """Every input node is owned by exactly one partition: per-part counts sum to the batch."""
    job, pset, prof = cora_profile
    assert prof.feature_bytes == pset.feature_dim * 4
    for pp in prof.parts:
        assert pp.n == 4 and pp.train_seeds > 0
        for ids, counts in zip(pp.input_parts, pp.input_nodes):
            assert counts.sum() >= min(job.batch_size, pp.train_seeds)  # seeds are inputs
            assert set(ids.tolist()) <= set(range(pset.num_parts))
        assert (pp.sample_s > 0).all() and (pp.train_s > 0).all()
        # edges counted per expanded partition add up to the block sizes
        assert np.allclose([c.sum() for c in pp.edge_counts], pp.edges)
    assert prof.total_train_seeds == 140  # Cora's public split


def test_profile_roundtrip_and_job_check(cora_profile: tuple, tmp_path: Path) -> None:
    job, _, prof = cora_profile
    path = tmp_path / "cost.json"
    prof.save(path)
    back = CostProfile.load(path)
    assert back.num_parts == prof.num_parts
    assert np.allclose(back.parts[2].mean_input_nodes(4), prof.parts[2].mean_input_nodes(4))
    back.check_job(job)
    other = replace(job, fanouts=(5, 5))
    with pytest.raises(SpecError, match=r"job.fanouts: profile was measured for fanouts="):
        back.check_job(other, str(path))
    assert profile_for(job, str(path)).num_parts == 4


def test_bad_profile_files(tmp_path: Path) -> None:
    p = tmp_path / "cost.json"
    p.write_text("{not json")
    with pytest.raises(SpecError, match="cost.json: line 1: not valid JSON"):
        CostProfile.load(p)
    p.write_text('{"num_parts": 2}')
    with pytest.raises(SpecError, match="cost.json: job_key: is missing"):
        CostProfile.load(p)
    d = synthetic_profile(2, samples=2).to_dict()
    d["parts"][1]["samples"][0]["input_nodes"] = {"7": 3}
    import json

    p.write_text(json.dumps(d))
    with pytest.raises(SpecError, match=r"parts\[1\]\.samples\[0\]\.input_nodes: names "
                                        r"partition '7', outside 0\.\.1"):
        CostProfile.load(p)


def test_synthetic_profile_shape() -> None:
    prof = synthetic_profile(16, skew=1.0, locality=0.5, neighbours=4, samples=4, seed=3)
    assert prof.num_parts == 16 and prof.synthetic
    sizes = [pp.train_seeds for pp in prof.parts]
    assert max(sizes) > 3 * min(sizes)  # skewed
    nodes = prof.parts[5].mean_input_nodes(16)
    assert nodes[5] / nodes.sum() == pytest.approx(0.5, abs=0.02)
    assert synthetic_profile(16, seed=3, samples=4).parts[0].sample_s.tolist() == \
        synthetic_profile(16, seed=3, samples=4).parts[0].sample_s.tolist()


def test_allreduce_overhead_is_time_not_bytes(cora_profile: tuple, examples: Path,
                                              tmp_path: Path) -> None:
    """A calibrated all-reduce overhead (seconds the collective library adds beyond bytes /
    bandwidth) lengthens every all-reduce by exactly that much, leaves the gradient bytes --
    and so the NIC time the simulator reserves for them -- unchanged, and survives a save."""
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import load_cluster
    from gnnsched.workload import Workload

    job, _, prof = cora_profile
    cluster = load_cluster(examples / "lab4" / "cluster.yaml")
    gpus = [m.name for m in cluster.machines if m.gpus][:2]
    stores = [m.name for m in cluster.machines if m.partitions]
    plan = Plan("hand", cluster.name, cluster.fingerprint(), tuple(
        TrainerPlan(i, gpus[i], 0, (2 * i, 2 * i + 1), ((stores[0], 1),), gpus[i])
        for i in range(2)))
    base, calibrated = Workload(cluster, job, prof), replace(prof, allreduce_overhead_s=0.05)
    slow = Workload(cluster, job, calibrated)
    assert base.allreduce_s(plan) > 0
    assert slow.allreduce_s(plan) == pytest.approx(base.allreduce_s(plan) + 0.05)
    assert slow.allreduce_bytes(plan) == base.allreduce_bytes(plan)
    calibrated.save(tmp_path / "cost.json")
    assert CostProfile.load(tmp_path / "cost.json").allreduce_overhead_s == 0.05
    assert "allreduce_overhead_s" not in prof.to_dict()  # profiler output stays as it was


def test_barrier_skew_survives_a_save_and_is_checked(tmp_path: Path) -> None:
    """A calibrated barrier skew (how long after the first each trainer left an all-reduce)
    is kept by save/load, left out of profiler output, and rejected, naming the field, when
    negative, empty, not numbers or not a list of rows."""
    import json

    prof = synthetic_profile(2, samples=2)
    assert "barrier_skew_s" not in prof.to_dict()
    p = tmp_path / "cost.json"
    replace(prof, barrier_skew_s=((0.0, 0.004), (0.02, 0.0))).save(p)
    assert CostProfile.load(p).barrier_skew_s == ((0.0, 0.004), (0.02, 0.0))
    d = json.loads(p.read_text())
    for bad in ([[0.01, -0.5]], [[]], [0.1, 0.2], 5, [["a"]], {"a": [0.1]}, [[1e400]]):
        d["barrier_skew_s"] = bad
        p.write_text(json.dumps(d))
        with pytest.raises(SpecError, match=r"cost.json: barrier_skew_s: must be a list of rows"):
            CostProfile.load(p)


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("parts[0].samples[1].sample_s", _NAN, "must be a finite number >= 0, got nan"),
    ("parts[0].samples[1].sample_s", _INF, "must be a finite number >= 0, got inf"),
    ("parts[0].samples[1].train_s", -1, "must be a finite number >= 0, got -1"),
    ("parts[0].samples[1].train_s", "0.1", "must be a finite number >= 0, got '0.1'"),
    ("parts[0].samples[1].edges", -100, "must be an integer >= 0, got -100"),
    ("parts[0].samples[1].edges", 2.5, "must be an integer >= 0, got 2.5"),
    ("parts[0].samples[1].input_nodes['0']", _NAN, "must be a finite number >= 0, got nan"),
    ("parts[0].samples[1].input_nodes['1']", -3, "must be a finite number >= 0, got -3"),
    ("parts[1].samples[0].edges_by_part['0']", _INF, "must be a finite number >= 0, got inf"),
    ("parts[1].samples[0].edges_by_part", {"-1": 5}, "names partition '-1', outside 0..1"),
    ("parts[1].samples[0].input_nodes", [1, 2], "must be a mapping of partition id to count"),
    ("parts[1].samples[0]", 7, "must be a mapping"),
    ("parts[1].train_seeds", -5, "must be an integer >= 0, got -5"),
    ("parts[1].part", 0, "partition 0 is listed twice"),
    ("parts[1].part", 99, "partition 99 is out of range"),
    ("num_parts", 1.5, "must be an integer >= 1, got 1.5"),
    ("num_parts", "2", "must be an integer >= 1, got '2'"),
    ("num_parts", True, "must be an integer >= 1, got True"),
    ("feature_bytes", 0, "must be an integer > 0, got 0"),
    ("feature_bytes", -4, "must be an integer > 0, got -4"),
    ("grad_bytes", 0, "must be an integer > 0, got 0"),
    ("model_bytes", -1, "must be an integer >= 0, got -1"),
    ("allreduce_overhead_s", -1, "must be a finite number >= 0, got -1"),
    ("allreduce_overhead_s", _NAN, "must be a finite number >= 0, got nan"),
    ("synthetic", "false", "must be true or false, got 'false'"),
])
def test_nonsense_numbers_name_the_field(tmp_path: Path, field: str, value: object,
                                         problem: str) -> None:
    """A number no measurement could give (NaN, infinite, negative, fractional where a count
    belongs, a string) is a SpecError naming the file and the exact field, not a silently wrong
    simulation or a bare exception."""
    import json
    import re

    d = synthetic_profile(2, samples=2).to_dict()
    *head, last = re.findall(r"[a-z_]+|\d+", field)  # parts[0].input_nodes['1'] -> parts 0 ...
    node = d
    for k in head:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[int(last) if isinstance(node, list) else last] = value
    p = tmp_path / "cost.json"
    p.write_text(json.dumps(d))  # NaN / Infinity, as Python's json writes and reads them
    with pytest.raises(SpecError) as err:
        CostProfile.load(p)
    assert str(err.value).startswith(f"{p}: {field}: {problem}"), str(err.value)


def test_integral_floats_load_and_some_partition_must_train(tmp_path: Path) -> None:
    """3.0 where a count belongs loads as 3; zero training seeds everywhere is rejected."""
    import json

    d = synthetic_profile(2, samples=2).to_dict()
    d["parts"][0]["samples"][0]["edges"] = 3.0
    d["num_parts"] = 2.0
    p = tmp_path / "cost.json"
    p.write_text(json.dumps(d))
    prof = CostProfile.load(p)
    assert prof.parts[0].edges[0] == 3 and prof.num_parts == 2
    for pd in d["parts"]:
        pd["train_seeds"] = 0
    p.write_text(json.dumps(d))
    with pytest.raises(SpecError, match=r"cost.json: parts\[\*\]\.train_seeds: is 0 on every"):
        CostProfile.load(p)


def test_profile_into_a_pipe_prints_no_bar(examples: Path, tmp_path: Path) -> None:
    """``gnnsched profile`` with stdout and stderr piped (a log file, CI) prints its table and
    no progress bar: bars are for terminals only, as ``train``'s are (issue 51 item 6)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "gnnsched", "profile", "--job",
                        str(examples / "lab4" / "job.yaml"), "--samples", "1", "--out",
                        str(tmp_path / "cost.json")], capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    both = p.stdout + p.stderr
    assert "wrote" in p.stdout and "sample ms" in p.stdout
    for mark in ("\r", "█", "profiling:", "part/s", "it/s"):
        assert mark not in both, (mark, both)


def test_bars_only_on_a_terminal() -> None:
    """The one rule every verb's bars follow (:func:`gnnsched.commands.progress.bar`)."""
    import io

    from gnnsched.commands.progress import bar, on_terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    pipe, tty = io.StringIO(), Tty()
    assert not on_terminal(pipe) and on_terminal(tty)
    for out in (pipe, tty):
        with bar(3, "profiling", "part", file=out) as b:
            for _ in range(3):
                b.update()
    assert pipe.getvalue() == "" and "profiling" in tty.getvalue()
    quiet = Tty()
    with bar(3, "profiling", file=quiet, quiet=True) as b:
        b.update()
    assert quiet.getvalue() == ""
