"""Coordinator: starts and watches the run, drives the online policy live, collects metrics,
and recovers from dead processes and machines.

It runs in the ``gnnsched train`` process, binds one ROUTER socket, and every role connects a
DEALER to it. Start-up: launch all roles -> ``hello`` -> ``config`` (the run's settings) ->
``ready`` (each role's endpoints; stores also send ``PART_INFO``: their partitions' seeds and
labels) -> ``start`` (everyone's endpoints). Then, event by event, it plays the part the
simulator plays for the same :class:`~gnnsched.policy.Policy` object:

* **which mini-batch a free sampler builds** -- each machine runs at most ``cpus`` sampling
  tasks at once; when a core is free and several trainers' samplers there are idle with an open
  prefetch window, ``pick_batch`` chooses (a trainer's batches go in order); the coordinator
  sends that sampler a ``BATCH`` with the seeds;
* **the prefetch window** -- batch ``k`` of a trainer may start once batch
  ``k - prefetch(trainer)`` started training (trainers report ``started``);
* **the order of every store NIC** -- stores report ``queued`` transfers; the coordinator asks
  ``priority`` once per transfer and sends the keys (``prio``), and the store's
  :class:`~gnnsched.runtime.store.NicQueue` sends in that order (``sharing: priority``) or
  round robin (``fair``);
* **events** -- ``on_sampled`` (with the batch's measured sizes), ``on_transfer_done`` (store
  reports ``sent``), ``on_trained``, ``on_barrier`` (every trainer finished that iteration).

Expected costs in the policy's context come from the cost profile when one is given (exactly
what the simulator uses); otherwise they are learnt during the run (moving averages of the
measured train time per edge and fetch time per trainer).

Mini-batches (:class:`Schedule`): every trainer runs ``K = ceil(train seeds / (W * batch))``
iterations per epoch; trainer ``t``'s seeds (the training nodes of its plan's parts) are
shuffled per epoch with seed (job seed, epoch, t) and split into ``K`` near-equal batches, so
each seed is trained exactly once per epoch and nobody waits at epoch end (a trainer with
fewer seeds gets smaller, possibly empty, batches). Validation batches follow each
``eval_every``-th epoch and test batches the last one, equally many per trainer.

Failure detection. A role is dead when its process exits (the launcher owns it: seen within
one poll, ~50 ms), when it sends no heartbeat for ``dead_after_s`` (a frozen process, a lost
host or network), or when the coordinator can no longer reach it. The log names the process,
its machine and pid, and what its last heartbeat said it was doing. A role that *reports* an
exception is not itself the cause when another role just died (a peer's all-reduce fails when
a trainer is killed): the coordinator looks for a dead role first and recovers from that;
otherwise the error is deterministic (bad input, a bug), replaying would hit it again, and the
run fails with it.

Recovery (``RuntimeOptions.recover``). Decided as follows, and logged with the time it took:

1. *Where*: if the dead role's machine can still run processes (:meth:`Launcher.reachable`),
   the resource is not lost -- only a process died -- and the same plan is kept (``replan:
   auto``; a new placement would move healthy work and add planning time to the outage).
   If the machine is gone, the placer (the plan's own, else ``greedy``; ``replan_budget``
   seconds) re-plans on ``cluster.without(machine)``, which moves that machine's partitions to
   the least-loaded live store host (shared/replicated storage; ``storage: local`` cannot
   recover). Seed ownership stays: trainer ``w`` keeps its partitions' seeds, only where its
   tasks run changes, so its mini-batches are the same. ``replan: always`` re-plans even for
   a process death; ``never`` refuses to run without the lost machine.
2. *What restarts*: every non-store role (simplest and always consistent: new processes get
   fresh endpoints and generation-tagged identities), plus dead stores; live stores keep their
   partitions loaded and drop queued transfers (``reset``). When the machine set changed every
   role restarts (machine indices changed).
3. *From where*: trainers checkpoint every ``checkpoint_every`` steps and at each epoch end
   (atomically; reported when complete). All trainers load the last reported checkpoint, so
   the synchronous model state is consistent; the steps after it that had completed are
   *replayed* -- each from the very model state it first saw (mini-batches and dropout are
   functions of (seed, trainer, step)), so none is applied twice to the model. The run's log
   and ``metrics.jsonl`` (``type: recovery``) record detection time, what was re-planned, the
   checkpoint, the replayed steps, and how long restarting and catching up took.

Fault injection (``RuntimeOptions.faults``): ``Fault("sampler:1", at_step=20)`` makes the
coordinator SIGKILL that role's real process when a trainer starts step 20 (``signal="STOP"``
freezes it instead: only heartbeats can tell); ``Fault("machine:store0", ...)`` kills every
process on that machine and marks it down in the launcher -- what tests and
``bench/bench_faults.py`` use.

Shutdown order: trainers first (they consume), then samplers and relays, then stores (which
serve the others); each group gets ``stop`` and ``stop_grace_s`` to exit, then the launcher
sends SIGTERM and SIGKILL to whatever is left. After a failure or Ctrl-C the same happens with
a short grace, so no process outlives the run and every port is closed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from gnnsched.plan import Plan, TrainerPlan, plan_dict_diff
from gnnsched.policy import (
    BatchInfo,
    BatchKey,
    Policy,
    PolicyContext,
    Transfer,
    get_policy,
    gradient_contenders,
)
from gnnsched.runtime.launcher import Launcher, LaunchError, Process, RoleLaunch
from gnnsched.runtime.role import PHASES, seed_of, seeds_hash
from gnnsched.runtime.store import CHUNK_BYTES, PEER_WINDOW_BYTES, WINDOW_BYTES
from gnnsched.runtime.transport import (
    CONTROL,
    STATS,
    Channel,
    Kind,
    Message,
    MessageError,
    TransportError,
    bind_port,
    bind_random,
    ctrl,
    ctrl_body,
    load_keys,
    make_socket,
    start_authenticator,
)
from gnnsched.spec import ClusterSpec, JobSpec, SpecError
from gnnsched.workload import ring_wire_s

NIC_WINDOW_S, PEER_WINDOW_S = 0.15, 0.12  # shaped links: in flight, as seconds of egress
NIC_CHUNK_S = 0.008  # shaped links: a store's chunk, as seconds of its own egress
STAGES = ("sample_s", "fetch_s", "wait_s", "train_s", "allreduce_s")
ROLE_ORDER = (("trainer",), ("sampler", "fetcher"), ("store",))  # shutdown order


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


@dataclass(frozen=True)
class Fault:
    """Fault injection: at ``at_step`` (when a trainer starts it) send ``signal`` to ``role``
    (``sampler:1``, ``trainer:0``, ``store:store1``, ``fetcher:store0``) or to every process
    of a machine (``machine:store0``, which also marks the machine down)."""

    role: str
    at_step: int
    signal: str = "KILL"  # KILL | STOP (a hang: only heartbeats detect it) | TERM


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
    # run. One-off runs with this file patched (gnnsched placement + policy): holding for the
    # whole call with 30 / 20 ms windows cut it to 135 ms and the epoch 2% (1.588 -> 1.554 s,
    # 3 runs each), but made hetero/Physics 6% slower (colocation + fifo, 1.35 -> 1.43 s,
    # 2 runs each), so neither is the default. Shallower emulated NIC queues are no way out
    # either: with ``gnnsched bench --shapes plentiful --datasets physics --nic-queue-ms 5``
    # TCP lost packets and gnnsched took 2.9 s per epoch (DistDGL 4.5 s).
    grad_first: bool = True
    request_timeout: float = 120.0  # a store / trainer answer we wait for
    start_timeout: float = 300.0  # all roles up and ready
    orphan_timeout: float = 30.0  # a role exits when the coordinator is silent this long
    ping_s: float = 1.0  # unused (kept for callers): liveness is the heartbeat below
    threads: int = 1  # intra-op threads per role process
    emulate_speed: bool | None = None  # None: stretch compute to GPU speed when no CUDA
    eval_batch_size: int = 256
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

    def __post_init__(self) -> None:
        if self.kill_at is not None:
            self.faults = (*self.faults, Fault(str(self.kill_at[0]), int(self.kill_at[1])))
            self.kill_at = None


# --------------------------------------------------------------------------------------
# What is trained when


@dataclass(frozen=True)
class Item:
    """One step of every trainer: ``phase`` 0 train, 1 validation, 2 test."""

    seq: int
    epoch: int
    phase: int
    index: int


class Schedule:
    """The run's sequence of steps and each trainer's seeds (identical in the reference)."""

    def __init__(self, job: JobSpec, trainer_parts: list[list[int]],
                 part_counts: list[dict[str, int]], eval_batch_size: int = 256) -> None:
        self.job, self.W = job, len(trainer_parts)
        self.trainer_parts = [list(p) for p in trainer_parts]
        total = sum(c["train"] for c in part_counts)
        self.K = max(1, math.ceil(total / (self.W * job.batch_size)))

        def steps(name: str) -> int:
            most = max(sum(part_counts[p][name] for p in ps) for ps in trainer_parts)
            return max(1, math.ceil(most / eval_batch_size)) if most else 0

        self.n_val, self.n_test = steps("val"), steps("test")
        items: list[Item] = []
        for e in range(job.epochs):
            items += [Item(len(items) + k, e, 0, k) for k in range(self.K)]
            if self.n_val and ((e + 1) % job.eval_every == 0 or e == job.epochs - 1):
                items += [Item(len(items) + k, e, 1, k) for k in range(self.n_val)]
        items += [Item(len(items) + k, job.epochs - 1, 2, k) for k in range(self.n_test)]
        self.items = items
        self.nodes: list[dict[str, tuple[np.ndarray, np.ndarray]]] = []
        self._perm: dict[tuple[int, int], list[np.ndarray]] = {}

    def set_nodes(self, splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]) -> None:
        """Per part ``{train|val|test: (ids, labels)}`` -> per trainer, sorted by node id."""
        self.nodes = []
        for ps in self.trainer_parts:
            mine = {}
            for name in PHASES:
                ids = np.concatenate([splits[p][name][0] for p in ps]).astype(np.int64)
                lab = np.concatenate([splits[p][name][1] for p in ps]).astype(np.int64)
                order = np.argsort(ids, kind="stable")
                mine[name] = (ids[order], lab[order])
            self.nodes.append(mine)

    def batch(self, trainer: int, item: Item) -> tuple[np.ndarray, np.ndarray]:
        """(seeds, labels) of ``trainer`` at ``item``."""
        ids, lab = self.nodes[trainer][PHASES[item.phase]]
        if item.phase == 0:
            key = (trainer, item.epoch)
            if key not in self._perm:
                rng = np.random.default_rng(seed_of(self.job.seed, item.epoch, trainer))
                self._perm = {k: v for k, v in self._perm.items() if k[1] >= item.epoch - 1}
                self._perm[key] = np.array_split(rng.permutation(len(ids)), self.K)
            sel = self._perm[key][item.index]
        else:
            n = self.n_val if item.phase == 1 else self.n_test
            sel = np.array_split(np.arange(len(ids)), n)[item.index]
        return ids[sel], lab[sel]


def part_counts(meta: dict[str, Any]) -> list[dict[str, int]]:
    return [{k: int(p.get(k, 0)) for k in PHASES} for p in meta["parts"]]


# --------------------------------------------------------------------------------------
# Result


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------
# The coordinator


@dataclass
class _Role:
    launch: RoleLaunch
    proc: Process | None = None
    state: str = "launched"  # launched | hello | ready | running | done | exited | stopped
    info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    last_heard: float | None = None  # monotonic time of its last heartbeat or message
    doing: str = "starting"  # what its last heartbeat said


@dataclass
class _Sampler:
    name: str
    trainer: int
    machine: int
    busy: bool = False


Progress = Callable[..., None]
_SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP, "TERM": signal.SIGTERM}


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"exited with code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exited with code {code}"


class Coordinator:
    """Runs one training job on a launcher (see the module docstring)."""

    def __init__(self, cluster: ClusterSpec, job: JobSpec, plan: Plan, partitions: str,
                 launcher: Launcher, run_dir: str | Path, policy: str | Policy = "gnnsched",
                 options: RuntimeOptions | None = None, profile: Any = None,
                 progress: Progress | None = None) -> None:
        from gnnsched.datasets import open_partitions

        self.job = job
        self.launcher, self.opts = launcher, options or RuntimeOptions()
        o = self.opts
        if o.replan not in ("auto", "always", "never"):
            raise SpecError("runtime options", "replan", f"unknown value {o.replan!r}",
                            "auto, always, never")
        for f in o.faults:
            if f.signal not in _SIGNALS:
                raise SpecError("runtime options", "faults", f"unknown signal {f.signal!r}",
                                ", ".join(_SIGNALS))
        self.policy = get_policy(policy)
        self.run_dir = Path(run_dir)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for old in (self.run_dir / "checkpoints").glob("*.pt*"):
            old.unlink()  # an earlier run's: recovery must only ever see this run's
        self.pset = open_partitions(partitions, verify=False)
        if self.pset.num_parts != cluster.num_parts:
            raise SpecError(str(self.pset.root), "num_parts",
                            f"the partition directory has {self.pset.num_parts} parts, cluster "
                            f"{cluster.source} stores {cluster.num_parts}",
                            "partitions made for this job (gnnsched partition)")
        if o.verify_partitions:
            from gnnsched.runtime.store import verify_files

            verify_files(str(self.pset.root), None)  # the shared maps; stores check their parts
        self.keys = None
        if cluster.curve:
            if not cluster.keys_dir:
                raise SpecError(cluster.source, "keys_dir", "is missing: curve: true needs "
                                "the folder with the cluster's keys",
                                f"gnnsched keys --cluster {cluster.source}")
            try:
                self.keys = load_keys(cluster.keys_dir)
            except TransportError as exc:
                raise SpecError(cluster.source, "keys_dir", str(exc)) from None
        self.partitions = str(self.pset.root.resolve())
        self.profile = profile
        self.progress = progress or (lambda *a, **k: None)
        self.W = len(plan.trainers)
        self.trainer_parts = [tuple(t.parts) for t in plan.trainers]
        self._bind(cluster, plan)
        self.schedule = Schedule(job, [list(p) for p in self.trainer_parts],
                                 part_counts(self.pset.meta), o.eval_batch_size)
        self.items = self.schedule.items
        self.record_seq = self._record_seqs()
        self.metrics = open(self.run_dir / "metrics.jsonl", "w")
        self.logfile = open(self.run_dir / "logs" / "coordinator.log", "a")
        self.roles: dict[str, _Role] = {}
        self.samplers: dict[str, _Sampler] = {}
        self.splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.attempt = 0  # recoveries so far; the generation of every role launched since
        self.recoveries: list[dict[str, Any]] = []
        self.ckpts: list[tuple[int, int, str]] = []  # reported checkpoints: (seq, epoch, path)
        self.checkpoints = 0
        self.fired: set[int] = set()
        self.fault_log: list[dict[str, Any]] = []
        self.training = False
        self.stale = 0  # messages from replaced incarnations, dropped
        self.rejected = 0  # malformed messages or unknown peers, dropped
        self.catchup: dict[str, Any] | None = None
        self.trained: dict[tuple[int, int], dict[str, Any]] = {}
        self.epochs: list[dict[str, Any]] = []
        self.barrier_at = [math.nan] * len(self.items)
        self.per_edge = [0.0] * self.W
        self.tseq = 0
        self.last_barrier = -1

    def _bind(self, cluster: ClusterSpec, plan: Plan) -> None:
        """Adopt a (new) cluster and plan: machine indices and where trainers run."""
        self.cluster, self.plan = cluster, plan
        self.launcher.cluster = cluster
        self.names = [m.name for m in cluster.machines]
        idx = cluster.machine_index
        self.T = [idx(t.machine) for t in plan.trainers]
        self.F = [idx(t.fetch_at) for t in plan.trainers]

    def _record_seqs(self) -> dict[int, int]:
        """Epoch -> the step after whose barrier its record (and validation) is complete."""
        out = {}
        for i, it in enumerate(self.items):
            nxt = self.items[i + 1] if i + 1 < len(self.items) else None
            if it.phase != 2 and (nxt is None or nxt.epoch != it.epoch or nxt.phase == 2):
                out[it.epoch] = it.seq
        return out

    def log(self, msg: str) -> None:
        """A line in ``logs/coordinator.log`` and on the user's progress output."""
        stamp = time.strftime("%H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
        self.logfile.write(f"[{stamp} coordinator] {msg}\n")
        self.logfile.flush()
        self.progress("log", msg=msg)

    # ------------------------------------------------------------------ set-up
    def _role_specs(self) -> list[tuple[str, str, str]]:
        """(role, id, machine) of every process the current plan needs; fills samplers."""
        specs = [("store", m.name, m.name) for m in self.cluster.machines if m.partitions]
        specs += [("trainer", str(w), t.machine) for w, t in enumerate(self.plan.trainers)]
        self.samplers = {}
        sid = 0
        for w, t in enumerate(self.plan.trainers):
            for mname, count in t.samplers:
                for _ in range(count):
                    specs.append(("sampler", str(sid), mname))
                    self.samplers[f"sampler:{sid}"] = _Sampler(
                        f"sampler:{sid}", w, self.cluster.machine_index(mname))
                    sid += 1
        specs += [("fetcher", m, m) for m in sorted({t.fetch_at for t in self.plan.trainers
                                                     if t.fetch_at != t.machine})]
        return specs

    def _add_role(self, role: str, rid: str, machine: str) -> str:
        o = self.opts
        launch = RoleLaunch(role, rid, machine, self.endpoint,
                            self.run_dir / "logs" / f"{role}-{rid}.log", o.threads,
                            o.orphan_timeout, o.start_timeout, gen=self.attempt,
                            heartbeat_s=o.heartbeat_s,
                            curve_keys=self.keys.folder if self.keys else None)
        self.roles[launch.name] = _Role(launch)
        return launch.name

    def _launch(self, names: list[str]) -> None:
        try:
            self.launcher.prepare([self.roles[n].launch for n in names])
        except (LaunchError, OSError) as exc:
            raise RunError(f"cannot start processes: {exc}") from None
        for n in names:
            r = self.roles[n]
            try:
                r.proc = self.launcher.start(r.launch)
            except (LaunchError, OSError) as exc:
                raise RunError(f"cannot start {n} on machine {r.launch.machine}: {exc}") \
                    from None
        self._write_processes()

    def _write_processes(self) -> None:
        """``logs/processes.json``: which process runs what, where (pid, generation, log)."""
        table = {n: {"pid": r.proc.pid if r.proc else None, "machine": r.launch.machine,
                     "role": r.launch.role, "generation": r.launch.gen,
                     "log": str(r.launch.log)} for n, r in self.roles.items()}
        tmp = self.run_dir / "logs" / ".processes.json.tmp"
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, self.run_dir / "logs" / "processes.json")

    def _sizes(self) -> dict[str, int]:
        """Chunk and window sizes. On real or shaped links (netns, ssh) each store's chunk is
        ~8 ms of its own egress (16..256 KiB, ``nic_chunk_bytes``) and its windows cover
        150 / 120 ms of it (``nic_windows``); on loopback (local) large chunks keep the CPU
        cost low. ``chunk_bytes`` (~2 ms of the slowest NIC when shaped) is the fallback for
        a sender with no entry of its own."""
        o = self.opts
        if o.chunk_bytes:
            chunk = int(o.chunk_bytes)
        elif self.launcher.name == "local":
            chunk = CHUNK_BYTES
        else:
            slowest = min(min(m.egress, m.ingress) for m in self.cluster.machines)
            chunk = int(min(CHUNK_BYTES, max(16 << 10, slowest * 0.002)))
        out: dict[str, Any] = {
            "chunk_bytes": chunk,
            "window_bytes": int(o.window_bytes or (WINDOW_BYTES if chunk == CHUNK_BYTES
                                                   else 4 * chunk)),
            "peer_window_bytes": int(o.peer_window_bytes or (
                PEER_WINDOW_BYTES if chunk == CHUNK_BYTES else 2 * chunk))}
        if chunk != CHUNK_BYTES:
            # Shaped links: a window must cover the bandwidth-delay product of *its* NIC, or an
            # acknowledgement round trip through busy processes and the receiver's own queued
            # egress caps a sender below its rate. Per store: 150 ms (total) / 120 ms (per
            # receiver) of its egress, never less than the chunk-based floor. With 40 / 30 ms
            # a 50 Mbit/s store waited for acks ~60% of a hetero/Cora run (its ``waits_s``
            # stats) and the run was 11% slower than simulated; with 150 / 120 ms it never
            # waits and a priority transfer still overtakes within ~150 ms of that NIC.
            #
            # A store's chunk is ~8 ms of its own egress (16..256 KiB): each chunk costs the
            # sender and receiver a message, an ack and a scheduling decision in Python, so
            # chunks sized by the *slowest* NIC (16 KiB) kept a 50 Mbit/s store sending ~380
            # chunks a second, 3-4 s of its CPU per ~20 s hetero/Physics run (its ``waits_s``
            # "send"; ~1.6 s with 8 ms chunks), and a 200 Mbit/s one four times as many.
            # Priority and holds act at window granularity anyway.
            chunks = {} if o.chunk_bytes else {
                m.name: int(min(CHUNK_BYTES, max(16 << 10, m.egress * NIC_CHUNK_S)))
                for m in self.cluster.machines if m.partitions}
            out["nic_chunk_bytes"] = chunks
            out["nic_windows"] = {
                m.name: [max(out["window_bytes"], 4 * chunks.get(m.name, chunk),
                             int(m.egress * NIC_WINDOW_S)),
                         max(out["peer_window_bytes"], 2 * chunks.get(m.name, chunk),
                             int(m.egress * PEER_WINDOW_S))]
                for m in self.cluster.machines if m.partitions}
        return out

    def _config(self, resume: dict[str, Any] | None = None) -> dict[str, Any]:
        o = self.opts
        trainers = []
        for w, t in enumerate(self.plan.trainers):
            gpus = self.cluster.machine(t.machine).gpus
            trainers.append({"id": w, "machine": t.machine, "device": t.device,
                             "speed": gpus[t.device].speed if t.device < len(gpus) else 1.0,
                             "fetch_at": t.fetch_at, "parts": list(t.parts)})
        return {
            "run_dir": str(self.run_dir.resolve()), "partitions": self.partitions,
            "node_part_file": str(self.pset.root.resolve() / self.pset.meta.get(
                "node_part", "node_part.npy")),
            "machines": self.names, "part_store": self.cluster.part_stores,
            "job": self.job.to_dict(), "feature_dim": self.pset.feature_dim,
            "num_classes": self.pset.num_classes, "feature_bytes": 4 * self.pset.feature_dim,
            "sharing": self.policy.sharing, **self._sizes(),
            "grad_first": o.grad_first and len(set(self.T)) > 1,
            "request_timeout": o.request_timeout, "emulate_speed": o.emulate_speed,
            "verify_partitions": o.verify_partitions, "trace": o.trace,
            "checkpoint_every": o.checkpoint_every, "resume": resume,
            "trainers": trainers,
            "items": [[it.seq, it.epoch, it.phase, it.index] for it in self.items],
        }

    def _context(self) -> PolicyContext:
        n = len(self.items)
        cl = self.cluster
        ctx = PolicyContext(
            trainers=self.W, iterations=n, prefetch=self.job.prefetch,
            egress=[m.egress for m in cl.machines], ingress=[m.ingress for m in cl.machines],
            trainer_machine=list(self.T), fetch_machine=list(self.F))
        if self.profile is not None:
            from gnnsched.simulator import Instance, workload_for

            inst = Instance(workload_for(cl, self.job, self.profile), self.plan, iterations=1)
            ref = inst.context(self.job.prefetch)
            ctx.train_s, ctx.fetch_s, ctx.sample_s = ref.train_s, ref.fetch_s, ref.sample_s
            ctx.buffer_batches = ref.buffer_batches
            self.learn = False
        else:  # learnt online from measurements
            ctx.train_s, ctx.fetch_s, ctx.sample_s = [0.0] * self.W, [0.0] * self.W, \
                [0.0] * self.W
            self.learn = True
        return ctx

    # ------------------------------------------------------------------ messaging
    def send(self, name: str, msg: Message) -> None:
        r = self.roles[name]
        try:
            self.chan.send(msg, r.launch.ident.encode())
        except zmq.ZMQError as exc:
            if r.state not in ("done", "exited", "stopped"):
                # its connection dropped: an exit status, if one comes, says more
                end = time.monotonic() + 1.0
                while time.monotonic() < end:
                    self._check_roles()
                    time.sleep(0.02)
                raise self._failure(r, f"cannot be reached ({exc})") from None

    def event(self, record: dict[str, Any]) -> None:
        self.metrics.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self.metrics.flush()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _failure(self, r: _Role, how: str) -> RoleFailure:
        now = time.monotonic()
        return RoleFailure(r.launch.name, r.launch.machine, r.proc.pid if r.proc else None,
                           how, r.doing if r.state != "ready" else f"ready ({r.doing})", now,
                           None if r.last_heard is None else now - r.last_heard,
                           r.proc.log_tail() if r.proc else "", str(r.launch.log))

    # ------------------------------------------------------------------ the run
    def run(self) -> RunResult:
        self.t0, self.cpu0 = time.monotonic(), time.process_time()
        ctx = zmq.Context(io_threads=1)
        self.auth = start_authenticator(ctx, self.keys) if self.keys else None
        sock = make_socket(ctx, zmq.ROUTER, CONTROL, curve=self.keys, server=True)
        self.chan = Channel(sock, "coordinator")
        ok = False
        try:
            host = self.launcher.coordinator_host()
            try:
                self.endpoint = bind_port(sock, host, self.opts.coordinator_port) \
                    if self.opts.coordinator_port else bind_random(sock, host)
            except TransportError as exc:
                raise RunError(f"coordinator: {exc}") from None
            try:
                self.launcher.preflight(sorted({m for _, _, m in self._role_specs()}))
            except LaunchError as exc:
                raise RunError(str(exc)) from None
            names = [self._add_role(*spec) for spec in self._role_specs()]
            self._launch(names)
            self.log(f"started {len(names)} processes ({self.launcher.name} launcher"
                     + (", CURVE on" if self.keys else "") + f"; coordinator {self.endpoint})")
            try:
                self._startup(names, first=True)
            except RoleFailure as f:  # before training: nothing to recover, say why
                raise self._fatal(f, "while starting up") from None
            self._begin_training(0)
            failure: RoleFailure | None = None
            while True:
                try:
                    if failure is not None:
                        self._recover(failure)
                        failure = None
                    self._train()
                    break
                except RoleFailure as f:
                    failure = f
            result = self._finish()
            ok = True
            return result
        finally:
            if not ok:
                self._abort()
            self.metrics.close()
            self.logfile.close()
            self.chan.close()
            if self.auth is not None:
                self.auth.stop()
            ctx.destroy(linger=0)

    def _fatal(self, f: RoleFailure, why: str = "") -> RunError:
        tail = f"; last log lines ({f.log}):\n{f.log_tail}" if f.log_tail else ""
        extra = "".join(f"\n  then: {c}" for c in f.collateral)
        return RunError(f"{f.describe()}{' ' + why if why else ''}{tail}{extra}")

    def _check_roles(self) -> None:
        """Raise for the first dead role.

        *Hard* deaths -- killed by a signal, silent past ``dead_after_s``, or an exit code a
        role only uses when its coordinator vanished -- are :class:`RoleFailure` (recovered).
        A role that exited with code 1 raised an exception, which it reported: unless a hard
        death explains it (checked first), that error is the run's and ends it (replaying
        would only repeat it)."""
        now = time.monotonic()
        soft: _Role | None = None
        for r in self.roles.values():
            if r.proc is None or r.state in ("exited", "stopped", "error"):
                continue
            code = r.proc.poll()
            if code is not None:
                was = r.state
                if code == 0 and was == "done":
                    r.state = "exited"
                    continue
                if code == 1 or code == 0:
                    soft = soft or r
                    continue
                r.state = "exited"
                raise self._failure(r, _exit_text(code))
            if r.last_heard is not None and now - r.last_heard > self.opts.dead_after_s:
                raise self._failure(r, f"sent no heartbeat for {now - r.last_heard:.1f} s "
                                       f"(dead_after_s={self.opts.dead_after_s:g})")
        if soft is not None:
            soft.state = "exited"
            code = soft.proc.poll() if soft.proc else None
            err = self._error_of(soft)
            raise RunError(f"{soft.launch.name} on machine {soft.launch.machine} (pid "
                           f"{soft.proc.pid if soft.proc else '?'}) {_exit_text(code or 0)} "
                           f"while {soft.doing}" + (f": {err}" if err else "")
                           + f"; last log lines ({soft.launch.log}):\n"
                           + (soft.proc.log_tail() if soft.proc else ""))

    def _error_of(self, r: _Role) -> str | None:
        """The error a role reported before exiting, if it is (or soon is) in our queue."""
        end = time.monotonic() + 0.5
        while "error" not in r.info and time.monotonic() < end:
            if self.chan.sock.poll(50, zmq.POLLIN):
                while True:
                    try:
                        got = self.chan.recv_now()
                    except MessageError:
                        continue
                    if got is None:
                        break
                    ident = (got[0] or b"").decode(errors="replace")
                    name, _, gen = ident.rpartition("/")
                    if name == r.launch.name and gen == str(r.launch.gen) and \
                            got[1].kind == Kind.CTRL:
                        try:
                            body = ctrl_body(got[1], name)
                        except MessageError:
                            continue
                        if body.get("op") == "error":
                            r.info["error"] = str(body.get("error"))
        return r.info.get("error")

    def _poll(self, timeout_s: float) -> None:
        """Handle every message that arrives within ``timeout_s``; check processes."""
        now = time.monotonic()
        gap = now - getattr(self, "last_poll", now)
        if gap > 1.0:  # we were busy (re-planning...): silence meanwhile is not the roles'
            for r in self.roles.values():
                if r.last_heard is not None:
                    r.last_heard += gap
        self._check_roles()
        if self.chan.sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            for _ in range(1000):
                try:
                    got = self.chan.recv_now()
                except MessageError as exc:  # malformed: drop it, never trust it
                    self._reject(str(exc))
                    continue
                if got is None:
                    break
                ident, msg = got
                self._dispatch(ident.decode(errors="replace") if ident else "?", msg)
        self.last_poll = time.monotonic()
        self._check_roles()

    def _dispatch(self, ident: str, msg: Message) -> None:
        hb = ident.endswith("/hb")
        base = ident[:-3] if hb else ident
        name, _, gen = base.rpartition("/")
        r = self.roles.get(name)
        if r is None or gen != str(r.launch.gen):
            if name.split(":")[0] in ("store", "sampler", "fetcher", "trainer"):
                self.stale += 1  # a replaced incarnation: whatever it says is void
            else:
                self._reject(f"a message from unknown peer {ident!r}")
            return
        r.last_heard = time.monotonic()
        try:
            if hb:
                body = ctrl_body(msg, ident) if msg.kind == Kind.CTRL else {}
                r.doing = str(body.get("doing", r.doing))[:200]
                try:
                    self.chan.send(ctrl("hb"), ident.encode())
                except zmq.ZMQError:
                    pass
                return
            self._handle(name, r, msg)
        except MessageError as exc:
            self._reject(f"from {name}: {exc}")

    def _reject(self, what: str) -> None:
        """Count and log (the first 20) messages dropped as malformed or from strangers."""
        self.rejected += 1
        if self.rejected <= 20:
            self.log(f"rejected {what}" + (" (further rejections are only counted)"
                                           if self.rejected == 20 else ""))

    def _startup(self, names: list[str], first: bool = False) -> None:
        """Wait until ``names`` are ready (and every partition's seeds are known), then send
        them everyone's endpoints."""
        self.last_poll = time.monotonic()
        self.cfg = self._config(getattr(self, "resume", None))
        deadline = time.monotonic() + self.opts.start_timeout
        while any(self.roles[n].state != "ready" for n in names) or \
                len(self.splits) < self.pset.num_parts:
            if time.monotonic() > deadline:
                late = [f"{n} ({self.roles[n].state}: {self.roles[n].doing})" for n in names
                        if self.roles[n].state != "ready"]
                raise RunError(f"roles not ready within {self.opts.start_timeout:.0f} s: "
                               f"{', '.join(late)}")
            self._poll(0.1)
        if first:
            self.schedule.set_nodes(self.splits)
        stores = {str(self.cluster.machine_index(r.launch.machine)): r.info["endpoint"]
                  for r in self.roles.values() if r.launch.role == "store"}
        fetchers = {r.launch.machine: r.info["endpoint"] for r in self.roles.values()
                    if r.launch.role == "fetcher"}
        trainers = []
        cuda = []
        for w, t in enumerate(self.plan.trainers):
            info = self.roles[f"trainer:{w}"].info
            relay = fetchers.get(t.fetch_at) if t.fetch_at != t.machine else None
            trainers.append({"id": w, "data": info["data"], "relay": relay,
                             "relay_machine": t.fetch_at if relay else None})
            cuda.append(info.get("cuda"))
        backend = "nccl" if all(cuda) and len(set(cuda)) == len(cuda) else "gloo"
        master = self.roles["trainer:0"].info.get("master_port")
        start = ctrl("start", stores=stores, trainers=trainers, backend=backend,
                     master_addr=self.launcher.host_of(self.plan.trainers[0].machine),
                     master_port=master)
        if first:
            self.startup_s = self.now()
            self.log(f"all {len(names)} roles ready in {self.startup_s:.1f} s "
                     f"(all-reduce: {backend})")
        for n in names:
            self.roles[n].state = "running"
            self.send(n, start)

    # ------------------------------------------------------------------ training
    def _begin_training(self, start: int) -> None:
        """(Re)start the training state at step ``start`` (0, or after a checkpoint)."""
        W, n = self.W, len(self.items)
        now = self.now()
        if start == 0:
            self.t_train = now
        self.cores_free = [m.cpus for m in self.cluster.machines]
        self.next_disp = [start] * W
        self.started = [start] * W
        self.ready_since = [now] * W
        self.expected: dict[tuple[int, int], str] = {}
        self.trained = {k: v for k, v in self.trained.items() if k[1] < start}
        self.barriers = [W if s < start else 0 for s in range(n)]
        self.queues: dict[int, dict[int, Transfer]] = defaultdict(dict)
        self.stores = {self.cluster.machine_index(r.launch.machine): name
                       for name, r in self.roles.items() if r.launch.role == "store"}
        self.fetchers = [name for name, r in self.roles.items() if r.launch.role == "fetcher"]
        self.ranked: dict[tuple[int, int, int, str], list] = {}
        self.reducing: dict[int, int] = defaultdict(int)  # machine -> trainers all-reducing
        self.entered: dict[int, int] = defaultdict(int)  # step -> trainers in its all-reduce
        self.grad_bytes: dict[int, int] = defaultdict(int)  # step -> largest ring volume
        self.holding: set[int] = set()  # machines the stores hold traffic into
        self.contending = self._contending()
        self.sampled_info: dict[tuple[int, int], dict[str, Any]] = {}
        # --trace: half-known sampler / relay transfers, (trainer, seq, kind) -> what is known
        self.handoffs: dict[tuple[int, int, str], dict[str, Any]] = {}
        self.epochs = [e for e in self.epochs if self.record_seq[e["epoch"]] < start]
        self.__dict__.pop("test_accuracy", None)  # set again after the test steps
        self.done_trainers: set[int] = set()
        for s in self.samplers.values():
            s.busy = False
        self.policy.reset(self._context())
        self.pf = [max(1, int(self.policy.prefetch(w))) for w in range(W)]
        self.training = True
        self.last_progress = time.monotonic()
        if start < n:
            it = self.items[start]
            self.progress("epoch_start", epoch=it.epoch, total=self.schedule.K,
                          epochs=self.job.epochs)
        for m in range(len(self.cluster.machines)):
            self._dispatch_batches(m)

    def _train(self) -> None:
        limit = self.opts.progress_timeout or (2 * self.opts.request_timeout
                                               + self.opts.dead_after_s)
        while len(self.done_trainers) < self.W:
            self._poll(0.05)
            if time.monotonic() - self.last_progress > limit:
                doing = "; ".join(f"{n}: {r.doing}" for n, r in self.roles.items())
                raise RunError(f"no training progress for {limit:.0f} s although every "
                               f"process is alive; what each was doing: {doing}")

    def _dispatch_batches(self, m: int) -> None:
        """Start sampling tasks on machine ``m`` while it has a free core (policy picks)."""
        n = len(self.items)
        while self.cores_free[m] > 0:
            cands = []
            seen = set()
            for s in self.samplers.values():
                w = s.trainer
                if s.machine != m or s.busy or w in seen:
                    continue
                nd = self.next_disp[w]
                if nd < n and nd < self.started[w] + self.pf[w]:
                    cands.append((self.ready_since[w], w))
                    seen.add(w)
            if not cands:
                return
            cands.sort()
            keys = [BatchKey(w, self.next_disp[w]) for _, w in cands]
            pick = keys[0] if len(keys) == 1 else self.policy.pick_batch(keys, self.now())
            w = pick.trainer
            seq = self.next_disp[w]
            self.next_disp[w] = seq + 1
            self.ready_since[w] = self.now()
            s = next(s for s in self.samplers.values()
                     if s.machine == m and s.trainer == w and not s.busy)
            s.busy = True
            self.cores_free[m] -= 1
            item = self.items[seq]
            self.roles[s.name].doing = f"sampling trainer {w} step {seq} (epoch {item.epoch})"
            seeds, labels = self.schedule.batch(w, item)
            self.expected[(w, seq)] = seeds_hash(seeds)
            self._rank(w, seq, "struct", [(st, m, 0.0) for st in self.stores if st != m])
            if self.opts.trace:
                self.event({"type": "dispatch", "trainer": w, "seq": seq, "t": self.now(),
                            "machine": self.cluster.machines[m].name})
            self.send(s.name, Message(Kind.BATCH, {"trainer": w, "seq": seq,
                                                   "epoch": item.epoch, "phase": item.phase,
                                                   "index": item.index},
                                      {"seeds": seeds, "labels": labels}))

    def _handle(self, name: str, r: _Role, msg: Message) -> None:
        if msg.kind == Kind.PART_INFO:
            if r.launch.role != "store":
                raise MessageError(f"PART_INFO from {name}, which is not a store")
            a = msg.arrays
            self.splits[msg["part"]] = {k: (a[k].copy(), a[f"{k}_labels"].copy())
                                        for k in PHASES}
            return
        if msg.kind != Kind.CTRL:
            raise MessageError(f"coordinator: unexpected {msg.kind.name} from {name}")
        body = ctrl_body(msg, name)
        op = body.pop("op")
        handler = getattr(self, f"_on_{op}", None)
        if handler is None:
            raise MessageError(f"coordinator: unknown op {op!r} from {name}")
        handler(name, r, body)

    # ----- start-up
    def _on_hello(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        r.state = "hello"
        r.info["pid"] = body.get("pid")
        self.send(name, ctrl("config", **self.cfg))

    def _on_ready(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        r.state = "ready"
        r.info.update(body)

    def _on_hb(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        r.doing = str(body.get("doing", r.doing))[:200]

    def _on_error(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        """A role reports an exception. If another role just died, that death is the cause
        (recover from it); otherwise the error is the run's (it would recur on replay)."""
        r.state = "error"
        r.info["error"] = str(body.get("error"))
        said = f"{name} on machine {r.launch.machine} failed: {body.get('error')}"
        if self.training:
            end = time.monotonic() + min(2.0, self.opts.dead_after_s)
            while True:
                try:
                    self._check_roles()
                except RoleFailure as f:
                    f.collateral.append(said)
                    raise
                except RunError:  # another role's own error: ours is reported below
                    break
                if time.monotonic() > end:
                    break
                time.sleep(0.05)
        raise RunError(f"{said}\n{body.get('traceback', '')}")

    def _on_stats(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        r.stats = body
        r.state = "done"

    # ----- sampling
    def _on_sampled(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        s = self.samplers[name]
        w, seq = int(body["trainer"]), int(body["seq"])
        self.sampled_info[(w, seq)] = body
        train_s = self.per_edge[w] * body["edges"] if self.learn else \
            self.policy.ctx.train_s[w]
        info = BatchInfo(float(body["feat_bytes"]), float(body["block_bytes"]), float(train_s),
                         tuple((int(m), float(b)) for m, b in body["feat_from"]), s.machine)
        self.policy.on_sampled(BatchKey(w, seq), info, self.now())
        if self.opts.trace:
            self.event({"type": "sampled", "trainer": w, "seq": seq, "t": self.now(),
                        "feat_bytes": info.feat_bytes})
            if s.machine != self.T[w]:  # the sampler sends BLOCK right after this report
                self._handoff(w, seq, "block", src=s.machine, queued=self.now())
        self._rank(w, seq, "feat", [(m, self.F[w], b) for m, b in info.feat_from
                                    if m != self.F[w]])
        s.busy = False
        r.doing = f"idle (sampled trainer {w} step {seq})"
        self.cores_free[s.machine] += 1
        self._dispatch_batches(s.machine)

    # ----- NICs
    def _rank(self, w: int, seq: int, kind: str, flows: list[tuple[int, int, float]]) -> None:
        """Send stores the priority of a batch's transfers before they are queued (the
        simulator asks ``priority`` when the flow starts; here it is asked as soon as the
        transfer is known, so the store can rank it the moment the request arrives)."""
        if self.policy.sharing != "priority":
            return
        now = self.now()
        for src, dst, nbytes in flows:
            self.tseq += 1
            tr = Transfer(BatchKey(w, seq), kind, src, dst, nbytes, now, self.tseq)
            key = list(self.policy.priority(tr))
            self.ranked[(src, w, seq, kind)] = key
            self.send(self.stores[src], ctrl("rank", ranks=[[w, seq, kind, key]]))

    def _on_queued(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        m = int(body["machine"])
        now = self.now()
        keys = []
        for tid, trainer, seq, kind, dst, nbytes, ranked in body["transfers"]:
            self.tseq += 1
            tr = Transfer(BatchKey(int(trainer), int(seq)), str(kind), m, int(dst),
                          float(nbytes), now, self.tseq)
            self.queues[m][int(tid)] = tr
            if self.policy.sharing == "priority" and not ranked:
                key = self.ranked.get((m, int(trainer), int(seq), str(kind)))
                keys.append([int(tid), key if key is not None else
                             list(self.policy.priority(tr))])
        if keys:
            self.send(name, ctrl("prio", keys=keys))

    def _on_sent(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        m = int(body["machine"])
        now = self.now()
        for tid in body["tids"]:
            tr = self.queues[m].pop(int(tid), None)
            if tr is not None:
                self.policy.on_transfer_done(tr, now)
                if self.opts.trace:
                    self.event({"type": "transfer", "trainer": tr.batch.trainer,
                                "seq": tr.batch.iteration, "kind": tr.kind,
                                "src": self.cluster.machines[tr.src].name,
                                "dst": self.cluster.machines[tr.dst].name,
                                "bytes": tr.nbytes, "queued": tr.created, "done": now})

    def _on_allreduce(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        """Gradients first, as in the cost model: once *every* trainer has entered all-reduce
        ``k`` (gradients are on the wire; before that a trainer only waits at the barrier),
        a store or relay that would share a NIC with the gradients sends the reducing
        machines nothing of later iterations until their all-reduce ends. What any trainer
        needs for barrier ``k`` is never held."""
        m, seq = self.T[int(body["trainer"])], int(body["seq"])
        r.doing = f"{'all-reducing' if body['on'] else 'stepping'} step {seq}"
        extra: dict[str, Any] = {}
        if body["on"]:
            self.reducing[m] += 1
            self.entered[seq] += 1
            self.grad_bytes[seq] = max(self.grad_bytes[seq], int(body.get("bytes", 0)))
            if self.entered[seq] < self.W:
                return
            del self.entered[seq]
            volume = self.grad_bytes.pop(seq)
            if volume > 0:  # the gradients' time on the wire; the rest of the call is not
                extra["for_s"] = self.gradient_wire_s(volume)
            hold = [mm for mm, n in self.reducing.items() if n > 0 and mm not in self.holding]
            on = True
        else:
            self.reducing[m] -= 1
            if self.reducing[m] > 0 or m not in self.holding:
                return
            hold, on = [m], False
        for mm in hold:
            (self.holding.add if on else self.holding.discard)(mm)
            for peer in self.contending[mm]:
                self.send(peer, ctrl("hold", machine=mm, seq=seq, on=on, **extra))

    def gradient_wire_s(self, volume: float) -> float:
        """The gradients' time on the wire (:func:`gnnsched.workload.ring_wire_s`), without
        the all-reduce's fixed overhead, during which the cost model's NICs carry other
        traffic."""
        ms = self.cluster.machines
        return ring_wire_s(volume, list(self.T), [m.egress for m in ms],
                           [m.ingress for m in ms], self.cluster.latency)

    def _contending(self) -> dict[int, list[str]]:
        """Per trainer machine, the stores and relays whose traffic into it would slow its
        gradients (:func:`gnnsched.policy.gradient_contenders`). Fixed by the plan, so
        computed once per (re)start."""
        ms = self.cluster.machines
        senders = [*((n, i) for i, n in self.stores.items()),
                   *((n, self.cluster.machine_index(self.roles[n].launch.machine))
                     for n in self.fetchers)]
        rule = gradient_contenders([x.egress for x in ms], [x.ingress for x in ms], self.T,
                                   {at for _, at in senders})
        return {m: [peer for peer, at in senders if at in cont] for m, cont in rule.items()}

    def _on_fetched(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        # the trainer reports the fetch time with the batch; a relay reports this when a
        # gathered batch enters its send queue (a gradient hold may keep it there, as in a
        # store's NIC queue): for --trace, the queued time of that relay transfer
        if self.opts.trace:
            w, m = int(body["trainer"]), self.cluster.machine_index(r.launch.machine)
            if m != self.T[w]:
                self._handoff(w, int(body["seq"]), "relay", src=m, queued=self.now())

    def _on_arrived(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        """--trace: a trainer received a BLOCK (kind ``block``) or FEATS (``relay``)."""
        w, kind = int(body["trainer"]), str(body["kind"])
        if kind not in ("block", "relay") or name != f"trainer:{w}":
            raise MessageError(f"coordinator: bad arrival report {body!r} from {name}")
        self._handoff(w, int(body["seq"]), kind, done=self.now(), bytes=int(body["bytes"]))

    def _handoff(self, w: int, seq: int, kind: str, **known: Any) -> None:
        """A ``transfer`` record of a sampler's or relay's push once both halves are known:
        when the sender handed it over (its report) and when the trainer had it (its
        report), both on this clock as the stores' transfers are. The two reports travel on
        different connections: should the receipt come first, the transfer took no
        measurable time (``done = queued``). Receipts of same-machine BLOCKs never pair and
        are dropped when the step is trained."""
        key = (w, seq, kind)
        h = self.handoffs.setdefault(key, {})
        h.update(known)
        if "queued" not in h or "done" not in h:
            return
        del self.handoffs[key]
        self.event({"type": "transfer", "trainer": w, "seq": seq, "kind": kind,
                    "src": self.cluster.machines[h["src"]].name,
                    "dst": self.cluster.machines[self.T[w]].name, "bytes": h["bytes"],
                    "queued": h["queued"], "done": max(h["done"], h["queued"])})

    # ----- training
    def _on_started(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        w, seq = int(body["trainer"]), int(body["seq"])
        r.doing = f"training step {seq} (epoch {self.items[seq].epoch})"
        self.started[w] = seq + 1
        if self.next_disp[w] == self.started[w] - 1 + self.pf[w]:
            self.ready_since[w] = self.now()  # the window just opened
        for m in {s.machine for s in self.samplers.values() if s.trainer == w}:
            self._dispatch_batches(m)
        for i, f in enumerate(self.opts.faults):
            if i not in self.fired and f.at_step == seq:
                self.fired.add(i)
                self._inject(f)

    def _inject(self, f: Fault) -> None:
        """Fault injection: a real signal to a real process (or every process of a machine)."""
        sig = _SIGNALS[f.signal]
        t = time.monotonic()
        if f.role.startswith("machine:"):
            machine = f.role.split(":", 1)[1]
            pids = self.launcher.mark_down(machine)
            what = f"machine {machine} down: SIGKILL to {len(pids)} processes {pids}"
        else:
            r = self.roles.get(f.role)
            if r is None or r.proc is None:
                raise RunError(f"fault injection: no process {f.role!r} in this plan "
                               f"(known: {', '.join(sorted(self.roles))})")
            pids = [r.proc.pid]
            machine = r.launch.machine
            what = f"SIG{f.signal} to {f.role} (pid {r.proc.pid}) on {machine}, which was " \
                   f"{r.doing}"
            r.proc.signal(sig)
        rec = {"type": "fault", "role": f.role, "signal": f.signal, "at_step": f.at_step,
               "pids": pids, "machine": machine, "time": self.now(), "_t": t}
        self.fault_log.append(rec)
        self.event({k: v for k, v in rec.items() if k != "_t"})
        self.log(f"fault injection at step {f.at_step}: {what}")

    def _on_checkpointed(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        self.ckpts.append((int(body["seq"]), int(body["epoch"]), str(body["path"])))
        self.checkpoints += 1
        self.event({"type": "checkpoint", **body, "time": self.now()})

    def _on_trained(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        w, seq = int(body["trainer"]), int(body["seq"])
        key = (w, seq)
        r.doing = f"finished step {seq}, waiting for the next mini-batch"
        if key in self.trained:
            raise RunError(f"trainer {w} trained batch {seq} twice")
        if body["seeds"] != self.expected.pop(key, None):
            raise RunError(f"trainer {w} trained batch {seq} with other seeds than assigned")
        now = self.now()
        body["time"] = now
        body["attempt"] = self.attempt
        self.trained[key] = body
        self.last_progress = time.monotonic()
        item = self.items[seq]
        self.event({"type": "batch", **body})
        self.policy.on_trained(BatchKey(w, seq), now)
        if self.learn and item.phase == 0:
            edges = self.sampled_info.get(key, {}).get("edges", 0)
            a = 0.3
            ctx = self.policy.ctx
            if edges:
                self.per_edge[w] = (1 - a) * self.per_edge[w] + a * body["train_s"] / edges \
                    if self.per_edge[w] else body["train_s"] / edges
            ctx.train_s[w] = (1 - a) * ctx.train_s[w] + a * body["train_s"] \
                if ctx.train_s[w] else body["train_s"]
            ctx.fetch_s[w] = (1 - a) * ctx.fetch_s[w] + a * body["fetch_s"] \
                if ctx.fetch_s[w] else body["fetch_s"]
            ctx.sample_s[w] = (1 - a) * ctx.sample_s[w] + a * body["sample_s"] \
                if ctx.sample_s[w] else body["sample_s"]
        self.sampled_info.pop(key, None)
        for k in [k for k in self.ranked if k[1] == w and k[2] == seq]:
            del self.ranked[k]
        for kind in ("block", "relay"):  # a same-machine BLOCK's receipt (--trace)
            self.handoffs.pop((w, seq, kind), None)
        self.barriers[seq] += 1
        if self.barriers[seq] == self.W:
            self.barrier_at[seq] = now
            self.last_barrier = max(self.last_barrier, seq)
            self.policy.on_barrier(seq, now)
            self._after_barrier(item, now)
            if self.catchup is not None and seq >= self.catchup["until"]:
                self._caught_up(now)

    def _after_barrier(self, item: Item, now: float) -> None:
        K = self.schedule.K
        if item.phase == 0:
            self.progress("batch", epoch=item.epoch, done=item.index + 1, total=K,
                          seeds=sum(self.trained[(w, item.seq)]["n"] for w in range(self.W)))
        last = item.seq + 1 == len(self.items) or self.items[item.seq + 1].epoch != item.epoch \
            or (self.items[item.seq + 1].phase == 2 and item.phase != 2)
        if not last:
            return
        if item.phase == 2:
            correct, total = self._accuracy(2, item.epoch)
            self.test_accuracy = correct / total if total else float("nan")
            self.event({"type": "test", "accuracy": self.test_accuracy, "nodes": total,
                        "time": now})
            return
        self._epoch_record(item.epoch, now)

    def _accuracy(self, phase: int, epoch: int) -> tuple[int, int]:
        recs = [b for (w, s), b in self.trained.items()
                if self.items[s].phase == phase and self.items[s].epoch == epoch]
        return sum(b["correct"] for b in recs), sum(b["n"] for b in recs)

    def _epoch_record(self, e: int, now: float) -> None:
        train = [it for it in self.items if it.epoch == e and it.phase == 0]
        first, lastk = train[0].seq, train[-1].seq
        begin = self.t_train if first == 0 else self.barrier_at[first - 1]
        end = self.barrier_at[lastk]
        recs = [self.trained[(w, it.seq)] for it in train for w in range(self.W)]
        seeds = sum(b["n"] for b in recs)
        stages = {str(w): {s: float(np.mean([self.trained[(w, it.seq)][s] for it in train]))
                           for s in STAGES} for w in range(self.W)}
        assigned = np.concatenate([self.schedule.batch(w, it)[0] for it in train
                                   for w in range(self.W)])
        correct, total = self._accuracy(1, e)
        rec = {"type": "epoch", "epoch": e, "epoch_time_s": end - begin,
               "train_loss": float(np.mean([b["loss"] for b in recs])),
               "val_accuracy": correct / total if total else None,
               "throughput_seeds_s": seeds / max(end - begin, 1e-9),
               "batches": len(recs), "seeds": seeds,
               "unique_seeds": int(len(np.unique(assigned))),
               "train_nodes": int(sum(len(n["train"][0]) for n in self.schedule.nodes)),
               "recovered": any(rc["epoch"] == e for rc in self.recoveries),
               "attempt": self.attempt,
               "stages": stages, "time": now}
        self.epochs.append(rec)
        self.event(rec)
        self.progress("epoch_end", record=rec)
        if e + 1 < self.job.epochs:
            self.progress("epoch_start", epoch=e + 1, total=self.schedule.K,
                          epochs=self.job.epochs)

    def _on_done(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        self.done_trainers.add(int(body["trainer"]))

    # ------------------------------------------------------------------ recovery
    def _recover(self, f: RoleFailure) -> None:
        """Re-plan if a machine is lost, restart the affected roles from the last checkpoint
        (see the module docstring); raises RunError when recovery is off or impossible."""
        o = self.opts
        self.training = False
        if self.catchup is not None:  # a failure during the replay of the previous one
            self._caught_up(self.now(), interrupted=True)
        fault = self.fault_log[-1] if self.fault_log else None
        detect_s = f.detected - fault["_t"] if fault and not fault.get("detected") else None
        if fault is not None:
            fault["detected"] = True
        self.log(f"FAILURE detected: {f.describe()}"
                 + (f"; {detect_s:.3f} s after the fault was injected"
                    if detect_s is not None else "")
                 + "".join(f"; then {c.splitlines()[0]}" for c in f.collateral))
        if not o.recover:
            raise self._fatal(f, "(recovery is off)")
        if self.attempt >= o.max_recoveries:
            raise self._fatal(f, f"(gave up after {o.max_recoveries} recoveries)")
        self.attempt += 1
        rec: dict[str, Any] = {
            "type": "recovery", "attempt": self.attempt, "role": f.name, "machine": f.machine,
            "pid": f.pid, "how": f.how, "doing": f.doing, "last_heard_s": f.last_heard_s,
            "collateral": [c.splitlines()[0] for c in f.collateral], "detect_s": detect_s,
            "detected_at": f.detected - self.t0, "epoch": self.items[max(
                0, min(self.last_barrier + 1, len(self.items) - 1))].epoch}
        # 1. is the machine still there?
        machine_ok = self.launcher.reachable(f.machine)
        # 2. stop every non-store role, and every store when the machine set changes
        keep = {n for n, r in self.roles.items() if r.launch.role == "store" and machine_ok
                and r.proc is not None and r.proc.poll() is None and n != f.name
                and r.state not in ("error", "exited")}
        stop = [r for n, r in self.roles.items() if n not in keep]
        self.launcher.stop([r.proc for r in stop if r.proc is not None], grace=1.0)
        for r in stop:
            r.state = "stopped"
        stopped = sorted(r.launch.name for r in stop)
        # 3. re-plan
        old_plan, old_cluster = self.plan, self.cluster
        if not machine_ok:
            if o.replan == "never":
                raise self._fatal(f, f"and machine {f.machine} is unreachable (replan: never)")
            try:
                cluster = self.cluster.without(f.machine)
            except SpecError as exc:
                raise self._fatal(f, f"and machine {f.machine} is gone; cannot move its "
                                     f"partitions: {exc}") from None
            plan = self._replan(cluster, f)
            keep = set()
            why = f"machine {f.machine} is unreachable: re-planned on the cluster without it"
        elif o.replan == "always":
            cluster, plan = self.cluster, self._replan(self.cluster, f)
            why = "re-planned on the same cluster (replan: always)"
        else:
            cluster, plan = self.cluster, self.plan
            why = f"machine {f.machine} is alive: only a process died, same plan, restarted " \
                  "in place"
        moved = {p: (old_cluster.machines[old_cluster.store_of(p)].name,
                     cluster.machines[cluster.store_of(p)].name)
                 for p in range(cluster.num_parts)
                 if old_cluster.machines[old_cluster.store_of(p)].name
                 != cluster.machines[cluster.store_of(p)].name}
        diff = plan_dict_diff(old_plan, plan)
        self.log(f"recovery {self.attempt}: {why}"
                 + ("; partitions moved: " + ", ".join(f"{p} {a}->{b}" for p, (a, b)
                                                        in moved.items()) if moved else "")
                 + (f"; plan changes: {'; '.join(diff)}" if diff else "; plan unchanged"))
        # 4. where to resume from: the newest checkpoint whose barrier we saw (so every
        # trainer's record of every step before it is here) and whose file is intact
        ckpt = max((c for c in self.ckpts if c[0] <= self.last_barrier and Path(c[2]).is_file()),
                   default=None)
        start = ckpt[0] + 1 if ckpt else 0
        replay = [s for s in range(start, self.last_barrier + 1) if self.items[s].phase == 0]
        until = self.last_barrier
        self.ckpts = [c for c in self.ckpts if ckpt and c[0] <= ckpt[0]]
        self.last_barrier = start - 1
        self.resume = {"path": ckpt[2], "seq": ckpt[0]} if ckpt else None
        self.log(f"recovery {self.attempt}: rolling back to "
                 + (f"the checkpoint of step {ckpt[0]} (epoch {ckpt[1]})"
                    if ckpt else "the start (no checkpoint yet)")
                 + f"; every trainer resumes at step {start}; replaying completed training "
                   f"steps {_span(replay)} ({len(replay)} steps, each from the model state it "
                   "first saw)")
        for tmp in (self.run_dir / "checkpoints").glob(".*.tmp-*"):
            tmp.unlink(missing_ok=True)  # what a killed trainer was writing
        # 5. the new roles
        self._bind(cluster, plan)
        self.roles = {n: r for n, r in self.roles.items() if n in keep}
        for store in keep:  # their queued transfers were for clients that are gone
            self.send(store, ctrl("reset", attempt=self.attempt))
        names = [self._add_role(role, rid, m) for role, rid, m in self._role_specs()
                 if f"{role}:{rid}" not in keep]
        if not machine_ok or moved:
            self.splits = {}  # stores announce their partitions again
        self.cfg = self._config(self.resume)
        self._launch(names)
        rec.update(stopped=stopped, restarted=sorted(names), kept=sorted(keep),
                   replanned=bool(diff) or not machine_ok, why=why, plan_changes=diff,
                   moved_partitions={str(p): list(v) for p, v in moved.items()},
                   checkpoint_step=ckpt[0] if ckpt else None,
                   resume_step=start, replayed_steps=replay)
        self.recoveries.append(rec)
        self._startup(names)
        self._begin_training(start)
        rec["restart_s"] = time.monotonic() - f.detected
        self.log(f"recovery {self.attempt}: {len(names)} processes restarted, training "
                 f"resumed {rec['restart_s']:.2f} s after detection")
        until = max(until, start - 1)
        self.catchup = {"rec": rec, "until": until, "t": time.monotonic()}
        if until < start:
            self._caught_up(self.now())
        self.event({k: v for k, v in rec.items()})

    def _caught_up(self, now: float, interrupted: bool = False) -> None:
        """The run is back where it was when the failure was detected: time lost is known
        (``interrupted``: another failure came first; the replay so far is counted)."""
        c = self.catchup
        assert c is not None
        rec = c["rec"]
        rec["replay_s"] = time.monotonic() - c["t"]
        if interrupted:
            rec["replay_interrupted"] = True
        rec["lost_s"] = (rec["detect_s"] or 0.0) + rec["restart_s"] + rec["replay_s"]
        self.catchup = None
        self.event({"type": "caught_up", "attempt": rec["attempt"], "replay_s": rec["replay_s"],
                    "lost_s": rec["lost_s"], "time": now})
        self.log(f"recovery {rec['attempt']}: caught up with step {c['until']} after "
                 f"{rec['replay_s']:.2f} s of replay; time lost to this failure "
                 f"{rec['lost_s']:.2f} s (detection "
                 + (f"{rec['detect_s']:.2f} s + " if rec["detect_s"] is not None else "? + ")
                 + f"restart {rec['restart_s']:.2f} s + replay {rec['replay_s']:.2f} s)")

    def _replan(self, cluster: ClusterSpec, f: RoleFailure) -> Plan:
        """A placement on ``cluster`` by the placer; seeds stay with their trainers."""
        from gnnsched.placement import PLACERS, get_placer

        o = self.opts
        get_placer("greedy")  # importing registers every placer
        name = o.replan_placer or (self.plan.placer if self.plan.placer in PLACERS
                                   else "greedy")
        profile = self.profile or self._rough_profile()
        t0 = time.monotonic()
        try:
            plan = get_placer(name).place(cluster, self.job, profile, seed=self.job.seed,
                                          budget=o.replan_budget)
            plan = self._pin_seeds(plan)
            plan.validate(cluster, self.job, f"re-plan by {name}")
        except (SpecError, ValueError, KeyError) as exc:
            raise self._fatal(f, f"and re-planning on {len(cluster.machines)} machines "
                                 f"failed: {exc}") from None
        self.log(f"re-planned with placer {name!r} in {time.monotonic() - t0:.2f} s")
        return plan

    def _rough_profile(self) -> Any:
        """Without a cost profile, a synthetic one shaped by the real partitions: a re-plan
        only has to place the lost tasks sensibly, now, not optimally."""
        from gnnsched.profile import synthetic_profile

        counts = part_counts(self.pset.meta)
        return synthetic_profile(
            self.pset.num_parts, batch_size=self.job.batch_size, fanouts=self.job.fanouts,
            seeds_per_part=max(1, int(np.mean([c["train"] for c in counts]))),
            feature_dim=self.pset.feature_dim, hidden=self.job.hidden,
            num_classes=self.pset.num_classes, seed=self.job.seed)

    def _pin_seeds(self, plan: Plan) -> Plan:
        """Trainer ``w`` keeps the partitions whose seeds it owns (its mini-batches are a
        function of them): the new plan's trainer slots are matched to the old seed groups,
        same groups first."""
        slots = list(plan.trainers)
        out: list[TrainerPlan | None] = [None] * self.W
        for w, parts in enumerate(self.trainer_parts):
            for t in slots:
                if tuple(sorted(t.parts)) == tuple(sorted(parts)):
                    out[w] = replace(t, id=w, parts=parts)
                    slots.remove(t)
                    break
        for w in range(self.W):
            if out[w] is None:
                out[w] = replace(slots.pop(0), id=w, parts=self.trainer_parts[w])
        return replace(plan, trainers=tuple(t for t in out if t is not None),
                       notes=(*plan.notes, "re-planned by the runtime after a failure"))

    # ------------------------------------------------------------------ shutdown
    def _stop_roles(self, grace: float) -> None:
        """Stop roles group by group (trainers, samplers + relays, stores), draining their
        stats; a group gets ``grace`` seconds before the next is asked."""
        for group in ROLE_ORDER:
            members = [r for r in self.roles.values() if r.launch.role in group
                       and r.proc is not None and r.proc.poll() is None]
            for r in members:
                try:
                    self.chan.send(ctrl("stop"), r.launch.ident.encode())
                except zmq.ZMQError:
                    pass
            end = time.monotonic() + grace
            while time.monotonic() < end and any(r.proc.poll() is None for r in members
                                                 if r.proc is not None):
                if self.chan.sock.poll(50, zmq.POLLIN):
                    self._drain_stats()
            self._drain_stats()

    def _drain_stats(self) -> None:
        while True:
            try:
                got = self.chan.recv_now()
            except MessageError:
                continue
            if got is None:
                return
            ident, msg = got
            name, _, gen = (ident or b"?").decode(errors="replace").rpartition("/")
            r = self.roles.get(name)
            if msg.kind == Kind.CTRL and r is not None and gen == str(r.launch.gen):
                try:
                    body = ctrl_body(msg, name)
                except MessageError:
                    continue
                if body.get("op") == "stats":
                    r.stats = body
                    r.state = "done"

    def _finish(self) -> RunResult:
        self.training = False
        self._stop_roles(self.opts.stop_grace_s)
        leftover = self.launcher.stop_all(grace=2.0)
        if leftover:
            self.log(f"had to terminate: {', '.join(leftover)}")
        if self.catchup is not None:  # ended before catching up (failure in the last steps)
            self._caught_up(self.now())
        wall = self.now()
        by_proc = {n: int((r.stats or {}).get("bytes_sent", 0)) for n, r in self.roles.items()}
        by_proc["coordinator"] = STATS.total
        network = sum(int((r.stats or {}).get("network_bytes", 0)) for r in self.roles.values())
        allreduce = sum(int((r.stats or {}).get("allreduce_bytes", 0))
                        for r in self.roles.values())
        times = [e["epoch_time_s"] for e in self.epochs]
        median = statistics.median(times[1:]) if len(times) > 1 else (times[0] if times else 0.0)
        steady = self.epochs[1:] or self.epochs  # the first epoch includes warm-up
        stages = {str(w): {s: float(np.mean([e["stages"][str(w)][s] for e in steady]))
                           for s in STAGES} for w in range(self.W)}
        result = RunResult(
            run_dir=str(self.run_dir), policy=self.policy.name, placer=self.plan.placer,
            launcher=self.launcher.name, epochs=self.epochs, epoch_time_s=float(median),
            val_accuracy=[e["val_accuracy"] for e in self.epochs if e["val_accuracy"] is not None],
            test_accuracy=float(getattr(self, "test_accuracy", float("nan"))),
            bytes_sent=int(sum(by_proc.values())), network_bytes=network,
            allreduce_bytes=allreduce, bytes_by_process=by_proc, stages=stages,
            startup_s=self.startup_s, wall_s=wall, iterations_per_epoch=self.schedule.K,
            processes={n: {"machine": r.launch.machine, "pid": r.info.get("pid"),
                           "generation": r.launch.gen,
                           **{k: v for k, v in (r.stats or {}).items() if k != "op"}}
                       for n, r in self.roles.items()},
            recoveries=[{k: v for k, v in rc.items() if k != "type"} for rc in self.recoveries],
            checkpoints=self.checkpoints)
        cpu = {n: round(float(r.stats["cpu_s"]), 3) for n, r in self.roles.items()
               if r.stats and "cpu_s" in r.stats}
        cpu["coordinator"] = round(time.process_time() - self.cpu0, 3)  # this process, all threads
        self.event({"type": "run", **{k: v for k, v in result.to_dict().items()
                                      if k not in ("epochs", "processes")},
                    "cpu_s_by_process": cpu,
                    "stale_messages": self.stale, "rejected_messages": self.rejected})
        return result

    def _abort(self) -> None:
        """Failure or Ctrl-C: stop roles quickly, then make sure every process is gone."""
        self.training = False
        try:
            self._stop_roles(min(self.opts.stop_grace_s, 2.0))
        except Exception:
            pass
        self.launcher.stop_all(grace=2.0)


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]}" if len(steps) > 1 else str(steps[0])


__all__ = ["Coordinator", "Fault", "Item", "RoleFailure", "RunError", "RunResult",
           "RuntimeOptions", "Schedule"]
