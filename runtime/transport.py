"""ZeroMQ transport: typed binary messages, bounded and validated, never pickle.

Wire format of one message (a ZeroMQ multipart message):

* frame 0, the header (little endian, ``struct``-packed)::

      magic "GNSH" | version u8 | kind u8 | n_ints u16 | n_bufs u16
      n_ints  x int64                      (ids and scalars; names come from the kind's schema)
      n_bufs  x (dtype u8 | ndim u8 | ndim x int64 shape)

* frames 1..n_bufs: the raw buffers (C-contiguous), sent with ``copy=False``.

Every kind has a :class:`Schema` (names of its ints, dtype and rank of its buffers, an
optional repeated group such as one (src, dst) pair per GNN layer). :func:`decode` checks the
header against it before building any array -- magic, version, kind, counts, dtypes, ranks,
shapes, that each buffer's byte length matches its shape, and the size limits -- and raises
:class:`MessageError` naming the offending field. Arrays are zero-copy views of the received
frames. Control messages are JSON objects in a ``CTRL`` message (JSON, not pickle: decoding
cannot run code).

Sockets are made by :func:`make_socket` with high-water marks, kernel buffer sizes,
``MAXMSGSIZE`` (libzmq drops a peer that announces a bigger frame, so no huge allocation
happens on our side) and ``LINGER`` set; :class:`Channel` wraps one socket, counts every
payload byte it sends, and its receives always take a timeout.

Security. A cluster with ``curve: true`` has one CURVE key pair (``gnnsched keys``): every
bound socket is a CURVE server and every connecting socket a CURVE client with that pair, and
each process runs a ZAP handler (:func:`start_authenticator`) that admits only clients whose
public key is the cluster's. A peer without the secret key cannot complete the handshake, so
it can neither read nor inject anything. :func:`bind_random` / :func:`bind_port` bind only to
the address they are given and refuse wildcards (``*``, ``0.0.0.0``, ``::``): servers listen
on the interfaces the cluster file names, nothing else.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.ledger import section
from gnnsched.runtime.qos import BULK_TOS

MAGIC = b"GNSH"
VERSION = 1
_HEAD = struct.Struct("<4sBBHH")
_BUF = struct.Struct("<BB")

MAX_INTS = 64
MAX_BUFS = 64
MAX_NDIM = 4
MAX_LAYERS = 8
MAX_HEADER = _HEAD.size + 8 * MAX_INTS + MAX_BUFS * (_BUF.size + 8 * MAX_NDIM)
MAX_CTRL_BYTES = 4 << 20
DEFAULT_MAX_MESSAGE = 1 << 31  # 2 GiB per message unless the caller lowers it


class MessageError(ValueError):
    """A message that is malformed, of an unexpected kind, or too big; names the field."""


class TransportTimeout(TimeoutError):
    """No message arrived within the receive timeout; says from whom and what was awaited."""


class TransportError(RuntimeError):
    """A socket could not be set up (address not on this host, port in use, missing keys)."""


class Kind(IntEnum):
    """Message kinds; the values are on the wire, so never renumber them."""

    CTRL = 1  # JSON control object {"op": ...}
    BATCH = 2  # coordinator -> sampler: build this mini-batch
    SAMPLE_REQ = 3  # sampler -> store: sample in-neighbours of these nodes
    SAMPLE_CHUNK = 4  # store -> sampler: (part of) the sampled edges
    FEAT_REQ = 5  # fetcher -> store: feature rows of these nodes
    FEAT_CHUNK = 6  # store -> fetcher: (part of) the rows
    ACK = 7  # receiver -> store: a chunk arrived (frees the store's send window)
    BLOCK = 8  # sampler -> trainer: the sampled blocks of a mini-batch
    FETCH_REQ = 9  # sampler -> relay fetcher: gather these input nodes for a trainer
    FEATS = 10  # relay fetcher -> trainer: the gathered input features
    PART_INFO = 11  # store -> coordinator: train/val/test nodes and labels of a partition


# dtype codes on the wire
DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<i8"), 2: np.dtype("<i4"), 3: np.dtype("<f4"), 4: np.dtype("<f2"),
    5: np.dtype("u1"), 6: np.dtype("<f8"),
}
_CODES = {dt: code for code, dt in DTYPES.items()}
I64, I32, F32, F16, U8, F64 = (DTYPES[i] for i in range(1, 7))


@dataclass(frozen=True)
class Schema:
    """What a kind carries: named ints, typed buffers, and an optional repeated group.

    The group (``rep_ints``, ``rep_bufs``) appears ``ints[rep_count]`` times (at most
    ``MAX_LAYERS``); repeated names get the repetition index appended (``src0``, ``src1``).
    """

    ints: tuple[str, ...]
    bufs: tuple[tuple[str, tuple[np.dtype, ...], int], ...]
    rep_ints: tuple[str, ...] = ()
    rep_bufs: tuple[tuple[str, tuple[np.dtype, ...], int], ...] = ()
    rep_count: str = ""


_IDS = (I64,)
_FEAT = (F32, F16)
SCHEMAS: dict[Kind, Schema] = {
    Kind.CTRL: Schema((), (("json", (U8,), 1),)),
    Kind.BATCH: Schema(("trainer", "seq", "epoch", "phase", "index"),
                       (("seeds", _IDS, 1), ("labels", _IDS, 1))),
    Kind.SAMPLE_REQ: Schema(("req", "trainer", "seq", "layer", "part", "fanout", "seed",
                             "src_machine"), (("nodes", _IDS, 1),)),
    Kind.SAMPLE_CHUNK: Schema(("req", "chunk", "chunks", "start", "total"),
                              (("src", _IDS, 1), ("dst", _IDS, 1))),
    Kind.FEAT_REQ: Schema(("req", "trainer", "seq", "src_machine"), (("nodes", _IDS, 1),)),
    Kind.FEAT_CHUNK: Schema(("req", "chunk", "chunks", "start", "total"),
                            (("feats", _FEAT, 2),)),
    Kind.ACK: Schema(("req", "chunk"), ()),
    Kind.BLOCK: Schema(("trainer", "seq", "epoch", "phase", "index", "sampler", "sample_us",
                        "wait_us", "layers"),
                       (("seeds", _IDS, 1), ("labels", _IDS, 1), ("input_nodes", _IDS, 1)),
                       ("num_src", "num_dst"), (("src", _IDS, 1), ("dst", _IDS, 1)), "layers"),
    Kind.FETCH_REQ: Schema(("trainer", "seq"), (("nodes", _IDS, 1),)),
    Kind.FEATS: Schema(("trainer", "seq", "fetch_us"), (("feats", _FEAT, 2),)),
    Kind.PART_INFO: Schema(("part", "num_classes", "feature_dim", "num_nodes"),
                           (("train", _IDS, 1), ("train_labels", _IDS, 1),
                            ("val", _IDS, 1), ("val_labels", _IDS, 1),
                            ("test", _IDS, 1), ("test_labels", _IDS, 1))),
}


@dataclass
class Message:
    """A decoded (or to-be-encoded) message: its kind, named ints and named arrays."""

    kind: Kind
    ints: dict[str, int] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> int:
        return self.ints[name]

    def __repr__(self) -> str:  # short: arrays as dtype[shape]
        arrs = ", ".join(f"{k}={v.dtype}{list(v.shape)}" for k, v in self.arrays.items())
        return f"Message({self.kind.name}, {self.ints}, {arrs})"


def _expand(schema: Schema, count: int) -> tuple[list[str], list[tuple]]:
    ints = list(schema.ints)
    bufs = list(schema.bufs)
    for i in range(count):
        ints += [f"{n}{i}" for n in schema.rep_ints]
        bufs += [(f"{n}{i}", dts, nd) for n, dts, nd in schema.rep_bufs]
    return ints, bufs


def encode(msg: Message) -> list[Any]:
    """Header frame + raw buffers for ``send_multipart(..., copy=False)``; validates first."""
    schema = SCHEMAS[msg.kind]
    count = int(msg.ints.get(schema.rep_count, 0)) if schema.rep_count else 0
    if not 0 <= count <= MAX_LAYERS:
        raise MessageError(f"{msg.kind.name}.{schema.rep_count}: {count} not in 0..{MAX_LAYERS}")
    int_names, buf_specs = _expand(schema, count)
    try:
        ints = [int(msg.ints[n]) for n in int_names]
    except KeyError as exc:
        raise MessageError(f"{msg.kind.name}: int field {exc.args[0]!r} missing") from None
    parts = [_HEAD.pack(MAGIC, VERSION, int(msg.kind), len(ints), len(buf_specs)),
             struct.pack(f"<{len(ints)}q", *ints)]
    frames: list[Any] = []
    for name, dtypes, ndim in buf_specs:
        arr = msg.arrays.get(name)
        if arr is None:
            raise MessageError(f"{msg.kind.name}: buffer {name!r} missing")
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in dtypes:
            arr = arr.astype(dtypes[0])  # e.g. int32 ids -> int64 on the wire
        if arr.ndim != ndim:
            raise MessageError(f"{msg.kind.name}.{name}: rank {arr.ndim}, schema says {ndim}")
        parts.append(_BUF.pack(_CODES[arr.dtype], arr.ndim))
        parts.append(struct.pack(f"<{arr.ndim}q", *arr.shape))
        frames.append(memoryview(arr).cast("B") if arr.size else b"")
    return [b"".join(parts), *frames]


def _frame_bytes(frame: Any) -> memoryview:
    if isinstance(frame, zmq.Frame):
        return frame.buffer
    return memoryview(frame)


def decode(frames: list[Any], *, max_bytes: int = DEFAULT_MAX_MESSAGE,
           expect: tuple[Kind, ...] | None = None, peer: str = "peer") -> Message:
    """Validate and decode frames (header first); arrays are views of the frames (no copy).

    Raises :class:`MessageError` naming the field on anything unexpected.
    """
    if not frames:
        raise MessageError(f"message from {peer}: no frames")
    head = _frame_bytes(frames[0])
    if len(head) < _HEAD.size:
        raise MessageError(f"message from {peer}: header: {len(head)} bytes, need >= "
                           f"{_HEAD.size}")
    if len(head) > MAX_HEADER:
        raise MessageError(f"message from {peer}: header: {len(head)} bytes > {MAX_HEADER}")
    magic, version, kind_v, n_ints, n_bufs = _HEAD.unpack_from(head, 0)
    if magic != MAGIC:
        raise MessageError(f"message from {peer}: magic: {bytes(magic)!r}, expected {MAGIC!r} "
                           "(not a gnnsched peer)")
    if version != VERSION:
        raise MessageError(f"message from {peer}: version: {version}, this build speaks "
                           f"{VERSION}")
    try:
        kind = Kind(kind_v)
    except ValueError:
        raise MessageError(f"message from {peer}: kind: unknown kind {kind_v}") from None
    if expect is not None and kind not in expect:
        raise MessageError(f"message from {peer}: kind: {kind.name} where "
                           f"{'/'.join(k.name for k in expect)} was expected")
    schema = SCHEMAS[kind]
    if n_ints > MAX_INTS or n_bufs > MAX_BUFS:
        raise MessageError(f"{kind.name} from {peer}: counts: {n_ints} ints, {n_bufs} buffers "
                           f"(max {MAX_INTS}, {MAX_BUFS})")
    off = _HEAD.size
    if len(head) < off + 8 * n_ints:
        raise MessageError(f"{kind.name} from {peer}: ints: header truncated")
    values = struct.unpack_from(f"<{n_ints}q", head, off)
    off += 8 * n_ints
    count = 0
    if schema.rep_count:
        base = len(schema.ints)
        if n_ints < base:
            raise MessageError(f"{kind.name} from {peer}: ints: {n_ints}, need >= {base}")
        count = values[schema.ints.index(schema.rep_count)]
        if not 0 <= count <= MAX_LAYERS:
            raise MessageError(f"{kind.name} from {peer}: {schema.rep_count}: {count} not in "
                               f"0..{MAX_LAYERS}")
    int_names, buf_specs = _expand(schema, count)
    if n_ints != len(int_names):
        raise MessageError(f"{kind.name} from {peer}: ints: {n_ints}, schema has "
                           f"{len(int_names)} ({', '.join(int_names)})")
    if n_bufs != len(buf_specs):
        raise MessageError(f"{kind.name} from {peer}: buffers: {n_bufs}, schema has "
                           f"{len(buf_specs)}")
    if len(frames) != 1 + n_bufs:
        raise MessageError(f"{kind.name} from {peer}: frames: {len(frames)}, header announces "
                           f"{1 + n_bufs}")
    total = len(head)
    arrays: dict[str, np.ndarray] = {}
    for i, (name, dtypes, ndim) in enumerate(buf_specs):
        if len(head) < off + _BUF.size:
            raise MessageError(f"{kind.name}.{name} from {peer}: header truncated")
        code, nd = _BUF.unpack_from(head, off)
        off += _BUF.size
        dt = DTYPES.get(code)
        if dt is None or dt not in dtypes:
            raise MessageError(f"{kind.name}.{name} from {peer}: dtype code {code} "
                               f"({dt}), expected {'/'.join(str(d) for d in dtypes)}")
        if nd != ndim:
            raise MessageError(f"{kind.name}.{name} from {peer}: ndim {nd}, expected {ndim}")
        if len(head) < off + 8 * nd:
            raise MessageError(f"{kind.name}.{name} from {peer}: shape truncated")
        shape = struct.unpack_from(f"<{nd}q", head, off)
        off += 8 * nd
        if any(s < 0 for s in shape):
            raise MessageError(f"{kind.name}.{name} from {peer}: negative shape {shape}")
        if any(s > max_bytes for s in shape):  # even when another dimension is 0
            raise MessageError(f"{kind.name}.{name} from {peer}: shape {list(shape)}: "
                               f"dimensions exceed the limit of {max_bytes}")
        nbytes = dt.itemsize
        for s in shape:
            nbytes *= s
        total += nbytes
        if nbytes > max_bytes or total > max_bytes:
            raise MessageError(f"{kind.name}.{name} from {peer}: {total} bytes exceed the "
                               f"limit of {max_bytes}")
        buf = _frame_bytes(frames[1 + i])
        if len(buf) != nbytes:
            raise MessageError(f"{kind.name}.{name} from {peer}: frame has {len(buf)} bytes, "
                               f"shape {list(shape)} of {dt} needs {nbytes}")
        arrays[name] = np.frombuffer(buf, dtype=dt).reshape(shape) if nbytes else \
            np.zeros(shape, dtype=dt)
    if off != len(head):
        raise MessageError(f"{kind.name} from {peer}: header: {len(head) - off} trailing bytes")
    return Message(kind, dict(zip(int_names, values)), arrays)


# --------------------------------------------------------------------------------------
# Control messages: JSON objects with an "op"


def ctrl(op: str, **fields: Any) -> Message:
    """A control message: a JSON object ``{"op": op, **fields}``."""
    with section("serialise:json"):
        blob = json.dumps({"op": op, **fields}, separators=(",", ":")).encode()
    if len(blob) > MAX_CTRL_BYTES:
        raise MessageError(f"CTRL {op}: {len(blob)} bytes > {MAX_CTRL_BYTES}")
    return Message(Kind.CTRL, {}, {"json": np.frombuffer(blob, dtype=np.uint8)})


def ctrl_body(msg: Message, peer: str = "peer") -> dict[str, Any]:
    """The JSON object of a CTRL message, validated to be an object with a string ``op``."""
    raw = msg.arrays["json"]
    if raw.nbytes > MAX_CTRL_BYTES:
        raise MessageError(f"CTRL from {peer}: json: {raw.nbytes} bytes > {MAX_CTRL_BYTES}")
    try:
        with section("serialise:json"):
            body = json.loads(raw.tobytes())
    except (ValueError, RecursionError) as exc:  # bad UTF-8 / JSON, or absurdly deep nesting
        raise MessageError(f"CTRL from {peer}: json: not valid JSON "
                           f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(body, dict) or not isinstance(body.get("op"), str):
        raise MessageError(f"CTRL from {peer}: json: must be an object with a string 'op'")
    return body


# --------------------------------------------------------------------------------------
# Sockets


@dataclass(frozen=True)
class SocketOptions:
    """Bounds on what a socket may hold: messages queued per peer and kernel buffer bytes.

    Bulk senders use a small ``sndhwm`` and ``sndbuf`` so that data waits in the sender's
    own (policy-ordered) queue, not in buffers no scheduler can reorder. ``tos`` is the IP
    type of service of what the socket sends: bulk graph data goes as ``BULK_TOS``, so a NIC
    queue with priority bands (Linux's classic ``pfifo_fast``; emulated NICs with ``bands``)
    sends the gradient all-reduce, requests and acknowledgements ahead of queued features.
    """

    sndhwm: int = 64
    rcvhwm: int = 64
    sndbuf: int = -1  # -1: OS default
    rcvbuf: int = -1
    max_message: int = DEFAULT_MAX_MESSAGE
    linger_ms: int = 0
    tos: int = 0


CONTROL = SocketOptions(sndhwm=1000, rcvhwm=1000, max_message=256 << 20)
BULK = SocketOptions(sndhwm=4, rcvhwm=16, sndbuf=256 << 10, rcvbuf=1 << 20)
BULK_OUT = replace(BULK, tos=BULK_TOS)  # what sends bulk data (its receivers stay BULK)


@dataclass(frozen=True)
class CurveKeys:
    """The cluster's CURVE key pair (Z85 bytes) and the folder holding its public key."""

    public: bytes
    secret: bytes
    folder: str


KEY_NAME = "cluster"  # keys_dir/cluster.key (public) and keys_dir/cluster.key_secret


def load_keys(keys_dir: str | Path) -> CurveKeys:
    """Read the cluster key pair written by ``gnnsched keys``; a clear error if absent."""
    import zmq.auth

    folder = Path(keys_dir)
    secret_file = folder / f"{KEY_NAME}.key_secret"
    if not secret_file.is_file():
        raise TransportError(f"{secret_file}: no CURVE secret key (the cluster has curve: "
                             f"true); create the keys with `gnnsched keys --cluster FILE "
                             f"--out {folder}`")
    try:
        public, secret = zmq.auth.load_certificate(str(secret_file))
    except (OSError, ValueError, zmq.ZMQError) as exc:
        raise TransportError(f"{secret_file}: not a CURVE key file ({exc})") from None
    if not secret or len(public) != 40 or len(secret) != 40:
        raise TransportError(f"{secret_file}: not a CURVE key pair")
    return CurveKeys(public, secret, str(folder))


def start_authenticator(ctx: zmq.Context, keys: CurveKeys) -> Any:
    """A ZAP handler in this process admitting only clients that hold the cluster's key.

    Without it a CURVE server accepts any client key pair; with it, a client must prove it
    holds the cluster's secret key. Returns the authenticator (``stop()`` it at the end).
    """
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=keys.folder)  # public keys in keys_dir
    return auth


def make_socket(ctx: zmq.Context, kind: int, opts: SocketOptions = CONTROL,
                identity: bytes | None = None, *, curve: CurveKeys | None = None,
                server: bool = False) -> zmq.Socket:
    """A socket with our bounds set; with ``curve`` a CURVE server (binds) or client."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, opts.linger_ms)
    sock.setsockopt(zmq.SNDHWM, opts.sndhwm)
    sock.setsockopt(zmq.RCVHWM, opts.rcvhwm)
    if opts.sndbuf > 0:
        sock.setsockopt(zmq.SNDBUF, opts.sndbuf)
    if opts.rcvbuf > 0:
        sock.setsockopt(zmq.RCVBUF, opts.rcvbuf)
    sock.setsockopt(zmq.MAXMSGSIZE, opts.max_message)
    if opts.tos:
        sock.setsockopt(zmq.TOS, opts.tos)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unknown peer: an error, not a silent drop
        # a restarted role reconnects under its old identity before the dead connection is
        # noticed: the new connection takes over instead of being ignored
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    if curve is not None:
        if server:
            sock.curve_server = True
            sock.curve_secretkey = curve.secret
            sock.curve_publickey = curve.public
        else:
            sock.curve_serverkey = curve.public
            sock.curve_publickey = curve.public
            sock.curve_secretkey = curve.secret
    return sock


_WILDCARDS = ("*", "0.0.0.0", "::", "[::]", "")


def _check_host(host: str) -> None:
    if host in _WILDCARDS:
        raise TransportError(f"refusing to bind to {host or 'an empty address'!r} (all "
                             "interfaces): servers bind only to the address the cluster file "
                             "names for their machine (machines[*].address)")
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise TransportError(f"cannot bind to {host!r}: not an IP address (give the "
                             "machine's `address` in the cluster file)") from None


def bind_random(sock: zmq.Socket, host: str) -> str:
    """Bind to an ephemeral port on ``host`` only; returns the connectable endpoint."""
    _check_host(host)
    try:
        port = sock.bind_to_random_port(f"tcp://{host}", min_port=20000, max_port=60000,
                                        max_tries=200)
    except zmq.ZMQBindError:
        raise TransportError(f"no free port on {host} in 20000..60000") from None
    except zmq.ZMQError as exc:
        raise TransportError(_bind_problem(host, None, exc)) from None
    return f"tcp://{host}:{port}"


def bind_port(sock: zmq.Socket, host: str, port: int) -> str:
    """Bind to ``host:port`` (a fixed port the user asked for); clear error when taken."""
    _check_host(host)
    if not 1 <= int(port) <= 65535:
        raise TransportError(f"port {port} is not in 1..65535")
    try:
        sock.bind(f"tcp://{host}:{int(port)}")
    except zmq.ZMQError as exc:
        raise TransportError(_bind_problem(host, port, exc)) from None
    return f"tcp://{host}:{int(port)}"


def _bind_problem(host: str, port: int | None, exc: zmq.ZMQError) -> str:
    where = f"{host}:{port}" if port is not None else host
    if exc.errno == errno.EADDRINUSE:
        return f"cannot bind {where}: port {port} is already in use (another run, or a " \
               "process that did not exit?)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot bind {where}: {host} is not an address of this host (check " \
               "machines[*].address in the cluster file)"
    return f"cannot bind {where}: {exc}"


class Stats:
    """Payload bytes and messages sent, per message kind, and how many bytes left the machine
    (``network``: the peer is on another machine, so they crossed this machine's NIC)."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self.messages: Counter[str] = Counter()
        self.network = 0

    def add(self, kind: Kind, nbytes: int, remote: bool = False) -> None:
        self.bytes[kind.name] += nbytes
        self.messages[kind.name] += 1
        if remote:
            self.network += nbytes

    @property
    def total(self) -> int:
        return int(sum(self.bytes.values()))

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_sent": self.total, "network_bytes": self.network,
                "by_kind": dict(self.bytes), "messages": dict(self.messages)}


STATS = Stats()  # one per process: every Channel of the process adds to it


@dataclass
class Encoded:
    """A message as wire frames (header + raw buffers), and its payload bytes."""

    kind: Kind
    frames: list[Any]
    nbytes: int


class Channel:
    """One ZeroMQ socket with typed send/recv, byte accounting and receive timeouts.

    On a ROUTER socket ``send`` needs the peer identity and ``recv`` returns it; on other
    sockets the identity is ``None``. ``remote``: the peer is on another machine (its bytes
    count as network bytes; a ROUTER's sends can say so per message).
    """

    def __init__(self, sock: zmq.Socket, name: str, *, max_bytes: int | None = None,
                 stats: Stats = STATS, remote: bool = False) -> None:
        self.sock, self.name, self.stats, self.remote = sock, name, stats, remote
        self.router = sock.type == zmq.ROUTER
        self.max_bytes = max_bytes or sock.getsockopt(zmq.MAXMSGSIZE)
        if self.max_bytes <= 0:
            self.max_bytes = DEFAULT_MAX_MESSAGE

    def send(self, msg: Message, identity: bytes | None = None, *, flags: int = 0,
             remote: bool | None = None) -> int:
        return self.send_encoded(self.encode(msg), identity, flags=flags, remote=remote)

    def encode(self, msg: Message) -> Encoded:
        """``msg`` as wire frames, ready for :meth:`send_encoded` (which may be retried with
        the same frames: a refused send need not be encoded again)."""
        with section("serialise:encode"):
            frames = encode(msg)
        return Encoded(msg.kind, frames, sum(_nbytes(f) for f in frames))

    def send_encoded(self, enc: Encoded, identity: bytes | None = None, *, flags: int = 0,
                     remote: bool | None = None) -> int:
        """Send encoded frames (zero-copy: the buffers are handed to ZeroMQ as they are).
        With ``zmq.NOBLOCK`` a full pipe raises ``zmq.Again`` and nothing is counted."""
        frames = enc.frames
        if self.router:
            if identity is None:
                raise ValueError(f"{self.name}: ROUTER send needs a peer identity")
            frames = [identity, *frames]
        with section("rpc:send"):
            self.sock.send_multipart(frames, flags=flags, copy=False)
        self.stats.add(enc.kind, enc.nbytes, self.remote if remote is None else remote)
        return enc.nbytes

    def recv_frames(self, timeout: float | None) -> list[zmq.Frame]:
        if timeout is not None:
            with section("wait:recv"):
                ready = self.sock.poll(int(max(timeout, 0) * 1000), zmq.POLLIN)
            if not ready:
                raise TransportTimeout(f"{self.name}: no message within {timeout:.1f} s")
        with section("rpc:recv"):
            return self.sock.recv_multipart(copy=False)

    def recv(self, timeout: float | None, expect: tuple[Kind, ...] | None = None
             ) -> tuple[bytes | None, Message]:
        """Next message (waiting at most ``timeout`` seconds; ``None`` only for tests)."""
        frames = self.recv_frames(timeout)
        return self.decode(frames, expect)

    def decode(self, frames: list[Any], expect: tuple[Kind, ...] | None = None
               ) -> tuple[bytes | None, Message]:
        ident = None
        if self.router:
            if len(frames) < 2:
                raise MessageError(f"{self.name}: ROUTER message without identity")
            ident = bytes(_frame_bytes(frames[0]))
            frames = frames[1:]
        peer = f"{self.name}[{ident.decode(errors='replace')}]" if ident else self.name
        with section("serialise:decode"):
            return ident, decode(frames, max_bytes=self.max_bytes, expect=expect, peer=peer)

    def recv_now(self) -> tuple[bytes | None, Message] | None:
        """A message if one is queued, else None (never blocks)."""
        try:
            with section("rpc:recv"):
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        return self.decode(frames)

    def close(self) -> None:
        self.sock.close(linger=0)


def _nbytes(frame: Any) -> int:
    if isinstance(frame, (bytes, bytearray)):
        return len(frame)
    if isinstance(frame, memoryview):
        return frame.nbytes
    return len(frame)


class BufferPool:
    """Reusable row buffers for the big per-batch arrays (a store's gathered rows, a
    gatherer's batch): a buffer is handed out again only once nothing references it any more
    -- no array or view of it, no memoryview, no zero-copy ZeroMQ frame still being sent (each
    holds a reference) -- so reuse can never overwrite data in use. Reusing saves the page
    faults of fresh memory (first-touch faults cost as much as the copy itself here). At most
    ``keep`` buffers are kept; beyond that, arrays are allocated as usual."""

    def __init__(self, keep: int = 4, slack: float = 1.25) -> None:
        self.keep, self.slack = keep, slack
        self.bufs: list[np.ndarray] = []
        self.reused = self.allocated = 0

    def take(self, rows: int, dim: int, dtype: Any = np.float32) -> np.ndarray:
        """A ``[rows, dim]`` C-contiguous array (uninitialised)."""
        dtype = np.dtype(dtype)
        need = rows * dim * dtype.itemsize
        free = small = -1
        for i in range(len(self.bufs)):
            if sys.getrefcount(self.bufs[i]) > 2:  # the list's + the call's: in use
                continue
            if self.bufs[i].nbytes >= need:
                if free < 0 or self.bufs[i].nbytes < self.bufs[free].nbytes:
                    free = i
            else:
                small = i
        if free >= 0:
            self.reused += 1
            return self.bufs[free][:need].view(dtype).reshape(rows, dim)
        self.allocated += 1
        buf = np.empty(max(need, int(need * self.slack)), dtype=np.uint8)
        if small >= 0:
            self.bufs[small] = buf  # too small to serve anyone again: replace it
        elif len(self.bufs) < self.keep:
            self.bufs.append(buf)
        return buf[:need].view(dtype).reshape(rows, dim)


class Deadline:
    """A wall-clock budget shared by several receives (``left()`` never negative)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end


__all__ = [
    "BULK", "BULK_OUT", "BULK_TOS", "CONTROL", "BufferPool", "Channel", "CurveKeys", "Deadline", "Encoded",
    "Kind",
    "Message", "MessageError",
    "SCHEMAS", "STATS", "Schema", "SocketOptions", "Stats", "TransportError",
    "TransportTimeout", "bind_port", "bind_random", "ctrl", "ctrl_body", "decode", "encode",
    "load_keys", "make_socket", "start_authenticator",
]
