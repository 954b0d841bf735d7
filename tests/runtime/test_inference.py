"""``gnnsched predict``: full-neighbour layer-wise inference, single-process and distributed.

Cora in 4 METIS parts; models are freshly initialised checkpoints in a run folder (what
trainer 0 writes), so exactness is tested without training. Distributed predictions on 4
local hosts equal the single-process pass to 1e-5 on the class scores (slow); the outputs
do not depend on the chunk size; bad input is refused before any work, naming the file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from test_export import fake_run

from gnnsched.commands import predict as cmd
from gnnsched.runtime.inference import (
    MANIFEST,
    load_outputs,
    load_trained,
    reference_inference,
)
from gnnsched.spec import SpecError, cluster_from_dict


@pytest.fixture(scope="module")
def cora4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gnnsched.datasets import load_dataset, partition_graph

    parts = tmp_path_factory.mktemp("cora4")
    partition_graph(load_dataset("cora"), 4, parts, method="metis", seed=0)
    return parts


def four_hosts(tmp_path: Path) -> Path:
    """Four hosts, one partition each (written as a cluster file)."""
    import yaml

    data = {"name": "four", "machines": [
        {"name": f"h{i}", "cpus": 2, "memory_gb": 4, "nic_gbps": 1, "partitions": [i]}
        for i in range(4)]}
    cluster_from_dict(data)
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _args(run: Path, **kw) -> argparse.Namespace:
    base = dict(run=str(run), cluster=None, checkpoint=None, out=None, embeddings=False,
                partitions=None, data_dir=None, job=None, launcher="local", chunk=4096,
                threads=1, request_timeout=60.0, single_process=False, json=True)
    base.update(kw)
    return argparse.Namespace(**base)


def test_outputs_do_not_depend_on_the_chunk(cora4: Path, tmp_path: Path) -> None:
    from gnnsched.datasets import open_partitions

    pset = open_partitions(str(cora4), verify=False)
    for kind in ("sage", "gcn", "gat"):
        trained = load_trained(fake_run(tmp_path / kind, kind, 1433, 7))
        whole = reference_inference(trained, pset, chunk=10**6, embeddings=True)
        small = reference_inference(trained, pset, chunk=97, embeddings=True)
        np.testing.assert_allclose(small.probs, whole.probs, atol=1e-6)
        np.testing.assert_allclose(small.embeddings, whole.embeddings, atol=1e-5)
        assert whole.probs.shape == (2708, 7) and np.allclose(whole.probs.sum(1), 1, atol=1e-5)


def test_single_process_writes_every_partition(cora4: Path, tmp_path: Path, capsys) -> None:
    run = fake_run(tmp_path / "run", "sage", 1433, 7)
    assert cmd.run(_args(run, single_process=True, partitions=str(cora4),
                         embeddings=True)) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    out = Path(res["out"])
    assert out == run / "predictions" and (out / MANIFEST).is_file()
    man = json.loads((out / MANIFEST).read_text())
    assert set(man["files"]) == {"0", "1", "2", "3"} and man["full"]["test_nodes"] == 1000
    got = load_outputs(out)
    assert np.array_equal(got["nodes"], np.arange(2708))
    assert got["emb"].shape == (2708, 16) and got["probs"].dtype == np.float32
    assert np.array_equal(got["pred"], got["probs"].argmax(1))
    assert not list(tmp_path.glob(".*partial*")) and not list(run.glob(".*partial*"))


def test_bad_input_is_refused_before_any_work(cora4: Path, tmp_path: Path) -> None:
    cluster = four_hosts(tmp_path)
    empty = tmp_path / "no-checkpoints"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(SpecError, match="holds no checkpoint") as e:
        cmd.run(_args(empty, cluster=str(cluster), partitions=str(cora4)))
    assert "checkpoints" in str(e.value) and "gnnsched train" in str(e.value)
    run = fake_run(tmp_path / "run", "sage", 1433, 7)
    other = fake_run(tmp_path / "other", "gcn", 1433, 7, hidden=8)
    with pytest.raises(SpecError, match="another job or model") as e:
        cmd.run(_args(run, cluster=str(cluster), partitions=str(cora4),
                      checkpoint=str(other / "checkpoints" / "latest.pt")))
    assert "model 'gcn' vs 'sage'" in str(e.value)
    wide = fake_run(tmp_path / "wide", "sage", 500, 7)  # not Cora's 1433 features
    with pytest.raises(SpecError, match="feature_dim") as e:
        cmd.run(_args(wide, cluster=str(cluster), partitions=str(cora4)))
    assert str(cora4) in str(e.value)
    two = fake_run(tmp_path / "two", "sage", 1433, 7, num_parts=2)
    with pytest.raises(SpecError, match="num_parts"):
        cmd.run(_args(two, cluster=str(cluster), partitions=str(cora4)))
    done = tmp_path / "done"
    done.mkdir()
    (done / MANIFEST).write_text("{}")
    with pytest.raises(SpecError, match="already holds predictions") as e:
        cmd.run(_args(run, cluster=str(cluster), partitions=str(cora4), out=str(done)))
    assert str(done) in str(e.value)
    with pytest.raises(SpecError, match="--cluster"):
        cmd.run(_args(run, partitions=str(cora4)))
    assert not (tmp_path / "logs").exists() and not list(tmp_path.glob(".*partial*"))


@pytest.mark.slow
def test_a_failed_prediction_leaves_nothing_that_looks_complete(cora4: Path,
                                                                tmp_path: Path) -> None:
    """Hosts that do not answer in time: the run fails, every process is stopped, and
    --out is not created (the staged outputs are removed)."""
    run = fake_run(tmp_path / "run", "sage", 1433, 7)
    out = tmp_path / "pred"
    code = cmd.run(_args(run, cluster=str(four_hosts(tmp_path)), partitions=str(cora4),
                         out=str(out), request_timeout=0.01))
    assert code == 2 and not out.exists()
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_distributed_equals_single_process(cora4: Path, tmp_path: Path, kind: str,
                                           capsys) -> None:
    """4 local hosts, one partition each: every node's class scores equal the single-process
    full-neighbour pass to 1e-5, and so do the embeddings."""
    from gnnsched.datasets import open_partitions

    run = fake_run(tmp_path / "run", kind, 1433, 7, seed=3)
    out = tmp_path / "pred"
    assert cmd.run(_args(run, cluster=str(four_hosts(tmp_path)), partitions=str(cora4),
                         out=str(out), embeddings=True, chunk=300)) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = load_outputs(out)
    ref = reference_inference(load_trained(run), open_partitions(str(cora4), verify=False),
                              embeddings=True)
    assert np.array_equal(got["nodes"], ref.nodes)
    np.testing.assert_allclose(got["probs"], ref.probs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got["emb"], ref.embeddings, atol=1e-5, rtol=1e-5)
    assert np.array_equal(got["pred"], ref.pred)
    assert res["mode"] == "distributed" and len(res["hosts"]) == 4
    assert res["bytes_read"] > 0 and all(r["fetched_rows"] > 0 for r in res["roles"].values())
    assert (out / "logs" / "infer-h0.log").is_file()
    assert not list(tmp_path.glob(".*partial*"))


PHYSICS = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "coauthor_physics.npz"


@pytest.mark.slow
@pytest.mark.netns
def test_physics_on_four_emulated_hosts_equals_single_process(tmp_path: Path,
                                                              capsys) -> None:
    """Issue 56's exactness on its second graph: Coauthor Physics (features projected to 64,
    4 METIS parts) on 4 emulated hosts (network namespaces, shaped NICs, the netns launcher):
    every node's class scores equal the single-process full-neighbour pass to 1e-5."""
    import os

    import yaml

    from gnnsched.datasets import load_dataset, open_partitions, partition_graph
    from gnnsched.runtime import netns

    if not PHYSICS.is_file():
        pytest.skip(f"shared dataset {PHYSICS} is absent")
    why = netns.unavailable_reason()
    if why is not None:
        pytest.skip(f"emulated cluster unavailable: {why}")
    parts = tmp_path / "physics4"
    graph = load_dataset(str(PHYSICS), feature_dim=64, seed=0)
    partition_graph(graph, 4, parts, method="metis", seed=0)
    data = {"name": f"phys{os.getpid() % 100000}", "machines": [
        {"name": f"h{i}", "cpus": 2, "memory_gb": 4, "nic_gbps": 1, "partitions": [i]}
        for i in range(4)]}
    cluster = tmp_path / "four.yaml"
    cluster.write_text(yaml.safe_dump(data))
    run = fake_run(tmp_path / "run", "sage", 64, graph.num_classes, seed=5,
                   dataset=str(PHYSICS), feature_dim=64)
    out = tmp_path / "pred"
    net = netns.EmulatedCluster(cluster_from_dict(data, str(cluster))).up()
    try:
        assert cmd.run(_args(run, cluster=str(cluster), partitions=str(parts), out=str(out),
                             launcher="netns", chunk=4096)) == 0
    finally:
        net.down()
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = load_outputs(out)
    ref = reference_inference(load_trained(run), open_partitions(str(parts), verify=False))
    assert np.array_equal(got["nodes"], ref.nodes) and len(ref.nodes) == graph.num_nodes
    np.testing.assert_allclose(got["probs"], ref.probs, atol=1e-5, rtol=0)
    assert res["mode"] == "distributed" and len(res["hosts"]) == 4 and res["bytes_read"] > 0
    assert [n for n in netns.list_namespaces() if n in net.namespaces] == []
