"""What ZeroMQ CURVE encryption costs: bulk-message throughput on loopback with and without it.

Run: ``python bench/bench_curve.py [--quick] [--mb 256] [--repeats 3] [--out docs/bench/curve.json]``

Why: ``curve: true`` encrypts and authenticates every byte of the data plane (features,
blocks, sampled edges), so it is only worth turning on if the data plane stays fast. A sender
process pushes ``--mb`` MB of ``FEATS`` messages (the runtime's own typed header + raw
float32 rows, via :class:`~gnnsched.runtime.transport.Channel`, zero-copy) to a receiver
process that decodes each one, as a relay pushes gathered features to a trainer; message sizes
cover the store's chunk (256 KiB) up to whole mini-batches (16 MiB). Both ends run as
separate processes (one core each on a 2-core box), CURVE keys from ``gnnsched keys``, the
ZAP handler on. Reported: MB/s (median of ``--repeats``), and the ratio plain / CURVE.
CURVE's crypto runs in libzmq's I/O thread, one per context, so one stream tops out at about
one core's worth of XSalsa20-Poly1305; the runtime has one stream per (sender, receiver) pair.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _receiver(endpoint_q: Any, result_q: Any, keys_dir: str | None, count: int,
              msg_bytes: int) -> None:
    import zmq

    from gnnsched.runtime.transport import (
        BULK,
        Channel,
        Kind,
        load_keys,
        make_socket,
        start_authenticator,
    )

    ctx = zmq.Context()
    keys = load_keys(keys_dir) if keys_dir else None
    auth = start_authenticator(ctx, keys) if keys else None
    sock = make_socket(ctx, zmq.PULL, BULK, curve=keys, server=True)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    endpoint_q.put(f"tcp://127.0.0.1:{port}")
    chan = Channel(sock, "receiver")
    got = 0
    t0 = None
    for _ in range(count):
        _, msg = chan.recv(120.0, expect=(Kind.FEATS,))
        t0 = t0 or time.perf_counter()  # from the first message: connection set-up excluded
        got += msg.arrays["feats"].nbytes
    seconds = time.perf_counter() - (t0 or time.perf_counter())
    result_q.put({"bytes": got, "seconds": seconds})
    sock.close(0)
    if auth:
        auth.stop()
    ctx.destroy(0)


def _sender(endpoint: str, keys_dir: str | None, count: int, msg_bytes: int) -> None:
    import numpy as np
    import zmq

    from gnnsched.runtime.transport import BULK, Channel, Kind, Message, load_keys, make_socket

    ctx = zmq.Context()
    keys = load_keys(keys_dir) if keys_dir else None
    sock = make_socket(ctx, zmq.PUSH, BULK, curve=keys)
    sock.connect(endpoint)
    chan = Channel(sock, "sender")
    rows = max(1, msg_bytes // (4 * 256))
    feats = np.random.default_rng(0).random((rows, 256), dtype=np.float32)
    for i in range(count):
        chan.send(Message(Kind.FEATS, {"trainer": 0, "seq": i, "fetch_us": 0}, {"feats": feats}))
    sock.close(linger=-1)  # wait until everything is out
    ctx.term()


def measure(msg_bytes: int, total_mb: float, keys_dir: str | None) -> dict[str, Any]:
    """One transfer of ``total_mb`` MB in messages of ``msg_bytes``; MB/s at the receiver."""
    count = max(8, int(total_mb * 1e6 // msg_bytes))
    mpc = mp.get_context("spawn")
    eq, rq = mpc.Queue(), mpc.Queue()
    recv = mpc.Process(target=_receiver, args=(eq, rq, keys_dir, count, msg_bytes))
    recv.start()
    endpoint = eq.get(timeout=60)
    send = mpc.Process(target=_sender, args=(endpoint, keys_dir, count, msg_bytes))
    send.start()
    res = rq.get(timeout=600)
    send.join(60)
    recv.join(60)
    return {"msg_bytes": msg_bytes, "messages": count, "bytes": res["bytes"],
            "seconds": res["seconds"], "mb_s": res["bytes"] / max(res["seconds"], 1e-9) / 1e6}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=256.0, help="MB per measurement")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sizes", default="65536,262144,1048576,4194304,16777216",
                   help="message sizes in bytes")
    p.add_argument("--quick", action="store_true", help="64 MB, 1 repeat, 3 sizes")
    p.add_argument("--out", default=str(ROOT / "docs" / "bench" / "curve.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.mb, a.repeats, a.sizes = 64.0, 1, "262144,1048576,4194304"
    from gnnsched.commands.keys import create_keys

    sizes = [int(s) for s in a.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        keys = str(Path(tmp) / "keys")
        create_keys(keys)
        for size in sizes:
            row: dict[str, Any] = {"msg_bytes": size}
            for mode, kd in (("plain", None), ("curve", keys)):
                runs = [measure(size, a.mb, kd) for _ in range(a.repeats)]
                row[f"{mode}_mb_s"] = statistics.median(r["mb_s"] for r in runs)
                row[f"{mode}_runs_mb_s"] = [round(r["mb_s"], 1) for r in runs]
            row["slowdown"] = row["plain_mb_s"] / row["curve_mb_s"]
            rows.append(row)
            print(f"{size / 1024:>8.0f} KiB messages: plain {row['plain_mb_s']:8.1f} MB/s   "
                  f"CURVE {row['curve_mb_s']:8.1f} MB/s   ({row['slowdown']:.2f}x slower)",
                  flush=True)
    out = {"bench": "curve", "command": "python bench/bench_curve.py" + (
        " --quick" if a.quick else ""), "mb_per_measurement": a.mb, "repeats": a.repeats,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "machine": platform.machine()},
        "zmq": __import__("zmq").zmq_version(), "rows": rows,
        "summary": {"median_slowdown": statistics.median(r["slowdown"] for r in rows),
                    "curve_mb_s_at_256KiB": next((r["curve_mb_s"] for r in rows
                                                  if r["msg_bytes"] == 262144), None)}}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
