"""What a real run is measured with beyond its own metrics: NIC byte counters of the emulated
hosts, a progress callback that snapshots them at epoch barriers, and the runtime knobs a
loaded benchmarking box needs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import say


class NicCounters:
    """tx bytes of every emulated host's NIC.

    One ``sleep`` is started inside each host namespace; its ``/proc/PID/net/dev`` shows that
    namespace's interfaces, so a reading is a file read (no subprocess in the timed path).
    """

    def __init__(self, net: Any) -> None:
        from gnnsched.runtime.netns import HOST_IF

        self.ifname = HOST_IF
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

    from gnnsched.runtime.coordinator import RuntimeOptions

    known = {f.name for f in dataclasses.fields(RuntimeOptions)}
    want = {"start_timeout": 300, "request_timeout": 120, "orphan_timeout": 120,
            "dead_after_s": 60.0, "checkpoint_every": 10**6}
    return RuntimeOptions(**{k: v for k, v in want.items() if k in known})
