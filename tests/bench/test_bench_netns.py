"""bench/bench_netns.py's all-reduce timing: its two ranks really all-reduce over gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_netns.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_allreduce_worker_times_each_call_on_loopback() -> None:
    port, reps = _free_port(), 4
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, str(SCRIPT), "--allreduce-worker", "127.0.0.1", str(port), "1000",
            str(reps)]
    procs = [subprocess.Popen([*argv, str(r)], env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for r in range(2)]
    out = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    times = json.loads(out[0])
    assert len(times) == reps and all(0 < t < 30 for t in times)
    assert out[1].strip() == ""  # only rank 0 reports
