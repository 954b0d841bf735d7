"""Evaluation that scales: the job's ``evaluation: {fanouts, batch_size, max_nodes}`` and
``eval_every: 0`` decide which validation and test steps run and on which nodes."""

from __future__ import annotations

import numpy as np
import pytest

from gnnsched.runtime.coordinator import Schedule
from gnnsched.runtime.coordinator.schedule import node_hash
from gnnsched.spec import SpecError, job_from_dict

COUNTS = [{"train": 100, "val": 400, "test": 1000}, {"train": 100, "val": 200, "test": 600}]


def _splits() -> dict:
    rng = np.random.default_rng(0)
    out, base = {}, 0
    for p, c in enumerate(COUNTS):
        out[p] = {}
        for name in ("train", "val", "test"):
            ids = np.arange(base, base + c[name], dtype=np.int64)
            base += c[name]
            out[p][name] = (ids, rng.integers(0, 3, len(ids)))
    return out


def test_job_fields_parse_and_round_trip() -> None:
    job = job_from_dict({"eval_every": 0, "evaluation": {"fanouts": [-1, 4], "batch_size": 32,
                                                         "max_nodes": 100}})
    assert (job.eval_every, job.eval_fanouts, job.eval_batch_size, job.eval_max_nodes) == \
        (0, (-1, 4), 32, 100)
    assert job.evaluation_fanouts == (-1, 4) and job_from_dict({}).evaluation_fanouts == (10, 25)
    assert job_from_dict(job.to_dict()) == job and "evaluation" not in job_from_dict({}).to_dict()
    with pytest.raises(SpecError, match=r"evaluation.fanouts: has 3 entries but the model has 2"):
        job_from_dict({"evaluation": {"fanouts": [1, 2, 3]}}, source="job.yaml")
    with pytest.raises(SpecError, match=r"evaluation.max_nodes"):
        job_from_dict({"evaluation": {"max_nodes": 0}})
    with pytest.raises(SpecError, match=r"evaluation.fanout: unknown field"):
        job_from_dict({"evaluation": {"fanout": [1, 2]}})


def test_eval_every_zero_validates_only_after_the_last_epoch() -> None:
    job = job_from_dict({"epochs": 3, "eval_every": 0, "batch_size": 50})
    s = Schedule(job, [[0], [1]], COUNTS)
    val_epochs = {it.epoch for it in s.items if it.phase == 1}
    assert val_epochs == {2} and s.items[-1].phase == 2
    every = Schedule(job_from_dict({"epochs": 3, "batch_size": 50}), [[0], [1]], COUNTS)
    assert {it.epoch for it in every.items if it.phase == 1} == {0, 1, 2}


def test_batch_size_and_capped_sample() -> None:
    job = job_from_dict({"epochs": 1, "batch_size": 50,
                         "evaluation": {"batch_size": 64, "max_nodes": 300}})
    s = Schedule(job, [[0], [1]], COUNTS)
    s.set_nodes(_splits())
    for phase, name in ((1, "val"), (2, "test")):
        items = [it for it in s.items if it.phase == phase]
        got = [s.batch(w, it)[0] for w in range(2) for it in items]
        ids = np.concatenate(got)
        assert 300 <= len(ids) <= 302 and len(np.unique(ids)) == len(ids)
        assert max(len(g) for g in got) <= 64
        # each trainer keeps its nodes with the smallest seeded hash: the same every run
        for w in range(2):
            mine = _splits()[w][name][0]
            kept = s.nodes[w][name][0]
            expect = np.sort(mine[np.argsort(node_hash(mine, job.seed))[:len(kept)]])
            assert np.array_equal(kept, expect)
    again = Schedule(job, [[0], [1]], COUNTS)
    again.set_nodes(_splits())
    assert all(np.array_equal(a["test"][0], b["test"][0]) for a, b in zip(s.nodes, again.nodes))
    # the training nodes are never sampled down
    assert sum(len(n["train"][0]) for n in s.nodes) == 200
