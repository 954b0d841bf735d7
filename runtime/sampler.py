"""Sampler: builds the blocks of a mini-batch with DGL neighbour sampling, hop by hop.

For each layer (from the seeds outwards, DGL's order: ``fanouts[-1]`` first), the frontier is
split by owning partition. Partitions whose store is on this machine are sampled in process
(:class:`~gnnsched.runtime.store.PartGraph`, DGL ``sample_neighbors`` on the partition); the
others become ``SAMPLE_REQ`` messages to their stores, all in flight at once, and the local hops
run while they travel. The edges are then compacted into a block (:func:`compact`: destination
nodes first, then new sources in id order; edges sorted by (dst, src); a few linear numpy
passes and one sort of packed keys, no Python loop per node or edge), so a mini-batch is a
pure function of (job seed, trainer, sequence number): whichever process samples it, it is the
same -- which is what makes the single-process reference an exact baseline.

The sampler process builds what the coordinator sends it (a ``BATCH``: which mini-batch, chosen
with the policy's ``pick_batch`` when a core of this machine is free, and its seeds),
sends the blocks to the trainer (``BLOCK``) and, when the plan gathers features elsewhere, the
input nodes to that fetcher (``FETCH_REQ``), and reports ``sampled`` with the measured time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.ledger import section
from gnnsched.runtime.role import Role, seed_of
from gnnsched.runtime.store import PartGraph, load_parts
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import BULK_OUT, Channel, Kind, Message, MessageError

MAX_EDGES = 1 << 31


@dataclass
class SampledBatch:
    """The result of sampling: per-layer blocks (input layer first) and the input nodes."""

    seeds: np.ndarray
    input_nodes: np.ndarray
    layers: list[tuple[np.ndarray, np.ndarray, int, int]]  # (src, dst, num_src, num_dst)

    @property
    def num_edges(self) -> int:
        return sum(len(s) for s, _, _, _ in self.layers)


class _Scratch:
    """Per-thread lookup tables over the graph's node ids, all ``-1`` / ``False`` between
    calls: ``pos`` maps a node to its local id in the block being built, ``mark`` flags the
    new sources. Allocated once per thread and graph size (9 bytes a node)."""

    def __init__(self, n: int) -> None:
        self.pos = np.full(n, -1, dtype=np.int64)
        self.mark = np.zeros(n, dtype=bool)


_tls = threading.local()


def _scratch(n: int) -> _Scratch:
    s = getattr(_tls, "scratch", None)
    if s is None or len(s.pos) < n:
        s = _tls.scratch = _Scratch(n)
    return s


def compact(dst_nodes: np.ndarray, src: np.ndarray, dst: np.ndarray,
            num_nodes: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DGL ``to_block`` on original ids: (src_nodes, src_local, dst_local).

    ``src_nodes`` is ``dst_nodes`` followed by the other sources in increasing id; edges are
    returned sorted by (dst_local, src_local), a canonical order independent of who sampled.
    ``num_nodes``: a bound on the node ids (the graph's size; default: the largest id + 1).

    Linear passes and one sort of the edges' packed keys, no Python loop: ids are relabelled
    through a per-thread table indexed by node id (``pos``), the new sources are found with a
    bitmap over the ids (``np.unique`` when the edges are few against the graph), and the
    edges are put in order by sorting ``dst_local << b | src_local`` as one int64 array.
    """
    dst_nodes = np.asarray(dst_nodes, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    nd = len(dst_nodes)
    if num_nodes is None:
        num_nodes = 1 + max(int(dst_nodes.max(initial=-1)), int(src.max(initial=-1)),
                            int(dst.max(initial=-1)))
    s = _scratch(int(num_nodes))
    pos = s.pos
    done = False
    try:
        pos[dst_nodes[::-1]] = np.arange(nd - 1, -1, -1)  # a repeated node: its first place
        d_loc = pos[dst]
        if len(d_loc) and d_loc.min() < 0:
            raise ValueError("an edge points to a node outside the block's destinations")
        if num_nodes <= 32 * len(src):  # a bitmap over the ids: O(E + N), no sort
            s.mark[src] = True
            s.mark[dst_nodes] = False
            extra = np.flatnonzero(s.mark)
            s.mark[extra] = False
        else:  # few edges against the graph: sort the new sources
            extra = np.unique(src[pos[src] < 0])
        ns = nd + len(extra)
        pos[extra] = np.arange(nd, ns)
        s_loc = pos[src]
        pos[dst_nodes] = -1
        pos[extra] = -1
        done = True
    finally:
        if not done:  # the tables may be dirty: the next call builds new ones
            _tls.scratch = None
    bits = max(int(ns).bit_length(), 1)
    key = (d_loc << bits) | s_loc
    key.sort()
    src_nodes = np.concatenate([dst_nodes, extra])
    return src_nodes, key & ((1 << bits) - 1), key >> bits


SampleFn = Callable[[dict[int, tuple[np.ndarray, int, int]]],
                    dict[int, tuple[np.ndarray, np.ndarray]]]


def sample_blocks(seeds: np.ndarray, fanouts: list[int], node_part: np.ndarray,
                  job_seed: int, trainer: int, seq: int, sample_parts: SampleFn
                  ) -> SampledBatch:
    """Sample a mini-batch. ``sample_parts({part: (nodes, fanout, seed)})`` returns each
    part's sampled edges ``(src, dst)`` in original ids (locally, remotely, or both)."""
    dst_nodes = np.asarray(seeds, dtype=np.int64)
    layers: list[tuple[np.ndarray, np.ndarray, int, int]] = []
    for layer in reversed(range(len(fanouts))):
        with section("work:split"):  # the frontier by owning partition
            owner = node_part[dst_nodes]
            requests = {}
            for p in np.flatnonzero(np.bincount(owner)).tolist():
                requests[int(p)] = (dst_nodes[owner == p], int(fanouts[layer]),
                                    seed_of(job_seed, trainer, seq, layer, p))
        edges = sample_parts(requests)
        with section("copy:concat"):
            src = np.concatenate([edges[p][0] for p in sorted(edges)]
                                 or [np.zeros(0, np.int64)])
            dst = np.concatenate([edges[p][1] for p in sorted(edges)]
                                 or [np.zeros(0, np.int64)])
        with section("work:compact"):
            src_nodes, s_loc, d_loc = compact(dst_nodes, src, dst, len(node_part))
        layers.insert(0, (s_loc, d_loc, len(src_nodes), len(dst_nodes)))
        dst_nodes = src_nodes
    return SampledBatch(np.asarray(seeds, dtype=np.int64), dst_nodes, layers)


def block_message(batch: SampledBatch, labels: np.ndarray, ints: dict[str, int]) -> Message:
    """The ``BLOCK`` message of a sampled mini-batch (``ints``: trainer, seq, ...)."""
    out = {**ints, "layers": len(batch.layers)}
    arrays = {"seeds": batch.seeds, "labels": labels, "input_nodes": batch.input_nodes}
    for i, (s, d, ns, nd) in enumerate(batch.layers):
        out[f"num_src{i}"], out[f"num_dst{i}"] = ns, nd
        arrays[f"src{i}"], arrays[f"dst{i}"] = s, d
    return Message(Kind.BLOCK, out, arrays)


def local_sampler(parts: dict[int, PartGraph]) -> SampleFn:
    """A ``sample_parts`` that samples every partition in process (the reference)."""

    def run(requests: dict[int, tuple[np.ndarray, int, int]]
            ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        return {p: parts[p].sample(*r) for p, r in requests.items()}

    return run


class Sampler(Role):
    """The sampler role (see the module docstring)."""

    role = "sampler"

    def setup(self) -> None:
        cfg = self.config
        self.machine_index = cfg["machines"].index(self.args.machine)
        local = [p for p, m in enumerate(cfg["part_store"]) if m == self.machine_index]
        self.parts = load_parts(cfg["partitions"], local, keep_features=False) if local else {}
        self.node_part = np.load(cfg["node_part_file"], allow_pickle=False)
        self.fanouts = [int(f) for f in cfg["job"]["fanouts"]]
        ev = (cfg["job"].get("evaluation") or {}).get("fanouts")
        self.eval_fanouts = [int(f) for f in ev] if ev else self.fanouts
        self.evaluated = {int(it[0]) for it in cfg["items"] if int(it[2]) != 0}
        self.job_seed = int(cfg["job"]["seed"])
        self.feature_bytes = int(cfg["feature_bytes"])
        self.batch: Message | None = None
        self.sampled = 0
        self.busy_s = 0.0
        self.sample_cpu_s = 0.0  # CPU of this thread in sample_blocks (every hop, all of it)
        self.stores_wait_s = 0.0  # of the batch being built: waiting for remote hops' answers

    def run(self) -> None:
        peers = self.peers
        self.stores = StoreClient.from_peers(self.ctx, peers,
                                  self.name, self.ident.encode(), self.machine_index,
                                  curve=self.curve)
        machine_of = {t["id"]: self.config["trainers"][int(t["id"])]["machine"]
                      for t in peers["trainers"]}
        self.part_store = [int(m) for m in self.config["part_store"]]
        self.to_trainer: dict[int, Channel] = {}
        self.to_fetcher: dict[int, Channel] = {}
        for t in peers["trainers"]:
            sock = self.socket(zmq.PUSH, BULK_OUT)
            sock.connect(t["data"])
            self.to_trainer[int(t["id"])] = Channel(
                sock, f"{self.name}->trainer{t['id']}",
                remote=machine_of[t["id"]] != self.args.machine)
            if t.get("relay"):
                sock = self.socket(zmq.PUSH, BULK_OUT)
                sock.connect(t["relay"])
                self.to_fetcher[int(t["id"])] = Channel(
                    sock, f"{self.name}->fetcher", remote=t["relay_machine"] != self.args.machine)
        self.poller = zmq.Poller()
        self.poller.register(self.control.sock, zmq.POLLIN)
        for s in self.stores.poll_sockets:
            self.poller.register(s, zmq.POLLIN)
        self.timeout = float(self.config.get("request_timeout", 120.0))
        self.doing = "idle (no batch assigned)"
        while not self.stopping:  # the coordinator sends BATCH when this sampler may start
            with section("wait:idle"):
                events = dict(self.poller.poll(200))
            if self.control.sock in events:
                self.poll_control()
            if self.batch is not None and not self.stopping:
                batch, self.batch = self.batch, None
                self.build(batch)

    def on_message(self, msg: Message) -> None:
        if msg.kind != Kind.BATCH:
            super().on_message(msg)
            return
        if self.batch is not None:
            raise MessageError(f"{self.name}: a second BATCH before the first was built")
        self.batch = msg

    def build(self, job: Message) -> None:
        t0 = time.monotonic()
        trainer, seq = job["trainer"], job["seq"]
        self._key = (trainer, seq)
        self.doing = f"sampling trainer {trainer} step {seq} (epoch {job['epoch'] + 1})"
        seeds = job.arrays["seeds"].copy()
        if len(seeds) and (seeds.min() < 0 or seeds.max() >= len(self.node_part)):
            raise MessageError("BATCH.seeds: node id outside the graph")
        fanouts = self.eval_fanouts if seq in self.evaluated else self.fanouts
        cpu0 = time.thread_time()
        self.stores_wait_s = 0.0
        batch = sample_blocks(seeds, fanouts, self.node_part, self.job_seed, trainer, seq,
                              self.sample_parts)
        sample_s = time.monotonic() - t0
        self.sample_cpu_s += time.thread_time() - cpu0
        # Tell the coordinator first: the policy must learn a batch's sizes before any of its
        # transfers is queued (the feature requests this message triggers).
        with section("other:sizes"):
            owner = np.asarray(self.part_store)[self.node_part[batch.input_nodes]]
            counts = np.bincount(owner, minlength=len(self.config["machines"]))
        self.event("sampled", trainer=trainer, seq=seq, sample_s=sample_s,
                   input_nodes=len(batch.input_nodes), edges=batch.num_edges,
                   block_bytes=16 * batch.num_edges, machine=self.machine_index,
                   feat_bytes=len(batch.input_nodes) * self.feature_bytes,
                   feat_from=[[int(m), int(c) * self.feature_bytes]
                              for m, c in enumerate(counts.tolist()) if c])
        ints = {"trainer": trainer, "seq": seq, "epoch": job["epoch"], "phase": job["phase"],
                "index": job["index"], "sampler": int(self.args.id),
                "sample_us": int(sample_s * 1e6), "wait_us": int(self.stores_wait_s * 1e6)}
        with section("serialise:block"):
            block = block_message(batch, job.arrays["labels"], ints)
        self.to_trainer[trainer].send(block)
        if trainer in self.to_fetcher:
            self.to_fetcher[trainer].send(Message(Kind.FETCH_REQ, {"trainer": trainer,
                                                                   "seq": seq},
                                                  {"nodes": batch.input_nodes}))
        self.sampled += 1
        self.busy_s += sample_s
        self.doing = f"idle (last built trainer {trainer} step {seq})"

    def sample_parts(self, requests: dict[int, tuple[np.ndarray, int, int]]
                     ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Remote requests first (all in flight together), then the local hops, then wait."""
        got: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        waiting: dict[int, int] = {}
        trainer, seq = self.batch_key
        for p, (nodes, fanout, seed) in requests.items():
            if p in self.parts:
                continue
            got[p] = []

            def keep(msg: Message, p: int = p) -> None:
                with section("copy:chunk"):
                    got[p].append((msg["start"], msg.arrays["src"].copy(),
                                   msg.arrays["dst"].copy()))

            max_total = len(nodes) * fanout if fanout > 0 else MAX_EDGES
            req = self.stores.request(self.part_store[p], Kind.SAMPLE_REQ, {
                "trainer": trainer, "seq": seq, "layer": 0, "part": p, "fanout": fanout,
                "seed": seed, "src_machine": self.machine_index}, nodes, -1, max_total, keep)
            waiting[req] = p
        with section("work:sample"):
            out = {p: self.parts[p].sample(*r) for p, r in requests.items() if p in self.parts}
        waited = time.monotonic()
        deadline = waited + self.timeout
        while waiting:
            if self.stopping:
                raise SystemExit(0)
            left = deadline - time.monotonic()
            if left <= 0:
                lost = sorted({self.part_store[p] for p in waiting.values()})
                raise TimeoutError(f"{self.name}: no sampling answer from store machine(s) "
                                   f"{lost} within {self.timeout:.0f} s")
            with section("wait:stores"):
                events = dict(self.poller.poll(int(min(left, 1.0) * 1000)))
            for sock in events:
                if sock is self.control.sock:
                    self.poll_control()
                else:
                    for req in self.stores.handle(sock):
                        waiting.pop(req, None)
        self.stores_wait_s += time.monotonic() - waited
        with section("copy:concat"):
            for p, chunks in got.items():
                chunks.sort(key=lambda c: c[0])
                out[p] = (np.concatenate([c[1] for c in chunks]) if chunks
                          else np.zeros(0, np.int64),
                          np.concatenate([c[2] for c in chunks]) if chunks
                          else np.zeros(0, np.int64))
        return out

    @property
    def batch_key(self) -> tuple[int, int]:
        return self._key

    def stats(self) -> dict[str, Any]:
        return {"sampled": self.sampled, "busy_s": self.busy_s,
                "sample_cpu_s": round(self.sample_cpu_s, 6)}

    def close(self) -> None:
        for ch in [*getattr(self, "to_trainer", {}).values(),
                   *getattr(self, "to_fetcher", {}).values()]:
            ch.close()
        if hasattr(self, "stores"):
            self.stores.close()
