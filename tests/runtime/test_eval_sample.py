"""The job's ``evaluation: {max_nodes}`` sample is one global set of node ids: every plan of a
job, DistDGL and the single-process reference evaluate exactly the same nodes (issue 51)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnsched.runtime.coordinator import Schedule, part_counts
from gnnsched.runtime.coordinator.schedule import (
    eval_ids_of,
    eval_threshold,
    in_sample,
    lowest_keys,
    node_hash,
)
from gnnsched.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
CAP = 300


@pytest.fixture(scope="module")
def cora4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """examples/lab4's job (Cora, 4 METIS parts) with a 300-node evaluation sample."""
    from gnnsched.datasets import load_dataset, partition_graph

    job = load_job(ROOT / "examples" / "lab4" / "job.yaml")
    job = replace(job, epochs=1, eval_max_nodes=CAP)
    parts = tmp_path_factory.mktemp("cora4-eval")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    return job, parts


def _splits(pset: Any) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """What the stores announce: per part, (original ids, labels) of every phase."""
    ids = pset.split_ids()
    return {p: {k: (v, np.zeros(len(v), np.int64)) for k, v in d.items()}
            for p, d in ids.items()}


def _tested(job: Any, pset: Any, parts: list[list[int]],
            slices: list[dict[int, tuple[float, float]]] | None = None,
            eval_ids: Any = "pset") -> list[np.ndarray]:
    """Per trainer, the test node ids a plan with these trainers' parts evaluates."""
    ids = eval_ids_of(job, pset) if eval_ids == "pset" else eval_ids
    s = Schedule(job, parts, part_counts(pset.meta), None, slices, ids)
    s.set_nodes(_splits(pset))
    out = []
    for w in range(len(parts)):
        got = [s.batch(w, it)[0] for it in s.items if it.phase == 2]
        assert all(len(b) <= s.eval_batch for b in got)
        out.append(np.concatenate(got))
    return out


def _global_sample(pset: Any, seed: int) -> np.ndarray:
    """The definition: of every test node, the CAP with the smallest seeded hash."""
    every = np.concatenate([d["test"] for d in pset.split_ids().values()])
    return np.sort(every[np.argsort(node_hash(every, seed))[:CAP]])


def test_two_plans_and_shares_evaluate_the_same_test_nodes(cora4: tuple[Any, Path]) -> None:
    from gnnsched.datasets import open_partitions

    job, parts = cora4
    pset = open_partitions(parts, verify=False)
    want = _global_sample(pset, job.seed)
    plans = [
        ([[0, 1], [2, 3]], None),  # colocation-like: two stores' parts each
        ([[0, 3], [1, 2]], None),  # another placement of the same job
        ([[0, 1, 2, 3]], None),  # one trainer
        ([[0, 1], [1, 2], [2, 3]],  # seed shares: parts cut between trainers
         [{0: (0.0, 1.0), 1: (0.0, 0.3)}, {1: (0.3, 1.0), 2: (0.0, 0.5)},
          {2: (0.5, 1.0), 3: (0.0, 1.0)}]),
    ]
    for trainer_parts, slices in plans:
        per = _tested(job, pset, trainer_parts, slices)
        every = np.concatenate(per)
        assert len(every) == CAP == len(np.unique(every)), trainer_parts
        assert np.array_equal(np.sort(every), want), trainer_parts
        # without the partition set's split ids the steps are bounded, the nodes the same
        bounded = np.concatenate(_tested(job, pset, trainer_parts, slices, None))
        assert np.array_equal(np.sort(bounded), want)
    # another seed: another sample, of the same size
    other = replace(job, seed=1)
    assert not np.array_equal(np.sort(np.concatenate(_tested(other, pset, [[0, 1], [2, 3]]))),
                              want)


def test_exact_counts_give_the_fewest_steps(cora4: tuple[Any, Path]) -> None:
    from gnnsched.datasets import open_partitions

    job, parts = cora4
    job = replace(job, eval_batch_size=32)
    pset = open_partitions(parts, verify=False)
    counts = part_counts(pset.meta)
    exact = Schedule(job, [[0, 1], [2, 3]], counts, None, None, pset.split_ids())
    bounded = Schedule(job, [[0, 1], [2, 3]], counts)
    exact.set_nodes(_splits(pset))
    held = max(len(n["test"][0]) for n in exact.nodes)
    assert exact.n_test == -(-held // 32) < bounded.n_test == -(-CAP // 32)
    # split ids that are not the partitions' own are caught, not silently trained on
    wrong = {p: {k: v[: len(v) // 4] for k, v in d.items()} for p, d in pset.split_ids().items()}
    bad = Schedule(job, [[0, 1], [2, 3]], counts, None, None, wrong)
    with pytest.raises(RuntimeError, match="not the partitions' own"):
        bad.set_nodes(_splits(pset))


def test_distdgl_threshold_from_each_trainers_keys(cora4: tuple[Any, Path]) -> None:
    """DistDGL's trainers each hold some nodes (its node_split, any cut); each contributes
    its lowest keys, and the threshold they agree on selects the same global sample."""
    from gnnsched.datasets import open_partitions

    job, parts = cora4
    pset = open_partitions(parts, verify=False)
    every = np.concatenate([d["test"] for d in pset.split_ids().values()])
    rng = np.random.default_rng(3)
    for cut in (2, 3, 5):
        held = np.array_split(rng.permutation(every), cut)
        keys = [lowest_keys(h, CAP, job.seed) for h in held]
        limit = eval_threshold(keys, CAP, job.seed, keys=True)
        mine = [h[in_sample(h, limit, job.seed)] for h in held]
        assert np.array_equal(np.sort(np.concatenate(mine)), _global_sample(pset, job.seed))
    assert eval_threshold([every], len(every), job.seed) is None  # no more than the cap
    assert eval_threshold([every], None, job.seed) is None


def test_node_hash_has_no_ties() -> None:
    ids = np.arange(200_000, dtype=np.int64)
    assert len(np.unique(node_hash(ids, 0))) == len(ids)


def test_old_partition_dirs_have_no_split_ids(cora4: tuple[Any, Path], tmp_path: Path) -> None:
    import shutil

    from gnnsched.datasets import open_partitions

    job, parts = cora4
    old = tmp_path / "old"
    shutil.copytree(parts, old)
    meta = json.loads((old / "gnnsched.json").read_text())
    del meta["splits"], meta["sha256"]["splits.npy"]
    (old / "gnnsched.json").write_text(json.dumps(meta))
    (old / "splits.npy").unlink()
    pset = open_partitions(old, verify=True)
    assert pset.split_ids() is None and eval_ids_of(job, pset) is None
    full = pset.full_graph()
    ids = open_partitions(parts, verify=False).split_ids()
    for name in ("train", "val", "test"):
        mask = getattr(full, f"{name}_mask")
        assert np.array_equal(np.sort(np.concatenate([d[name] for d in ids.values()])),
                              np.flatnonzero(mask))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_distdgl_and_the_reference_test_the_schedules_nodes(cora4: tuple[Any, Path],
                                                           tmp_path: Path) -> None:
    """A real DistDGL run over the same partitions tests exactly the sample that every plan
    of the job tests; the single-process reference scores the same number of nodes."""
    from gnnsched.datasets import open_partitions
    from gnnsched.runtime.distdgl import run_distdgl
    from gnnsched.spec import GPU, ClusterSpec, Machine

    job, parts = cora4
    job = replace(job, trainers=4, batch_size=64)
    gb = 1 << 30
    cluster = ClusterSpec("t", tuple(Machine(f"h{i}", 2, 8 * gb, 1e9, 1e9, (GPU(),), (i,))
                                     for i in range(4)))
    res = run_distdgl(cluster, job, parts, out_dir=tmp_path / "dd", epochs=1, timeout_s=100)
    assert res.feasible, res.reason
    tested = np.concatenate([np.load(tmp_path / "dd" / f"test-nodes-{r}.npy")
                             for r in range(4)])
    pset = open_partitions(parts, verify=False)
    assert np.array_equal(np.sort(tested), _global_sample(pset, job.seed))
    assert all(t["test_nodes"] == CAP for t in res.trainers)
    # the reference (the schedule of another seed split) scores the same nodes: same rate
    from gnnsched import metrics
    from gnnsched.runtime.reference import reference_train

    rate = metrics.majority_rate(pset.full_graph().labels[tested])
    ref = reference_train(replace(job, trainers=2), str(parts), [[0, 3], [1, 2]])
    assert ref.majority_rate == pytest.approx(rate) == pytest.approx(res.majority_rate)
