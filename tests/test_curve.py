"""ZeroMQ CURVE: with ``curve: true`` only holders of the cluster's secret key get anything.

A real store (Cora, 2 parts) with the cluster's keys serves a client that has them, and gives
nothing -- no handshake, so not one byte of data and not one request served -- to a client
without CURVE, or with CURVE and a key pair of its own that knows the store's public key.
A real training run with ``curve: true`` completes (every socket of every role encrypted and
authenticated), and ``gnnsched keys`` writes a private secret.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
import zmq

from gnnsched.commands.keys import create_keys
from gnnsched.runtime import transport as tp
from gnnsched.runtime.store import StoreClient

ROOT = Path(__file__).resolve().parents[1]
LAB4 = ROOT / "examples" / "lab4"


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gnnsched.datasets import load_dataset, partition_graph

    out = tmp_path_factory.mktemp("cora2")
    partition_graph(load_dataset("cora"), 2, out, method="metis", seed=0)
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tp.CurveKeys:
    folder = tmp_path_factory.mktemp("keys") / "cluster-keys"
    create_keys(folder)
    return tp.load_keys(folder)


@pytest.fixture()
def store(cora_parts: Path, keys: tp.CurveKeys) -> Any:
    """A real Store with CURVE on, serving in a thread; its coordinator is a stand-in."""
    from gnnsched.runtime.store import Store

    ctx = zmq.Context()
    auth = tp.start_authenticator(ctx, keys)
    coord = tp.make_socket(ctx, zmq.ROUTER, tp.CONTROL, curve=keys, server=True)
    port = coord.bind_to_random_port("tcp://127.0.0.1")
    args = argparse.Namespace(id="m0", machine="m0", host="127.0.0.1",
                              coordinator=f"tcp://127.0.0.1:{port}", curve_keys=keys.folder)
    s = Store(args)
    s.config = {"machines": ["m0", "m1"], "part_store": [0, 0], "partitions": str(cora_parts),
                "node_part_file": str(cora_parts / "node_part.npy"), "num_classes": 7,
                "sharing": "fair", "verify_partitions": True}
    s.setup()
    thread = threading.Thread(target=s.run, daemon=True)
    thread.start()
    yield s, ctx
    s.stopping = True
    thread.join(5)
    s.close()
    s.auth.stop()
    s.ctx.destroy(linger=0)
    auth.stop()
    ctx.destroy(linger=0)


def _ask(client: StoreClient, wait: float) -> np.ndarray | None:
    """Request the features of nodes 0..4; the rows, or None if nothing came back."""
    got: dict[str, np.ndarray] = {}
    client.request(0, tp.Kind.FEAT_REQ, {"trainer": 0, "seq": 0, "src_machine": 1},
                   np.arange(5), 5, 5, lambda m: got.update(rows=m.arrays["feats"].copy()))
    end = time.monotonic() + wait
    while "rows" not in got and time.monotonic() < end:
        for sock in client.poll_sockets:
            if sock.poll(50):
                client.handle(sock)
    return got.get("rows")


def test_client_with_the_cluster_keys_is_served(store: Any, keys: tp.CurveKeys,
                                                cora_parts: Path) -> None:
    from gnnsched.datasets import open_partitions

    s, ctx = store
    client = StoreClient(ctx, {0: s.endpoint}, "insider", b"insider", machine=1, curve=keys)
    rows = _ask(client, 20.0)
    client.close()
    assert rows is not None and rows.shape == (5, 1433)
    np.testing.assert_array_equal(rows, open_partitions(cora_parts).full_graph().features[:5])
    assert s.served["feat"] == 1


def test_client_without_keys_gets_nothing(store: Any) -> None:
    """No CURVE at all: the handshake cannot even start; the store never sees the request."""
    s, ctx = store
    client = StoreClient(ctx, {0: s.endpoint}, "stranger", b"stranger", machine=1)
    assert _ask(client, 2.0) is None
    client.close()
    assert s.served["feat"] == 0 and s.rejected == 0  # nothing reached the store's code


def test_client_with_other_keys_is_rejected(store: Any, keys: tp.CurveKeys) -> None:
    """CURVE with its own key pair and the store's (public) key: ZAP refuses the client."""
    s, ctx = store
    public, secret = zmq.curve_keypair()
    sock = tp.make_socket(ctx, zmq.DEALER, tp.BULK, identity=b"impostor")
    sock.curve_serverkey = keys.public
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.setsockopt(zmq.SNDTIMEO, 2000)  # the refused handshake may drop the only pipe first
    sock.connect(s.endpoint)
    req = {"req": 1, "trainer": 0, "seq": 0, "src_machine": 1}
    try:
        sock.send_multipart(tp.encode(tp.Message(tp.Kind.FEAT_REQ, req,
                                                 {"nodes": np.arange(5)})))
    except zmq.Again:
        pass  # no connection to send on: refused before the request was queued
    assert not sock.poll(2000)  # nothing comes back
    sock.close(0)
    assert s.served["feat"] == 0


def test_keys_command_writes_a_private_secret(tmp_path: Path, capsys: Any) -> None:
    from gnnsched.cli import main
    from gnnsched.spec import SpecError

    cluster = tmp_path / "cluster.yaml"
    shutil.copy(LAB4 / "cluster.yaml", cluster)
    assert main(["keys", "--cluster", str(cluster)]) == 0
    out = capsys.readouterr().out
    assert "curve: true" in out and "keys_dir: keys" in out
    secret = tmp_path / "keys" / "cluster.key_secret"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert tp.load_keys(tmp_path / "keys").secret
    with pytest.raises(SpecError, match="keys already exist"):
        create_keys(tmp_path / "keys")
    old = secret.read_bytes()
    assert main(["keys", "--cluster", str(cluster), "--force"]) == 0
    assert secret.read_bytes() != old


@pytest.mark.slow
def test_training_with_curve_on(tmp_path: Path) -> None:
    """lab4 with ``curve: true``: every role, relay and store talks CURVE, and trains."""
    from gnnsched.commands.train import train
    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.spec import load_cluster, load_job

    data = yaml.safe_load((LAB4 / "cluster.yaml").read_text())
    data.update(curve=True, keys_dir="keys")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(data))
    create_keys(tmp_path / "keys")
    cluster = load_cluster(tmp_path / "cluster.yaml")
    assert cluster.curve and cluster.keys_dir == str(tmp_path / "keys")
    job = replace(load_job(LAB4 / "job.yaml"), epochs=1)
    parts = tmp_path / "parts"
    partition_graph(load_dataset("cora"), 4, parts, method="metis", seed=0)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=RuntimeOptions(start_timeout=240, request_timeout=60))
    assert res.test_accuracy > 0.5 and res.bytes_by_process["fetcher:store0"] > 0
    assert "CURVE on" in (tmp_path / "run" / "logs" / "coordinator.log").read_text()
