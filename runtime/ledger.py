"""Where a role's CPU goes: a per-thread ledger of CPU and wall seconds by category.

Every role process (store, sampler, fetcher, trainer) keeps one :class:`Ledger` per Python
thread that does its work (the main thread; the trainer's I/O thread too). A thread is always
in exactly one category; ``with section("rpc:send"): ...`` switches it there and back. Each
switch reads two clocks once -- :func:`time.thread_time` (CPU seconds *of this thread*: user +
system, per ``CLOCK_THREAD_CPUTIME_ID``) and :func:`time.perf_counter` (wall) -- and charges
the time since the previous switch to the category the thread was in. So:

* **Nesting is exclusive.** Inside ``with section("work:sample")`` a nested
  ``with section("rpc:send")`` takes its own time out of ``work:sample``: each second of a
  thread's CPU lands in exactly one category, and the categories of a thread add up to its
  CPU time (what no section covers is ``unaccounted``).
* **Overhead** is two clock reads per section (``thread_time`` is a system call, 0.2-2 us
  depending on the kernel and the virtualisation; :func:`section_cost` measures it), and no
  section runs per node or per edge: sections wrap a message, a hop, a batch.

Categories are ``class`` or ``class:detail``; the classes (:data:`CLASSES`) are what the
table shows: ``work`` (the job itself: sample / gather / forward_backward / optimizer /
evaluate), ``copy`` (numpy/torch copies, concatenations, scatters into the batch),
``serialise`` (building and parsing messages: :mod:`.transport`'s encode/decode, JSON),
``rpc`` (socket send/recv calls, the gradient all-reduce, ZeroMQ's own I/O thread), ``wait``
(blocked in poll, on a queue or a condition), ``other`` (the loop's own bookkeeping: NIC queue
decisions, control messages, checkpoints) and ``unaccounted``.

Threads without a ledger are listed from ``/proc/self/task`` and read from their own CPU
clocks (Linux): ZeroMQ's background I/O thread (``ZMQbg/IO/*``) is ``rpc:zmq_io`` -- it does
the socket system calls, so it is where bytes copied through ZeroMQ cost CPU -- gloo's event
loop ``rpc:gloo_io``, and threads named with :func:`name_thread` (the heartbeat) get their
category; any other thread (an OpenMP worker) is ``unaccounted:thread:<name>``. The process's
CPU (:func:`time.process_time`, every thread, live or exited) minus everything attributed is
``unaccounted`` too; the share explained is ``1 - unaccounted / process CPU``.

A role calls :func:`begin_run` when it starts its run loop (after loading data and before the
first request), so the report covers the run, not imports and partition loading (which it
reports as ``setup_cpu_s``), and :func:`report` at the end: the dict that goes into the
role's stats (``RunResult.processes[name]["ledger"]``). :func:`breakdown` and
:func:`format_table` turn a run's processes into CPU-seconds per training iteration per role
and class.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CLASSES = ("work", "copy", "serialise", "rpc", "wait", "other", "unaccounted")
UNACCOUNTED = "unaccounted"
CLOCK = ("thread CPU: time.thread_time() of each ledgered thread (CLOCK_THREAD_CPUTIME_ID); "
         "other threads from /proc/self/task (clock ticks); process CPU: "
         "time.process_time() (all threads); wall: time.perf_counter()")

_tls = threading.local()
_thread_time = time.thread_time
_perf = time.perf_counter


def class_of(category: str) -> str:
    """The class of a category (``rpc:send`` -> ``rpc``); unknown prefixes are ``other``."""
    head = category.split(":", 1)[0]
    return head if head in CLASSES else "other"


class _Section:
    """``with`` target switching one ledger into one category (cached per category)."""

    __slots__ = ("ledger", "cat")

    def __init__(self, ledger: Ledger, cat: str) -> None:
        self.ledger, self.cat = ledger, cat

    def __enter__(self) -> None:
        led = self.ledger
        led.stack.append(led.cur)
        led.switch(self.cat)
        led.counts[self.cat] = led.counts.get(self.cat, 0) + 1

    def __exit__(self, *exc: Any) -> None:
        led = self.ledger
        led.switch(led.stack.pop())


class _Null:
    """The section of a thread without a ledger (the coordinator, the reference)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


NULL = _Null()


class Ledger:
    """CPU and wall seconds of one thread by category (module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.native_id = threading.get_native_id()
        self.ident = threading.get_ident()
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.stack: list[str] = []
        self.cur = UNACCOUNTED
        self.sections: dict[str, _Section] = {}
        self.final_cpu: float | None = None  # thread CPU when the thread finished
        self.reset()

    def reset(self) -> None:
        """Forget what was counted; keep the current category and open sections."""
        self.cpu.clear()
        self.wall.clear()
        self.counts.clear()
        self.t_cpu, self.t_wall = _thread_time(), _perf()
        self.cpu0, self.wall0 = self.t_cpu, self.t_wall

    def switch(self, cat: str) -> None:
        """Charge the time since the last switch to the current category; enter ``cat``."""
        c, w = _thread_time(), _perf()
        cur = self.cur
        self.cpu[cur] = self.cpu.get(cur, 0.0) + (c - self.t_cpu)
        self.wall[cur] = self.wall.get(cur, 0.0) + (w - self.t_wall)
        self.t_cpu, self.t_wall, self.cur = c, w, cat

    def section(self, cat: str) -> _Section:
        s = self.sections.get(cat)
        if s is None:
            s = self.sections[cat] = _Section(self, cat)
        return s

    def finish(self) -> None:
        """The thread is ending: close its books (called by the thread itself)."""
        self.switch(self.cur)
        self.final_cpu = _thread_time()

    def totals(self) -> tuple[dict[str, dict[str, float]], float]:
        """({category: {cpu_s, wall_s, n}}, thread CPU seconds since the reset). From the
        ledger's own thread (or after :meth:`finish`) the books are exact; from another
        thread the time since its last switch is ``unaccounted``."""
        if threading.get_ident() == self.ident and self.final_cpu is None:
            self.switch(self.cur)
            total = self.t_cpu - self.cpu0
        elif self.final_cpu is not None:
            total = self.final_cpu - self.cpu0
        else:
            total = _other_thread_cpu(self.ident, self.native_id)
            total = (total - self.cpu0) if total is not None else sum(self.cpu.values())
        cats = {c: {"cpu_s": self.cpu.get(c, 0.0), "wall_s": self.wall.get(c, 0.0),
                    "n": self.counts.get(c, 0)}
                for c in sorted(set(self.cpu) | set(self.counts))}
        tail = total - sum(self.cpu.values())
        if tail > 0:
            u = cats.setdefault(UNACCOUNTED, {"cpu_s": 0.0, "wall_s": 0.0, "n": 0})
            u["cpu_s"] += tail
        return cats, total


def _other_thread_cpu(ident: int, native_id: int) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (AttributeError, OSError, OverflowError):
        return _stat_cpu(native_id)


# --------------------------------------------------------------------------------------
# The process: its ledgers, named threads, and the report


class _Process:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ledgers: list[Ledger] = []
        self.named: dict[int, tuple[str, int]] = {}  # native id -> (category, ident)
        self.cpu0 = 0.0
        self.wall0 = _perf()
        self.setup_cpu = 0.0
        self.threads0: dict[int, tuple[str, float]] = {}
        self.running = False


_proc: _Process | None = None


def _process() -> _Process:
    global _proc
    if _proc is None or _proc.pid != os.getpid():  # a fork starts a new account
        _proc = _Process()
        _tls.__dict__.pop("ledger", None)
    return _proc


def start_thread(name: str) -> Ledger:
    """Give the calling thread a ledger (its sections count from now)."""
    proc = _process()
    led = Ledger(name)
    proc.ledgers.append(led)
    _tls.ledger = led
    return led


def finish_thread() -> None:
    """The calling thread is about to end: close its ledger's books."""
    led = getattr(_tls, "ledger", None)
    if led is not None:
        led.finish()
        _tls.ledger = None


def name_thread(category: str) -> None:
    """The calling thread has no ledger; all its CPU is ``category`` (e.g. ``other:heartbeat``)."""
    _process().named[threading.get_native_id()] = (category, threading.get_ident())


def current() -> Ledger | None:
    """The calling thread's ledger, if it has one."""
    return getattr(_tls, "ledger", None)


def section(cat: str) -> Any:
    """``with section("copy:concat"): ...`` -- charge the block to ``cat`` on this thread's
    ledger (a no-op context in a thread without one)."""
    led = getattr(_tls, "ledger", None)
    if led is None:
        return NULL
    s = led.sections.get(cat)
    if s is None:
        s = led.sections[cat] = _Section(led, cat)
    return s


def begin_run() -> None:
    """The run starts now: reset every ledger and remember the process's CPU so far."""
    proc = _process()
    proc.setup_cpu = time.process_time()
    proc.cpu0 = proc.setup_cpu
    proc.wall0 = _perf()
    for led in proc.ledgers:
        if led.final_cpu is None:
            led.reset()
    proc.threads0 = _proc_threads()
    proc.running = True


def _thread_clock(tid: int) -> int:
    """Linux's CPU clock id of thread ``tid`` of this process (``MAKE_THREAD_CPUCLOCK``)."""
    return ((~tid) << 3) | 6  # per-thread (4) | CPUCLOCK_SCHED (2)


def _proc_threads() -> dict[int, tuple[str, float]]:
    """{native id: (name, CPU seconds)} of this process's live threads (Linux; else {}).
    CPU from the thread's own CPU clock (nanoseconds); ``/proc`` ticks if that fails."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                name = f.read().decode(errors="replace").strip()
        except OSError:
            continue  # ended meanwhile
        try:
            cpu = time.clock_gettime(_thread_clock(tid))
        except (OSError, OverflowError):
            got = _stat_cpu(tid)
            if got is None:
                continue
            cpu = got
        out[tid] = (name, cpu)
    return out


def _stat_cpu(tid: int) -> float | None:
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
        fields = raw[raw.rfind(")") + 2:].split()  # after "(comm)": utime, stime at 11, 12
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _thread_category(name: str) -> str:
    if name.startswith("ZMQbg/IO"):
        return "rpc:zmq_io"
    if name.startswith("ZMQbg/"):
        return "other:zmq_reaper"
    if "gloo" in name:  # gloo's TCP event loop: the all-reduce's socket I/O
        return "rpc:gloo_io"
    if name.startswith("pt_tcpstore"):
        return "rpc:tcpstore"
    return f"{UNACCOUNTED}:thread:{name}"


def report() -> dict[str, Any]:
    """What the process's CPU went to since :func:`begin_run` (from its main thread)."""
    proc = _process()
    if not proc.running:
        begin_run()
    total_cpu = time.process_time() - proc.cpu0
    wall = _perf() - proc.wall0
    threads: dict[str, dict[str, Any]] = {}
    cats: dict[str, dict[str, float]] = {}
    ledgered = set()

    def add(thread: str, cat: str, cpu: float, wall_s: float, n: int) -> None:
        th = threads.setdefault(thread, {"cpu_s": 0.0, "categories": {}})
        th["cpu_s"] += cpu
        c = th["categories"].setdefault(cat, {"cpu_s": 0.0, "wall_s": 0.0, "n": 0})
        a = cats.setdefault(cat, {"cpu_s": 0.0, "wall_s": 0.0, "n": 0})
        for d in (c, a):
            d["cpu_s"] += cpu
            d["wall_s"] += wall_s
            d["n"] += n

    sections = 0
    for led in proc.ledgers:
        ledgered.add(led.native_id)
        got, _ = led.totals()
        for cat, v in got.items():
            add(led.name, cat, v["cpu_s"], v["wall_s"], int(v["n"]))
            sections += int(v["n"])
    now = _proc_threads()
    live = {t.native_id: t for t in threading.enumerate()}
    named = {tid: cat for tid, (cat, ident) in proc.named.items()  # still that thread
             if tid in live and live[tid].ident == ident}
    for tid, t in live.items():  # pyzmq frees zero-copy frames in its own thread
        if type(t).__name__ == "GarbageCollectorThread" and tid is not None:
            named.setdefault(tid, "rpc:zmq_gc")
    for tid, (comm, cpu) in now.items():
        if tid in ledgered:
            continue
        before = proc.threads0.get(tid)
        used = cpu - (before[1] if before and before[0] == comm else 0.0)
        cat = named.get(tid)
        if cat is not None:
            label = cat.split(":", 1)[-1]
        else:  # a Python thread nobody named: say which
            label = f"{comm}/{live[tid].name}" if tid in live else comm
            cat = _thread_category(label)
        add(label, cat, used, 0.0, 0)
    attributed = sum(v["cpu_s"] for v in cats.values())
    rest = total_cpu - attributed  # exited unledgered threads, tick rounding
    if abs(rest) > 1e-9:
        add("(rest of process)", UNACCOUNTED, rest, 0.0, 0)
    unacc = sum(v["cpu_s"] for c, v in cats.items() if class_of(c) == UNACCOUNTED)
    return {
        "clock": CLOCK,
        "cpu_s": round(total_cpu, 6),
        "wall_s": round(wall, 6),
        "setup_cpu_s": round(proc.setup_cpu, 6),
        "explained": round(1.0 - unacc / total_cpu, 4) if total_cpu > 0 else 1.0,
        "sections": sections,
        "overhead_s": round(sections * section_cost(), 6),
        "categories": {c: _rounded(v) for c, v in sorted(cats.items())},
        "threads": {t: {"cpu_s": round(v["cpu_s"], 6),
                        "categories": {c: _rounded(x) for c, x in sorted(
                            v["categories"].items())}}
                    for t, v in threads.items()},
    }


def _rounded(v: Mapping[str, float]) -> dict[str, float]:
    return {"cpu_s": round(v["cpu_s"], 6), "wall_s": round(v["wall_s"], 6), "n": int(v["n"])}


_COST: list[float] = []


def section_cost(n: int = 2000) -> float:
    """CPU seconds one section costs on this machine (measured once per process)."""
    if not _COST:
        led = Ledger("calibration")
        s = led.section("x")
        t0 = _thread_time()
        for _ in range(n):
            with s:
                pass
        _COST.append((_thread_time() - t0) / n)
    return _COST[0]


# --------------------------------------------------------------------------------------
# A run's breakdown: role x class, CPU-seconds per training iteration


def _load(run: Any) -> tuple[dict[str, dict[str, Any]], int]:
    """(processes, training iterations) of a RunResult, its dict, a JSON file of it, or a
    run folder whose metrics.jsonl ``run`` record carries the processes' ledgers."""
    if hasattr(run, "to_dict"):
        run = run.to_dict()
    if isinstance(run, (str, Path)):
        path = Path(run)
        if path.is_dir():
            return _from_metrics(path / "metrics.jsonl")
        if path.suffix == ".jsonl":
            return _from_metrics(path)
        run = json.loads(path.read_text())
    procs = run.get("processes") or {}
    iters = int(run.get("iterations_per_epoch", 0)) * len(run.get("epochs") or [])
    return procs, iters


def _from_metrics(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = {(r.get("trainer"), r.get("seq")) for r in recs
             if r.get("type") == "batch" and r.get("phase") == "train"}
    trainers = {w for w, _ in steps}
    iters = len(steps) // max(len(trainers), 1)
    for r in recs[::-1]:
        if r.get("type") != "run":
            continue
        procs = r.get("processes") or {n: {"ledger": led} for n, led in (
            r.get("ledger_by_process") or {}).items()}
        if procs:
            return procs, iters
    raise ValueError(f"{path}: its run record has no role ledgers (the coordinator writes "
                     "them to metrics.jsonl only as 'ledger_by_process'); pass the RunResult "
                     "or its JSON instead")


def breakdown(run: Any, iterations: int | None = None) -> dict[str, Any]:
    """CPU-seconds per training iteration by role process and class, with the share of
    each process's CPU the ledger explains. ``run``: a RunResult, its dict, a JSON file of
    it, or a run folder (see :func:`_load`); ``iterations``: training steps per trainer
    (default: the run's)."""
    procs, iters = _load(run)
    iters = int(iterations or iters)
    if iters <= 0:
        raise ValueError("the run trained no iteration")
    rows: dict[str, dict[str, Any]] = {}
    for name, st in sorted(procs.items(), key=lambda kv: _role_order(kv[0])):
        led = st.get("ledger")
        if not led:
            continue
        by_class = dict.fromkeys(CLASSES, 0.0)
        for cat, v in led["categories"].items():
            by_class[class_of(cat)] += v["cpu_s"]
        cpu = float(led["cpu_s"])
        role = name.split(":")[0]
        batches = int(st.get("sampled", 0) if role == "sampler" else
                      st.get("fetched", 0) if role == "fetcher" else 0)
        rows[name] = {
            "role": role,
            "cpu_s": cpu,
            "cpu_s_per_iter": cpu / iters,
            "per_iter": {c: v / iters for c, v in by_class.items()},
            "explained": float(led["explained"]),
            "batches": batches,
            "cpu_s_per_batch": cpu / batches if batches else None,
            "setup_cpu_s": float(led.get("setup_cpu_s", 0.0)),
            "overhead_s": float(led.get("overhead_s", 0.0)),
            "top": sorted(((c, v["cpu_s"] / iters, v["n"] / iters)
                           for c, v in led["categories"].items()),
                          key=lambda x: -x[1])[:6],
        }
    roles: dict[str, dict[str, Any]] = {}
    for r in rows.values():
        g = roles.setdefault(r["role"], {"processes": 0, "cpu_s_per_iter": 0.0,
                                         "per_iter": dict.fromkeys(CLASSES, 0.0)})
        g["processes"] += 1
        g["cpu_s_per_iter"] += r["cpu_s_per_iter"]
        for c in CLASSES:
            g["per_iter"][c] += r["per_iter"][c]
    return {"iterations": iters, "classes": list(CLASSES), "processes": rows, "roles": roles,
            "cpu_s_per_iter": sum(r["cpu_s_per_iter"] for r in rows.values())}


def _role_order(name: str) -> tuple[int, str]:
    order = ("store", "sampler", "fetcher", "trainer")
    role = name.split(":")[0]
    return (order.index(role) if role in order else len(order), name)


def format_table(b: Mapping[str, Any], details: bool = True) -> str:
    """The breakdown as text: one row per role process, CPU-s per training iteration."""
    cols = list(b["classes"])
    head = f"{'process':<18}" + "".join(f"{c[:9]:>10}" for c in cols) + \
        f"{'total':>9}{'explained':>10}{'per batch':>10}"
    lines = [f"CPU-seconds per training iteration ({b['iterations']} iterations)", head,
             "-" * len(head)]

    def row(label: str, per: Mapping[str, float], total: float, tail: str) -> str:
        return f"{label:<18}" + "".join(f"{per[c]:>10.4f}" for c in cols) + \
            f"{total:>9.4f}" + tail

    for name, r in b["processes"].items():
        pb = f"{r['cpu_s_per_batch']:>10.4f}" if r["cpu_s_per_batch"] else f"{'':>10}"
        lines.append(row(name, r["per_iter"], r["cpu_s_per_iter"],
                         f"{r['explained']:>10.1%}{pb}"))
    lines.append("-" * len(head))
    for role, g in b["roles"].items():
        lines.append(row(f"{role} (x{g['processes']})", g["per_iter"], g["cpu_s_per_iter"], ""))
    lines.append(f"{'all roles':<18}" + " " * (10 * len(cols)) + f"{b['cpu_s_per_iter']:>9.4f}")
    if details:
        lines.append("")
        lines.append("largest categories (CPU-s per iteration, sections per iteration):")
        for name, r in b["processes"].items():
            top = ", ".join(f"{c} {v:.4f} ({n:.0f})" for c, v, n in r["top"])
            lines.append(f"  {name}: {top}")
    return "\n".join(lines)


def merge(reports: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Categories summed over several reports (e.g. every sampler)."""
    out: dict[str, dict[str, float]] = {}
    for rep in reports:
        for c, v in rep["categories"].items():
            d = out.setdefault(c, {"cpu_s": 0.0, "wall_s": 0.0, "n": 0})
            for k in d:
                d[k] += v[k]
    return out


__all__ = ["CLASSES", "CLOCK", "Ledger", "begin_run", "breakdown", "class_of", "current",
           "finish_thread", "format_table", "merge", "name_thread", "report", "section",
           "section_cost", "start_thread"]
