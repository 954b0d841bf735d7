"""Graph-store server: one process per store machine, serving all partitions that machine holds.

It answers two requests from samplers and fetchers (``SAMPLE_REQ``: sample in-neighbours of
these nodes; ``FEAT_REQ``: feature rows of these nodes) and sends every response through one
:class:`NicQueue`, because the machine's NIC is the contended resource and only one queue per
NIC can order it. Priority transmission is real, not a label:

* responses are cut into chunks (``chunk_bytes``, 256 KiB by default; on shaped links
  ~8 ms of this store's own egress, ``nic_chunk_bytes``);
* a chunk leaves only while the bytes sent but not yet acknowledged by their receiver stay
  under ``window_bytes``, so data waits in *this* queue, not in socket buffers nobody can
  reorder (sockets also get a small ``SNDHWM`` and ``SO_SNDBUF``);
* at most ``SNDHWM`` chunks are unacknowledged per receiver, same-machine ones included, so
  a receiver's pipe is never found full; sends never block: if a pipe is full anyway its
  chunk goes back to the queue *encoded* (a retry does not encode it again) and that
  receiver is skipped until it acknowledges a chunk (or ``RETRY_S``), while the NIC serves
  the others (a blocking send would stall every transfer, sampling answers included, behind
  the slowest receiver; retrying every loop round spun the CPU);
* with ``sharing == "priority"`` the next chunk always comes from the first transfer in the
  policy's order (and with the policy's ``wire_levels`` none of a later iteration while a
  chunk of an earlier one is unacknowledged, unless the NIC idles, nor while its receiver's
  floor is an earlier iteration); with ``"fair"`` active transfers take turns chunk by
  chunk, like TCP flows sharing a link. The coordinator runs the policy: it sends each
  transfer's priority key ahead of time, keyed by (trainer, iteration, kind) -- when it
  dispatches a batch (its sampling requests) and when the batch is sampled (its feature
  transfers, whose sizes are then known) -- and, as a fallback for a request that beats that
  message, per queued transfer. Transfers not ranked yet go after ranked ones, in arrival order, so the NIC never
  idles waiting for a decision.

So a high-priority transfer queued behind a large low-priority one overtakes it after at most
one window of bytes. The store tells the coordinator when a transfer is queued and when its
last chunk is acknowledged (the policy's ``on_transfer_done``). Gradients come first, as in
the cost model: once the trainers all-reduce (every one has reached the barrier), the
coordinator ``hold``s this store's new chunks of later iterations into their machines when
they would share a NIC with the gradients, for the gradients' time on the wire (ring bytes /
bandwidth; the rest of the all-reduce call leaves the NIC to prefetch), so feature prefetch
does not slow the barrier.

Feature rows are gathered from one stacked :class:`FeatureTable` straight into the buffer the
chunks are sent from (pooled, :class:`~gnnsched.runtime.transport.BufferPool`; chunks are
views of it, handed to ZeroMQ without a copy). The table lives in anonymous shared memory: a
receiver on the store's own machine maps it read-only and gathers those rows itself, so they
never touch a socket (the store's ``local_bytes`` count only what still does).

:class:`StoreClient` is the other side (used by samplers and fetchers): one DEALER per store,
request ids, chunk reassembly with size checks before any allocation, and acks; with ``shm``
it maps its own machine's store table.
:class:`PartGraph` wraps one loaded partition for sampling and feature look-ups in original
node ids; samplers on a store's machine use it for local hops.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.ledger import section
from gnnsched.runtime.qos import URGENT_TOS
from gnnsched.runtime.role import Role
from gnnsched.runtime.transport import (
    BULK,
    BULK_TOS,
    BufferPool,
    Channel,
    CurveKeys,
    Encoded,
    Kind,
    Message,
    MessageError,
    SocketOptions,
    ctrl,
    ctrl_body,
    make_socket,
)
from gnnsched.workload import CONSERVE_BELOW, CONSERVE_EVERY

CHUNK_BYTES = 256 << 10
WINDOW_BYTES = 1 << 20  # total bytes in flight from one NIC
PEER_WINDOW_BYTES = 512 << 10  # bytes in flight to one receiver
RETRY_S = 0.02  # a receiver whose pipe was full is retried after this at the latest
URGENT_RETRY_S = 0.5  # a receiver not (yet) on the urgent socket: bulk band until then
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
# Feature rows in shared memory (same-machine receivers gather them themselves)

SHM_MAGIC = b"GNSHROWS"
_SHM_HEAD = 64  # magic (8) | token (16) | zero padding; arrays start 64-byte aligned


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


def boot_id() -> str:
    """This kernel's boot id: two processes that read the same one share a kernel, hence
    memory ('' where Linux does not say)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class FeatureTable:
    """A store's feature rows, every partition it serves stacked in one matrix, plus
    ``rowmap[original node id]`` -> row (-1: not stored here).

    The store builds it at start in an anonymous shared-memory file (Linux ``memfd_create``):
    it has *no name* anywhere (nothing in ``/dev/shm``), so nothing can outlive its users --
    the kernel frees it when the store and every process that mapped it have exited or
    unmapped it, whether they ended cleanly, failed, were interrupted or SIGKILLed. The
    store's own gathers read it; a receiver on the same machine (a relay fetcher, a trainer
    gathering its own features) asks the store over its data socket (``CTRL {"op": "shm"}``),
    opens the file through ``/proc/<store pid>/fd/<fd>`` read-only, checks the random token
    the store wrote at its head (and the kernel's boot id), and gathers its rows straight
    into its batch buffer: no socket, no copy in the store, no chunk, no acknowledgement.
    Where any of that is unavailable (no memfd, another kernel or PID namespace, permission
    denied), rows keep flowing through ZeroMQ.
    """

    def __init__(self, buf: Any, fd: int, rowmap: np.ndarray, feats: np.ndarray,
                 token: bytes, offsets: tuple[int, int], size: int) -> None:
        self.buf, self.fd, self.rowmap, self.feats = buf, fd, rowmap, feats
        self.token, self.offsets, self.size = token, offsets, size

    @classmethod
    def build(cls, num_nodes: int, parts: Iterable[tuple[np.ndarray, Any]],
              dim: int | None = None, shared: bool = True) -> FeatureTable:
        """Stack ``parts`` -- (original ids of its rows, ``[n, dim]`` float32 rows), consumed
        one at a time, so a caller that loads each part lazily holds one part's own copy at a
        time -- into a new table (in shared memory if ``shared`` and the OS has memfd).
        ``dim``: the feature width (None: the first part's)."""
        import mmap
        import os
        import secrets

        map_off = _SHM_HEAD
        feat_off = _align(map_off + 8 * num_nodes)
        fd = -1
        if shared and hasattr(os, "memfd_create"):
            try:
                fd = os.memfd_create("gnnsched-features", os.MFD_CLOEXEC)
            except OSError:
                fd = -1
        ids_all, kept, rows = [], [], 0
        for ids, block in parts:
            block = np.ascontiguousarray(block, dtype=np.float32)
            if dim is None and block.ndim == 2:
                dim = block.shape[1]
            if block.shape != (len(ids), dim):
                raise ValueError(f"feature rows of shape {block.shape}, expected "
                                 f"({len(ids)}, {dim})")
            ids_all.append(np.asarray(ids, dtype=np.int64))
            if fd >= 0:  # straight into the shared file; the part's copy can go at once
                view, off = memoryview(block).cast("B"), feat_off + rows * dim * 4
                while len(view):
                    n = os.pwrite(fd, view, off)
                    view, off = view[n:], off + n
            else:
                kept.append(block)
            rows += len(ids)
            del block
        dim = dim or 0
        size = max(feat_off + rows * dim * 4, _SHM_HEAD)
        if fd >= 0:
            os.ftruncate(fd, size)
            buf: Any = mmap.mmap(fd, size)
            mem = np.frombuffer(buf, np.uint8)
        else:  # private memory (transparent huge pages where the OS gives them to numpy)
            buf = mem = np.empty(size, np.uint8)
        token = secrets.token_bytes(16)
        mem[:8], mem[8:24] = np.frombuffer(SHM_MAGIC, np.uint8), np.frombuffer(token, np.uint8)
        rowmap = mem[map_off:map_off + 8 * num_nodes].view(np.int64)
        rowmap[:] = -1
        feats = mem[feat_off:feat_off + rows * dim * 4].view(np.float32).reshape(rows, dim)
        at = 0
        for i, ids in enumerate(ids_all):
            if fd < 0:
                feats[at:at + len(ids)] = kept[i]
            rowmap[ids] = np.arange(at, at + len(ids))
            at += len(ids)
        return cls(buf, fd, rowmap, feats, token, (map_off, feat_off), size)

    def offer(self) -> dict[str, Any]:
        """What a same-machine receiver needs to map this table (the ``shm`` answer)."""
        import os

        if self.fd < 0:
            return {"error": "the store's rows are not in shared memory (no gatherer was "
                             "planned on its machine, or no memfd here)"}
        return {"pid": os.getpid(), "fd": self.fd, "boot_id": boot_id(),
                "token": self.token.hex(), "size": self.size, "nodes": len(self.rowmap),
                "rows": int(self.feats.shape[0]), "dim": int(self.feats.shape[1]),
                "map_off": self.offsets[0], "feat_off": self.offsets[1]}

    @classmethod
    def attach(cls, offer: dict[str, Any], num_nodes: int, dim: int) -> FeatureTable:
        """Map a table another process on this machine offered, read-only; raises OSError or
        ValueError (with the reason) when it cannot be mapped or is not what was offered."""
        import mmap
        import os

        if "error" in offer:
            raise ValueError(str(offer["error"]))
        try:
            pid, fd, size = int(offer["pid"]), int(offer["fd"]), int(offer["size"])
            nodes, rows = int(offer["nodes"]), int(offer["rows"])
            map_off, feat_off = int(offer["map_off"]), int(offer["feat_off"])
            token = bytes.fromhex(str(offer["token"]))
            if int(offer["dim"]) != dim or nodes != num_nodes:
                raise ValueError(f"{nodes} nodes x {offer['dim']} features, this run has "
                                 f"{num_nodes} x {dim}")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed offer ({exc!r})") from None
        if offer.get("boot_id") != boot_id() or not boot_id():
            raise ValueError("the store runs on another kernel")
        if not (map_off >= _SHM_HEAD and feat_off >= map_off + 8 * nodes
                and size >= feat_off + rows * dim * 4 and rows >= 0):
            raise ValueError("inconsistent offsets")
        own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(own).st_size != size:
                raise ValueError(f"/proc/{pid}/fd/{fd} is not the offered table (size)")
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # no fault per page
            buf = mmap.mmap(own, size, flags=flags, prot=mmap.PROT_READ)
        finally:
            os.close(own)  # the mapping keeps the file alive; no descriptor is kept
        if buf[:8] != SHM_MAGIC or buf[8:24] != token:
            buf.close()
            raise ValueError(f"/proc/{pid}/fd/{fd} is not the offered table (token)")
        rowmap = np.frombuffer(buf, np.int64, nodes, map_off)
        feats = np.frombuffer(buf, np.float32, rows * dim, feat_off).reshape(rows, dim)
        return cls(buf, -1, rowmap, feats, token, (map_off, feat_off), size)

    def rows_of(self, nodes: np.ndarray) -> np.ndarray | None:
        """Rows of ``nodes`` (original ids, in range); None if any is not stored here."""
        rows = self.rowmap[nodes]
        return None if len(rows) and rows.min() < 0 else rows

    def close(self) -> None:
        """Unmap (once no array views it) and close the descriptor."""
        import os

        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.rowmap = self.feats = np.zeros(0)
        try:
            if hasattr(self.buf, "close"):
                self.buf.close()
        except BufferError:  # a view is still alive: the mapping goes with the process
            pass


# --------------------------------------------------------------------------------------
# The NIC queue


@dataclass
class OutTransfer:
    """One queued response: its chunks, who receives it, and what the policy knows of it."""

    tid: int
    peer: bytes
    req: int
    kind: str  # "struct" | "feat" (the policy's Transfer.kind)
    trainer: int
    seq: int
    dst_machine: int
    chunks: list[Any]  # a Message, its Encoded frames once a send was refused, None once sent
    sizes: list[int]
    created: float
    local: bool = False  # same machine: no NIC involved, sent at once
    next_chunk: int = 0
    acked: int = 0

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)

    @property
    def pending(self) -> bool:
        return self.next_chunk < len(self.chunks)


class Holds(dict[int, tuple[int, float]]):
    """Gradients first, the rule stores and relays share: a machine whose trainer all-reduces
    iteration ``k`` gets nothing of later iterations until :meth:`release` or until the hold's
    time (the gradients' time on the wire) is up. Anything of iteration ``k`` or earlier still
    flows -- another trainer may need it to reach the same barrier -- so a hold can never
    deadlock. Maps machine -> (``k``, monotonic end; ``inf``: until released)."""

    def hold(self, machine: int, seq: int, for_s: float | None = None) -> None:
        self[machine] = (seq, time.monotonic() + for_s if for_s is not None else math.inf)

    def release(self, machine: int) -> None:
        self.pop(machine, None)

    def blocks(self, machine: int | None, seq: int, now: float) -> bool:
        """Whether iteration ``seq`` into ``machine`` must wait now (an ended hold is dropped)."""
        h = self.get(machine) if machine is not None else None
        if h is None:
            return False
        if now >= h[1]:  # its time is up: the gradients have left
            del self[machine]
            return False
        return seq > h[0]

    def expire(self, now: float) -> list[int]:
        """Drop the holds whose time is up; returns their machines."""
        done = [m for m, (_, until) in self.items() if now >= until]
        for m in done:
            del self[m]
        return done

    def left(self) -> float | None:
        """Seconds until the next timed hold ends (None: no timed hold)."""
        ends = [until for _, until in self.values() if until < math.inf]
        return max(0.0, min(ends) - time.monotonic()) if ends else None


class NicQueue:
    """Chooses the next chunk a NIC sends.

    ``priority``: the pending transfer with the smallest policy key (keys arrive from the
    coordinator; unranked transfers come after ranked ones, in arrival order) whose receiver
    still has window room -- strict priority that stays work-conserving when the first
    transfer's receiver is the slow side. ``fair``: pending transfers take turns, one chunk each.
    Bytes in flight (sent, not acknowledged) are bounded per receiver (``peer_window``) and in
    total (``window``); same-machine transfers bypass both (they never touch the NIC).
    ``peer_chunks`` bounds the chunks in flight to one receiver, local or remote: set to the
    socket's ``SNDHWM``, a send can never find the receiver's pipe full (every chunk in the
    pipe is unacknowledged), so none is refused and retried.
    :meth:`hold` marks a machine whose trainer is all-reducing (:class:`Holds`: gradients go
    ahead of all other traffic in the cost model).
    ``rate`` (this NIC's bytes per second, on the run's clock) makes the total window
    work-conserving (:data:`gnnsched.workload.CONSERVE_BELOW` says why): when it blocks a
    transfer while less than ``CONSERVE_BELOW`` of the NIC's rate was acknowledged over the
    last ``CONSERVE_EVERY`` of the window's drain time (``window / rate``), and its oldest
    chunk in flight left before that -- the bytes in flight wait at congested receivers, not at
    this NIC -- the best blocked transfer goes past the total window (its receiver's window
    still applies), at most one per that time. When the NIC is the bottleneck nothing changes
    and the policy's order holds. ``levels`` (priority only; the policy's ``wire_levels``):
    a transfer whose key starts with a higher level than a bulk chunk in flight here waits
    as behind a full total window, so the next iteration's bytes do not share this NIC with
    the current one's; and one whose receiver's floor (:meth:`set_floor`: the first key of
    every store's unfinished transfers to it) has a lower level waits while the others go,
    so they do not share the receiver's NIC either (the wire levels of
    :mod:`gnnsched.workload`). The simulator's window model admits the same way
    (:class:`gnnsched.simulator.network._WindowNet`).
    """

    def __init__(self, sharing: str = "fair", window: int = WINDOW_BYTES,
                 peer_window: int | None = None, peer_chunks: int | None = None,
                 urgent: bool = False, rate: float | None = None, levels: bool = False
                 ) -> None:
        if sharing not in ("fair", "priority"):
            raise ValueError(f"sharing must be 'fair' or 'priority', got {sharing!r}")
        self.sharing, self.window = sharing, window
        self.levels = levels and sharing == "priority"
        self.level_bytes: dict[Any, int] = {}  # level -> remote bulk bytes in flight
        self.chunk_level: dict[tuple[bytes, int, int], Any] = {}  # in flight, by chunk
        # the urgent band (priority only): the head transfer's chunks, outside the windows
        # below, within one receiver's window (and ``peer_chunks``) of its own
        self.urgent = urgent and sharing == "priority"
        self.urgent_count = self.urgent_bytes = 0
        self.urgent_off: dict[bytes, float] = {}  # receivers not on the urgent socket: until
        self.bulk_tids: dict[int, int] = {}  # remote transfers' chunks in flight on the bulk band
        # receiver machine -> the first key of all stores' transfers to it (the coordinator's
        # grants): only a transfer at or before it may take the urgent band; None: nothing
        # pending there (so anything may); no entry: not known (the store's own order decides)
        self.floors: dict[int, tuple | None] = {}
        self.peer_window = peer_window or window
        self.active: OrderedDict[int, OutTransfer] = OrderedDict()  # arrival order
        self.keys: dict[int, tuple] = {}
        self.ranks: OrderedDict[tuple[int, int, str], tuple] = OrderedDict()  # pre-ranked
        self.in_flight: dict[tuple[bytes, int, int], tuple[int, int, bool, bool]] = {}
        self.in_flight_bytes = 0
        # work conservation (see above): the NIC's rate, acknowledged bulk bytes over the
        # last `every` seconds, when each bulk chunk in flight left, and the transfers let past
        self.rate = float(rate) if rate else None
        self.every = CONSERVE_EVERY * window / self.rate if self.rate else math.inf
        self.acked: deque[tuple[float, int]] = deque()
        self.acked_bytes = 0
        self.sent_at: dict[tuple[bytes, int, int], float] = {}
        self.past: set[int] = set()
        self.next_past = 0.0
        self.passed = 0  # transfers let past the total window (stats)
        self.peer_bytes: dict[bytes, int] = {}
        self.peer_chunks = peer_chunks
        self.peer_count: dict[bytes, int] = {}  # chunks in flight per receiver
        self.held = Holds()
        self.full: set[bytes] = set()  # receivers whose socket pipe was full this round
        self._rr = 0

    def add(self, t: OutTransfer) -> None:
        """Queue a transfer; it is ranked at once if the policy pre-ranked its batch."""
        self.active[t.tid] = t
        key = self.ranks.get((t.trainer, t.seq, t.kind))
        if key is not None:
            self.keys[t.tid] = key

    def hold(self, machine: int, seq: int, for_s: float | None = None) -> None:
        """Send ``machine`` nothing of iterations after ``seq`` for ``for_s`` seconds (None:
        until released)."""
        self.held.hold(machine, seq, for_s)

    def release(self, machine: int) -> None:
        self.held.release(machine)

    def hold_left(self) -> float | None:
        """Seconds until the next timed hold ends (None: no timed hold)."""
        return self.held.left()

    def set_ranks(self, ranks: dict[tuple[int, int, str], tuple], keep: int = 4096) -> None:
        """Keys for transfers of a batch that are about to be queued (trainer, seq, kind)."""
        self.ranks.update(ranks)
        while len(self.ranks) > keep:
            self.ranks.popitem(last=False)

    def set_keys(self, keys: dict[int, tuple]) -> None:
        """Cached policy priorities (smaller first) for queued transfers."""
        for tid, key in keys.items():
            if tid in self.active:
                self.keys[tid] = key

    @property
    def sendable(self) -> bool:
        return any(t.pending for t in self.active.values())

    def _peer_room(self, t: OutTransfer, size: int) -> bool:
        """Room in ``t``'s receiver's window (and pipe budget)."""
        if self.peer_chunks and self.peer_count.get(t.peer, 0) >= self.peer_chunks:
            return False
        if t.local:
            return True
        held = self.peer_bytes.get(t.peer, 0)
        return not held or held + size <= self.peer_window

    def _room(self, t: OutTransfer, size: int) -> bool:
        if not self._peer_room(t, size):
            return False
        if t.local:
            return True
        return not self.in_flight_bytes or self.in_flight_bytes + size <= self.window or \
            t.tid in self.past

    def _idle(self, now: float) -> bool:
        """The bytes in flight wait at their receivers while this NIC idles: less than
        ``CONSERVE_BELOW`` of its rate acknowledged over the last ``every`` seconds, and its
        oldest bulk chunk in flight handed over longer ago than that."""
        if self.rate is None or now < self.next_past or not self.sent_at:
            return False
        if next(iter(self.sent_at.values())) > now - self.every:
            return False
        while self.acked and self.acked[0][0] < now - self.every:
            self.acked_bytes -= self.acked.popleft()[1]
        return self.acked_bytes < CONSERVE_BELOW * self.rate * self.every

    def _behind(self, t: OutTransfer) -> bool:
        """``levels``: a lower level than ``t``'s has bulk chunks in flight here."""
        if not self.level_bytes or t.tid in self.past:
            return False
        key = self.keys.get(t.tid)
        return key is not None and min(self.level_bytes) < key[0]

    def _floor_held(self, t: OutTransfer) -> bool:
        """``levels``: some store's transfer of a lower level than ``t``'s to the same
        receiver is unfinished (the coordinator's floor for that receiver says so)."""
        if not self.levels:
            return False
        floor = self.floors.get(t.dst_machine)
        key = self.keys.get(t.tid)
        return floor is not None and key is not None and floor[0] < key[0]

    def _order(self, t: OutTransfer) -> tuple:
        """The policy's order: ranked transfers by key, then the rest in arrival order."""
        return (0, self.keys[t.tid], t.tid) if t.tid in self.keys else (1, (), t.tid)

    def _granted(self, t: OutTransfer) -> bool:
        """Whether ``t`` may take the urgent band: no store's transfer to its receiver comes
        before it in the policy's order (as far as the coordinator's last floor says)."""
        if t.dst_machine not in self.floors:
            return True
        floor = self.floors[t.dst_machine]
        key = self.keys.get(t.tid)
        return floor is None or (key is not None and key <= floor)

    def set_floor(self, machine: int, key: tuple | None) -> None:
        self.floors[machine] = key

    def _urgent_room(self, size: int) -> bool:
        if self.peer_chunks and self.urgent_count >= self.peer_chunks:
            return False
        return not self.urgent_bytes or self.urgent_bytes + size <= self.peer_window

    def _pick(self) -> tuple[OutTransfer, bool] | None:
        ready = [t for t in self.active.values() if t.pending]
        for t in ready:  # same machine: at once, unless its receiver's pipe is full
            if t.local and t.peer not in self.full and self._room(t, 0):
                return t, False
        now = time.monotonic()
        ready = [t for t in ready if not t.local and not self.held.blocks(t.dst_machine, t.seq, now)]
        if self.urgent and ready:
            # The first granted transfer (see _granted) goes on the urgent band, past every
            # bulk byte queued at this NIC and at its receiver's. It has a receiver's window
            # of its own, outside the bulk windows, and never spills into the bulk band (its
            # chunks there would wait behind the bulk bytes). A budget of two chunks was
            # tried: a trainer busy all-reducing acknowledges late, and one mixedgen/Cora
            # epoch stalled for over a second. Only when it has something to pass (another
            # transfer pending, or bulk bytes of another in flight): a transfer alone keeps
            # the bulk band, so the band stays free for the next one ranked ahead of it.
            granted = [t for t in ready if self._granted(t)]
            head = min(granted, key=self._order) if granted else None
            alone = head is not None and len(ready) == 1 and \
                all(tid == head.tid for tid in self.bulk_tids)
            if head is not None and not alone and self.urgent_off.get(head.peer, 0.0) <= now:
                if self._urgent_room(head.sizes[head.next_chunk]):
                    return head, True
                ready = [t for t in ready if t is not head]
        open_ = [t for t in ready if t.peer not in self.full and not self._floor_held(t)]
        ready = [t for t in open_ if self._room(t, t.sizes[t.next_chunk])
                 and not self._behind(t)]
        if not ready:
            # only the total window (or a lower level in flight) blocks them, and the NIC
            # idles: let the best one past
            blocked = [t for t in open_ if self._peer_room(t, t.sizes[t.next_chunk])]
            if not blocked or not self._idle(now):
                return None
            t = min(blocked, key=self._order) if self.sharing == "priority" else blocked[0]
            self.past.add(t.tid)
            self.next_past = now + self.every
            self.passed += 1
            return t, False
        if self.sharing == "priority":
            return min(ready, key=self._order), False
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr], False

    def stall(self) -> str:
        """Why no remote chunk leaves now: ``idle`` (none pending), ``held`` (every pending
        one is held for an all-reduce), ``pipe`` (their receivers' socket pipes are full: the
        NIC is busy) or ``window`` (waiting for acknowledgements). The store adds up the
        seconds spent in each (its ``waits_s`` stats): time in ``window`` is a NIC left idle
        by the runtime, which the simulator does not model."""
        ready = [t for t in self.active.values() if t.pending and not t.local]
        if not ready:
            return "idle"
        now = time.monotonic()
        ready = [t for t in ready if not self.held.blocks(t.dst_machine, t.seq, now)]
        if not ready:
            return "held"
        if all(t.peer in self.full for t in ready):
            return "pipe"
        return "window"

    def next_chunk(self) -> tuple[OutTransfer, Any, int, bool] | None:
        """The next (transfer, chunk, bytes, urgent) to send, or None if nothing may go now;
        the chunk is its Message, or its frames if an earlier send of it was refused;
        ``urgent``: it goes on the urgent band's socket."""
        picked = self._pick()
        if picked is None:
            return None
        t, urgent = picked
        i = t.next_chunk
        size = t.sizes[i]
        t.next_chunk += 1
        self.in_flight[(t.peer, t.req, i)] = (t.tid, size, t.local, urgent)
        if urgent:
            self.urgent_count += 1
            self.urgent_bytes += size
        else:
            self.peer_count[t.peer] = self.peer_count.get(t.peer, 0) + 1
            if not t.local:
                self.in_flight_bytes += size
                if self.rate is not None:
                    self.sent_at[(t.peer, t.req, i)] = time.monotonic()
                self.peer_bytes[t.peer] = self.peer_bytes.get(t.peer, 0) + size
                self.bulk_tids[t.tid] = self.bulk_tids.get(t.tid, 0) + 1
                key = self.keys.get(t.tid) if self.levels else None
                if key is not None:
                    self.chunk_level[(t.peer, t.req, i)] = key[0]
                    self.level_bytes[key[0]] = self.level_bytes.get(key[0], 0) + size
        msg = t.chunks[i]
        t.chunks[i] = None  # freed once sent
        assert msg is not None
        return t, msg, size, urgent

    def unsend(self, t: OutTransfer, msg: Any, size: int, unreachable: bool = False) -> None:
        """Take back the chunk :meth:`next_chunk` just returned: its receiver's pipe is full.
        ``msg`` is what goes back in its place (the store keeps the encoded frames, so a retry
        does not encode it again). The receiver is skipped until :meth:`retry` (it
        acknowledged a chunk: its pipe drains) or :meth:`next_round`, so one slow receiver
        never blocks the NIC's other transfers. ``unreachable``: an urgent chunk whose
        receiver has not connected its urgent socket (yet): that receiver's chunks go on the
        bulk band for ``URGENT_RETRY_S``."""
        t.next_chunk -= 1
        i = t.next_chunk
        t.chunks[i] = msg
        *_, urgent = self.in_flight.pop((t.peer, t.req, i))
        self.sent_at.pop((t.peer, t.req, i), None)
        self._unlevel((t.peer, t.req, i), size)
        self._release(t.tid, t.peer, size, t.local, urgent)
        if unreachable:
            self.urgent_off[t.peer] = time.monotonic() + URGENT_RETRY_S
        else:
            self.full.add(t.peer)

    def next_round(self) -> None:
        """Retry every receiver whose pipe was full."""
        self.full.clear()

    def retry(self, peer: bytes) -> None:
        """Retry ``peer`` (it acknowledged a chunk, so its pipe has drained)."""
        self.full.discard(peer)

    def _release(self, tid: int, peer: bytes, size: int, local: bool, urgent: bool) -> None:
        if urgent:
            self.urgent_count -= 1
            self.urgent_bytes -= size
            return
        if not local:
            left = self.bulk_tids.get(tid, 0) - 1
            if left > 0:
                self.bulk_tids[tid] = left
            else:
                self.bulk_tids.pop(tid, None)
        left = self.peer_count.get(peer, 0) - 1
        if left > 0:
            self.peer_count[peer] = left
        else:
            self.peer_count.pop(peer, None)
        if local:
            return
        self.in_flight_bytes -= size
        left = self.peer_bytes.get(peer, 0) - size
        if left > 0:
            self.peer_bytes[peer] = left
        else:
            self.peer_bytes.pop(peer, None)

    def _unlevel(self, chunk: tuple[bytes, int, int], size: int) -> None:
        level = self.chunk_level.pop(chunk, None)
        if level is None:
            return
        left = self.level_bytes[level] - size
        if left > 0:
            self.level_bytes[level] = left
        else:
            del self.level_bytes[level]

    def ack(self, peer: bytes, req: int, chunk: int) -> OutTransfer | None:
        """Record an acknowledged chunk; returns the transfer if that completed it."""
        entry = self.in_flight.pop((peer, req, chunk), None)
        if entry is None:
            raise MessageError(f"ACK for unknown chunk {chunk} of request {req}")
        tid, size, local, urgent = entry
        self._unlevel((peer, req, chunk), size)
        if self.sent_at.pop((peer, req, chunk), None) is not None:
            now = time.monotonic()
            self.acked.append((now, size))
            self.acked_bytes += size
        self._release(tid, peer, size, local, urgent)
        t = self.active[tid]
        t.acked += 1
        if t.acked == len(t.chunks):
            del self.active[tid]
            self.keys.pop(tid, None)
            self.past.discard(tid)
            return t
        return None

    def reset(self) -> None:
        """Forget every transfer, window and hold (recovery: the receivers were restarted)."""
        self.active.clear()
        self.keys.clear()
        self.ranks.clear()
        self.in_flight.clear()
        self.in_flight_bytes = 0
        self.level_bytes.clear()
        self.chunk_level.clear()
        self.sent_at.clear()
        self.past.clear()
        self.peer_bytes.clear()
        self.peer_count.clear()
        self.urgent_count = self.urgent_bytes = 0
        self.urgent_off.clear()
        self.bulk_tids.clear()
        self.floors.clear()
        self.full.clear()
        self.held.clear()

    def drop_peer(self, peer: bytes) -> None:
        for tid in [t.tid for t in self.active.values() if t.peer == peer]:
            del self.active[tid]
            self.keys.pop(tid, None)
            self.past.discard(tid)
        for key in [k for k in self.in_flight if k[0] == peer]:
            tid, size, local, urgent = self.in_flight.pop(key)
            self.sent_at.pop(key, None)
            self._unlevel(key, size)
            self._release(tid, peer, size, local, urgent)
        self.full.discard(peer)


def chunked(kind: Kind, req: int, arrays: dict[str, np.ndarray], row_bytes: int,
            chunk_bytes: int) -> tuple[list[Message], list[int]]:
    """Split row-aligned arrays into messages of about ``chunk_bytes`` (at least one)."""
    total = len(next(iter(arrays.values())))
    rows = max(1, chunk_bytes // max(row_bytes, 1))
    starts = list(range(0, total, rows)) or [0]
    msgs, sizes = [], []
    for i, s in enumerate(starts):
        part = {k: v[s:s + rows] for k, v in arrays.items()}
        msgs.append(Message(kind, {"req": req, "chunk": i, "chunks": len(starts), "start": s,
                                   "total": total}, part))
        sizes.append(max(sum(v.nbytes for v in part.values()), 1))
    return msgs, sizes


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


# --------------------------------------------------------------------------------------
# The client side


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


__all__ = ["CHUNK_BYTES", "FeatureTable", "NicQueue", "OutTransfer", "PartGraph", "Store", "StoreClient",
           "WINDOW_BYTES", "chunked", "load_parts", "verify_files"]
