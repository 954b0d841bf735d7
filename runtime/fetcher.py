"""Feature fetching: gather the input nodes' feature rows from the stores that own them.

:class:`Gather` is the stage itself: it splits a mini-batch's input nodes by owning store,
sends one ``FEAT_REQ`` per store (all in flight together), and writes each arriving chunk
into its rows of one preallocated ``[num_input, F]`` array (sized from what *we* asked for,
never from a peer's header). It runs wherever the plan's ``fetch_at`` says:

* ``fetch_at`` is the trainer's machine: inside the trainer process (its I/O thread);
* another machine (a relay, e.g. the store holding most of the rows, or a host with a fast
  NIC): the :class:`Fetcher` role there receives ``FETCH_REQ`` from samplers and pushes one
  ``FEATS`` message per mini-batch to the trainer.

Rows of a store on the gatherer's own machine do not go through a socket at all: the store's
rows are in shared memory (:class:`~gnnsched.runtime.feature_table.FeatureTable`), mapped read-only
here, and gathered straight into the batch buffer (``shm_rows`` / ``shm_bytes`` in the stats:
bytes read, not sent -- no socket and no NIC counts them). Rows from other machines arrive
in chunks that are decoded as views of the received frames and scattered once into the
buffer.

The fetcher role needs neither torch nor DGL, so it starts in a fraction of a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.ledger import section
from gnnsched.runtime.nicqueue import Holds
from gnnsched.runtime.role import Role
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import (
    BULK,
    BULK_OUT,
    BufferPool,
    Channel,
    Kind,
    Message,
    MessageError,
)


class FeatureCache:
    """Other machines' hottest feature rows, replicated in a gatherer's own memory.

    ``slot[node]`` is the node's row here (-1: not cached): one int32 per graph node, so a
    lookup is one vectorised gather. Rows are fetched from their stores once, at start-up,
    through the same requests as a mini-batch; until they have all arrived every lookup
    misses (training does not wait for the cache).
    """

    def __init__(self, nodes: np.ndarray, num_nodes: int, dim: int) -> None:
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.slot = np.full(num_nodes, -1, dtype=np.int32)
        self.rows = np.empty((len(self.nodes), dim), dtype=np.float32)
        self.ready = len(self.nodes) == 0
        self.fill_s = 0.0
        self.hits = self.lookups = 0

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.slot.nbytes)

    def filled(self, seconds: float) -> None:
        self.slot[self.nodes] = np.arange(len(self.nodes), dtype=np.int32)
        self.ready, self.fill_s = True, seconds


CACHE_FILL = -1  # the trainer id of the start-up request that fills the cache
SHM_OFFER_WAIT_S = 5.0  # at most this long for the own store's shared-memory answer, once


@dataclass
class _Job:
    trainer: int
    seq: int
    out: np.ndarray
    reqs: set[int]
    started: float = field(default_factory=time.monotonic)


class Gather:
    """Concurrent feature gathers over a :class:`StoreClient`; ``on_done(trainer, seq,
    features, seconds)`` fires when the last row of a mini-batch has arrived."""

    def __init__(self, stores: StoreClient, node_part: np.ndarray, part_store: list[int],
                 feature_dim: int, machine_index: int,
                 on_done: Callable[[int, int, np.ndarray, float], None]) -> None:
        self.stores, self.node_part = stores, node_part
        self.part_store = np.asarray(part_store, dtype=np.int64)
        self.dim, self.machine_index, self.on_done = feature_dim, machine_index, on_done
        self.jobs: dict[tuple[int, int], _Job] = {}
        self.owner: dict[int, tuple[int, int]] = {}
        self.fetched = 0
        self.busy_s = 0.0
        self.shm_rows = self.shm_bytes = 0  # read from a same-machine store's shared memory
        self.buffers = BufferPool(keep=3)  # batch buffers, reused once trained / sent
        self.tmp = np.empty((max(1, (512 << 10) // max(4 * feature_dim, 1)), feature_dim),
                            dtype=np.float32)  # rows in transit from shared memory
        self.cache: FeatureCache | None = None

    def fill_cache(self, nodes: np.ndarray) -> None:
        """Replicate ``nodes``' rows here (fetched now, in the background of training)."""
        self.cache = FeatureCache(nodes, len(self.node_part), self.dim)
        if len(nodes):
            self.start(CACHE_FILL, 0, self.cache.nodes, out=self.cache.rows)

    @property
    def in_flight(self) -> int:
        return len(self.jobs)

    def start(self, trainer: int, seq: int, nodes: np.ndarray,
              out: np.ndarray | None = None) -> None:
        # bound what we allocate: a mini-batch never has more input nodes than the graph
        if len(nodes) > len(self.node_part) or (len(nodes) and (
                nodes.min() < 0 or nodes.max() >= len(self.node_part))):
            raise MessageError(f"fetch for trainer {trainer} seq {seq}: {len(nodes)} node ids, "
                               f"not all in 0..{len(self.node_part) - 1}")
        key = (trainer, seq)
        if key in self.jobs:
            raise MessageError(f"fetch for trainer {trainer} seq {seq} requested twice")
        if out is None:
            out = self.buffers.take(len(nodes), self.dim)
        job = _Job(trainer, seq, out, set())
        self.jobs[key] = job
        todo = self._from_cache(nodes, out) if trainer != CACHE_FILL else None
        with section("work:split"):  # the input nodes (not cached here) by owning store
            want = nodes if todo is None else nodes[todo]
            machine = self.part_store[self.node_part[want]] if len(want) else want
            split = [(m, np.nonzero(machine == m)[0]) for m in np.unique(machine).tolist()]
            if todo is not None:
                split = [(m, todo[i]) for m, i in split]
        if getattr(self.stores, "shm_pending", None) is not None:  # start-up: offer due
            with section("wait:shm_offer"):
                self.stores.wait_shm(SHM_OFFER_WAIT_S)
        for m, idx in split:
            with section("copy:ids"):
                ids = nodes[idx]
            table = self.stores.tables.get(int(m))
            if table is not None and self._from_shm(table, ids, idx, out):
                continue

            dense = bool(len(idx)) and int(idx[-1]) - int(idx[0]) + 1 == len(idx)

            def write(msg: Message, idx: np.ndarray = idx, out: np.ndarray = out,
                      dense: bool = dense) -> None:
                rows = msg.arrays["feats"]
                if rows.shape[1] != out.shape[1]:
                    raise MessageError(f"FEAT_CHUNK.feats: {rows.shape[1]} columns, expected "
                                       f"{out.shape[1]}")
                s = msg["start"]
                with section("copy:scatter"):  # from the received frame: the one copy
                    if dense:  # this store's rows are one run of the batch: a block copy
                        out[idx[0] + s:idx[0] + s + len(rows)] = rows
                    else:
                        out[idx[s:s + len(rows)]] = rows

            req = self.stores.request(int(m), Kind.FEAT_REQ, {
                "trainer": trainer, "seq": seq, "src_machine": self.machine_index},
                ids, len(idx), len(idx), write)
            job.reqs.add(req)
            self.owner[req] = key
        if not job.reqs:
            self._finish(key)

    def _from_cache(self, nodes: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """Cached rows of ``nodes`` into ``out``; the positions still to fetch (None: no
        cache here, or not filled yet)."""
        c = self.cache
        if c is None or not c.ready or not len(nodes):
            return None
        with section("copy:cache"):
            slot = c.slot[nodes]
            hit = np.flatnonzero(slot >= 0)
            tmp = self.tmp
            for s in range(0, len(hit), len(tmp)):  # via a small buffer that stays in cache
                h = hit[s:s + len(tmp)]
                part = np.take(c.rows, slot[h], axis=0, out=tmp[:len(h)])
                out[h] = part
            c.hits += len(hit)
            c.lookups += len(nodes)
            return np.flatnonzero(slot < 0)

    def _from_shm(self, table: Any, ids: np.ndarray, idx: np.ndarray, out: np.ndarray) -> bool:
        """Rows ``ids`` from a same-machine store's shared table into ``out[idx]``; False
        (the caller requests them instead) if the table does not hold them all."""
        with section("copy:shm_gather"):
            rows = table.rows_of(ids)
            if rows is None:
                return False
            lo = int(idx[0]) if len(idx) else 0
            if len(idx) and int(idx[-1]) - lo + 1 == len(idx):  # one run of the batch:
                np.take(table.feats, rows, axis=0, out=out[lo:lo + len(idx)])  # in place
            else:  # block by block through a small buffer that stays in cache
                tmp = self.tmp
                for s in range(0, len(rows), len(tmp)):
                    part = np.take(table.feats, rows[s:s + len(tmp)], axis=0,
                                   out=tmp[:min(len(tmp), len(rows) - s)])
                    out[idx[s:s + len(part)]] = part
        self.shm_rows += len(rows)
        self.shm_bytes += len(rows) * out.shape[1] * out.itemsize
        return True

    def handle(self, sock: zmq.Socket) -> None:
        for req in self.stores.handle(sock):
            key = self.owner.pop(req)
            job = self.jobs[key]
            job.reqs.discard(req)
            if not job.reqs:
                self._finish(key)

    def _finish(self, key: tuple[int, int]) -> None:
        job = self.jobs.pop(key)
        took = time.monotonic() - job.started
        if job.trainer == CACHE_FILL:
            if self.cache is not None:
                self.cache.filled(took)
            return
        self.fetched += 1
        self.busy_s += took
        self.on_done(job.trainer, job.seq, job.out, took)

    def oldest(self) -> float:
        """Seconds the oldest unfinished gather has been waiting (0 if none)."""
        if not self.jobs:
            return 0.0
        return time.monotonic() - min(j.started for j in self.jobs.values())


def shm_of(config: dict[str, Any], node_part: np.ndarray) -> tuple[int, int] | None:
    """What :class:`StoreClient` needs to map a same-machine store's rows (None: the run's
    ``shm_features`` is off)."""
    if config.get("shm_features") is False:
        return None
    return len(node_part), int(config["feature_dim"])


def fill_cache(g: Gather, config: dict[str, Any], machine_index: int) -> None:
    """Start filling ``g``'s cache with the plan's rows for this machine (if any)."""
    rows = int((config.get("caches") or {}).get(str(machine_index), 0))
    if rows <= 0 or not config.get("hot_order_file"):
        return
    from gnnsched.datasets.hot import cache_nodes

    order = np.load(config["hot_order_file"], mmap_mode="r", allow_pickle=False)
    g.fill_cache(cache_nodes(np.asarray(order), g.node_part, list(g.part_store),
                             machine_index, rows))


def gather_stats(g: Gather | None) -> dict[str, Any]:
    """A gatherer's shared-memory counters (and which stores it mapped)."""
    if g is None:
        return {"shm_rows": 0, "shm_bytes": 0, "shm_stores": []}
    c = g.cache
    cache = {} if c is None else {
        "cache_rows": len(c.nodes), "cache_bytes": c.nbytes, "cache_ready": c.ready,
        "cache_fill_s": c.fill_s, "cache_hits": c.hits, "cache_lookups": c.lookups,
        "cache_hit_bytes": c.hits * c.rows.shape[1] * 4}
    return {"shm_rows": g.shm_rows, "shm_bytes": g.shm_bytes,
            "shm_stores": sorted(g.stores.tables), **cache}


class Fetcher(Role):
    """A relay: gathers features for the trainers whose plan puts ``fetch_at`` here."""

    role = "fetcher"

    def setup(self) -> None:
        cfg = self.config
        self.machine_index = cfg["machines"].index(self.args.machine)
        self.node_part = np.load(cfg["node_part_file"], allow_pickle=False)
        self.sock, self.endpoint = self.bind(zmq.PULL, BULK)
        self.inbox = Channel(self.sock, f"{self.name} requests")

        self.held = Holds()
        self.deferred: list[tuple[int, int, np.ndarray, float]] = []

    def ready_fields(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint}

    def run(self) -> None:
        peers = self.peers
        self.stores = StoreClient.from_peers(self.ctx, peers,
                                  self.name, self.ident.encode(), self.machine_index,
                                  curve=self.curve, shm=shm_of(self.config, self.node_part),
                                  log=self.log)
        self.to_trainer: dict[int, Channel] = {}
        self.trainer_machine: dict[int, int] = {}
        for t in peers["trainers"]:
            if t.get("relay_machine") == self.args.machine:
                sock = self.socket(zmq.PUSH, BULK_OUT)
                sock.connect(t["data"])
                machine = self.config["trainers"][int(t["id"])]["machine"]
                self.to_trainer[int(t["id"])] = Channel(
                    sock, f"{self.name}->trainer{t['id']}", remote=machine != self.args.machine)
                self.trainer_machine[int(t["id"])] = self.config["machines"].index(machine)
        self.gather = Gather(self.stores, self.node_part, self.config["part_store"],
                             int(self.config["feature_dim"]), self.machine_index, self.gathered)
        fill_cache(self.gather, self.config, self.machine_index)
        timeout = float(self.config.get("request_timeout", 120.0))
        poller = zmq.Poller()
        for s in [self.sock, self.control.sock, *self.stores.poll_sockets]:
            poller.register(s, zmq.POLLIN)
        while not self.stopping:
            left = self.held.left()
            with section("wait:poll"):
                events = dict(poller.poll(200 if left is None
                                          else int(min(200, 1 + left * 1e3))))
            self.expire_holds()
            for sock in events:
                if sock is self.control.sock:
                    self.poll_control()
                elif sock is self.sock:
                    while True:
                        try:  # a malformed push is dropped (and logged), never trusted
                            got = self.inbox.recv_now()
                            if got is None:
                                break
                            msg = got[1]
                            if msg.kind != Kind.FETCH_REQ or \
                                    msg["trainer"] not in self.to_trainer:
                                raise MessageError(f"{self.name}: unexpected {msg!r}")
                        except MessageError as exc:
                            self.log(f"rejected a message: {exc}")
                            continue
                        with section("copy:ids"):
                            nodes = msg.arrays["nodes"].copy()
                        self.gather.start(msg["trainer"], msg["seq"], nodes)
                else:
                    self.gather.handle(sock)
            self.doing = f"gathering {self.gather.in_flight} mini-batch(es)" \
                if self.gather.in_flight else "idle"
            if self.gather.oldest() > timeout:
                raise TimeoutError(f"{self.name}: a feature gather waited more than "
                                   f"{timeout:.0f} s for the stores")

    def gathered(self, trainer: int, seq: int, feats: np.ndarray, took: float) -> None:
        """A mini-batch's features are all here: tell the coordinator (the queued time of
        this relay transfer in a traced run), then deliver them."""
        self.event("fetched", trainer=trainer, seq=seq, fetch_s=took, nbytes=int(feats.nbytes))
        self.deliver(trainer, seq, feats, took)

    def deliver(self, trainer: int, seq: int, feats: np.ndarray, took: float) -> None:
        """Push a gathered mini-batch, unless its trainer's machine is all-reducing an
        earlier iteration: then it waits (gradients first, as the stores' NIC queues do)."""
        m = self.trainer_machine.get(trainer)
        if self.held.blocks(m, seq, time.monotonic()):
            self.deferred.append((trainer, seq, feats, took))
            return
        self._push(trainer, seq, feats, took)

    def on_control(self, body: dict[str, Any]) -> None:
        if body["op"] != "hold":
            super().on_control(body)
            return
        m = int(body["machine"])
        if body["on"]:
            self.held.hold(m, int(body["seq"]), body.get("for_s"))
            return
        self.held.release(m)
        self.flush_deferred()

    def expire_holds(self) -> None:
        """Timed holds end by themselves once the gradients have left."""
        if self.held.expire(time.monotonic()):
            self.flush_deferred()

    def flush_deferred(self) -> None:
        waiting, self.deferred = self.deferred, []
        for item in sorted(waiting, key=lambda x: x[1]):  # oldest iteration first
            self.deliver(*item)

    def _push(self, trainer: int, seq: int, feats: np.ndarray, took: float) -> None:
        self.to_trainer[trainer].send(Message(Kind.FEATS, {
            "trainer": trainer, "seq": seq, "fetch_us": int(took * 1e6)}, {"feats": feats}))

    def stats(self) -> dict[str, Any]:
        g = getattr(self, "gather", None)
        return {"fetched": g.fetched if g else 0, "busy_s": g.busy_s if g else 0.0,
                **gather_stats(g)}

    def close(self) -> None:
        for ch in getattr(self, "to_trainer", {}).values():
            ch.close()
        if hasattr(self, "stores"):
            self.stores.close()
        if hasattr(self, "inbox"):
            self.inbox.close()
