"""What a real run is measured with beyond its own metrics: NIC byte counters of the emulated
hosts, a progress callback that snapshots them at epoch barriers, the runtime knobs a loaded
benchmarking box needs, and the processes' own measurements (a child's peak memory and CPU,
every descendant's RSS and CPU polled from ``/proc``)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import say

POLL_S = 0.25  # how often ProcWatch reads /proc
GB = 1e9


class NicCounters:
    """tx bytes of every emulated host's NIC.

    One ``sleep`` is started inside each host namespace; its ``/proc/PID/net/dev`` shows that
    namespace's interfaces, so a reading is a file read (no subprocess in the timed path).
    """

    def __init__(self, net: Any) -> None:
        from gnnsched.api import NETNS_HOST_IF

        self.ifname = NETNS_HOST_IF
        self.procs: dict[str, subprocess.Popen] = {}
        for host in net.hosts:
            self.procs[host] = subprocess.Popen(
                [*net.exec_prefix(host), "sleep", "86400"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def read(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for host, proc in self.procs.items():
            try:
                text = Path(f"/proc/{proc.pid}/net/dev").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                name, _, rest = line.partition(":")
                if name.strip() == self.ifname:
                    out[host] = int(rest.split()[8])  # rx: 8 fields, then tx bytes
        return out

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def bytes_between(before: dict[str, int] | None, after: dict[str, int]) -> int | None:
    """Bytes sent by all hosts between two counter readings."""
    if before is None:
        return None
    return int(sum(after[h] - before.get(h, 0) for h in after))


class Tracker:
    """Progress callback of one run: prints epochs, snapshots NIC counters at barriers."""

    def __init__(self, label: str, counters: NicCounters | None) -> None:
        self.label, self.counters = label, counters
        self.snaps: dict[int, dict[str, int]] = {}

    def __call__(self, kind: str, **kw: Any) -> None:
        if kind == "epoch_start" and kw.get("epoch") == 0 and self.counters:
            self.snaps[-1] = self.counters.read()
        elif kind == "batch" and kw.get("done") == kw.get("total") and self.counters:
            self.snaps[int(kw["epoch"])] = self.counters.read()
        elif kind == "epoch_end":
            r = kw["record"]
            say(f"    {self.label}: epoch {r['epoch'] + 1}: {r['epoch_time_s']:.3f} s, "
                f"loss {r['train_loss']:.3f}")

    def bytes_per_epoch(self, epochs: int) -> tuple[dict[str, float] | None, str]:
        """Per-host tx bytes per epoch over the steady epochs: not the warm-up, not the last
        (which prefetches the evaluation's batches)."""
        if not self.counters:
            return None, ""
        if epochs >= 4:
            a, b = 0, epochs - 2  # epochs 1..E-2: not the warm-up, not the eval prefetch
        elif epochs == 3:
            a, b = 0, 1
        else:
            a, b = -1, 0
        if a not in self.snaps or b not in self.snaps:
            return None, "counters not read (no barrier events)"
        n = b - a
        first, last = self.snaps[a], self.snaps[b]
        per = {h: (last[h] - first.get(h, 0)) / n for h in last}
        what = (f"epochs {a + 2}..{b + 1}" if a >= 0 else "epoch 1 (warm-up)")
        return per, f"NIC tx bytes per epoch over {what}, every host"


def runtime_options() -> Any:
    """Runtime knobs for benchmarking: a loaded 2-core box starts a dozen processes slowly,
    so generous timeouts; checkpoints only at epoch ends (DistDGL writes none)."""
    import dataclasses

    from gnnsched.api import RuntimeOptions

    known = {f.name for f in dataclasses.fields(RuntimeOptions)}
    want = {"start_timeout": 300, "request_timeout": 120, "orphan_timeout": 120,
            "dead_after_s": 60.0, "checkpoint_every": 10**6}
    return RuntimeOptions(**{k: v for k, v in want.items() if k in known})


def run_child(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``argv`` and wait for it with ``wait4``: exit code, seconds, peak RSS bytes (the
    child's and its waited-for descendants' ``ru_maxrss``) and CPU seconds (user + system)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    done = threading.Event()

    def heartbeat() -> None:  # a long step says it is alive, and how big it is
        while not done.wait(60):
            try:
                import psutil

                rss = psutil.Process(p.pid).memory_info().rss
                size = f", {rss / GB:.2f} GB resident"
            except Exception:  # noqa: BLE001
                size = ""
            say(f"    ... still running ({time.perf_counter() - t0:.0f} s{size})")

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    except BaseException:
        p.kill()
        p.wait()
        raise
    finally:
        done.set()
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": p.returncode, "seconds": time.perf_counter() - t0,
            "peak_rss_bytes": int(ru.ru_maxrss) * 1024, "cpu_s": ru.ru_utime + ru.ru_stime}


class ProcWatch:
    """RSS and CPU of this process's descendants (and of this process, ``self_too``), read
    every ``interval`` seconds from ``/proc`` (psutil) in a thread; optionally the first time
    each line matching ``pattern`` appears in a log file (``watch``)."""

    def __init__(self, interval: float = POLL_S, self_too: bool = False) -> None:
        self.interval, self.self_too = interval, self_too
        self.procs: dict[int, dict[str, Any]] = {}
        self.marks: dict[str, float] = {}
        self.watches: list[tuple[Path, re.Pattern[str], str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.own_cpu0 = 0.0
        self.poll_cpu = 0.0  # this thread's own CPU (taken out of the coordinator's)
        self.box: list[tuple[float, float]] = []  # (time, CPU-s every process of the box used)

    def watch(self, path: Path, pattern: str, key: str) -> None:
        """Record ``marks[key.format(*groups)]``: when a line matching ``pattern`` appears."""
        self.watches.append((path, re.compile(pattern), key))

    def __enter__(self) -> ProcWatch:
        self._thread = threading.Thread(target=self._loop, name="scale-procwatch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        try:
            import psutil
        except ImportError:  # no numbers, not a failure
            return
        me = psutil.Process(os.getpid())
        while True:
            self._tick(psutil, me)
            if self._stop.wait(self.interval):
                self._tick(psutil, me)
                return

    def _tick(self, psutil: Any, me: Any) -> None:
        now = time.perf_counter()
        ct = psutil.cpu_times()
        self.box.append((now, float(ct.user + ct.nice + ct.system + getattr(ct, "irq", 0.0)
                                    + getattr(ct, "softirq", 0.0) + getattr(ct, "steal", 0.0))))
        try:
            kids = me.children(recursive=True)
        except psutil.Error:
            kids = []
        for p in kids:
            try:
                with p.oneshot():
                    rss = int(p.memory_info().rss)
                    ct = p.cpu_times()
                    cpu = float(ct.user + ct.system)
                    rec = self.procs.get(p.pid)
                    if rec is None:
                        rec = self.procs[p.pid] = {"cmd": " ".join(p.cmdline()[:12]),
                                                   "rss": 0, "cpu": []}
            except (psutil.Error, OSError):
                continue
            rec["rss"] = max(rec["rss"], rss)
            rec["cpu"].append((now, cpu))
        if self.self_too:
            rec = self.procs.setdefault(-1, {"cmd": "coordinator", "rss": 0, "cpu": []})
            rec["rss"] = max(rec["rss"], int(me.memory_info().rss))
            self.poll_cpu = time.thread_time()
            rec["cpu"].append((now, time.process_time() - self.poll_cpu))
        for path, pat, key in self.watches:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for m in pat.finditer(text):
                self.marks.setdefault(key.format(*m.groups()), now)

    def box_between(self, t0: float, t1: float) -> float | None:
        """CPU seconds the whole box used between ``t0`` and ``t1`` (``/proc/stat``)."""
        if not self.box:
            return None
        return max(0.0, interp(self.box, t1) - interp(self.box, t0))

    def cpu_between(self, t0: float, t1: float, pids: list[int] | None = None) -> float:
        """CPU seconds the processes ``pids`` (default: all seen) used between ``t0`` and
        ``t1`` (their cumulative CPU interpolated at both edges)."""
        total = 0.0
        for pid in (self.procs if pids is None else pids):
            rec = self.procs.get(pid)
            if rec and rec["cpu"]:
                total += max(0.0, interp(rec["cpu"], t1) - interp(rec["cpu"], t0))
        return total


def interp(series: list[tuple[float, float]], t: float) -> float:
    """A cumulative counter at time ``t`` (linear between samples, clamped at the ends)."""
    if t <= series[0][0]:
        return series[0][1]
    for (ta, va), (tb, vb) in zip(series, series[1:]):
        if ta <= t <= tb:
            return va + (vb - va) * ((t - ta) / (tb - ta) if tb > ta else 1.0)
    return series[-1][1]
