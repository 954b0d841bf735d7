"""The client side of the stores (samplers and fetchers): requests, reassembly, acks.

One DEALER per store (and a receive-only one per store's urgent band), request ids, chunk
reassembly with size checks before any allocation, and acknowledgements; with ``shm`` it maps
its own machine's store table (:class:`~gnnsched.runtime.feature_table.FeatureTable`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.feature_table import FeatureTable
from gnnsched.runtime.transport import (
    BULK,
    Channel,
    CurveKeys,
    Kind,
    Message,
    MessageError,
    ctrl,
    ctrl_body,
    make_socket,
)


@dataclass
class _Pending:
    kind: Kind
    expect_rows: int
    max_total: int
    on_chunk: Callable[[Message], None]
    received: int = 0
    chunks: int = -1
    started: float = field(default_factory=time.monotonic)


class StoreClient:
    """Requests to every store over one DEALER each; reassembles chunked answers.

    ``poll_sockets`` lists the sockets to register with the caller's poller; ``handle``
    processes one ready socket. Each answer is validated (known request, chunk index, sizes
    within what was asked) before it is written anywhere, then acknowledged.

    ``shm=(num_nodes, feature_dim)``: ask the store on this client's own machine for its
    shared :class:`FeatureTable`; once it is mapped, ``tables[machine]`` holds it and a
    gatherer reads those rows itself instead of requesting them (``log`` says why not when it
    cannot be mapped: the rows then keep coming over the socket).
    """

    def __init__(self, ctx: zmq.Context, stores: dict[int, str], name: str,
                 identity: bytes, machine: int = -1, curve: CurveKeys | None = None,
                 shm: tuple[int, int] | None = None,
                 log: Callable[[str], None] | None = None,
                 urgent: dict[int, str] | None = None) -> None:
        self.channels: dict[int, Channel] = {}
        self.urgent: dict[int, Channel] = {}  # receive-only: a store's urgent band
        for m, endpoint in stores.items():
            sock = make_socket(ctx, zmq.DEALER, BULK, identity=identity, curve=curve)
            sock.connect(endpoint)
            self.channels[m] = Channel(sock, f"{name}->store{m}", remote=m != machine)
            if urgent and urgent.get(m) and m != machine:  # same identity: the store routes
                sock = make_socket(ctx, zmq.DEALER, BULK, identity=identity, curve=curve)
                sock.connect(urgent[m])
                self.urgent[m] = Channel(sock, f"{name}->store{m} urgent", remote=True)
        self.by_sock = {ch.sock: m for m, ch in (*self.channels.items(), *self.urgent.items())}
        self.pending: dict[int, _Pending] = {}
        self.ids = itertools.count(1)
        self.tables: dict[int, FeatureTable] = {}
        self.shm, self.log = shm, log or (lambda text: None)
        self.shm_pending: int | None = None  # own machine, until its store answers
        if shm is not None and machine in self.channels:  # queued until connected
            self.channels[machine].send(ctrl("shm", machine=machine))
            self.shm_pending = machine

    @classmethod
    def from_peers(cls, ctx: zmq.Context, peers: dict[str, Any], name: str, identity: bytes,
                   machine: int = -1, **kw: Any) -> StoreClient:
        """A client of the stores the coordinator's ``start`` message lists (``stores`` and,
        where the NICs band by TOS, ``urgent_stores``)."""
        return cls(ctx, {int(m): ep for m, ep in peers["stores"].items()}, name, identity,
                   machine, urgent={int(m): ep for m, ep in
                                    (peers.get("urgent_stores") or {}).items()}, **kw)

    def wait_shm(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the own store's shared-memory answer, so that
        no row crosses a socket only because the answer was late (at start-up). Only while no
        request is in flight: answers to those are never consumed here."""
        deadline = time.monotonic() + timeout
        while self.shm_pending is not None and not self.pending and \
                time.monotonic() < deadline:
            ch = self.channels[self.shm_pending]
            if ch.sock.poll(20):
                self.handle(ch.sock)

    def _on_ctrl(self, m: int, msg: Message) -> None:
        body = ctrl_body(msg, self.channels[m].name)
        if body["op"] != "shm" or self.shm is None or m in self.tables:
            raise MessageError(f"{self.channels[m].name}: unexpected control op {body['op']!r}")
        self.shm_pending = None
        try:
            self.tables[m] = FeatureTable.attach(body, *self.shm)
        except (OSError, ValueError) as exc:
            self.log(f"store {m}'s rows stay on the socket (no shared memory: {exc})")
            return
        self.log(f"reading store {m}'s rows from shared memory "
                 f"({self.tables[m].feats.nbytes / 1e6:.1f} MB mapped read-only)")

    @property
    def poll_sockets(self) -> list[zmq.Socket]:
        return [ch.sock for ch in (*self.channels.values(), *self.urgent.values())]

    def request(self, machine: int, kind: Kind, ints: dict[str, int], nodes: np.ndarray,
                expect_rows: int, max_total: int, on_chunk: Callable[[Message], None]) -> int:
        req = next(self.ids)
        self.pending[req] = _Pending(
            Kind.SAMPLE_CHUNK if kind == Kind.SAMPLE_REQ else Kind.FEAT_CHUNK,
            expect_rows, max_total, on_chunk)
        self.channels[machine].send(Message(kind, {"req": req, **ints}, {"nodes": nodes}))
        return req

    def handle(self, sock: zmq.Socket) -> list[int]:
        """Process queued answers on ``sock``; returns the request ids now complete. Chunks
        may come on a store's urgent socket too (any order: each says where its rows go);
        every acknowledgement goes back on the store's main socket."""
        m = self.by_sock[sock]
        ch = self.channels[m]
        rx = self.urgent[m] if m in self.urgent and sock is self.urgent[m].sock else ch
        done = []
        while True:
            got = rx.recv_now()
            if got is None:
                return done
            _, msg = got
            if msg.kind == Kind.CTRL:
                self._on_ctrl(self.by_sock[sock], msg)
                continue
            req = msg["req"] if msg.kind in (Kind.SAMPLE_CHUNK, Kind.FEAT_CHUNK) else -1
            p = self.pending.get(req)
            if p is None or msg.kind != p.kind:
                raise MessageError(f"{ch.name}: {msg.kind.name} for unknown request {req}")
            total, start, chunk, chunks = msg["total"], msg["start"], msg["chunk"], msg["chunks"]
            rows = len(next(iter(msg.arrays.values())))
            if p.chunks < 0:
                if not 0 <= total <= p.max_total or (p.expect_rows >= 0 and total != p.expect_rows):
                    raise MessageError(f"{ch.name}: {msg.kind.name}.total: {total} rows, asked "
                                       f"for {p.expect_rows if p.expect_rows >= 0 else p.max_total}")
                if not 1 <= chunks <= max(total, 1):
                    raise MessageError(f"{ch.name}: {msg.kind.name}.chunks: {chunks}")
                p.chunks = chunks
            if chunks != p.chunks or not 0 <= chunk < chunks or start < 0 or \
                    start + rows > total:
                raise MessageError(f"{ch.name}: {msg.kind.name}: chunk {chunk}/{chunks} rows "
                                   f"{start}..{start + rows} outside 0..{total}")
            p.on_chunk(msg)
            ch.send(Message(Kind.ACK, {"req": req, "chunk": chunk}))
            p.received += 1
            if p.received == p.chunks:
                del self.pending[req]
                done.append(req)

    def close(self) -> None:
        for ch in (*self.channels.values(), *self.urgent.values()):
            ch.close()
        for table in self.tables.values():
            table.close()


__all__ = ["StoreClient"]
