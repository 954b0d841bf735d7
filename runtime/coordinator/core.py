"""The coordinator: starts and watches the run, drives the online policy live, collects
metrics, and recovers from dead processes and machines.

It runs in the ``gnnsched train`` process, binds one ROUTER socket, and every role connects a
DEALER to it. Start-up: launch all roles -> ``hello`` -> ``config`` (the run's settings) ->
``ready`` (each role's endpoints; stores also send ``PART_INFO``: their partitions' seeds and
labels) -> ``start`` (everyone's endpoints). Then, event by event, it plays the part the
simulator plays for the same :class:`~gnnsched.policy.Policy` object.

The :class:`Coordinator` keeps the message loop and owns three components, which share one
:class:`~.state.RunState` and talk through the coordinator as their
:class:`~.messenger.Messenger` (none of them imports it). Incoming control ops are dispatched
by name to the part that handles them. Where each part lives (a newcomer reads them in this
order):

* :mod:`.options` -- :class:`RuntimeOptions`, :class:`Fault`, errors, :class:`RunResult`;
* :mod:`.schedule` -- which seeds every trainer trains at every step;
* :mod:`.state` -- :class:`~.state.RunState`: the plan being run (machine indices) and how far
  training got;
* :mod:`.messenger` -- :class:`~.messenger.Messenger`: send a role a message, log, record, the
  clock;
* this module -- :class:`Coordinator`: set-up, the message loop and its dispatch, start-up,
  epochs and barriers, evaluation, the result;
* :mod:`.startup` -- what roles are told at start-up: the ``config`` (NIC chunk and window
  sizes included) and the ``start`` (everyone's endpoints);
* :mod:`.roles` -- :class:`~.roles.RoleTable`: launching, reaching, watching (failure
  detection), fault injection and stopping of the processes;
* :mod:`.driver` -- :class:`~.driver.PolicyDriver`: everything that asks the policy: sampling
  dispatch, NIC order, holds;
* :mod:`.recovery` -- :class:`~.recovery.Recovery`: from a dead role back to training, with
  the coordinator as its :class:`~.recovery.RecoveryHost` for the process work;
* :mod:`.resume` -- ``--resume``: what an interrupted run left;
* :mod:`.advisor` -- the planning side the coordinator is given (reference times, re-plans).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from gnnsched import metrics
from gnnsched.plan import Plan, seed_slices
from gnnsched.policy import Policy, get_policy
from gnnsched.runtime.checkpoints import renumber_epoch_files
from gnnsched.runtime.coordinator.advisor import Advisor
from gnnsched.runtime.coordinator.driver import Handler, PolicyDriver
from gnnsched.runtime.coordinator.options import (
    GREY,
    SIGNALS,
    STAGES,
    RoleFailure,
    RunError,
    RunResult,
    RuntimeOptions,
)
from gnnsched.runtime.coordinator.recovery import Recovery
from gnnsched.runtime.coordinator.resume import Earlier, earlier_run
from gnnsched.runtime.coordinator.roles import RoleState, RoleTable
from gnnsched.runtime.coordinator.schedule import Item, Schedule, eval_ids_of, part_counts
from gnnsched.runtime.coordinator.startup import check_host_memory, role_config, start_message
from gnnsched.runtime.coordinator.state import RunState
from gnnsched.runtime.coordinator.straggler import StragglerWatch
from gnnsched.runtime.launcher import Launcher, LaunchError
from gnnsched.runtime.role import PHASES
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

Progress = Callable[..., None]


class Coordinator:
    """Runs one training job on a launcher (see the module docstring); the
    :class:`~.messenger.Messenger` and :class:`~.recovery.RecoveryHost` of its components.

    ``advisor`` answers what needs the cost model or a placer (:class:`~.advisor.Advisor`;
    ``gnnsched.api.train`` passes :class:`gnnsched.advisor.PlanAdvisor`). Without one the
    policy's expected costs are always learnt from measurements and a failure that needs a
    new plan ends the run."""

    def __init__(self, cluster: ClusterSpec, job: JobSpec, plan: Plan, partitions: str,
                 launcher: Launcher, run_dir: str | Path, policy: str | Policy = "gnnsched",
                 options: RuntimeOptions | None = None, profile: Any = None,
                 progress: Progress | None = None, advisor: Advisor | None = None) -> None:
        from gnnsched.datasets import open_partitions

        self.job = job
        self.launcher, self.opts = launcher, options or RuntimeOptions()
        o = self.opts
        if o.replan not in ("auto", "always", "never"):
            raise SpecError("runtime options", "replan", f"unknown value {o.replan!r}",
                            "auto, always, never")
        for f in o.faults:
            if f.signal in GREY:
                if not f.role.startswith("machine:") or f.seconds <= 0:
                    raise SpecError("runtime options", "faults", f"{f.signal} of {f.role!r} "
                                    f"for {f.seconds:g} s", "machine:NAME and seconds > 0")
            elif f.signal not in SIGNALS:
                raise SpecError("runtime options", "faults", f"unknown signal {f.signal!r}",
                                ", ".join([*SIGNALS, *GREY]))
        self.policy = get_policy(policy)
        self.run_dir = Path(run_dir)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for old in (self.run_dir / "checkpoints").glob("*.pt*"):
            if not o.resume:  # an earlier run's: recovery must only ever see this run's
                old.unlink()
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
        self.profile, self.advisor = profile, advisor
        self.progress = progress or (lambda *a, **k: None)
        self.trainer_parts = [tuple(t.parts) for t in plan.trainers]
        self.trainer_shares = [tuple(t.shares) for t in plan.trainers]
        counts = part_counts(self.pset.meta)
        slices = seed_slices(plan.trainers)
        self.schedule = Schedule(job, [list(p) for p in self.trainer_parts], counts,
                                 o.eval_batch_size, [slices[t.id] for t in plan.trainers],
                                 eval_ids_of(job, self.pset))
        self.state = RunState(cluster, plan, self.schedule.items, self._dilation(cluster))
        self.record_seq = self.schedule.record_seqs()
        self.metric = metrics.resolve(job.metric, self.pset.num_classes, job.source)
        # evaluated nodes per (trainer, step): labels, predictions, positive-class probability
        self.outputs: dict[tuple[int, int], tuple[list, list, list | None]] = {}
        self.imbalance_checked = False
        self.stragglers = StragglerWatch()
        self.recovery = Recovery(
            self, self.state, opts=o, job=job, launcher=launcher, run_dir=self.run_dir,
            trainer_parts=self.trainer_parts, trainer_shares=self.trainer_shares,
            advisor=advisor, profile=profile, part_counts=counts,
            feature_dim=self.pset.feature_dim, num_classes=self.pset.num_classes)
        self.table = RoleTable(self.state, self, opts=o, launcher=launcher, run_dir=self.run_dir,
                               keys=self.keys, recovery=self.recovery)
        self.driver = PolicyDriver(self.state, self, self.table, policy=self.policy, opts=o,
                                   job=job, schedule=self.schedule, advisor=advisor,
                                   profile=profile)
        self.handlers: dict[str, Handler] = {**self._handlers(), **self.driver.handlers()}
        self.metrics = open(self.run_dir / "metrics.jsonl", "a" if o.resume else "w")
        self.logfile = open(self.run_dir / "logs" / "coordinator.log", "a")
        self.splits: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.resume: dict[str, Any] | None = None  # the checkpoint roles start from
        self.stale = 0  # messages from replaced incarnations, dropped
        self.rejected = 0  # malformed messages or unknown peers, dropped
        self.epochs: list[dict[str, Any]] = []
        self.barrier_at = [math.nan] * len(self.state.items)
        # before any process starts: every machine holds its roles' memory floor
        check_host_memory(cluster, plan, self.table.role_specs(), self.pset)
        self.last_poll: float | None = None

    def _dilation(self, cluster: ClusterSpec) -> float:
        """Give the launcher ``cluster``; the scale model's D it runs it at (1.0: none)."""
        self.launcher.cluster = cluster
        return float(getattr(self.launcher, "dilation", 1.0) or 1.0)

    def _bind(self, cluster: ClusterSpec, plan: Plan) -> None:
        """Adopt a (new) cluster and plan: machine indices and where trainers run."""
        self.state.bind(cluster, plan, self._dilation(cluster))

    def log(self, msg: str) -> None:
        """A line in ``logs/coordinator.log`` and on the user's progress output."""
        stamp = time.strftime("%H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
        self.logfile.write(f"[{stamp} coordinator] {msg}\n")
        self.logfile.flush()
        self.progress("log", msg=msg)

    # ------------------------------------------------------------------ the messenger
    def send(self, name: str, msg: Message) -> None:
        """Send role ``name`` a message (through the role table, which knows its address)."""
        self.table.send(name, msg)

    def event(self, record: dict[str, Any]) -> None:
        """One record in ``metrics.jsonl``."""
        self.metrics.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self.metrics.flush()

    def now(self) -> float:
        """Seconds since the run started (the clock of every record)."""
        return time.monotonic() - self.state.t0

    # ------------------------------------------------------------------ the run
    def run(self) -> RunResult:
        self.state.t0, self.cpu0 = time.monotonic(), time.process_time()
        ctx = zmq.Context(io_threads=1)
        self.auth = start_authenticator(ctx, self.keys) if self.keys else None
        sock = make_socket(ctx, zmq.ROUTER, CONTROL, curve=self.keys, server=True)
        self.chan = self.table.chan = Channel(sock, "coordinator")
        ok = False
        try:
            earlier = earlier_run(self.run_dir, self.state.W, self.record_seq) \
                if self.opts.resume else None
            if earlier:  # the trainers load it before their first step
                for said in earlier.skipped:
                    self.log(f"--resume: {said}")
                self.resume = {"path": earlier.path, "seq": earlier.seq}
                renamed = renumber_epoch_files(self.run_dir / "checkpoints")
                if renamed:  # an older run's 0-based names: the log's numbers from now on
                    self.log(f"renamed {len(renamed)} epoch checkpoints to the log's epoch "
                             f"numbers ({renamed[-1][0]} -> {renamed[-1][1]}, ...)")
            host = self.launcher.coordinator_host()
            try:
                self.endpoint = bind_port(sock, host, self.opts.coordinator_port) \
                    if self.opts.coordinator_port else bind_random(sock, host)
            except TransportError as exc:
                raise RunError(f"coordinator: {exc}") from None
            self.table.endpoint = self.endpoint
            try:
                bind = getattr(self.launcher, "bind_run", None)
                if bind is not None:  # what the preflight checks on every host (ssh)
                    bind(partitions=self.partitions, run_dir=str(self.run_dir.resolve()),
                         endpoint=self.endpoint)
                self.launcher.preflight(sorted({m for _, _, m in self.table.role_specs()}))
            except LaunchError as exc:
                raise RunError(str(exc)) from None
            names = [self.table.add_role(*spec) for spec in self.table.role_specs()]
            self.table.launch(names)
            self.log(f"started {len(names)} processes ({self.launcher.name} launcher"
                     + (", CURVE on" if self.keys else "") + f"; coordinator {self.endpoint})")
            try:
                self._startup(names, first=True)
            except RoleFailure as f:  # before training: nothing to recover, say why
                raise f.fatal("while starting up") from None
            self._begin_training(self._restore(earlier) if earlier else 0)
            failure: RoleFailure | None = None
            while True:
                try:
                    if failure is not None:
                        self.state.training = False
                        self.recovery.recover(failure)
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
                self.table.abort()
            self.metrics.close()
            self.logfile.close()
            self.chan.close()
            if self.auth is not None:
                self.auth.stop()
            ctx.destroy(linger=0)

    def _poll(self, timeout_s: float) -> None:
        """Handle every message that arrives within ``timeout_s``; check processes."""
        now = time.monotonic()
        gap = now - (self.last_poll if self.last_poll is not None else now)
        if gap > 1.0:  # we were busy (re-planning...): silence meanwhile is not the roles'
            for r in self.table.roles.values():
                if r.last_heard is not None:
                    r.last_heard += gap
        self.table.check()
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
        self.table.check()

    def _dispatch(self, ident: str, msg: Message) -> None:
        hb = ident.endswith("/hb")
        base = ident[:-3] if hb else ident
        name, _, gen = base.rpartition("/")
        r = self.table.roles.get(name)
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

    def _config(self, resume: dict[str, Any] | None) -> dict[str, Any]:
        """The ``config`` every role gets after ``hello`` (:func:`~.startup.role_config`)."""
        return role_config(self.state, opts=self.opts, job=self.job, policy=self.policy,
                           launcher=self.launcher, run_dir=self.run_dir, pset=self.pset,
                           resume=resume)

    def _startup(self, names: list[str], first: bool = False) -> None:
        """Wait until ``names`` are ready (and every partition's seeds are known), then send
        them everyone's endpoints."""
        roles = self.table.roles
        self.last_poll = time.monotonic()
        self.cfg = self._config(self.resume)
        deadline = time.monotonic() + self.opts.start_timeout
        while any(roles[n].state != "ready" for n in names) or \
                len(self.splits) < self.pset.num_parts:
            if time.monotonic() > deadline:
                late = [f"{n} ({roles[n].state}: {roles[n].doing})" for n in names
                        if roles[n].state != "ready"]
                raise RunError(f"roles not ready within {self.opts.start_timeout:.0f} s: "
                               f"{', '.join(late)}")
            self._poll(0.1)
        if first:
            self.schedule.set_nodes(self.splits)
            # the nodes this run tests, the same in every plan of the job (schedule doc)
            np.save(self.run_dir / "test-nodes.npy", np.sort(np.concatenate(
                [n["test"][0] for n in self.schedule.nodes])))
        start, backend = start_message(self.state, roles, self.launcher)
        if first:
            self.startup_s = self.now()
            self.log(f"all {len(names)} roles ready in {self.startup_s:.1f} s "
                     f"(all-reduce: {backend})")
        for n in names:
            roles[n].state = "running"
            self.send(n, start)

    # ------------------------------------------------------------------ training
    def _begin_training(self, start: int) -> None:
        """(Re)start the training state at step ``start`` (0, or after a checkpoint)."""
        st = self.state
        W, n = st.W, len(st.items)
        now = self.now()
        if start == 0:
            self.t_train = now
            self.event({"type": "training", "dilation": st.dilation, "time": now})
        st.trained = {k: v for k, v in st.trained.items() if k[1] < start}
        self.outputs = {k: v for k, v in self.outputs.items() if k[1] < start}
        self.barriers = [W if s < start else 0 for s in range(n)]
        self.epochs = [e for e in self.epochs if self.record_seq[e["epoch"]] < start]
        self.test_accuracy = float("nan")  # set again after the test steps
        self.test_metric = float("nan")
        self.test_majority: float | None = None
        self.done_trainers: set[int] = set()
        self.driver.reset(start, now, self.cfg)
        st.training = True
        self.last_progress = time.monotonic()
        if start < n:
            it = st.items[start]
            self.progress("epoch_start", epoch=it.epoch, total=self.schedule.K,
                          epochs=self.job.epochs)
        for m in range(len(st.cluster.machines)):
            self.driver.dispatch_batches(m)

    def _restore(self, e: Earlier) -> int:
        """``--resume``: the state an interrupted run had reached at checkpoint ``e``, the
        clock continued from that step's barrier; returns the step to train from."""
        self.state.trained = dict(e.trained)
        self.epochs = list(e.epochs)
        for (_, s), b in e.trained.items():
            self.barrier_at[s] = max(b["time"], self.barrier_at[s]) \
                if self.barrier_at[s] == self.barrier_at[s] else b["time"]
        self.state.last_barrier = e.seq
        self.recovery.checkpoints = list(e.checkpoints)
        startup = self.now()
        # records read as one run; the pause is not counted
        self.state.t0 = time.monotonic() - e.time
        self.t_train = e.t_train
        self.log(f"resumed from the checkpoint of step {e.seq} (epoch {e.epoch + 1}, {e.path}); "
                 f"{len(self.epochs)} epochs done before; training goes on at step {e.seq + 1}"
                 f" after {startup:.1f} s of start-up")
        self.event({"type": "resume", "checkpoint_step": e.seq, "epoch": e.epoch,
                    "path": e.path, "startup_s": startup, "time": self.now(),
                    "skipped": list(e.skipped)})  # corrupt checkpoints passed over, and why
        return e.seq + 1

    # ------------------------------------------------------------------ the recovery host
    def stop_for_recovery(self, failed: str, machine_ok: bool) -> tuple[set[str], list[str]]:
        """Stop all roles but the live stores worth keeping: (kept, stopped)."""
        return self.table.stop_for_recovery(failed, machine_ok)

    def relaunch(self, cluster: ClusterSpec, plan: Plan, keep: set[str], attempt: int,
                 resume: dict[str, Any] | None, stores_moved: bool) -> list[str]:
        """Adopt ``cluster`` and ``plan``, tell the kept stores to drop their queues, and
        start every other role the plan needs (generation ``attempt``). Returns their names."""
        self._bind(cluster, plan)
        check_host_memory(cluster, plan, self.table.role_specs(), self.pset)
        self.table.keep_only(keep)
        for store in keep:  # their queued transfers were for clients that are gone
            self.send(store, ctrl("reset", attempt=attempt))
        names = [self.table.add_role(role, rid, m) for role, rid, m in self.table.role_specs()
                 if f"{role}:{rid}" not in keep]
        if stores_moved:
            self.splits = {}  # stores announce their partitions again
        self.resume = resume
        self.cfg = self._config(resume)
        self.table.launch(names)
        return names

    def resume_training(self, names: list[str], start: int) -> None:
        """After a recovery: wait for the restarted ``names``, then train from ``start``."""
        self._startup(names)
        self._begin_training(start)

    # ------------------------------------------------------------------ handling messages
    def _train(self) -> None:
        """Handle messages until every trainer is done (a role's death raises out of it)."""
        limit = self.opts.progress_timeout or (2 * self.opts.request_timeout
                                               + self.opts.dead_after_s)
        while len(self.done_trainers) < self.state.W:
            self._poll(0.05)
            if time.monotonic() - self.last_progress > limit:
                doing = "; ".join(f"{n}: {r.doing}" for n, r in self.table.roles.items())
                raise RunError(f"no training progress for {limit:.0f} s although every "
                               f"process is alive; what each was doing: {doing}")

    def _handle(self, name: str, r: RoleState, msg: Message) -> None:
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
        handler = self.handlers.get(op)
        if handler is None:
            raise MessageError(f"coordinator: unknown op {op!r} from {name}")
        handler(name, r, body)

    def _handlers(self) -> dict[str, Handler]:
        """The control ops the core handles itself (the driver's are in its own table)."""
        return {"hello": self._on_hello, "ready": self._on_ready, "hb": self._on_hb,
                "error": self._on_error, "stats": self._on_stats,
                "checkpointed": self._on_checkpointed, "trained": self._on_trained,
                "checkpoint_failed": self._on_checkpoint_failed,
                "done": self._on_done}

    # ----- start-up
    def _on_hello(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        r.state = "hello"
        r.info["pid"] = body.get("pid")
        self.send(name, ctrl("config", **self.cfg))

    def _on_ready(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        r.state = "ready"
        r.info.update(body)

    def _on_hb(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        r.doing = str(body.get("doing", r.doing))[:200]

    def _on_error(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        """A role reports an exception. If another role just died, that death is the cause
        (recover from it); otherwise the error is the run's (it would recur on replay)."""
        r.state = "error"
        r.info["error"] = str(body.get("error"))
        said = f"{name} on machine {r.launch.machine} failed: {body.get('error')}"
        if self.state.training:
            end = time.monotonic() + min(2.0, self.opts.dead_after_s)
            while True:
                try:
                    self.table.check()
                except RoleFailure as f:
                    f.collateral.append(said)
                    raise
                except RunError:  # another role's own error: ours is reported below
                    break
                if time.monotonic() > end:
                    break
                time.sleep(0.05)
        raise RunError(f"{said}\n{body.get('traceback', '')}")

    def _on_stats(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        r.stats = body
        r.state = "done"

    # ----- training
    def _on_checkpointed(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        self.recovery.checkpointed(int(body["seq"]), int(body["epoch"]), str(body["path"]))
        self.event({"type": "checkpoint", **body, "time": self.now()})

    def _on_checkpoint_failed(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        """A checkpoint write failed (a full disk): said and recorded; recovery and
        ``--resume`` keep the previous one, which the failed write left intact."""
        self.log(f"{name}: {body.get('error')}; recovery and --resume keep the previous "
                 "checkpoint (intact); training goes on")
        self.event({"type": "checkpoint_failed", **body, "time": self.now()})

    def _on_trained(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        w, seq = int(body["trainer"]), int(body["seq"])
        key = (w, seq)
        r.doing = f"finished step {seq}, waiting for the next mini-batch"
        if key in self.state.trained:
            raise RunError(f"trainer {w} trained batch {seq} twice")
        if body["seeds"] != self.driver.assigned(key):
            raise RunError(f"trainer {w} trained batch {seq} with other seeds than assigned")
        now = self.now()
        body["time"] = now
        body["attempt"] = self.recovery.attempt
        if "y" in body:  # an evaluation batch: kept apart, scored per phase
            self.outputs[key] = (body.pop("y"), body.pop("pred"), body.pop("prob", None))
        self.state.trained[key] = body
        self.last_progress = time.monotonic()
        item = self.state.items[seq]
        self.event({"type": "batch", **body})
        if item.phase == 0:
            self._watch_straggler(w, float(body.get("train_s") or 0.0), seq, now)
        self.driver.on_trained(w, seq, item, body, now)
        self.barriers[seq] += 1
        if self.barriers[seq] == self.state.W:
            self.barrier_at[seq] = now
            self.state.last_barrier = max(self.state.last_barrier, seq)
            self.policy.on_barrier(seq, now)
            self._after_barrier(item, now)
            self.recovery.barrier(seq, now)

    def _watch_straggler(self, w: int, train_s: float, seq: int, now: float) -> None:
        """Say and record a trainer that turned straggler or recovered (:mod:`.straggler`)."""
        change = self.stragglers.step(w, train_s)
        if change is None:
            return
        what, ratio = change
        machine = self.state.plan.trainers[w].machine
        if what == "slow":
            self.log(f"straggler: trainer {w} on {machine} takes {ratio:.1f}x its own usual "
                     f"step time (from step {seq}); the others wait for it at every barrier "
                     "(no re-plan: not built yet)")
        else:
            self.log(f"straggler: trainer {w} on {machine} is back to {ratio:.1f}x its usual "
                     f"step time (step {seq})")
        self.event({"type": "straggler" if what == "slow" else "straggler_recovered",
                    "trainer": w, "machine": machine, "seq": seq, "ratio": ratio,
                    "time": now})

    def _after_barrier(self, item: Item, now: float) -> None:
        """Every trainer finished ``item``: progress, and an epoch's or the test's record."""
        K, st = self.schedule.K, self.state
        items, n = st.items, sum(st.trained[(w, item.seq)]["n"] for w in range(st.W))
        if item.phase == 0:
            self.progress("batch", epoch=item.epoch, done=item.index + 1, total=K, seeds=n)
        else:  # evaluation at scale takes minutes: it gets a bar too
            self.progress("eval", phase=PHASES[item.phase], epoch=item.epoch,
                          done=item.index + 1,
                          total=self.schedule.n_val if item.phase == 1 else self.schedule.n_test,
                          nodes=n)
        last = item.seq + 1 == len(items) or items[item.seq + 1].epoch != item.epoch \
            or (items[item.seq + 1].phase == 2 and item.phase != 2)
        if not last:
            return
        if item.phase == 2:
            ev = self._evaluation(2, item.epoch)
            nan = float("nan")
            self.test_accuracy = nan if ev["accuracy"] is None else ev["accuracy"]
            self.test_metric = nan if ev["value"] is None else ev["value"]
            self.test_majority = ev["majority_rate"]
            self.event({"type": "test", **ev, "time": now})
            return
        self._epoch_record(item.epoch, now)

    def _evaluation(self, phase: int, epoch: int) -> dict[str, Any]:
        """Accuracy, the job's metric and the majority-class rate over every node evaluated
        in ``phase`` of ``epoch`` (all trainers), as scikit-learn computes them."""
        items = self.state.items
        outs = [o for (w, s), o in sorted(self.outputs.items())
                if items[s].phase == phase and items[s].epoch == epoch]
        y = np.asarray([v for o in outs for v in o[0]], np.int64)
        pred = np.asarray([v for o in outs for v in o[1]], np.int64)
        prob = None if any(o[2] is None for o in outs) else \
            np.asarray([v for o in outs for v in o[2]], np.float64)
        if not self.imbalance_checked and len(y):
            self.imbalance_checked = True
            note = metrics.imbalance_note(metrics.majority_rate(y), self.pset.num_classes,
                                          self.metric)
            if note:
                self.log(f"warning: {note}")
        return {"accuracy": metrics.score("accuracy", y, pred) if len(y) else None,
                "metric": self.metric,
                "value": metrics.score(self.metric, y, pred, prob) if len(y) else None,
                "majority_rate": metrics.majority_rate(y) if len(y) else None,
                "nodes": int(len(y))}

    def _epoch_record(self, e: int, now: float) -> None:
        """Epoch ``e``'s training and validation are done: its record and progress."""
        trained, W = self.state.trained, self.state.W
        train = [it for it in self.state.items if it.epoch == e and it.phase == 0]
        first, lastk = train[0].seq, train[-1].seq
        begin = self.t_train if first == 0 else self.barrier_at[first - 1]
        end = self.barrier_at[lastk]
        recs = [trained[(w, it.seq)] for it in train for w in range(W)]
        seeds = sum(b["n"] for b in recs)
        stages = {str(w): {s: float(np.mean([trained[(w, it.seq)][s] for it in train]))
                           for s in STAGES} for w in range(W)}
        assigned = np.concatenate([self.schedule.batch(w, it)[0] for it in train
                                   for w in range(W)])
        ev = self._evaluation(1, e)
        rec = {"type": "epoch", "epoch": e, "epoch_time_s": end - begin,
               "train_loss": float(np.mean([b["loss"] for b in recs])),
               "val_accuracy": ev["accuracy"], "metric": self.metric, "val_metric": ev["value"],
               "throughput_seeds_s": seeds / max(end - begin, 1e-9),
               "batches": len(recs), "seeds": seeds,
               "unique_seeds": int(len(np.unique(assigned))),
               "train_nodes": int(sum(len(n["train"][0]) for n in self.schedule.nodes)),
               "recovered": any(rc["epoch"] == e for rc in self.recovery.records),
               "attempt": self.recovery.attempt,
               "stages": stages, "time": now}
        self.epochs.append(rec)
        self.event(rec)
        self.progress("epoch_end", record=rec)
        if e + 1 < self.job.epochs:
            self.progress("epoch_start", epoch=e + 1, total=self.schedule.K,
                          epochs=self.job.epochs)

    def _on_done(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        self.done_trainers.add(int(body["trainer"]))

    # ------------------------------------------------------------------ the end
    def _finish(self) -> RunResult:
        """Stop every role (draining their stats), then the run's result and its record."""
        st, roles = self.state, self.table.roles
        st.training = False
        self.table.stop(self.opts.stop_grace_s)
        leftover = self.launcher.stop_all(grace=2.0)
        if leftover:
            self.log(f"had to terminate: {', '.join(leftover)}")
        self.recovery.close(self.now())  # ended before catching up (failure in the last steps)
        wall = self.now()
        by_proc = {n: int((r.stats or {}).get("bytes_sent", 0)) for n, r in roles.items()}
        by_proc["coordinator"] = STATS.total
        network = sum(int((r.stats or {}).get("network_bytes", 0)) for r in roles.values())
        allreduce = sum(int((r.stats or {}).get("allreduce_bytes", 0)) for r in roles.values())
        times = [e["epoch_time_s"] for e in self.epochs]
        median = statistics.median(times[1:]) if len(times) > 1 else (times[0] if times else 0.0)
        steady = self.epochs[1:] or self.epochs  # the first epoch includes warm-up
        stages = {str(w): {s: float(np.mean([e["stages"][str(w)][s] for e in steady]))
                           for s in STAGES} for w in range(st.W)}
        result = RunResult(
            run_dir=str(self.run_dir), policy=self.policy.name, placer=st.plan.placer,
            launcher=self.launcher.name, epochs=self.epochs, epoch_time_s=float(median),
            val_accuracy=[e["val_accuracy"] for e in self.epochs if e["val_accuracy"] is not None],
            test_accuracy=float(self.test_accuracy),
            metric=self.metric, test_metric=float(self.test_metric),
            majority_rate=self.test_majority, dilation=st.dilation,
            real_epoch_time_s=float(median) / st.dilation,
            host_usage=self.launcher.usage() if hasattr(self.launcher, "usage") else {},
            val_metric=[e["val_metric"] for e in self.epochs if e["val_metric"] is not None],
            bytes_sent=int(sum(by_proc.values())), network_bytes=network,
            allreduce_bytes=allreduce, bytes_by_process=by_proc, stages=stages,
            startup_s=self.startup_s, wall_s=wall, iterations_per_epoch=self.schedule.K,
            processes={n: {"machine": r.launch.machine, "pid": r.info.get("pid"),
                           "generation": r.launch.gen,
                           **{k: v for k, v in (r.stats or {}).items() if k != "op"}}
                       for n, r in roles.items()},
            recoveries=[{k: v for k, v in rc.items() if k != "type"}
                        for rc in self.recovery.records],
            checkpoints=self.recovery.written)
        cpu = {n: round(float(r.stats["cpu_s"]), 3) for n, r in roles.items()
               if r.stats and "cpu_s" in r.stats}
        cpu["coordinator"] = round(time.process_time() - self.cpu0, 3)  # this process, all threads
        self.event({"type": "run", **{k: v for k, v in result.to_dict().items()
                                      if k not in ("epochs", "processes")},
                    "cpu_s_by_process": cpu,
                    "ledger_by_process": {n: r.stats.get("ledger") for n, r in roles.items()
                                          if r.stats and r.stats.get("ledger")},
                    "stale_messages": self.stale, "rejected_messages": self.rejected})
        return result


__all__ = ["Coordinator"]
