"""Progress as every verb shows it: bars on a terminal only (:func:`bar`), and the progress a
run reports while it trains (:class:`Progress`, ``gnnsched train`` and ``demo``).

A pipe or a log file never gets a bar: carriage returns and block characters make a log
unreadable, and the epoch lines and the final table say the same in words.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any


def on_terminal(file: IO[str] | None = None) -> bool:
    """Whether ``file`` (default stderr, where bars go) is a terminal."""
    f = sys.stderr if file is None else file
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):  # replaced (tests) or closed
        return False


def bar(total: int, desc: str, unit: str = "it", file: IO[str] | None = None,
        quiet: bool = False, **kw: Any) -> Any:
    """A tqdm bar drawn only when ``file`` (default stderr) is a terminal and not ``quiet``
    (``--json``); elsewhere a bar that counts and draws nothing. Every verb's bars are made
    here, so all of them obey the same rule."""
    from tqdm import tqdm

    out = sys.stderr if file is None else file
    return tqdm(total=total, desc=desc, unit=unit, file=out,
                disable=quiet or not on_terminal(out), **kw)


class Progress:
    """A run's progress callback (``api.train(progress=...)``): a tqdm bar per epoch and per
    evaluation, then one summary line per epoch with each trainer's stage times. ``quiet``
    (``--json``): all of it on stderr, so stdout holds only the JSON."""

    def __init__(self, quiet: bool) -> None:
        self.out = sys.stderr if quiet else sys.stdout
        self.bar: Any = None
        self.t = time.monotonic()

    def __call__(self, kind: str, **kw: Any) -> None:
        from tqdm import tqdm

        if kind == "log":
            (tqdm.write if self.bar else print)(kw["msg"], file=self.out)
        elif kind == "epoch_start":
            if self.bar is not None:  # a recovery restarts an epoch: one bar at a time
                self.bar.close()
            # a bar on a terminal only; a pipe or log file gets the epoch lines
            self.bar = bar(kw["total"], f"epoch {kw['epoch'] + 1}/{kw['epochs']}",
                           file=self.out, leave=False, dynamic_ncols=True)
            self.t, self.seeds = time.monotonic(), 0
        elif kind == "batch" and self.bar is not None:
            self.seeds += kw["seeds"]
            self.bar.update(1)
            rate = self.seeds / max(time.monotonic() - self.t, 1e-9)
            self.bar.set_postfix_str(f"{rate:,.0f} seeds/s")
        elif kind == "eval":
            if kw["done"] == 1:
                if self.bar is not None:
                    self.bar.close()
                what = "test" if kw["phase"] == "test" else f"validation {kw['epoch'] + 1}"
                self.bar = bar(kw["total"], what, file=self.out, leave=False,
                               dynamic_ncols=True)
                self.t, self.seeds = time.monotonic(), 0
            if self.bar is not None:
                self.seeds += kw["nodes"]
                self.bar.update(1)
                rate = self.seeds / max(time.monotonic() - self.t, 1e-9)
                self.bar.set_postfix_str(f"{rate:,.0f} nodes/s")
                if kw["done"] == kw["total"]:
                    self.bar.close()
                    self.bar = None
        elif kind == "epoch_end":
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            r = kw["record"]
            val = f"{r['val_accuracy']:.4f}" if r["val_accuracy"] is not None else "-"
            if r.get("val_metric") is not None and r.get("metric", "accuracy") != "accuracy":
                val += f", val {r['metric']} {r['val_metric']:.4f}"
            print(f"epoch {r['epoch'] + 1}: {r['epoch_time_s']:.3f} s, "
                  f"{r['throughput_seeds_s']:,.0f} seeds/s, loss {r['train_loss']:.4f}, "
                  f"val acc {val}", file=self.out)
            for w, st in r["stages"].items():
                print(f"  trainer {w}: sample {st['sample_s'] * 1e3:7.1f} ms  fetch "
                      f"{st['fetch_s'] * 1e3:7.1f} ms  wait {st['wait_s'] * 1e3:7.1f} ms  "
                      f"train {st['train_s'] * 1e3:7.1f} ms  barrier "
                      f"{st['allreduce_s'] * 1e3:7.1f} ms", file=self.out)

    def close(self) -> None:
        """Close the bar in progress, if any (before an error or the final line)."""
        if self.bar is not None:
            self.bar.close()


__all__ = ["Progress", "bar", "on_terminal"]
