"""Coordinator: starts and watches the run, drives the online policy live, collects metrics.

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
each seed is trained exactly once per epoch and nobody waits at epoch end. Validation batches
follow each ``eval_every``-th epoch and test batches the last one, equally many per trainer.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from gnnsched.plan import Plan
from gnnsched.policy import BatchInfo, BatchKey, Policy, PolicyContext, Transfer, get_policy
from gnnsched.runtime.launcher import Launcher, Process, RoleLaunch
from gnnsched.runtime.role import PHASES, seed_of, seeds_hash
from gnnsched.runtime.store import CHUNK_BYTES, PEER_WINDOW_BYTES, WINDOW_BYTES
from gnnsched.runtime.transport import (
    CONTROL,
    STATS,
    Channel,
    Kind,
    Message,
    MessageError,
    bind_random,
    ctrl,
    ctrl_body,
    make_socket,
)
from gnnsched.spec import ClusterSpec, JobSpec

STAGES = ("sample_s", "fetch_s", "wait_s", "train_s", "allreduce_s")


class RunError(RuntimeError):
    """The run could not finish; the message names the role, its machine and what happened."""


@dataclass
class RuntimeOptions:
    """Knobs of the runtime (not of the model): transport, timeouts, evaluation."""

    chunk_bytes: int | None = None  # None: 256 KiB on loopback, ~2 ms of the NIC when shaped
    window_bytes: int | None = None  # None: 4 chunks
    peer_window_bytes: int | None = None  # None: 2 chunks
    grad_first: bool = True  # hold store traffic into a machine while it all-reduces
    request_timeout: float = 120.0  # a store / trainer answer we wait for
    start_timeout: float = 300.0  # all roles up and ready
    orphan_timeout: float = 30.0  # a role exits when the coordinator is silent this long
    ping_s: float = 1.0
    threads: int = 1  # intra-op threads per role process
    emulate_speed: bool | None = None  # None: stretch compute to GPU speed when no CUDA
    eval_batch_size: int = 256
    stop_grace_s: float = 10.0
    verify_partitions: bool = False


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------
# The coordinator


@dataclass
class _Role:
    launch: RoleLaunch
    proc: Process | None = None
    state: str = "launched"  # launched | hello | ready | running | done | exited
    info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None


@dataclass
class _Sampler:
    name: str
    trainer: int
    machine: int
    busy: bool = False


Progress = Callable[..., None]


class Coordinator:
    """Runs one training job on a launcher (see the module docstring)."""

    def __init__(self, cluster: ClusterSpec, job: JobSpec, plan: Plan, partitions: str,
                 launcher: Launcher, run_dir: str | Path, policy: str | Policy = "gnnsched",
                 options: RuntimeOptions | None = None, profile: Any = None,
                 progress: Progress | None = None) -> None:
        from gnnsched.datasets import open_partitions

        self.cluster, self.job, self.plan = cluster, job, plan
        self.launcher, self.opts = launcher, options or RuntimeOptions()
        self.policy = get_policy(policy)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.pset = open_partitions(partitions, verify=self.opts.verify_partitions)
        self.partitions = str(self.pset.root.resolve())
        self.profile = profile
        self.progress = progress or (lambda *a, **k: None)
        self.W = len(plan.trainers)
        self.names = [m.name for m in cluster.machines]
        idx = cluster.machine_index
        self.T = [idx(t.machine) for t in plan.trainers]
        self.F = [idx(t.fetch_at) for t in plan.trainers]
        self.schedule = Schedule(job, [list(t.parts) for t in plan.trainers],
                                 part_counts(self.pset.meta), self.opts.eval_batch_size)
        self.items = self.schedule.items
        self.metrics = open(self.run_dir / "metrics.jsonl", "w")
        self.roles: dict[str, _Role] = {}
        self.samplers: dict[str, _Sampler] = {}
        self.splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}

    # ------------------------------------------------------------------ set-up
    def _plan_roles(self, endpoint: str) -> None:
        o = self.opts

        def add(role: str, rid: str, machine: str) -> None:
            launch = RoleLaunch(role, rid, machine, endpoint,
                                self.run_dir / "logs" / f"{role}-{rid}.log", o.threads,
                                o.orphan_timeout, o.start_timeout)
            self.roles[launch.name] = _Role(launch)

        for m in self.cluster.machines:
            if m.partitions:
                add("store", m.name, m.name)
        for w, t in enumerate(self.plan.trainers):
            add("trainer", str(w), t.machine)
        sid = 0
        for w, t in enumerate(self.plan.trainers):
            for mname, count in t.samplers:
                for _ in range(count):
                    add("sampler", str(sid), mname)
                    self.samplers[f"sampler:{sid}"] = _Sampler(
                        f"sampler:{sid}", w, self.cluster.machine_index(mname))
                    sid += 1
        for mname in sorted({t.fetch_at for t in self.plan.trainers if t.fetch_at != t.machine}):
            add("fetcher", mname, mname)

    def _sizes(self) -> dict[str, int]:
        """Chunk and window sizes. On real or shaped links (netns, ssh) a chunk is ~2 ms of
        the slowest NIC (16..256 KiB), so priority decisions and gradient holds take effect
        within a few ms; on loopback (local) large chunks keep the CPU cost low."""
        o = self.opts
        if o.chunk_bytes:
            chunk = int(o.chunk_bytes)
        elif self.launcher.name == "local":
            chunk = CHUNK_BYTES
        else:
            slowest = min(min(m.egress, m.ingress) for m in self.cluster.machines)
            chunk = int(min(CHUNK_BYTES, max(16 << 10, slowest * 0.002)))
        return {"chunk_bytes": chunk,
                "window_bytes": int(o.window_bytes or (WINDOW_BYTES if chunk == CHUNK_BYTES
                                                       else 4 * chunk)),
                "peer_window_bytes": int(o.peer_window_bytes or (
                    PEER_WINDOW_BYTES if chunk == CHUNK_BYTES else 2 * chunk))}

    def _config(self) -> dict[str, Any]:
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
        try:
            self.chan.send(msg, name.encode())
        except zmq.ZMQError as exc:
            if self.roles[name].state not in ("done", "exited"):
                raise RunError(f"cannot reach {name} on {self.roles[name].launch.machine}: "
                               f"{exc}") from None

    def event(self, record: dict[str, Any]) -> None:
        self.metrics.write(json.dumps(record, separators=(",", ":")) + "\n")

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ the run
    def run(self) -> RunResult:
        self.t0 = time.monotonic()
        ctx = zmq.Context(io_threads=1)
        sock = make_socket(ctx, zmq.ROUTER, CONTROL)
        endpoint = bind_random(sock, self.launcher.coordinator_host())
        self.chan = Channel(sock, "coordinator")
        self._plan_roles(endpoint)
        ok = False
        try:
            for r in self.roles.values():
                r.proc = self.launcher.start(r.launch)
            self.progress("log", msg=f"started {len(self.roles)} processes "
                                     f"({self.launcher.name} launcher)")
            self._startup()
            self._train()
            result = self._finish()
            ok = True
            return result
        finally:
            if not ok:
                self._abort()
            self.metrics.close()
            self.chan.close()
            ctx.term()

    def _poll(self, timeout_s: float) -> None:
        """Handle every message that arrives within ``timeout_s``; check processes."""
        if self.chan.sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            for _ in range(1000):
                got = self.chan.recv_now()
                if got is None:
                    break
                ident, msg = got
                self._handle(ident.decode(errors="replace") if ident else "?", msg)
        now = time.monotonic()
        if now - self.last_ping >= self.opts.ping_s:
            self.last_ping = now
            for name, r in self.roles.items():
                if r.state in ("hello", "ready", "running"):
                    self.send(name, ctrl("ping"))
        for name, r in self.roles.items():
            code = r.proc.poll() if r.proc else None
            if code is not None and r.state != "exited":
                was = r.state
                r.state = "exited"
                if code != 0 or was != "done":
                    raise RunError(f"{name} on machine {r.launch.machine} (pid {r.proc.pid}) "
                                   f"exited with code {code} while {was}; last log lines "
                                   f"({r.launch.log}):\n{r.proc.log_tail()}")

    def _startup(self) -> None:
        self.last_ping = time.monotonic()
        self.cfg = self._config()
        deadline = time.monotonic() + self.opts.start_timeout
        while any(r.state != "ready" for r in self.roles.values()) or \
                len(self.splits) < self.pset.num_parts:
            if time.monotonic() > deadline:
                late = [n for n, r in self.roles.items() if r.state != "ready"]
                raise RunError(f"roles not ready within {self.opts.start_timeout:.0f} s: "
                               f"{', '.join(late)}")
            self._poll(0.1)
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
        self.startup_s = self.now()
        self.progress("log", msg=f"all {len(self.roles)} roles ready in {self.startup_s:.1f} s "
                                 f"(all-reduce: {backend})")
        self.policy.reset(self._context())
        self.pf = [max(1, int(self.policy.prefetch(w))) for w in range(self.W)]
        for name, r in self.roles.items():
            r.state = "running"
            self.send(name, start)
        self.t_train = self.now()

    # ------------------------------------------------------------------ training
    def _train(self) -> None:
        W, n = self.W, len(self.items)
        self.cores_free = [m.cpus for m in self.cluster.machines]
        self.next_disp = [0] * W
        self.started = [0] * W
        self.ready_since = [0.0] * W
        self.expected: dict[tuple[int, int], str] = {}
        self.trained: dict[tuple[int, int], dict[str, Any]] = {}
        self.barriers = [0] * n
        self.barrier_at = [math.nan] * n
        self.queues: dict[int, dict[int, Transfer]] = defaultdict(dict)
        self.stores = {self.cluster.machine_index(r.launch.machine): n
                       for n, r in self.roles.items() if r.launch.role == "store"}
        self.ranked: dict[tuple[int, int, int, str], list] = {}
        self.reducing: dict[int, int] = defaultdict(int)
        self.tseq = 0
        self.sampled_info: dict[tuple[int, int], dict[str, Any]] = {}
        self.epochs: list[dict[str, Any]] = []
        self.done_trainers: set[int] = set()
        self.per_edge = [0.0] * W
        self.progress("epoch_start", epoch=0, total=self.schedule.K, epochs=self.job.epochs)
        for m in range(len(self.cluster.machines)):
            self._dispatch(m)
        while len(self.done_trainers) < W:
            self._poll(0.05)

    def _dispatch(self, m: int) -> None:
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
            seeds, labels = self.schedule.batch(w, item)
            self.expected[(w, seq)] = seeds_hash(seeds)
            self._rank(w, seq, "struct", [(st, m, 0.0) for st in self.stores if st != m])
            self.send(s.name, Message(Kind.BATCH, {"trainer": w, "seq": seq,
                                                   "epoch": item.epoch, "phase": item.phase,
                                                   "index": item.index},
                                      {"seeds": seeds, "labels": labels}))

    def _handle(self, name: str, msg: Message) -> None:
        r = self.roles.get(name)
        if r is None:
            raise MessageError(f"coordinator: message from unknown peer {name!r}")
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

    def _on_error(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        raise RunError(f"{name} on machine {r.launch.machine} failed: {body.get('error')}\n"
                       f"{body.get('traceback', '')}")

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
        self._rank(w, seq, "feat", [(m, self.F[w], b) for m, b in info.feat_from
                                    if m != self.F[w]])
        s.busy = False
        self.cores_free[s.machine] += 1
        self._dispatch(s.machine)

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

    def _on_allreduce(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        """Gradients first: while a machine all-reduces iteration k, stores send it nothing
        of later iterations (what any trainer needs for barrier k is never held)."""
        m = self.T[int(body["trainer"])]
        before = self.reducing[m]
        self.reducing[m] += 1 if body["on"] else -1
        if (before == 0) != (self.reducing[m] == 0):
            for store in self.stores.values():
                self.send(store, ctrl("hold", machine=m, seq=int(body["seq"]),
                                      on=bool(body["on"])))

    def _on_fetched(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        pass  # the trainer reports the fetch time with the batch

    # ----- training
    def _on_started(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        w, seq = int(body["trainer"]), int(body["seq"])
        self.started[w] = seq + 1
        if self.next_disp[w] == self.started[w] - 1 + self.pf[w]:
            self.ready_since[w] = self.now()  # the window just opened
        for m in {s.machine for s in self.samplers.values() if s.trainer == w}:
            self._dispatch(m)

    def _on_trained(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        w, seq = int(body["trainer"]), int(body["seq"])
        key = (w, seq)
        if key in self.trained:
            raise RunError(f"trainer {w} trained batch {seq} twice")
        if body["seeds"] != self.expected.pop(key, None):
            raise RunError(f"trainer {w} trained batch {seq} with other seeds than assigned")
        now = self.now()
        body["time"] = now
        self.trained[key] = body
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
        self.barriers[seq] += 1
        if self.barriers[seq] == self.W:
            self.barrier_at[seq] = now
            self.policy.on_barrier(seq, now)
            self._after_barrier(item, now)

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
               "stages": stages, "time": now}
        self.epochs.append(rec)
        self.event(rec)
        self.progress("epoch_end", record=rec)
        if e + 1 < self.job.epochs:
            self.progress("epoch_start", epoch=e + 1, total=self.schedule.K,
                          epochs=self.job.epochs)

    def _on_done(self, name: str, r: _Role, body: dict[str, Any]) -> None:
        self.done_trainers.add(int(body["trainer"]))

    # ------------------------------------------------------------------ shutdown
    def _stop_roles(self, grace: float) -> None:
        """Ask every role to stop and wait (draining stats) until all exited or ``grace``."""
        for name, r in self.roles.items():
            if r.state in ("hello", "ready", "running"):
                try:
                    self.chan.send(ctrl("stop"), name.encode())
                except zmq.ZMQError:
                    pass
        end = time.monotonic() + grace
        while time.monotonic() < end and any(r.proc and r.proc.poll() is None
                                             for r in self.roles.values()):
            if self.chan.sock.poll(50, zmq.POLLIN):
                while (got := self.chan.recv_now()) is not None:
                    ident, msg = got
                    name = ident.decode(errors="replace") if ident else "?"
                    if msg.kind == Kind.CTRL and name in self.roles:
                        body = ctrl_body(msg, name)
                        if body.get("op") == "stats":
                            self.roles[name].stats = body

    def _finish(self) -> RunResult:
        self._stop_roles(self.opts.stop_grace_s)
        leftover = self.launcher.stop_all(grace=2.0)
        if leftover:
            self.progress("log", msg=f"had to terminate: {', '.join(leftover)}")
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
            allreduce_bytes=allreduce, bytes_by_process=by_proc, stages=stages, startup_s=self.startup_s, wall_s=wall,
            iterations_per_epoch=self.schedule.K,
            processes={n: {"machine": r.launch.machine, "pid": r.info.get("pid"),
                           **{k: v for k, v in (r.stats or {}).items() if k != "op"}}
                       for n, r in self.roles.items()})
        self.event({"type": "run", **{k: v for k, v in result.to_dict().items()
                                      if k not in ("epochs", "processes")}})
        return result

    def _abort(self) -> None:
        """Failure or Ctrl-C: stop roles quickly, then make sure every process is gone."""
        try:
            self._stop_roles(min(self.opts.stop_grace_s, 3.0))
        except Exception:
            pass
        self.launcher.stop_all(grace=2.0)


__all__ = ["Coordinator", "Item", "RunError", "RunResult", "RuntimeOptions", "Schedule"]
