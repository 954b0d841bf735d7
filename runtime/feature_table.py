"""A store's feature rows in one table, in anonymous shared memory where it can be.

The store gathers every response's rows from one stacked :class:`FeatureTable` straight into
the buffer its chunks are sent from; a receiver on the store's own machine maps the same table
read-only (:meth:`FeatureTable.attach`) and gathers those rows itself, so they never touch a
socket. Used by :mod:`.store` (which builds and offers it) and :mod:`.store_client` (which
maps it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

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


__all__ = ["SHM_MAGIC", "FeatureTable", "boot_id"]
