"""The ``infer`` role: one per store machine, layer-wise inference of its partitions' nodes.

Each host holds its partitions (structure and features) and computes layer ``l`` for its own
nodes, ``chunk`` destinations at a time, from all their in-neighbours' layer ``l-1`` rows:
its own from memory, the others' from their hosts' stores. The output stays on the host, in
its store (:class:`LayerStore`), and layer ``l+1`` reads it there, as training reads
features: a ``FEAT_REQ`` per host (``seq`` = the layer whose *input* rows are asked for, 0 =
the features; ``-1`` = GraphConv's out-degree counts) answered in ``FEAT_CHUNK``s that are
acknowledged, typed headers and raw buffers, nothing pickled
(:mod:`~gnnsched.runtime.transport`), through a :class:`~gnnsched.runtime.nicqueue.NicQueue`
so a store never has more than a window in flight.

The coordinator (:mod:`.inference_run`) starts each layer on every host at once only after
every host finished the one before, so a layer's rows are complete wherever they are read.
A host holds two layers' rows of its own nodes at most (the input being served and the
output being computed) plus one chunk's gathered rows. At the end it writes its partitions'
outputs into the run's staging folder (:func:`~.inference.save_part`) and says so.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import torch
import zmq

from gnnsched.runtime import ledger
from gnnsched.runtime.inference import ChunkBuilder, in_csr, layer_forward, load_trained, save_part
from gnnsched.runtime.ledger import section
from gnnsched.runtime.nicqueue import (
    CHUNK_BYTES,
    PEER_WINDOW_BYTES,
    WINDOW_BYTES,
    NicQueue,
    OutTransfer,
    chunked,
)
from gnnsched.runtime.role import Role
from gnnsched.runtime.store import STORE_SOCKET
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import Channel, Kind, Message, MessageError, TransportTimeout

DEGREES = -1  # the FEAT_REQ "layer" of the out-degree counts


class LayerStore(threading.Thread):
    """This host's rows, served to the other hosts from its own thread and socket.

    ``tables[l]``: layer ``l``'s input rows of this host's nodes (row ``rowmap[v]`` for node
    ``v``); ``tables[-1]``: the out-degree counts of every node from this host's in-edges,
    indexed by node id."""

    def __init__(self, role: InferRole, sock: Any, rowmap: np.ndarray, chunk_bytes: int) -> None:
        super().__init__(name="layer-store", daemon=True)
        self.role, self.rowmap, self.chunk_bytes = role, rowmap, chunk_bytes
        self.data = Channel(sock, f"infer {role.args.machine} store")
        self.tables: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.nic = NicQueue("fair", WINDOW_BYTES, PEER_WINDOW_BYTES, peer_chunks=STORE_SOCKET.sndhwm)
        self.tids = itertools.count()
        self.served = self.rejected = 0
        self.error: BaseException | None = None

    def publish(self, layer: int, rows: np.ndarray, drop: int | None = None) -> None:
        with self.lock:
            self.tables[layer] = rows
            if drop is not None:
                self.tables.pop(drop, None)

    def run(self) -> None:
        ledger.start_thread("store")
        try:
            while not self.halt.is_set():
                if self.data.sock.poll(20, zmq.POLLIN):
                    for _ in range(64):
                        got = self.data.recv_now()
                        if got is None:
                            break
                        try:
                            self.handle(*got)
                        except MessageError as exc:
                            self.rejected += 1
                            self.role.log(f"rejected a message: {exc}")
                self.pump()
        except BaseException as exc:  # noqa: BLE001  (the main thread reports it)
            self.error = exc
        finally:
            ledger.finish_thread()

    def handle(self, peer: bytes | None, msg: Message) -> None:
        assert peer is not None
        if msg.kind == Kind.ACK:
            self.nic.ack(peer, msg["req"], msg["chunk"])
            self.nic.retry(peer)
            return
        if msg.kind != Kind.FEAT_REQ:
            raise MessageError(f"infer store: unexpected {msg.kind.name} from {peer!r}")
        layer, nodes = int(msg["seq"]), msg.arrays["nodes"]
        with self.lock:
            table = self.tables.get(layer)
        if table is None:
            raise MessageError(f"FEAT_REQ.seq: layer {layer} is not held here (holding "
                               f"{sorted(self.tables)})")
        if len(nodes) and (nodes.min() < 0 or nodes.max() >= len(self.rowmap)):
            raise MessageError(f"FEAT_REQ.nodes: node id outside 0..{len(self.rowmap) - 1}")
        with section("work:gather"):
            if layer == DEGREES:
                rows = table[nodes].reshape(-1, 1)
            else:
                idx = self.rowmap[nodes]
                if len(idx) and idx.min() < 0:
                    raise MessageError(f"FEAT_REQ.nodes: node {int(nodes[np.argmax(idx < 0)])}"
                                       " is not stored here")
                rows = np.take(table, idx, axis=0)
        chunks, sizes = chunked(Kind.FEAT_CHUNK, msg["req"], {"feats": rows},
                                rows.shape[1] * rows.itemsize, self.chunk_bytes)
        self.nic.add(OutTransfer(next(self.tids), peer, msg["req"], "feat", -1, layer,
                                 int(msg["src_machine"]), list(chunks), sizes, time.monotonic()))
        self.served += 1

    def pump(self) -> None:
        while True:
            nxt = self.nic.next_chunk()
            if nxt is None:
                return
            t, chunk, size, _urgent = nxt
            enc = chunk if not isinstance(chunk, Message) else self.data.encode(chunk)
            try:
                self.data.send_encoded(enc, t.peer, flags=zmq.NOBLOCK, remote=True)
            except zmq.Again:
                self.nic.unsend(t, enc, size)
                self.nic.next_round()
                return
            except zmq.ZMQError as exc:
                self.role.log(f"dropping transfers to {t.peer!r}: {exc}")
                self.nic.drop_peer(t.peer)

    def close(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(2.0)
        self.data.close()


class InferRole(Role):
    """The infer role (see the module docstring)."""

    role = "infer"

    def setup(self) -> None:
        import faulthandler
        import signal

        from gnnsched.datasets import open_partitions
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        cfg = self.config
        self.me = cfg["machines"].index(self.args.machine)
        self.part_store = [int(m) for m in cfg["part_store"]]
        self.my_parts = [p for p, m in enumerate(self.part_store) if m == self.me]
        self.timeout = float(cfg.get("request_timeout", 120.0))
        self.doing = f"loading partitions {self.my_parts}"
        pset = open_partitions(cfg["partitions"], verify=bool(cfg.get("verify_partitions")))
        self.num_nodes = pset.num_nodes
        self.node_part = np.asarray(pset.node_part, dtype=np.int64)
        self.trained = load_trained(cfg["run_dir"], cfg["checkpoint"])
        self.model = self.trained.build()
        nodes, feats, srcs, dsts, self.part_rows = [], [], [], [], {}
        tests, labels = [], []
        at = 0
        for p in self.my_parts:
            part = pset.load_part(p)
            inner = np.asarray(part.inner_orig_ids, dtype=np.int64)
            self.part_rows[p] = (at, at + len(inner))
            at += len(inner)
            nodes.append(inner)
            labels.append(part.labels.numpy().astype(np.int64))
            tests.append(self.part_rows[p][0] + np.flatnonzero(part.test_mask.numpy()))
            feats.append(part.features.numpy().astype(np.float32, copy=False))
            g = part.graph
            u, v = g.edges()
            if "inner_edge" in g.edata:
                own = g.edata["inner_edge"].bool()
                u, v = u[own], v[own]
            gid = g.ndata["_ID"].numpy()
            srcs.append(pset.orig_nids[gid[u.numpy()]])
            dsts.append(pset.orig_nids[gid[v.numpy()]])
        self.own = np.concatenate(nodes) if nodes else np.zeros(0, np.int64)
        self.labels = np.concatenate(labels) if labels else np.zeros(0, np.int64)
        self.test_rows = np.concatenate(tests).astype(np.int64) if tests else \
            np.zeros(0, np.int64)
        src = np.concatenate(srcs).astype(np.int64)
        dst = np.concatenate(dsts).astype(np.int64)
        self.rowmap = np.full(self.num_nodes, -1, dtype=np.int64)
        self.rowmap[self.own] = np.arange(len(self.own))
        if (self.rowmap[dst] < 0).any():
            raise RuntimeError(f"{self.name}: an in-edge of partitions {self.my_parts} ends at "
                               "a node they do not own")
        indptr, indices = in_csr(self.num_nodes, src, dst, self.own)
        self.builder = ChunkBuilder(self.num_nodes, self.own, indptr, indices)
        sock, self.endpoint = self.bind(zmq.ROUTER, STORE_SOCKET)
        self.store = LayerStore(self, sock, self.rowmap,
                                int(cfg.get("chunk_bytes", CHUNK_BYTES)))
        self.store.publish(0, np.concatenate(feats) if feats else np.zeros((0, 1), np.float32))
        if self.model.kind == "gcn":
            self.store.publish(DEGREES, np.bincount(src, minlength=self.num_nodes)
                               .astype(np.float32))
        self.store.start()
        self.fetched_rows = self.fetched_bytes = 0
        self.layer_stats: list[dict[str, Any]] = []
        self.doing = f"serving partitions {self.my_parts}"

    def ready_fields(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "parts": self.my_parts, "nodes": int(len(self.own))}

    # ---------------------------------------------------------------- reading rows
    def gather(self, layer: int, nodes: np.ndarray, dim: int, local: np.ndarray) -> np.ndarray:
        """Rows of ``nodes`` at ``layer``: this host's from ``local``, the others' from
        their owners' stores."""
        out = np.empty((len(nodes), dim), dtype=np.float32)
        rows = self.rowmap[nodes]
        mine = rows >= 0
        if mine.any():
            out[mine] = local[rows[mine]]
        far = np.flatnonzero(~mine)
        if not len(far):
            return out
        owners = np.asarray(self.part_store)[self.node_part[nodes[far]]]
        pending: set[int] = set()
        for m in np.unique(owners):
            if int(m) == self.me:
                raise RuntimeError(f"{self.name}: node {int(nodes[far[0]])} should be here")
            sel = far[owners == m]
            want = np.ascontiguousarray(nodes[sel])

            def put(msg: Message, sel: np.ndarray = sel) -> None:
                f = msg.arrays["feats"]
                if f.shape[1] != dim:
                    raise MessageError(f"FEAT_CHUNK.feats: {f.shape[1]} columns, expected {dim}")
                out[sel[msg["start"]:msg["start"] + len(f)]] = f

            pending.add(self.client.request(int(m), Kind.FEAT_REQ,
                                            {"trainer": -1, "seq": layer, "src_machine": self.me},
                                            want, len(want), len(want), put))
            self.fetched_rows += len(want)
            self.fetched_bytes += len(want) * dim * 4
        self.wait(pending)
        return out

    def out_degrees(self) -> np.ndarray:
        """The graph's out-degree of every node this host reads (GraphConv's norm): its own
        in-edges' counts plus every other host's, asked of all of them at once."""
        needed = np.unique(np.concatenate([self.own, self.builder.indices]))
        total = self.store.tables[DEGREES][needed].copy()
        got = {m: np.zeros((len(needed), 1), np.float32) for m in self.client.channels}
        pending = set()
        for m, buf in got.items():
            def put(msg: Message, buf: np.ndarray = buf) -> None:
                f = msg.arrays["feats"]
                buf[msg["start"]:msg["start"] + len(f)] = f

            pending.add(self.client.request(m, Kind.FEAT_REQ, {"trainer": -1, "seq": DEGREES,
                                                               "src_machine": self.me},
                                            needed, len(needed), len(needed), put))
        self.wait(pending)
        for buf in got.values():
            total += buf[:, 0]
        out = np.zeros(self.num_nodes, dtype=np.float32)
        out[needed] = total
        return out

    def wait(self, pending: set[int]) -> None:
        poller = zmq.Poller()
        for s in self.client.poll_sockets:
            poller.register(s, zmq.POLLIN)
        end = time.monotonic() + self.timeout
        while pending:
            if self.store.error is not None:
                raise RuntimeError(f"{self.name}: its store thread failed: {self.store.error!r}")
            left = end - time.monotonic()
            if left <= 0:
                raise TransportTimeout(f"{self.name}: rows of {len(pending)} requests did not "
                                       f"come within {self.timeout:.0f} s")
            with section("wait:rows"):
                events = dict(poller.poll(int(min(left, 1.0) * 1000)))
            for s in events:
                pending -= set(self.client.handle(s))

    # ---------------------------------------------------------------- the layers
    def run(self) -> None:
        servers = {int(m): ep for m, ep in self.peers["servers"].items() if int(m) != self.me}
        self.client = StoreClient(self.ctx, servers, f"{self.name} rows",
                                  self.ident.encode(), self.me, curve=self.curve)
        out_deg = None
        if self.model.kind == "gcn":
            self.doing = "counting out-degrees"
            out_deg = torch.from_numpy(self.out_degrees())
        layers = len(self.model.layers)
        chunk = int(self.config.get("chunk", 4096))
        h = self.store.tables[0]
        for i in range(layers):
            body = self.wait_for("layer", self.timeout * 10)
            if self.stopping:
                return
            if int(body["layer"]) != i:
                raise MessageError(f"{self.name}: told layer {body['layer']}, expected {i}")
            self.doing = f"layer {i + 1}/{layers}"
            t0, rows0 = time.monotonic(), self.fetched_rows
            out = None
            with torch.no_grad():
                for a, b in self.builder.ranges(chunk):
                    block, src = self.builder.block(a, b)
                    x = torch.from_numpy(self.gather(i, src, h.shape[1], h))
                    with section("work:compute"):
                        y = layer_forward(self.model, i, block, x,
                                          out_deg[torch.from_numpy(src)] if out_deg is not None
                                          else None)
                    if out is None:
                        out = np.empty((len(self.own), y.shape[1]), dtype=np.float32)
                    out[a:b] = y.numpy()
            if out is None:
                out = np.zeros((0, 1), np.float32)
            emb = h if i == layers - 1 else None
            if i < layers - 1:
                self.store.publish(i + 1, out, drop=i - 1)
            h = out
            stats = {"layer": i, "seconds": time.monotonic() - t0,
                     "remote_rows": self.fetched_rows - rows0}
            self.layer_stats.append(stats)
            self.event("layer_done", **stats)
        self.write(h, emb)
        self.wait_for("stop", self.timeout * 10)

    def write(self, logits: np.ndarray, emb: np.ndarray | None) -> None:
        """Each own partition's outputs into the staging folder, then ``written``."""
        from pathlib import Path

        self.doing = "writing outputs"
        probs = torch.softmax(torch.from_numpy(logits), dim=1).numpy()
        stage = Path(self.config["stage"])
        for p, (a, b) in self.part_rows.items():
            arrays = {"nodes": self.own[a:b], "pred": probs[a:b].argmax(1).astype(np.int64),
                      "probs": probs[a:b]}
            if self.config.get("embeddings") and emb is not None:
                arrays["emb"] = emb[a:b]
            save_part(stage, p, arrays)
        t = self.test_rows  # the full-neighbour test metric is the coordinator's to compute
        pos = probs[t, 1].round(7).tolist() if probs.shape[1] == 2 else None
        self.event("written", parts=self.my_parts, test_labels=self.labels[t].tolist(),
                   test_pred=probs[t].argmax(1).tolist(), test_pos=pos)
        self.doing = "done"

    def stats(self) -> dict[str, Any]:
        st = getattr(self, "store", None)
        return {"fetched_rows": getattr(self, "fetched_rows", 0),
                "fetched_bytes": getattr(self, "fetched_bytes", 0),
                "served": st.served if st else 0, "rejected": st.rejected if st else 0,
                "layers": getattr(self, "layer_stats", [])}

    def close(self) -> None:
        if getattr(self, "store", None) is not None:
            self.store.close()
        if getattr(self, "client", None) is not None:
            self.client.close()


__all__ = ["DEGREES", "InferRole", "LayerStore"]
