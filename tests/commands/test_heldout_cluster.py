"""The held-out set-up (issue 51, Done when 1): a user's first day on a cluster and a graph the
project has never planned for, with the commands a newcomer runs.

A 4-host uneven emulated cluster of its own (two stores without GPUs, GPU hosts of speed 1.0
and 0.5), Coauthor CS (a shared dataset no evaluation shape uses), then ``gnnsched cluster
calibrate``, ``plan`` (gnnsched's and colocation's), ``cluster up`` and ``train``: the epoch
``plan`` says ``train`` will measure is within 15% of the measured one for both plans. Every
command runs with its defaults (FIFO NICs, the smallest D that fits this box), as a newcomer
would run them.

The rule was fixed before the first run and has not moved. gnnsched's plan missed it at
first (measured 17-25% slower than predicted): its samplers waited on a busy store's FIFO NIC
for every layer's remote hop, which the simulator did not charge. It now does (a round trip
per layer behind the bytes queued at both NICs, :meth:`gnnsched.simulator.engine._Epoch.
hop_wait`), and the calibration takes sampling net of that wait, so both plans must hold.

Needs root, network namespaces and ``../shared/datasets/coauthor_cs.npz``; skipped with the
reason otherwise. Slow: ~4 minutes on 2 cores (2 epochs after a warm-up per run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gnnsched.cli import main

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
DATA = SHARED / "coauthor_cs.npz"
TOLERANCE = 0.15
pytestmark = [pytest.mark.slow, pytest.mark.netns]


def _why_skip() -> str | None:
    from gnnsched import api

    if not DATA.is_file():
        return f"shared dataset {DATA} is absent"
    return api.netns_unavailable_reason()


CLUSTER = {
    "name": "heldout-cs", "storage": "shared",
    "machines": [
        {"name": "store0", "cpus": 2, "memory_gb": 4, "nic_gbps": 0.1, "partitions": [0, 1]},
        {"name": "store1", "cpus": 2, "memory_gb": 4, "nic_gbps": 0.1, "partitions": [2, 3]},
        {"name": "gpu0", "cpus": 1, "memory_gb": 4, "nic_gbps": 0.2,
         "gpus": [{"kind": "a10", "speed": 1.0, "memory_gb": 16}]},
        {"name": "gpu1", "cpus": 1, "memory_gb": 4, "nic_gbps": 0.2,
         "gpus": [{"kind": "t4", "speed": 0.5, "memory_gb": 16}]},
    ]}
JOB = {"name": "cs-sage", "dataset": str(DATA), "feature_dim": 128,
       "features": {"normalize": "row"}, "num_parts": 4, "part_method": "metis",
       "model": "sage", "hidden": 64, "fanouts": [10, 10], "batch_size": 16, "epochs": 3,
       "eval_every": 3, "evaluation": {"max_nodes": 1000}, "trainers": 2, "seed": 0,
       "prefetch": 2}


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, (argv, out.out[-2000:], out.err[-2000:])
    return out.out


@pytest.mark.skipif(_why_skip() is not None, reason=str(_why_skip()))
def test_a_new_cluster_and_graph_are_predicted_within_15_percent(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cluster, job, cost = tmp_path / "uneven.yaml", tmp_path / "job.yaml", tmp_path / "cost.json"
    cluster.write_text(yaml.safe_dump(CLUSTER, sort_keys=False))
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    c, j = str(cluster), str(job)
    _cli(capsys, "profile", "--job", j, "--samples", "8", "--out", str(cost))
    said = _cli(capsys, "cluster", "calibrate", "--cluster", c, "--job", j, "--cost",
                str(cost), "--work", str(tmp_path / "calibrate"))
    assert (tmp_path / "uneven.calibration.json").is_file(), said
    predicted: dict[str, float] = {}
    plans: dict[str, Path] = {}
    for placer in ("gnnsched", "colocation"):
        plans[placer] = tmp_path / f"plan-{placer}.json"
        out = json.loads(_cli(capsys, "plan", "--cluster", c, "--job", j, "--cost", str(cost),
                              "--placer", placer, "--budget", "5", "--out",
                              str(plans[placer]), "--json"))
        assert out["calibration"]["file"] == str(tmp_path / "uneven.calibration.json")
        predicted[placer] = out["steady_epoch_time_s"]["plan"]
    measured: dict[str, list[Any]] = {p: [] for p in plans}

    def train(placer: str, attempt: int) -> None:
        run = tmp_path / f"run-{placer}-{attempt}"
        _cli(capsys, "train", "--cluster", c, "--job", j, "--plan", str(plans[placer]),
             "--launcher", "netns", "--out", str(run), "--cost", str(cost), "--json")
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        measured[placer].append(next(r for r in reversed(records) if r.get("type") == "run"))

    def missed(placer: str) -> bool:
        real = measured[placer][-1]["real_epoch_time_s"]
        return abs(predicted[placer] / real - 1) > TOLERANCE

    _cli(capsys, "cluster", "up", "--cluster", c)
    try:
        for placer in plans:
            train(placer, 1)
        # The rule, fixed before any run: each plan's prediction within 15% of a measured
        # epoch; a plan that misses is measured once more (a shared box's load can stretch
        # one run), and the second run decides. Both runs are printed.
        for placer in [p for p in plans if missed(p)]:
            train(placer, 2)
    finally:
        main(["cluster", "down", "--cluster", c])
        capsys.readouterr()
    report = {p: (predicted[p], [m["real_epoch_time_s"] for m in measured[p]],
                  measured[p][-1]["dilation"]) for p in plans}
    print("held-out (predicted s, measured real-cluster s per run, D):", report)
    assert not missed("colocation"), ("colocation", report)
    assert not missed("gnnsched"), ("gnnsched", report)
