"""Graph-store server: one process per store machine, serving all partitions that machine holds.

It answers two requests from samplers and fetchers (``SAMPLE_REQ``: sample in-neighbours of
these nodes; ``FEAT_REQ``: feature rows of these nodes) and sends every response through one
:class:`~gnnsched.runtime.nicqueue.NicQueue`, because the machine's NIC is the contended
resource and only one queue per NIC can order it: responses are cut into chunks that leave in
the policy's order within send windows (:mod:`.nicqueue` says how). The store tells the
coordinator when a transfer is queued and when its last chunk is acknowledged (the policy's
``on_transfer_done``). Gradients come first, as in the cost model: once the trainers
all-reduce (every one has reached the barrier), the coordinator ``hold``s this store's new
chunks of later iterations into their machines when they would share a NIC with the gradients,
for the gradients' time on the wire (ring bytes / bandwidth; the rest of the all-reduce call
leaves the NIC to prefetch), so feature prefetch does not slow the barrier.

Feature rows are gathered from one stacked
:class:`~gnnsched.runtime.feature_table.FeatureTable` straight into the buffer the chunks are
sent from (pooled, :class:`~gnnsched.runtime.transport.BufferPool`; chunks are views of it,
handed to ZeroMQ without a copy). The table lives in anonymous shared memory: a receiver on
the store's own machine maps it read-only and gathers those rows itself, so they never touch a
socket (the store's ``local_bytes`` count only what still does).

:class:`~gnnsched.runtime.store_client.StoreClient` is the other side (used by samplers and
fetchers). :class:`PartGraph` wraps one loaded partition for sampling and feature look-ups in
original node ids; samplers on a store's machine use it for local hops.

The NIC queue's, the table's and the client's names are importable from here as well.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.feature_table import FeatureTable
from gnnsched.runtime.ledger import section
from gnnsched.runtime.nicqueue import (
    CHUNK_BYTES,
    PEER_WINDOW_BYTES,
    RETRY_S,
    URGENT_RETRY_S,
    WINDOW_BYTES,
    Holds,
    NicQueue,
    OutTransfer,
    chunked,
)
from gnnsched.runtime.qos import URGENT_TOS
from gnnsched.runtime.role import Role
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import (
    BULK_TOS,
    BufferPool,
    Channel,
    Encoded,
    Kind,
    Message,
    MessageError,
    SocketOptions,
    ctrl,
    ctrl_body,
)

STORE_SOCKET = SocketOptions(sndhwm=8, rcvhwm=256, sndbuf=128 << 10, rcvbuf=1 << 20,
                             tos=BULK_TOS)  # replies are the bulk data
URGENT_SOCKET = replace(STORE_SOCKET, tos=URGENT_TOS)  # ... except the head transfer's


# --------------------------------------------------------------------------------------
# A partition, addressed in original node ids


class PartGraph:
    """One partition's structure and features, looked up by original node id.

    ``sample`` runs DGL's ``sample_neighbors`` on the partition's local graph (which holds
    every in-edge of its inner nodes) with DGL's RNG seeded per request, so the same request
    gives the same edges in a store, a sampler or the single-process reference.
    """

    def __init__(self, part: Any, orig_nids: np.ndarray, new_nids: np.ndarray,
                 keep_features: bool = True) -> None:
        from gnnsched.compat import dgl

        self.part_id = int(part.part_id)
        g = part.graph
        inner_new = np.asarray(part.inner_new_ids, dtype=np.int64)
        self.lo = int(inner_new.min()) if len(inner_new) else 0
        span = int(inner_new.max()) - self.lo + 1 if len(inner_new) else 0
        self.new_nids = new_nids
        self.local_of = np.full(span, -1, dtype=np.int64)
        self.local_of[inner_new - self.lo] = part.inner_local.numpy()
        self.row_of = np.full(span, -1, dtype=np.int64)
        self.row_of[inner_new - self.lo] = np.arange(len(inner_new))
        self.local_orig = orig_nids[g.ndata[dgl.NID].numpy()]
        self.graph = g.formats(["csc"])  # in-edge sampling needs CSC: build it once
        self.features = part.features.numpy() if keep_features else None
        self.labels = part.labels.numpy()
        self.inner_orig = np.asarray(part.inner_orig_ids, dtype=np.int64)
        self.masks = {k: getattr(part, f"{k}_mask").numpy().astype(bool)
                      for k in ("train", "val", "test")}

    def _index(self, nodes: np.ndarray, table: np.ndarray) -> np.ndarray:
        new = self.new_nids[nodes] - self.lo if len(nodes) else np.zeros(0, np.int64)
        ok = (new >= 0) & (new < len(table))
        idx = np.where(ok, table[np.clip(new, 0, max(len(table) - 1, 0))], -1) \
            if len(table) else np.full(len(nodes), -1)
        if (idx < 0).any():
            bad = int(nodes[np.argmax(idx < 0)])
            raise MessageError(f"node {bad} is not owned by partition {self.part_id}")
        return idx

    def sample(self, nodes: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """In-neighbours of ``nodes`` (original ids), at most ``fanout`` each (-1: all)."""
        import torch

        from gnnsched.compat import dgl

        if len(nodes) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        local = torch.from_numpy(self._index(nodes, self.local_of))
        dgl.seed(int(seed))
        sg = dgl.sampling.sample_neighbors(self.graph, local, int(fanout), edge_dir="in",
                                           copy_ndata=False, copy_edata=False)
        u, v = sg.edges()
        return self.local_orig[u.numpy()], self.local_orig[v.numpy()]

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """Feature rows of ``nodes`` (original ids), a new contiguous float32 array."""
        return self.features[self._index(nodes, self.row_of)]

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(original ids, labels) of this part's train / val / test nodes."""
        m = self.masks[name]
        return self.inner_orig[m], self.labels[m]


def verify_files(partitions: str, parts: list[int] | None) -> int:
    """Check the sha256 of partition files against ``gnnsched.json`` before trusting them
    (:func:`gnnsched.datasets.partition.verify_checksums`).

    ``parts``: verify the files of these parts (``partN/...``); ``None``: the shared files
    only (node map, DGL config). Each store verifies what it loads, so the cost is spread over
    the stores and equals one extra read of the data. Returns the bytes hashed; raises
    :class:`~gnnsched.spec.SpecError` naming the missing or corrupted file.
    """
    from gnnsched.datasets.partition import verify_checksums

    if parts is None:
        return verify_checksums(partitions, parts=(), shared=True)
    return verify_checksums(partitions, parts=parts, shared=False)


def load_parts(partitions: str, parts: list[int], keep_features: bool = True,
               verify: bool = False) -> dict[int, PartGraph]:
    from gnnsched.datasets import open_partitions

    if verify:
        verify_files(partitions, parts)
    pset = open_partitions(partitions, verify=False)
    return {p: PartGraph(pset.load_part(p), pset.orig_nids, pset.new_nids, keep_features)
            for p in parts}




# --------------------------------------------------------------------------------------
# The server


class Store(Role):
    """The store role: load partitions, serve requests, send in the policy's order."""

    role = "store"

    def setup(self) -> None:
        me = self.args.machine
        cfg = self.config
        self.machine_index = cfg["machines"].index(me)
        self.my_parts = [p for p, m in enumerate(cfg["part_store"]) if m == self.machine_index]
        self.doing = f"loading partitions {self.my_parts}"
        t0 = time.monotonic()
        self.node_part = np.load(cfg["node_part_file"], allow_pickle=False)
        self.parts, self.table = self.load_features()
        self.buffers = BufferPool(keep=4)  # gathered rows, reused once sent
        self.log(f"loaded partitions {self.my_parts} in {time.monotonic() - t0:.2f} s"
                 + (" (checksums verified)" if cfg.get("verify_partitions") else "")
                 + ("; rows in shared memory" if self.table.fd >= 0 else ""))
        self.sock, self.endpoint = self.bind(zmq.ROUTER, STORE_SOCKET)
        self.data = Channel(self.sock, f"store {me} data")
        self.urgent: Channel | None = None  # the urgent band's socket (send only)
        self.urgent_endpoint: str | None = None
        if cfg.get("urgent_band") and cfg.get("sharing") == "priority":
            sock, self.urgent_endpoint = self.bind(zmq.ROUTER, URGENT_SOCKET)
            self.urgent = Channel(sock, f"store {me} urgent")
        self.doing = f"serving partitions {self.my_parts}"

    def shares_rows(self) -> bool:
        """Whether the table goes into shared memory: when a feature gatherer runs on this
        machine (a trainer whose ``fetch_at`` is here: its relay, or itself), unless the
        config's ``shm_features`` says (``true``: always, ``false``: never). Private memory
        otherwise: the OS backs it with huge pages, which shared memory here does not get."""
        want = self.config.get("shm_features")
        if want is not None:
            return bool(want)
        return any(t.get("fetch_at") == self.args.machine
                   for t in self.config.get("trainers", ()))

    def load_features(self) -> tuple[dict[int, PartGraph], FeatureTable]:
        """Load the served partitions one by one, their rows into one :class:`FeatureTable`
        (in shared memory if :meth:`shares_rows`); each part's own copy of its rows is dropped
        once in the table, so loading holds one extra part at most. The parts' ``features``
        are views of the table afterwards."""
        cfg = self.config
        parts: dict[int, PartGraph] = {}

        def rows() -> Iterable[tuple[np.ndarray, Any]]:
            for p in self.my_parts:
                pg = load_parts(cfg["partitions"], [p],
                                verify=bool(cfg.get("verify_partitions", False)))[p]
                parts[p] = pg
                block, pg.features = pg.features, None
                yield pg.inner_orig, block

        table = FeatureTable.build(len(self.node_part), rows(), cfg.get("feature_dim"),
                                   shared=self.shares_rows())
        at = 0
        for pg in parts.values():
            pg.features = table.feats[at:at + len(pg.inner_orig)]
            at += len(pg.inner_orig)
        return parts, table

    def ready_fields(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "urgent_endpoint": self.urgent_endpoint,
                "parts": self.my_parts}

    def announce(self) -> None:
        """Tell the coordinator the seeds and labels of each partition (they live here)."""
        for p, pg in self.parts.items():
            arrays = {}
            for name in ("train", "val", "test"):
                ids, labels = pg.split(name)
                arrays[name], arrays[f"{name}_labels"] = ids, labels
            self.control.send(Message(Kind.PART_INFO, {
                "part": p, "num_classes": int(self.config["num_classes"]),
                "feature_dim": int(pg.features.shape[1]), "num_nodes": len(pg.inner_orig)},
                arrays))

    def run(self) -> None:
        cfg = self.config
        window, peer = cfg.get("nic_windows", {}).get(self.args.machine, (
            cfg.get("window_bytes", WINDOW_BYTES), cfg.get("peer_window_bytes", PEER_WINDOW_BYTES)))
        self.nic = NicQueue(cfg["sharing"], int(window), int(peer),
                            peer_chunks=STORE_SOCKET.sndhwm,
                            urgent=getattr(self, "urgent", None) is not None,
                            rate=cfg.get("nic_rates", {}).get(self.args.machine),
                            levels=bool(cfg.get("wire_levels")))
        for floor in self.__dict__.pop("early_floors", []):
            self.nic.set_floor(*floor)
        self.chunk_bytes = int(cfg.get("nic_chunk_bytes", {}).get(
            self.args.machine, cfg.get("chunk_bytes", CHUNK_BYTES)))
        self.tids = itertools.count()
        self.queued: list[list[Any]] = []
        self.done: list[int] = []
        self.peer_machine: dict[bytes, int] = {}
        self.local_bytes = self.remote_bytes = self.urgent_bytes = 0
        self.served = {"sample": 0, "feat": 0}
        self.rejected = 0
        self.send_full = 0  # sends refused because the receiver's pipe was full (retried)
        self.retry_at = math.inf  # when receivers with a full pipe are retried regardless
        self.shm_clients: set[bytes] = set()  # same-machine receivers offered the table
        self.replies: list[tuple[bytes, Message]] = []  # answers whose pipe was full
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.control.sock, zmq.POLLIN)
        # seconds by why nothing left (NicQueue.stall) and sending ("send": our own CPU)
        self.waits = {"idle": 0.0, "window": 0.0, "held": 0.0, "pipe": 0.0, "send": 0.0}
        state, last = "idle", time.monotonic()
        while not self.stopping:
            # a receiver with a full pipe is retried when it acknowledges a chunk (an ACK is a
            # message: it ends the poll) or, at the latest, RETRY_S later -- never by spinning
            left = self.nic.hold_left()
            if self.nic.full:
                retry = max(0.0, self.retry_at - time.monotonic())
                left = retry if left is None else min(left, retry)
            wait = 50 if left is None else min(50, 1 + left * 1e3)
            with section("wait:poll"):
                events = dict(poller.poll(int(wait)))
            if self.sock in events:
                for _ in range(64):  # drain a burst before sending more
                    try:
                        got = self.data.recv_now()
                        if got is None:
                            break
                        self.handle(*got)
                    except MessageError as exc:  # a bad request must not take the store down
                        self.rejected += 1
                        self.log(f"rejected a message: {exc}")
                    except Exception as exc:  # e.g. DGL refusing a request: same, but say so
                        self.rejected += 1
                        self.log(f"rejected a request it could not serve: "
                                 f"{type(exc).__name__}: {exc}")
            if self.control.sock in events:
                self.poll_control()
            now = time.monotonic()
            self.waits[state] += now - last
            self.pump()
            self.flush_events()
            last = time.monotonic()
            self.waits["send"] += last - now
            with section("other:nic"):
                state = self.nic.stall()

    def handle(self, peer: bytes | None, msg: Message) -> None:
        assert peer is not None
        if msg.kind == Kind.ACK:
            t = self.nic.ack(peer, msg["req"], msg["chunk"])
            self.nic.retry(peer)  # its pipe drained by a chunk: worth another send
            if t is not None and not t.local:
                self.done.append(t.tid)
            return
        if msg.kind == Kind.CTRL:
            self.on_data_ctrl(peer, ctrl_body(msg, f"store {self.args.machine} data"))
            return
        if msg.kind not in (Kind.SAMPLE_REQ, Kind.FEAT_REQ):
            raise MessageError(f"store: unexpected {msg.kind.name} from {peer!r}")
        nodes = msg.arrays["nodes"]
        if len(nodes) and (nodes.min() < 0 or nodes.max() >= len(self.node_part)):
            raise MessageError(f"{msg.kind.name}.nodes: node id outside 0..{len(self.node_part) - 1}")
        now = time.monotonic()
        if msg.kind == Kind.SAMPLE_REQ:
            part = msg["part"]
            if part not in self.parts:
                raise MessageError(f"SAMPLE_REQ.part: partition {part} is not on this store")
            if msg["fanout"] != -1 and msg["fanout"] < 1:
                raise MessageError(f"SAMPLE_REQ.fanout: {msg['fanout']} (valid: -1 or >= 1)")
            with section("work:sample"):
                src, dst = self.parts[part].sample(nodes, msg["fanout"], msg["seed"])
            with section("serialise:chunk"):
                chunks, sizes = chunked(Kind.SAMPLE_CHUNK, msg["req"],
                                        {"src": src, "dst": dst}, 16, self.chunk_bytes)
            kind = "struct"
            self.served["sample"] += 1
        else:
            with section("work:gather"):
                rows = self.gather(nodes)
            with section("serialise:chunk"):
                chunks, sizes = chunked(Kind.FEAT_CHUNK, msg["req"], {"feats": rows},
                                        rows.shape[1] * rows.itemsize, self.chunk_bytes)
            kind = "feat"
            self.served["feat"] += 1
        dst = msg["src_machine"]
        t = OutTransfer(next(self.tids), peer, msg["req"], kind, msg["trainer"], msg["seq"],
                        dst, list(chunks), sizes, now, local=dst == self.machine_index)
        self.peer_machine[peer] = msg["src_machine"]
        self.nic.add(t)
        if not t.local:  # same-machine transfers are free: the policy never sees them
            self.queued.append([t.tid, t.trainer, t.seq, kind, t.dst_machine, t.nbytes,
                                t.tid in self.nic.keys])

    def gather(self, nodes: np.ndarray) -> np.ndarray:
        """Feature rows of ``nodes`` in request order (they may span this store's parts): one
        gather from the stacked table straight into the buffer the chunks are sent from (the
        chunks are views of it, handed to ZeroMQ without a copy)."""
        rows = self.table.rowmap[nodes]
        if len(rows) and rows.min() < 0:
            raise MessageError(f"FEAT_REQ.nodes: node {int(nodes[np.argmax(rows < 0)])} is not "
                               "stored here")
        out = self.buffers.take(len(nodes), self.table.feats.shape[1])
        return np.take(self.table.feats, rows, axis=0, out=out)

    def on_data_ctrl(self, peer: bytes, body: dict[str, Any]) -> None:
        """``shm``: a receiver on this machine asks for the shared feature table."""
        if body["op"] != "shm":
            raise MessageError(f"store: unexpected control op {body['op']!r} from {peer!r}")
        if body.get("machine") != self.machine_index:
            offer = {"error": f"machine {body.get('machine')} is not this store's "
                              f"({self.machine_index})"}
        else:
            offer = self.table.offer()
        if "error" not in offer:
            self.shm_clients.add(peer)
        self.replies.append((peer, ctrl("shm", **offer)))
        self.send_replies()

    def send_replies(self) -> None:
        keep = []
        for peer, msg in self.replies:
            try:
                self.data.send(msg, peer, flags=zmq.NOBLOCK, remote=False)
            except zmq.Again:
                keep.append((peer, msg))
            except zmq.ZMQError as exc:
                self.log(f"cannot answer {peer!r}: {exc}")
        self.replies = keep

    def pump(self) -> None:
        """Send every chunk the NIC queue lets go now. A send the receiver's pipe refuses
        (rare: ``peer_chunks`` keeps fewer chunks in flight than the pipe holds) goes back to
        the queue *encoded*, and its receiver is skipped until it acknowledges a chunk or
        ``RETRY_S`` has passed -- no re-encoding, no retry loop."""
        now = time.monotonic()
        if self.nic.full and now >= self.retry_at:
            self.nic.next_round()
        if self.replies:
            self.send_replies()
        while True:
            nxt = self.nic.next_chunk()  # bookkeeping: other:loop (no section per chunk)
            if nxt is None:
                break
            t, chunk, size, urgent = nxt
            enc = chunk if isinstance(chunk, Encoded) else self.data.encode(chunk)
            ch = self.urgent if urgent else self.data  # urgent: only with that socket
            try:
                ch.send_encoded(enc, t.peer, flags=zmq.NOBLOCK, remote=not t.local)
            except zmq.Again:  # its pipe is full: send to others, retry it later
                self.nic.unsend(t, enc, size)
                self.send_full += 1
                if not math.isfinite(self.retry_at) or self.retry_at <= now:
                    self.retry_at = now + RETRY_S
                continue
            except zmq.ZMQError as exc:
                if urgent and exc.errno == zmq.EHOSTUNREACH:  # not on the urgent socket (yet)
                    self.nic.unsend(t, enc, size, unreachable=True)
                    continue
                self.log(f"dropping transfers to {t.peer!r}: {exc}")  # the receiver is gone
                self.nic.drop_peer(t.peer)
                continue
            if urgent:
                self.urgent_bytes += size
            if t.dst_machine == self.machine_index:
                self.local_bytes += size
            else:
                self.remote_bytes += size
        if not self.nic.full:
            self.retry_at = math.inf

    def flush_events(self) -> None:
        if self.queued:
            self.control.send(ctrl("queued", machine=self.machine_index, transfers=self.queued))
            self.queued = []
        if self.done:
            self.control.send(ctrl("sent", machine=self.machine_index, tids=self.done))
            self.done = []

    def on_control(self, body: dict[str, Any]) -> None:
        if body["op"] == "prio":
            self.nic.set_keys({int(tid): tuple(key) for tid, key in body["keys"]})
        elif body["op"] == "hold":
            if body["on"]:
                self.nic.hold(int(body["machine"]), int(body["seq"]), body.get("for_s"))
            else:
                self.nic.release(int(body["machine"]))
        elif body["op"] == "floor":
            key = body.get("key")
            floor = (int(body["machine"]), None if key is None else tuple(key))
            if getattr(self, "nic", None) is None:
                # every store hears every receiver's floor, a restarted one while it loads
                self.__dict__.setdefault("early_floors", []).append(floor)
            else:
                self.nic.set_floor(*floor)
        elif body["op"] == "rank":
            self.nic.set_ranks({(int(t), int(q), str(k)): tuple(key)
                                for t, q, k, key in body["ranks"]})
        elif body["op"] == "reset":  # recovery: every client was restarted
            dropped = len(self.nic.active)
            self.nic.reset()
            self.queued, self.done = [], []
            self.log(f"reset for recovery {body.get('attempt')}: dropped {dropped} transfers "
                     "to restarted clients")
        else:
            super().on_control(body)

    def stats(self) -> dict[str, Any]:
        waits = {k: round(v, 3) for k, v in getattr(self, "waits", {}).items()}
        if waits:
            self.log("NIC queue: " + ", ".join(f"{k} {v:.2f} s" for k, v in waits.items()))
        table = getattr(self, "table", None)
        return {"local_bytes": getattr(self, "local_bytes", 0),
                "urgent_bytes": getattr(self, "urgent_bytes", 0),
                "served": getattr(self, "served", {}), "rejected": getattr(self, "rejected", 0),
                "send_full": getattr(self, "send_full", 0),
                "shm": table is not None and table.fd >= 0,
                "shm_clients": len(getattr(self, "shm_clients", ())),
                "waits_s": waits}

    def close(self) -> None:
        if hasattr(self, "data"):
            self.data.close()
        if getattr(self, "urgent", None) is not None:
            self.urgent.close()
        if getattr(self, "table", None) is not None:
            self.table.close()


__all__ = ["CHUNK_BYTES", "PEER_WINDOW_BYTES", "RETRY_S", "STORE_SOCKET", "URGENT_RETRY_S",
           "URGENT_SOCKET", "WINDOW_BYTES", "FeatureTable", "Holds", "NicQueue", "OutTransfer",
           "PartGraph", "Store", "StoreClient", "chunked", "load_parts", "verify_files"]
