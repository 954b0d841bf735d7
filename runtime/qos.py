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
features) with ``BULK_TOS``; gradients, requests and acknowledgements stay unmarked.
DistDGL marks nothing, so all its traffic shares one band, as on a plain FIFO.

The three bands, as the classifier sets them on every emulated NIC (a host's egress and the
switch port toward each host):

* band 0: everything unmarked -- gloo's gradients (which no socket option of ours reaches),
  requests, acknowledgements, control;
* band 1: ``URGENT_TOS`` -- with ``RuntimeOptions.urgent_band``, a store's head transfer (the
  policy's first) on its second socket, past the bulk bytes queued at both NICs;
* band 2: ``BULK_TOS`` -- the rest of the graph data.

On the host's own egress the classifier overrides the socket's priority, because Linux maps
an unmarked socket to the middle band, where gradients would share a FIFO with urgent data.

With ``EmulatedCluster(bands=True)`` (``gnnsched cluster up --bands``, ``gnnsched bench
--nic-bands``; the default is one FIFO per NIC, a plain switch) every tbf gets a
``pfifo_fast`` child (each band as deep as the tbf's byte limit). A packet's priority is
cleared when it crosses into the switch namespace, so a 13-instruction eBPF classifier on
each port's ingress (clsact) sets it again from the IP TOS, and the same program on each
host's egress sets it there (see above). Assembled here, loaded with the ``bpf``
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
from typing import Any

BULK_TOS = 0x08  # IPTOS_THROUGHPUT: Linux maps it to TC_PRIO_BULK, pfifo_fast's last band
URGENT_TOS = 0x04  # IPTOS_RELIABILITY: Linux maps it to TC_PRIO_BESTEFFORT, the middle band
_TC_PRIO_BULK, _TC_PRIO_BESTEFFORT, _TC_PRIO_INTERACTIVE = 2, 0, 6
_SKB_PRIORITY = 32  # offsetof(struct __sk_buff, priority)
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_OBJ_PIN, _BPF_PROG_TEST_RUN = 5, 6, 10
_SK_BUFF_BYTES = 192  # sizeof(struct __sk_buff)
_BPF_PROG_TYPE_SCHED_CLS = 3


class QosError(RuntimeError):
    """The kernel cannot band NIC queues by TOS (the message says which piece is missing)."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def tos_priority_program() -> bytes:
    """eBPF (tc direct-action) setting ``skb->priority`` from an IPv4 packet's TOS (ECN and
    precedence bits ignored), i.e. its ``pfifo_fast`` band: ``BULK_TOS`` -> ``TC_PRIO_BULK``
    (band 2), ``URGENT_TOS`` -> ``TC_PRIO_BESTEFFORT`` (band 1), anything else -- unmarked:
    gradients, requests, acknowledgements -> ``TC_PRIO_INTERACTIVE`` (band 0). Every packet
    passes (TC_ACT_OK); non-IPv4 ones are left alone."""
    mov64_reg, mov64_imm, and32_imm = 0xBF, 0xB7, 0x54
    ld_abs_h, ld_abs_b, stx_w = 0x28, 0x30, 0x63
    jne_imm, exit_ = 0x55, 0x95
    return b"".join([
        _insn(mov64_reg, 6, 1),                              # 0: r6 = skb (LD_ABS reads r6)
        _insn(ld_abs_h, imm=12),                             # 1: r0 = ethertype
        _insn(jne_imm, 0, off=8, imm=0x0800),                # 2: not IPv4: pass (11)
        _insn(ld_abs_b, imm=15),                             # 3: r0 = IP TOS byte
        _insn(and32_imm, 0, imm=0x1C),                       # 4: without ECN bits
        _insn(mov64_imm, 2, imm=_TC_PRIO_INTERACTIVE),       # 5: r2 = band 0 ...
        _insn(jne_imm, 0, off=1, imm=BULK_TOS),              # 6: ... unless bulk
        _insn(mov64_imm, 2, imm=_TC_PRIO_BULK),              # 7:   r2 = band 2
        _insn(jne_imm, 0, off=1, imm=URGENT_TOS),            # 8: ... or urgent
        _insn(mov64_imm, 2, imm=_TC_PRIO_BESTEFFORT),        # 9:   r2 = band 1
        _insn(stx_w, 6, 2, off=_SKB_PRIORITY),               # 10: skb->priority = r2
        _insn(mov64_imm, 0, imm=0),                          # 11: TC_ACT_OK
        _insn(exit_),                                        # 12
    ])


def drop_program(share: float) -> bytes:
    """eBPF (tc direct-action) dropping each packet with probability ``share`` (< 0.5): a
    lossy link where the kernel has no netem. A dropped packet is TC_ACT_SHOT; the rest
    continue to the next filter (TC_ACT_UNSPEC), the TOS classifier where there is one."""
    if not 0 <= share < 0.5:
        raise ValueError(f"drop share must be in [0, 0.5), got {share}")
    call, jlt_imm, mov64_imm, exit_ = 0x85, 0xA5, 0xB7, 0x95
    threshold = min(int(share * 2 ** 32), 2 ** 31 - 1)
    return b"".join([
        _insn(call, imm=7),                                  # 0: r0 = bpf_get_prandom_u32()
        _insn(jlt_imm, 0, off=2, imm=threshold),             # 1: r0 < share x 2^32: drop (4)
        _insn(mov64_imm, 0, imm=-1),                         # 2: TC_ACT_UNSPEC: go on
        _insn(exit_),                                        # 3
        _insn(mov64_imm, 0, imm=2),                          # 4: TC_ACT_SHOT
        _insn(exit_),                                        # 5
    ])


def _bpf(cmd: int, attr: bytes, give_attr: bool = False) -> Any:
    """The bpf system call; its return value, or (``give_attr``) the attribute block as the
    kernel left it (where ``BPF_PROG_TEST_RUN`` writes its results)."""
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise QosError(f"no bpf system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    r = libc.syscall(nr, cmd, buf, 128)
    if r < 0:
        err = ctypes.get_errno()
        raise QosError(f"bpf({cmd}) failed: {os.strerror(err)}")
    return buf.raw if give_attr else int(r)


def load_program(prog: bytes | None = None) -> int:
    """Load ``prog`` (default :func:`tos_priority_program`); returns its file descriptor."""
    prog = tos_priority_program() if prog is None else prog
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


def dropped(share: float, packets: int = 2000) -> int:
    """How many of ``packets`` built packets the loaded :func:`drop_program` drops (the
    kernel runs it on each, ``BPF_PROG_TEST_RUN``): checks the program the NICs use."""
    fd = load_program(drop_program(share))
    try:
        pkt = ctypes.create_string_buffer(b"\x02" * 12 + b"\x08\x00" + bytes(28), 42)
        out = ctypes.create_string_buffer(64)
        attr = struct.pack("<IIIIQQII", fd, 0, 42, 64, ctypes.addressof(pkt),
                           ctypes.addressof(out), 1, 0)
        shot = 0
        for _ in range(packets):
            raw = _bpf(_BPF_PROG_TEST_RUN, attr, give_attr=True)
            shot += struct.unpack_from("<i", raw, 4)[0] == 2  # retval: TC_ACT_SHOT
        return shot
    finally:
        os.close(fd)


def classify(tos: int) -> int:
    """The ``skb->priority`` the loaded classifier gives an IPv4 packet with IP TOS ``tos``:
    the kernel runs it on a built packet (``BPF_PROG_TEST_RUN``), so this checks the program
    the NICs use, not a copy of its logic."""
    fd = load_program()
    try:
        eth = b"\x02" * 12 + b"\x08\x00"
        ip = bytes([0x45, tos, 0, 28]) + bytes(16)
        pkt = ctypes.create_string_buffer(eth + ip + bytes(8), 42)
        out = ctypes.create_string_buffer(64)
        ctx_in = ctypes.create_string_buffer(_SK_BUFF_BYTES)
        ctx_out = ctypes.create_string_buffer(_SK_BUFF_BYTES)
        attr = struct.pack("<IIIIQQIIIIQQ", fd, 0, 42, 64, ctypes.addressof(pkt),
                           ctypes.addressof(out), 1, 0, _SK_BUFF_BYTES, _SK_BUFF_BYTES,
                           ctypes.addressof(ctx_in), ctypes.addressof(ctx_out))
        _bpf(_BPF_PROG_TEST_RUN, attr)
        return struct.unpack_from("<I", ctx_out.raw, _SKB_PRIORITY)[0]
    finally:
        os.close(fd)


def _tc(argv: list[str]) -> None:
    r = subprocess.run(["tc", *argv], capture_output=True, text=True)
    if r.returncode:
        raise QosError(f"`tc {' '.join(argv)}` failed: {r.stderr.strip() or r.returncode}")


def attach_classifier(ns: str, devs: list[str], direction: str = "ingress") -> None:
    """Set ``skb->priority`` from the IP TOS (:func:`tos_priority_program`) on what ``devs``
    (in namespace ``ns``) receive (``ingress``: switch ports, so the queues they forward into
    band it) or send (``egress``: a host's NIC, before its own queue)."""
    attach_program(ns, devs, direction, tos_priority_program(), "tos")


def attach_drop(ns: str, devs: list[str], share: float) -> None:
    """Drop ``share`` of what ``devs`` send (:func:`drop_program`), before every other
    filter there (``pref 1``): a lossy link on a kernel without netem."""
    attach_program(ns, devs, "egress", drop_program(share), "drop", pref=1)


def attach_program(ns: str, devs: list[str], direction: str, prog: bytes, name: str,
                   pref: int | None = None) -> None:
    """Load ``prog`` and attach it (tc direct-action, on a ``clsact`` qdisc, added where
    missing) to ``direction`` of ``devs`` in namespace ``ns``; ``pref``: its place among the
    filters there (lower runs first; None: tc's)."""
    if direction not in ("ingress", "egress"):
        raise ValueError(f"direction must be 'ingress' or 'egress', got {direction!r}")
    fd = load_program(prog)
    folder = tempfile.mkdtemp(prefix="gnnsched-bpf-")
    mounted = False
    try:
        r = subprocess.run(["mount", "-t", "bpf", "bpf", folder], capture_output=True,
                           text=True)
        if r.returncode:
            raise QosError(f"cannot mount a bpf filesystem: {r.stderr.strip()}")
        mounted = True
        pin = os.path.join(folder, name)
        path = ctypes.create_string_buffer(pin.encode())
        _bpf(_BPF_OBJ_PIN, struct.pack("<QII", ctypes.addressof(path), fd, 0))
        for dev in devs:
            r = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "clsact"],
                               capture_output=True, text=True)
            if r.returncode and "exists" not in r.stderr:
                raise QosError(f"`tc -n {ns} qdisc add dev {dev} clsact` failed: "
                               f"{r.stderr.strip() or r.returncode}")
            _tc(["-n", ns, "filter", "add", "dev", dev, direction,
                 *(["pref", str(pref)] if pref is not None else []), "bpf", "da",
                 "object-pinned", pin])
        os.unlink(pin)
    finally:
        os.close(fd)
        if mounted:
            subprocess.run(["umount", folder], capture_output=True)
        with contextlib.suppress(OSError):  # still mounted: leave the empty folder, not a crash
            os.rmdir(folder)


__all__ = ["BULK_TOS", "URGENT_TOS", "QosError", "attach_classifier", "attach_drop",
           "attach_program", "classify", "drop_program", "dropped", "load_program",
           "tos_priority_program"]
