"""The store's data path: same-machine rows through shared memory, no retry spin, buffers
reused.

End to end on the local launcher (examples/lab4, Cora in 4 METIS parts; trainer 0's relay
fetcher runs on store0, so store0's rows reach it through shared memory, the rest through
ZeroMQ): the relay maps store0's table (an anonymous memfd: nothing in ``/dev/shm``) and reads
its rows from it, no feature row goes through a socket to the store's own machine, the test
accuracy equals the single-process reference, and nothing is left in ``/dev/shm`` after a
successful run or after store0 is SIGKILLed mid-training and the run recovers. Plus the pure
pieces: the table (build, attach, refusals), the NIC queue's per-receiver chunk bound and
retry, a refused send kept encoded, the buffer pool.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import zmq
from procs import survivors

from gnnsched.runtime.feature_table import FeatureTable
from gnnsched.runtime.nicqueue import NicQueue, OutTransfer
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import (
    CONTROL,
    BufferPool,
    Channel,
    Encoded,
    Kind,
    Message,
    make_socket,
)

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
MEMFD = "memfd:gnnsched-features"


# ------------------------------------------------------------------ the table


def _table(n: int = 50, dim: int = 3) -> tuple[FeatureTable, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = [rng.permutation(n)[:10], np.arange(40, 45)]
    rows = [rng.random((len(i), dim), dtype=np.float32) for i in ids]
    parts = [(i[:], r.copy()) for i, r in zip(ids, rows)]
    return FeatureTable.build(n, iter(parts)), np.concatenate(ids), np.concatenate(rows)


def test_table_stacks_parts_and_a_same_machine_process_maps_it_read_only() -> None:
    table, ids, rows = _table()
    try:
        assert table.fd >= 0, "no memfd on this box"
        got = table.feats[table.rows_of(ids)]
        np.testing.assert_array_equal(got, rows)
        missing = np.setdiff1d(np.arange(50), ids)[0]
        assert table.rows_of(np.array([ids[0], missing])) is None  # not stored here
        offer = table.offer()
        assert {"pid", "fd", "token", "boot_id", "size"} <= set(offer)
        other = FeatureTable.attach(json.loads(json.dumps(offer)), 50, 3)  # over JSON
        np.testing.assert_array_equal(other.feats[other.rows_of(ids)], rows)
        assert not other.feats.flags.writeable and not other.rowmap.flags.writeable
        assert other.fd == -1  # the mapping keeps the file alive; no descriptor is kept
        # what is mapped is what was offered: another token, another kernel, another width
        with pytest.raises(ValueError, match="token"):
            FeatureTable.attach({**offer, "token": "00" * 16}, 50, 3)
        with pytest.raises(ValueError, match="another kernel"):
            FeatureTable.attach({**offer, "boot_id": "elsewhere"}, 50, 3)
        with pytest.raises(ValueError, match="this run has"):
            FeatureTable.attach(offer, 50, 4)
        with pytest.raises(ValueError, match="no memfd"):
            FeatureTable.attach({"error": "no memfd here"}, 50, 3)
        with pytest.raises(OSError):
            FeatureTable.attach({**offer, "fd": 9999}, 50, 3)
        other.close()
    finally:
        table.close()
    private = FeatureTable.build(50, iter([(np.arange(5), np.ones((5, 3), np.float32))]),
                                 shared=False)
    assert private.fd == -1 and "error" in private.offer()
    np.testing.assert_array_equal(private.feats, np.ones((5, 3)))


def test_store_client_maps_only_its_own_machines_store(tmp_path: Path) -> None:
    """A gatherer asks the store on its own machine for the table over the data socket; the
    store offers it to that machine only."""
    from gnnsched.runtime.store import Store

    ctx = zmq.Context()
    coord = make_socket(ctx, zmq.ROUTER, CONTROL)
    cport = coord.bind_to_random_port("tcp://127.0.0.1")
    store = Store(argparse.Namespace(id="m0", machine="m0", host="127.0.0.1",
                                     coordinator=f"tcp://127.0.0.1:{cport}"))
    table, ids, rows = _table()
    store.table, store.machine_index = table, 0
    store.sock, store.endpoint = store.bind(zmq.ROUTER, __import__(
        "gnnsched.runtime.store", fromlist=["STORE_SOCKET"]).STORE_SOCKET)
    store.data = Channel(store.sock, "store data")
    store.node_part = np.zeros(50, np.int64)
    store.config = {"sharing": "fair"}
    thread = threading.Thread(target=store.run, daemon=True)
    logs: list[str] = []
    try:
        thread.start()
        near = StoreClient(ctx, {0: store.endpoint}, "near", b"near", machine=0,
                           shm=(50, 3), log=logs.append)
        far = StoreClient(ctx, {0: store.endpoint}, "far", b"far", machine=1, shm=(50, 3))
        deadline = time.monotonic() + 10
        while 0 not in near.tables and time.monotonic() < deadline:
            for sock in near.poll_sockets:
                if sock.poll(50):
                    near.handle(sock)
        assert 0 in near.tables, logs
        np.testing.assert_array_equal(near.tables[0].feats[near.tables[0].rows_of(ids)], rows)
        assert store.shm_clients == {b"near"} and not far.tables  # far never asked
        near.close()
        far.close()
    finally:
        store.stopping = True
        thread.join(5)
        store.close()
        ctx.destroy(linger=0)


# ------------------------------------------------------------------ no retry spin


def _transfer(tid: int, chunks: int, peer: bytes = b"a", local: bool = False) -> OutTransfer:
    msgs = [Message(Kind.ACK, {"req": tid, "chunk": i}) for i in range(chunks)]
    return OutTransfer(tid, peer, tid, "feat", 0, tid, 1, msgs, [100] * chunks, 0.0,
                       local=local)


def test_chunks_in_flight_per_receiver_are_bounded_and_acks_retry() -> None:
    """``peer_chunks`` (the socket's SNDHWM) keeps a receiver's pipe from ever filling: local
    transfers too; a receiver whose pipe was full anyway is retried once it acknowledges."""
    q = NicQueue("priority", window=10_000, peer_chunks=3)
    loc, rem = _transfer(1, 5, b"l", local=True), _transfer(2, 5, b"r")
    q.add(loc)
    q.add(rem)
    sent = []
    while (nxt := q.next_chunk()) is not None:
        sent.append(nxt)
    assert [t.tid for t, *_ in sent] == [1, 1, 1, 2, 2, 2]  # 3 each, local first
    t, msg, *_ = sent[0]
    q.ack(t.peer, t.req, msg["chunk"])
    assert q.next_chunk()[0] is loc  # one acknowledged: one more may go
    # a full pipe: the chunk goes back (as given: the store gives its encoded frames) and
    # the receiver waits for an acknowledgement, not for the next loop round
    t, msg, size, _ = sent[3]
    q.ack(t.peer, t.req, msg["chunk"])
    t, msg, size, _ = q.next_chunk()
    enc = Encoded(Kind.ACK, [b"frames"], 6)
    q.unsend(t, enc, size)
    assert t.chunks[t.next_chunk] is enc and q.next_chunk() is None
    q.retry(b"r")
    t2, again, *_ = q.next_chunk()
    assert t2 is rem and again is enc


def test_a_slow_same_machine_receiver_costs_no_spin(tmp_path: Path) -> None:
    """A store answering a large request to a slow receiver on its own machine (rows through
    the socket: this client does not map the table): every chunk is encoded exactly once and
    no send is refused -- the store waits for acknowledgements instead of retrying."""
    from gnnsched.runtime.store import STORE_SOCKET, Store

    n, dim = 16384, 4  # 256 KiB of rows: 64 chunks of 4 KiB
    rows = np.arange(n * dim, dtype=np.float32).reshape(n, dim)
    ctx = zmq.Context()
    coord = make_socket(ctx, zmq.ROUTER, CONTROL)
    cport = coord.bind_to_random_port("tcp://127.0.0.1")
    store = Store(argparse.Namespace(id="m0", machine="m0", host="127.0.0.1",
                                     coordinator=f"tcp://127.0.0.1:{cport}"))
    store.sock, store.endpoint = store.bind(zmq.ROUTER, STORE_SOCKET)
    store.data = Channel(store.sock, "store data")
    store.machine_index = 0
    store.node_part = np.zeros(n, np.int64)
    store.table = FeatureTable.build(n, iter([(np.arange(n), rows)]), shared=False)
    store.buffers = BufferPool()
    store.config = {"sharing": "priority", "chunk_bytes": 4096}
    encodes: list[Kind] = []
    plain = store.data.encode
    store.data.encode = lambda msg: (encodes.append(msg.kind), plain(msg))[1]  # type: ignore
    thread = threading.Thread(target=store.run, daemon=True)
    try:
        thread.start()
        client = StoreClient(ctx, {0: store.endpoint}, "slow", b"slow", machine=0)
        got = np.zeros_like(rows)

        def write(msg: Message) -> None:
            time.sleep(0.002)  # slow: the store's queue builds up behind this receiver
            r = msg.arrays["feats"]
            got[msg["start"]:msg["start"] + len(r)] = r

        req = client.request(0, Kind.FEAT_REQ, {"trainer": 0, "seq": 0, "src_machine": 0},
                             np.arange(n)[::-1].copy(), n, n, write)
        done: list[int] = []
        deadline = time.monotonic() + 30
        while not done and time.monotonic() < deadline:
            for sock in client.poll_sockets:
                if sock.poll(50):
                    done += client.handle(sock)
        assert done == [req]
        np.testing.assert_array_equal(got, rows[::-1])
        assert encodes == [Kind.FEAT_CHUNK] * 64
        assert store.send_full == 0, store.send_full
        assert store.local_bytes == rows.nbytes
        client.close()
    finally:
        store.stopping = True
        thread.join(5)
        store.close()
        ctx.destroy(linger=0)


def test_buffer_pool_reuses_only_unreferenced_buffers() -> None:
    pool = BufferPool(keep=2)
    a = pool.take(10, 4)
    assert a.shape == (10, 4) and a.dtype == np.float32 and a.flags.c_contiguous
    view = a[3:5]
    del a
    b = pool.take(10, 4)  # a's buffer is still referenced by a view
    assert pool.allocated == 2 and pool.reused == 0
    del view
    c = pool.take(8, 4)  # free again, and big enough
    assert pool.reused == 1
    frame = memoryview(c).cast("B")  # as ZeroMQ holds a zero-copy frame
    del c
    pool.take(8, 4)
    assert pool.reused == 1 and pool.allocated == 3
    del frame, b


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def reference(lab4: tuple) -> Any:
    from gnnsched.runtime.reference import reference_train

    cluster, job, plan, parts = lab4
    return reference_train(job, str(parts), [list(t.parts) for t in plan.trainers])


def _dev_shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


class _Maps:
    """Progress callback: what the role processes have mapped at the end of ``epoch``."""

    def __init__(self, run_dir: Path, epoch: int = 0) -> None:
        self.run_dir, self.epoch = run_dir, epoch
        self.maps: dict[str, str] = {}
        self.pids: set[int] = set()

    def __call__(self, kind: str, **kw: Any) -> None:  # at the epoch's last training step
        if kind != "batch" or kw.get("epoch") != self.epoch or kw.get("done") != kw.get(
                "total"):
            return
        table = json.loads((self.run_dir / "logs" / "processes.json").read_text())
        for name, p in table.items():
            try:
                self.maps[name] = Path(f"/proc/{p['pid']}/maps").read_text()
                self.pids.add(int(p["pid"]))
            except (OSError, KeyError, TypeError):
                pass
        self.pids |= {c.pid for c in psutil.Process().children(recursive=True)}


def _check_shm_path(res: Any, maps: _Maps, before: set[str]) -> None:
    fetcher = res.processes["fetcher:store0"]
    assert fetcher["shm_stores"] == [0] and fetcher["shm_rows"] > 0
    assert fetcher["shm_bytes"] == fetcher["shm_rows"] * 1433 * 4
    store0 = res.processes["store:store0"]
    assert store0["shm"] and store0["shm_clients"] >= 1
    # store1 has no gatherer on its machine: its rows stay in private (huge-page) memory
    assert not res.processes["store:store1"]["shm"]
    # no feature row went through a socket to the store's own machine; shm reads are not
    # sent bytes, and stores on other machines still send theirs
    assert store0["local_bytes"] == 0
    assert fetcher["network_bytes"] > 0 and res.processes["store:store1"]["network_bytes"] > 0
    # the trainer gathering its own rows (gpu1: no store there) maps nothing
    assert res.processes["trainer:1"]["shm_rows"] == 0
    # mid-run: the relay had store0's table mapped (the store's memfd), and no process of
    # the run had anything of /dev/shm mapped
    assert maps.maps, "the progress callback never saw the processes"
    assert MEMFD in maps.maps["fetcher:store0"] and MEMFD in maps.maps["store:store0"]
    assert not any("/dev/shm/" in m for m in maps.maps.values())
    left = {n for n in _dev_shm() - before if "gnnsched" in n or "memfd" in n}
    assert not left, f"left in /dev/shm: {sorted(left)}"
    assert not survivors(maps.pids), "a process outlived the run"


@pytest.mark.slow
def test_same_machine_rows_through_shared_memory(lab4: tuple, reference: Any,
                                                  tmp_path: Path) -> None:
    from gnnsched.commands.train import train
    from gnnsched.runtime.coordinator import RuntimeOptions

    cluster, job, plan, parts = lab4
    before = _dev_shm()
    maps = _Maps(tmp_path / "run")
    res = train(cluster, job, plan, policy="gnnsched", out_dir=tmp_path / "run",
                partitions=parts, progress=maps,
                options=RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10))
    assert res.test_accuracy == reference.test_accuracy, (res.test_accuracy, reference)
    assert res.val_accuracy == pytest.approx(reference.val_accuracy, abs=1e-9)
    _check_shm_path(res, maps, before)
    log = (tmp_path / "run" / "logs" / "fetcher-store0.log").read_text()
    assert "reading store 0's rows from shared memory" in log, log[-2000:]


@pytest.mark.slow
def test_killed_store_leaves_nothing_and_recovery_maps_again(lab4: tuple, reference: Any,
                                                             tmp_path: Path) -> None:
    """store0 (whose table the relay maps) is SIGKILLed mid-epoch: the run recovers (a new
    store0, a new relay that maps the new table), trains like the reference, and nothing of
    either table is left anywhere."""
    from gnnsched.commands.train import train
    from gnnsched.runtime.coordinator import Fault, RuntimeOptions

    cluster, job, plan, parts = lab4
    before = _dev_shm()
    maps = _Maps(tmp_path / "run", epoch=1)  # after the recovery: the new processes
    opts = RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10,
                          checkpoint_every=4, heartbeat_s=0.5, dead_after_s=5.0,
                          faults=(Fault("store:store0", 12),))
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=parts,
                options=opts, progress=maps)
    assert len(res.recoveries) == 1 and res.recoveries[0]["role"] == "store:store0"
    assert "SIGKILL" in res.recoveries[0]["how"]
    assert res.processes["store:store0"]["generation"] >= 1
    assert res.test_accuracy == reference.test_accuracy, (res.test_accuracy, reference)
    _check_shm_path(res, maps, before)


class _Stores:
    """A StoreClient stand-in: store 0's table mapped, store 1 answered by hand."""

    def __init__(self, table: FeatureTable) -> None:
        self.tables = {0: table}
        self.asked: list[tuple[int, np.ndarray, Any]] = []

    def request(self, machine: int, kind: Kind, ints: dict, nodes: np.ndarray, *rest: Any
                ) -> int:
        self.asked.append((machine, nodes, rest[-1]))
        return len(self.asked)


@pytest.mark.parametrize("layout", ["mixed", "one run", "all here"])
def test_gather_reads_same_machine_rows_into_the_batch(layout: str) -> None:
    """Rows of the same-machine store come from its table (no request), in place when they
    are one run of the batch; the other store's rows still arrive as chunks."""
    from gnnsched.runtime.fetcher import Gather

    n, dim = 40, 3
    feats = np.arange(n * dim, dtype=np.float32).reshape(n, dim)
    node_part = (np.arange(n) >= 20).astype(np.int64)  # nodes 0..19 on store 0, rest store 1
    table = FeatureTable.build(n, iter([(np.arange(20), feats[:20])]), shared=False)
    stores = _Stores(table)
    done: dict[tuple[int, int], np.ndarray] = {}
    g = Gather(stores, node_part, [0, 1], dim, 0,  # type: ignore[arg-type]
               lambda w, s, f, t: done.update({(w, s): f.copy()}))
    nodes = {"mixed": np.array([25, 3, 31, 7, 0, 22]), "one run": np.array([4, 9, 2, 30, 21]),
             "all here": np.array([5, 1, 19])}[layout]
    g.start(0, 1, nodes)
    assert g.shm_rows == int((nodes < 20).sum()) and g.shm_bytes == g.shm_rows * dim * 4
    remote = nodes[nodes >= 20]
    assert [m for m, *_ in stores.asked] == ([1] if len(remote) else [])
    if len(remote):
        _, asked, write = stores.asked[0]
        np.testing.assert_array_equal(asked, remote)
        write(Message(Kind.FEAT_CHUNK, {"req": 1, "chunk": 0, "chunks": 1, "start": 0,
                                        "total": len(remote)}, {"feats": feats[remote]}))
        g.owner.pop(1)
        g.jobs[(0, 1)].reqs.clear()
        g._finish((0, 1))
    np.testing.assert_array_equal(done[(0, 1)], feats[nodes])
