"""The coordinator's vocabulary: run options, fault injection, errors, the run's result.

Kept apart from the coordinator's machinery so that callers (the CLI, the bench, tests) can
build options and read results without importing ZeroMQ or the policy driver.
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from typing import Any

from gnnsched.workload import NIC_CHUNK_S, NIC_WINDOW_S, PEER_WINDOW_S

STAGES = ("sample_s", "fetch_s", "wait_s", "train_s", "allreduce_s")
ROLE_ORDER = (("trainer",), ("sampler", "fetcher"), ("store",))  # shutdown order
SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP, "TERM": signal.SIGTERM}
GREY = ("CUT", "SLOW")  # grey faults of a machine, for Fault.seconds (not signals)
SLOW_FACTOR = 8.0  # SLOW: the machine keeps an eighth of its CPU


class RunError(RuntimeError):
    """The run could not finish; the message names the role, its machine and what happened."""


class RoleFailure(Exception):
    """A role died (exited, went silent, unreachable): what recovery starts from."""

    def __init__(self, name: str, machine: str, pid: int | None, how: str, doing: str,
                 detected: float, last_heard_s: float | None, log_tail: str = "",
                 log: str = "") -> None:
        self.name, self.machine, self.pid, self.how, self.doing = name, machine, pid, how, doing
        self.detected, self.last_heard_s = detected, last_heard_s
        self.log_tail, self.log = log_tail, log
        self.collateral: list[str] = []
        super().__init__(self.describe())

    def describe(self) -> str:
        heard = f"; last heard from {self.last_heard_s:.1f} s before" \
            if self.last_heard_s is not None else ""
        return (f"{self.name} on machine {self.machine} (pid {self.pid}) {self.how} while "
                f"{self.doing}{heard}")

    def fatal(self, why: str = "") -> RunError:
        """The run's error when this failure is not (or cannot be) recovered: what died, why
        that ends the run, its log's last lines and what failed after it."""
        tail = f"; last log lines ({self.log}):\n{self.log_tail}" if self.log_tail else ""
        extra = "".join(f"\n  then: {c}" for c in self.collateral)
        return RunError(f"{self.describe()}{' ' + why if why else ''}{tail}{extra}")


def exit_text(code: int) -> str:
    """``exited with code -9 (SIGKILL)``: what a log line says about an exit status."""
    if code < 0:
        try:
            return f"exited with code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exited with code {code}"


@dataclass(frozen=True)
class Fault:
    """Fault injection: at ``at_step`` (when a trainer starts it) send ``signal`` to ``role``
    (``sampler:1``, ``trainer:0``, ``store:store1``, ``fetcher:store0``) or to every process
    of a machine (``machine:store0``, which also marks the machine down); ``CUT`` takes a
    machine off the network for ``seconds`` with its processes alive (netns launcher),
    ``SLOW`` leaves it 1/:data:`SLOW_FACTOR` of its CPU for ``seconds`` (the scale model)."""

    role: str
    at_step: int
    signal: str = "KILL"  # KILL | STOP (a hang: only heartbeats detect it) | TERM | CUT
    seconds: float = 0.0  # CUT / SLOW: how long the grey fault lasts


@dataclass
class RuntimeOptions:
    """Knobs of the runtime (not of the model): transport, timeouts, evaluation, recovery."""

    chunk_bytes: int | None = None  # None: 256 KiB on loopback, ~8 ms of a store's NIC if shaped
    window_bytes: int | None = None  # None: 4 chunks
    peer_window_bytes: int | None = None  # None: 2 chunks
    # Gradients first: stores and relays send a machine nothing of later iterations while its
    # trainer's gradients are on the wire -- for the ring's bytes / bandwidth (the cost model's
    # reserved gradient share), not for the whole all-reduce call, whose fixed overhead leaves
    # the NICs to other traffic. Holding for the whole call left hetero's 50 Mbit/s store idle
    # (Physics, colocation + fifo, one run each: 1.59 s per epoch against 1.44 s with timed
    # holds and 1.40 s with none); with none, plentiful/Cora's gnnsched plan took 1.68 s
    # against 1.61 s with timed holds (1.5 MB of gradients per step on 100 Mbit/s).
    # Gradients still wait behind features already in flight when the hold starts (the
    # windows below cover 150 / 120 ms of a store's egress): gloo's all-reduce of those 1.5 MB
    # takes 123 ms between two idle 100 Mbit/s hosts (bench/bench_netns.py) and ~148 ms in the
    # run. One-off runs with this file patched (the gnnsched placer + policy): holding for the
    # whole call with 30 / 20 ms windows cut it to 135 ms and the epoch 2% (1.588 -> 1.554 s,
    # 3 runs each), but made hetero/Physics 6% slower (colocation + fifo, 1.35 -> 1.43 s,
    # 2 runs each), so neither is the default. Shallower emulated NIC queues are no way out
    # either: with ``gnnsched bench --shapes plentiful --datasets physics --nic-queue-ms 5``
    # TCP lost packets and gnnsched took 2.9 s per epoch (DistDGL 4.5 s).
    grad_first: bool = True
    # Priority sharing on NICs that band by IP TOS (``cluster up --bands``; runtime.qos): each
    # store sends its first granted transfer on a second socket marked ``URGENT_TOS``, past
    # every bulk byte queued at its NIC and at the receiver's (tests/runtime/test_transport.py::
    # test_wire_order_on_a_shaped_nic: +0.1 ms over its own bytes at line rate, against
    # +33-41 ms on one band). The coordinator grants it in each receiver's order (a floor per
    # receiver over all stores' transfers); without that, one store's next-iteration prefetch
    # passed another's current-iteration bytes and the gnnsched policy ran 7% slower than fifo
    # on mixedgen/Cora. Not the default: with the grants it is level with fifo and with the
    # policy alone on four shapes (docs/evaluation.md, "The wire order"). Ignored without bands.
    urgent_band: bool = False
    request_timeout: float = 120.0  # a store / trainer answer we wait for
    start_timeout: float = 300.0  # all roles up and ready
    orphan_timeout: float = 30.0  # a role exits when the coordinator is silent this long
    ping_s: float = 1.0  # unused (kept for callers): liveness is the heartbeat below
    threads: int = 1  # intra-op threads per role process
    emulate_speed: bool | None = None  # None: stretch compute to GPU speed when no CUDA
    eval_batch_size: int | None = None  # None: the job's evaluation.batch_size
    stop_grace_s: float = 10.0
    verify_partitions: bool = True  # each store checks its parts' sha256 before loading
    # failure detection and recovery
    heartbeat_s: float = 1.0  # every role sends a heartbeat this often
    dead_after_s: float = 10.0  # ... and is declared dead after this long without one
    checkpoint_every: int = 10  # training steps between checkpoints (and every epoch end)
    recover: bool = True  # False: a dead role fails the run
    max_recoveries: int = 3
    replan: str = "auto"  # auto: re-plan only when a machine is lost | always | never
    replan_placer: str | None = None  # None: the plan's placer if registered, else greedy
    replan_budget: float = 2.0  # planning seconds during recovery
    progress_timeout: float | None = None  # None: 2 x request_timeout + dead_after_s
    faults: tuple[Fault, ...] = ()  # fault injection (tests, bench)
    kill_at: tuple[str, int] | None = None  # shorthand: Fault(role, step), SIGKILL
    coordinator_port: int | None = None  # None: an ephemeral port
    # one metrics record per NIC transfer (queued, received) and per mini-batch dispatch
    # and sampling: the run's own timeline, to set beside the simulator's (off: costs a write
    # per transfer in the coordinator; on, trainers also report each BLOCK and FEATS they
    # receive, so that samplers' and relays' transfers are timed too)
    trace: bool = False
    # go on from the newest complete checkpoint of the interrupted run in the run folder
    # (coordinator.resume); its metrics.jsonl is appended to
    resume: bool = False

    def __post_init__(self) -> None:
        if self.kill_at is not None:
            self.faults = (*self.faults, Fault(str(self.kill_at[0]), int(self.kill_at[1])))
            self.kill_at = None


@dataclass
class RunResult:
    """What a run measured; ``to_dict`` is the ``--json`` object of one system."""

    run_dir: str
    policy: str
    placer: str
    launcher: str
    epochs: list[dict[str, Any]]
    epoch_time_s: float  # median over epochs after the first
    val_accuracy: list[float]
    test_accuracy: float
    bytes_sent: int  # every ZeroMQ payload byte every process sent (measured)
    network_bytes: int  # the part that crossed a NIC (peer on another machine)
    allreduce_bytes: int  # gradient all-reduce volume (ring; computed, sent by gloo/NCCL)
    bytes_by_process: dict[str, int]
    stages: dict[str, dict[str, float]]  # trainer -> stage -> mean s per iteration (steady)
    startup_s: float
    wall_s: float
    iterations_per_epoch: int
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    recoveries: list[dict[str, Any]] = field(default_factory=list)  # one per recovered failure
    checkpoints: int = 0  # checkpoints written
    metric: str = "accuracy"  # the job's metric (gnnsched.metrics), resolved for the task
    test_metric: float = float("nan")
    val_metric: list[float] = field(default_factory=list)
    majority_rate: float | None = None  # test accuracy of always predicting the commonest class
    # the scale model's D (docs/scale-model.md): every time above is measured; divided by D
    # it is the real cluster's
    dilation: float = 1.0
    real_epoch_time_s: float | None = None  # epoch_time_s / dilation
    host_usage: dict[str, dict[str, Any]] = field(default_factory=dict)  # control groups

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


__all__ = ["NIC_CHUNK_S", "NIC_WINDOW_S", "PEER_WINDOW_S", "ROLE_ORDER", "SIGNALS", "STAGES",
           "Fault", "RoleFailure", "RunError", "RunResult", "RuntimeOptions", "exit_text"]
