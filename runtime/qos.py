"""Priority bands on the emulated NICs: the sender's IP type of service picks the band.

Why: the runtime prefetches features while trainers all-reduce gradients. On one FIFO per
NIC, a gloo all-reduce of 137 KB (Coauthor Physics' gradients) between two emulated 100 Mbit/s
hosts took 9 ms idle but 57 ms with bulk TCP flowing into both (medians of 25, measured once
on this box during development); with the bulk marked and these bands, 12 ms. In the real runs
the trainers' all-reduce went from ~50 to ~21 ms on plentiful/Physics.
:meth:`~gnnsched.runtime.netns.EmulatedCluster.measure_priority` measures the effect on a
round trip (a test checks it). The cost model sends gradients ahead of all other traffic;
so do real hosts and switches with QoS: Linux's classic ``pfifo_fast`` queue serves three
bands by the packet's priority, which a socket's ``IP_TOS`` sets (``BULK_TOS``, "maximise
throughput", is ``TC_PRIO_BULK``: the last band), and a switch with DSCP queues does the same
by the IP header. The runtime marks its bulk graph data (store replies, blocks, relayed
features) with ``BULK_TOS``; gradients, requests and acknowledgements stay best effort.
DistDGL marks nothing, so all its traffic shares one band, as on a plain FIFO.

With ``EmulatedCluster(bands=True)`` (``gnnsched cluster up --bands``, ``gnnsched bench
--nic-bands``; the default is one FIFO per NIC, a plain switch) every tbf gets a
``pfifo_fast`` child (each band as deep as the tbf's byte limit). A host's own egress bands by
the socket's priority directly; a switch port cannot, because a packet's priority is cleared
when it crosses into the switch namespace, so a 10-instruction eBPF classifier on each port's
ingress (clsact) sets it again from the IP TOS. Assembled here, loaded with the ``bpf``
system call, attached with ``tc`` through a pin in a private bpffs that is removed at once
(the filters keep the program alive; deleting the namespace deletes them). Where the kernel
lacks any piece, :func:`attach_classifier` raises and the switch ports stay FIFO, saying so.

Why not the default: on a plain switch the simulator's in-situ calibration (the all-reduce's
measured time) predicts the runs better (``docs/results`` against ``docs/results-bands``:
18 of 24 runs within 10% with bands, 24 of 24 without, same code and seeds).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct
import subprocess
import tempfile

BULK_TOS = 0x08  # IPTOS_THROUGHPUT: Linux maps it to TC_PRIO_BULK, pfifo_fast's last band
_TC_PRIO_BULK = 2
_SKB_PRIORITY = 32  # offsetof(struct __sk_buff, priority)
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_OBJ_PIN = 5, 6
_BPF_PROG_TYPE_SCHED_CLS = 3


class QosError(RuntimeError):
    """The kernel cannot band NIC queues by TOS (the message says which piece is missing)."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def tos_priority_program() -> bytes:
    """eBPF (tc direct-action): an IPv4 packet whose TOS is ``BULK_TOS`` (ECN and precedence
    bits ignored) gets ``skb->priority = TC_PRIO_BULK``; every packet passes (TC_ACT_OK)."""
    mov64_reg, mov64_imm, and32_imm = 0xBF, 0xB7, 0x54
    ld_abs_h, ld_abs_b, stx_w = 0x28, 0x30, 0x63
    jne_imm, exit_ = 0x55, 0x95
    return b"".join([
        _insn(mov64_reg, 6, 1),                              # r6 = skb (LD_ABS reads r6)
        _insn(ld_abs_h, imm=12),                             # r0 = ethertype
        _insn(jne_imm, 0, off=5, imm=0x0800),                # not IPv4: pass
        _insn(ld_abs_b, imm=15),                             # r0 = IP TOS byte
        _insn(and32_imm, 0, imm=0x1E),                       # the TOS bits proper
        _insn(jne_imm, 0, off=2, imm=BULK_TOS),              # not bulk: pass
        _insn(mov64_imm, 2, imm=_TC_PRIO_BULK),
        _insn(stx_w, 6, 2, off=_SKB_PRIORITY),               # skb->priority = bulk
        _insn(mov64_imm, 0, imm=0),                          # TC_ACT_OK
        _insn(exit_),
    ])


def _bpf(cmd: int, attr: bytes) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise QosError(f"no bpf system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    r = libc.syscall(nr, cmd, buf, 128)
    if r < 0:
        err = ctypes.get_errno()
        raise QosError(f"bpf({cmd}) failed: {os.strerror(err)}")
    return int(r)


def load_program() -> int:
    """Load :func:`tos_priority_program`; returns its file descriptor."""
    prog = tos_priority_program()
    code = ctypes.create_string_buffer(prog, len(prog))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = struct.pack("<IIQQIIQ", _BPF_PROG_TYPE_SCHED_CLS, len(prog) // 8,
                       ctypes.addressof(code), ctypes.addressof(lic), 1, len(log),
                       ctypes.addressof(log))
    try:
        return _bpf(_BPF_PROG_LOAD, attr)
    except QosError as exc:
        raise QosError(f"{exc} loading the TOS classifier "
                       f"({log.value.decode(errors='replace').strip()[:300]})") from None


def _tc(argv: list[str]) -> None:
    r = subprocess.run(["tc", *argv], capture_output=True, text=True)
    if r.returncode:
        raise QosError(f"`tc {' '.join(argv)}` failed: {r.stderr.strip() or r.returncode}")


def attach_classifier(ns: str, devs: list[str]) -> None:
    """Set ``skb->priority`` from the IP TOS on everything ``devs`` (in namespace ``ns``)
    receive, so the queues they forward into band it (:func:`tos_priority_program`)."""
    fd = load_program()
    folder = tempfile.mkdtemp(prefix="gnnsched-bpf-")
    mounted = False
    try:
        r = subprocess.run(["mount", "-t", "bpf", "bpf", folder], capture_output=True,
                           text=True)
        if r.returncode:
            raise QosError(f"cannot mount a bpf filesystem: {r.stderr.strip()}")
        mounted = True
        pin = os.path.join(folder, "tos")
        path = ctypes.create_string_buffer(pin.encode())
        _bpf(_BPF_OBJ_PIN, struct.pack("<QII", ctypes.addressof(path), fd, 0))
        for dev in devs:
            _tc(["-n", ns, "qdisc", "add", "dev", dev, "clsact"])
            _tc(["-n", ns, "filter", "add", "dev", dev, "ingress", "bpf", "da",
                 "object-pinned", pin])
        os.unlink(pin)
    finally:
        os.close(fd)
        if mounted:
            subprocess.run(["umount", folder], capture_output=True)
        with contextlib.suppress(OSError):  # still mounted: leave the empty folder, not a crash
            os.rmdir(folder)


__all__ = ["BULK_TOS", "QosError", "attach_classifier", "load_program", "tos_priority_program"]
