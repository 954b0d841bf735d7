"""The role table: which processes the plan needs, launching them, watching them, stopping them.

Failure detection. A role is dead when its process exits (the launcher owns it: seen within
one poll, ~50 ms), when it sends no heartbeat for ``dead_after_s`` (a frozen process, a lost
host or network), or when the coordinator can no longer reach it. The log names the process,
its machine and pid, and what its last heartbeat said it was doing. A role that *reports* an
exception is not itself the cause when another role just died (a peer's all-reduce fails when
a trainer is killed): the coordinator looks for a dead role first and recovers from that;
otherwise the error is deterministic (bad input, a bug), replaying would hit it again, and the
run fails with it.

Fault injection (``RuntimeOptions.faults``): ``Fault("sampler:1", at_step=20)`` makes the
coordinator SIGKILL that role's real process when a trainer starts step 20 (``signal="STOP"``
freezes it instead: only heartbeats can tell); ``Fault("machine:store0", ...)`` kills every
process on that machine and marks it down in the launcher -- what tests and
``bench/bench_faults.py`` use.

Shutdown order: trainers first (they consume), then samplers and relays, then stores (which
serve the others); each group gets ``stop`` and ``stop_grace_s`` to exit, then the launcher
sends SIGTERM and SIGKILL to whatever is left. After a failure or Ctrl-C the same happens with
a short grace, so no process outlives the run and every port is closed.

:class:`RoleTable` is a component the :class:`~.core.Coordinator` owns: it holds the role
table (read by the message loop and the policy driver), sends on the coordinator's control
channel, reads the plan from the :class:`~.state.RunState`, and logs through a
:class:`~.messenger.Messenger`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from gnnsched.runtime.coordinator.messenger import Messenger
from gnnsched.runtime.coordinator.options import (
    ROLE_ORDER,
    SIGNALS,
    SLOW_FACTOR,
    Fault,
    RoleFailure,
    RunError,
    RuntimeOptions,
    exit_text,
)
from gnnsched.runtime.coordinator.state import RunState
from gnnsched.runtime.launcher import Launcher, LaunchError, Process, RoleLaunch
from gnnsched.runtime.transport import Channel, Kind, Message, MessageError, ctrl, ctrl_body

if TYPE_CHECKING:
    from gnnsched.runtime.coordinator.recovery import Recovery
    from gnnsched.runtime.transport import CurveKeys


ABORT_BUDGET_S = 2.0  # Ctrl-C or a failure: how long roles get to stop on request, all together


@dataclass
class RoleState:
    """One role process as the coordinator knows it."""

    launch: RoleLaunch
    proc: Process | None = None
    state: str = "launched"  # launched | hello | ready | running | done | exited | stopped
    info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    last_heard: float | None = None  # monotonic time of its last heartbeat or message
    doing: str = "starting"  # what its last heartbeat said


@dataclass
class SamplerSlot:
    """A sampler process: the trainer it samples for, its machine, whether it is sampling."""

    name: str
    trainer: int
    machine: int
    busy: bool = False


class RoleTable:
    """Launches, watches and stops the run's processes (module docstring)."""

    chan: Channel  # the coordinator's control socket, set once it exists
    endpoint: str  # where roles reach the coordinator, set once it is bound

    def __init__(self, state: RunState, messenger: Messenger, *, opts: RuntimeOptions,
                 launcher: Launcher, run_dir: Path, keys: CurveKeys | None,
                 recovery: Recovery) -> None:
        self.state, self.opts, self.launcher = state, opts, launcher
        self.run_dir, self.keys = run_dir, keys
        self.recovery = recovery  # the generation of new roles; where injected faults go
        self.log, self.event, self.now = messenger.log, messenger.event, messenger.now
        self.roles: dict[str, RoleState] = {}
        self.samplers: dict[str, SamplerSlot] = {}
        self.fired: set[int] = set()  # faults injected (indices into opts.faults)

    # ------------------------------------------------------------------ launching
    def role_specs(self) -> list[tuple[str, str, str]]:
        """(role, id, machine) of every process the current plan needs; fills samplers."""
        cluster, plan = self.state.cluster, self.state.plan
        specs = [("store", m.name, m.name) for m in cluster.machines if m.partitions]
        specs += [("trainer", str(w), t.machine) for w, t in enumerate(plan.trainers)]
        self.samplers = {}
        sid = 0
        for w, t in enumerate(plan.trainers):
            for mname, count in t.samplers:
                for _ in range(count):
                    specs.append(("sampler", str(sid), mname))
                    self.samplers[f"sampler:{sid}"] = SamplerSlot(
                        f"sampler:{sid}", w, cluster.machine_index(mname))
                    sid += 1
        specs += [("fetcher", m, m) for m in sorted({t.fetch_at for t in plan.trainers
                                                     if t.fetch_at != t.machine})]
        return specs

    def add_role(self, role: str, rid: str, machine: str) -> str:
        """Enter a role of the current generation in the table (not started yet); its name."""
        o = self.opts
        launch = RoleLaunch(role, rid, machine, self.endpoint,
                            self.run_dir / "logs" / f"{role}-{rid}.log", o.threads,
                            o.orphan_timeout, o.start_timeout, gen=self.recovery.attempt,
                            heartbeat_s=o.heartbeat_s,
                            curve_keys=self.keys.folder if self.keys else None,
                            device=self.state.plan.trainers[int(rid)].device
                            if role == "trainer" else None)
        self.roles[launch.name] = RoleState(launch)
        return launch.name

    def launch(self, names: list[str]) -> None:
        """Start the processes of roles ``names`` (prepared together first)."""
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

    def keep_only(self, keep: set[str]) -> None:
        """Forget every role but ``keep`` (the others were stopped for a recovery)."""
        self.roles = {n: r for n, r in self.roles.items() if n in keep}

    # ------------------------------------------------------------------ reaching and watching
    def send(self, name: str, msg: Message) -> None:
        """Send role ``name`` a message; a live role that cannot be reached is a failure."""
        r = self.roles[name]
        try:
            self.chan.send(msg, r.launch.ident.encode())
        except zmq.ZMQError as exc:
            if r.state not in ("done", "exited", "stopped"):
                # its connection dropped: an exit status, if one comes, says more
                end = time.monotonic() + 1.0
                while time.monotonic() < end:
                    self.check()
                    time.sleep(0.02)
                raise self.failure(r, f"cannot be reached ({exc})") from None

    def failure(self, r: RoleState, how: str) -> RoleFailure:
        """The failure of role ``r``, dead ``how``: who, where, doing what, its log's end."""
        now = time.monotonic()
        return RoleFailure(r.launch.name, r.launch.machine, r.proc.pid if r.proc else None,
                           how, r.doing if r.state != "ready" else f"ready ({r.doing})", now,
                           None if r.last_heard is None else now - r.last_heard,
                           r.proc.log_tail() if r.proc else "", str(r.launch.log))

    def check(self) -> None:
        """Raise for the first dead role.

        *Hard* deaths -- killed by a signal, silent past ``dead_after_s``, or an exit code a
        role only uses when its coordinator vanished -- are :class:`RoleFailure` (recovered).
        A role that exited with code 1 raised an exception, which it reported: unless a hard
        death explains it (checked first), that error is the run's and ends it (replaying
        would only repeat it)."""
        now = time.monotonic()
        soft: RoleState | None = None
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
                explain = getattr(self.launcher, "explain_exit", None)
                why = explain(r.proc) if explain and r.proc else None  # e.g. out of memory
                raise self.failure(r, exit_text(code) + (f": {why}" if why else ""))
            if r.last_heard is not None and now - r.last_heard > self.opts.dead_after_s:
                raise self.failure(r, f"sent no heartbeat for {now - r.last_heard:.1f} s "
                                       f"(dead_after_s={self.opts.dead_after_s:g})")
        if soft is not None:
            soft.state = "exited"
            code = soft.proc.poll() if soft.proc else None
            err = self._error_of(soft)
            raise RunError(f"{soft.launch.name} on machine {soft.launch.machine} (pid "
                           f"{soft.proc.pid if soft.proc else '?'}) {exit_text(code or 0)} "
                           f"while {soft.doing}" + (f": {err}" if err else "")
                           + f"; last log lines ({soft.launch.log}):\n"
                           + (soft.proc.log_tail() if soft.proc else ""))

    def _error_of(self, r: RoleState) -> str | None:
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
                    own = self.own_ctrl(got, r)
                    if own is not None and own[1].get("op") == "error":
                        r.info["error"] = str(own[1].get("error"))
        return r.info.get("error")

    def own_ctrl(self, got: tuple[bytes | None, Any], only: RoleState | None = None
                  ) -> tuple[RoleState, dict[str, Any]] | None:
        """(role, body) of a control message from the current incarnation of a role (``only``
        that one, if given); None for anything else (data, strangers, old generations)."""
        ident, msg = got
        name, _, gen = (ident or b"?").decode(errors="replace").rpartition("/")
        r = only if only is not None else self.roles.get(name)
        if r is None or name != r.launch.name or gen != str(r.launch.gen) or \
                msg.kind != Kind.CTRL:
            return None
        try:
            return r, ctrl_body(msg, name)
        except MessageError:
            return None

    # ------------------------------------------------------------------ fault injection
    def fire_faults(self, seq: int) -> None:
        """Inject the faults due when a trainer starts step ``seq`` (each fires once)."""
        for i, f in enumerate(self.opts.faults):
            if i not in self.fired and f.at_step == seq:
                self.fired.add(i)
                self._inject(f)

    def _inject(self, f: Fault) -> None:
        """Fault injection: a real signal to a real process (or every process of a machine)."""
        t = time.monotonic()
        if f.signal == "CUT":  # a grey fault: the machine unreachable, its processes alive
            machine = f.role.split(":", 1)[1]
            pids: list[int] = []
            what = self.launcher.cut_off(machine, f.seconds)
        elif f.signal == "SLOW":  # a straggler: the machine's CPU quota cut for a while
            machine = f.role.split(":", 1)[1]
            pids = []
            what = self.launcher.slow_down(machine, SLOW_FACTOR, f.seconds)
        elif f.role.startswith("machine:"):
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
            r.proc.signal(SIGNALS[f.signal])
        rec = {"type": "fault", "role": f.role, "signal": f.signal, "at_step": f.at_step,
               "pids": pids, "machine": machine, "time": self.now(), "_t": t,
               **({"seconds": f.seconds} if f.signal in ("CUT", "SLOW") else {})}
        self.recovery.faults.append(rec)
        self.event({k: v for k, v in rec.items() if k != "_t"})
        self.log(f"fault injection at step {f.at_step}: {what}")

    # ------------------------------------------------------------------ restarting
    def stop_for_recovery(self, failed: str, machine_ok: bool) -> tuple[set[str], list[str]]:
        """Stop every role except the live stores on machines still there (all of them when
        the failed role's machine is gone: machine indices change). Returns the names kept
        and the sorted names stopped."""
        keep = {n for n, r in self.roles.items() if r.launch.role == "store" and machine_ok
                and r.proc is not None and r.proc.poll() is None and n != failed
                and r.state not in ("error", "exited")}
        stop = [r for n, r in self.roles.items() if n not in keep]
        self.launcher.stop([r.proc for r in stop if r.proc is not None], grace=1.0)
        for r in stop:
            r.state = "stopped"
        return keep, sorted(r.launch.name for r in stop)

    # ------------------------------------------------------------------ stopping
    def stop(self, grace: float, deadline: float | None = None) -> None:
        """Stop roles group by group (trainers, samplers + relays, stores), draining their
        stats; a group gets ``grace`` seconds before the next is asked, and none waits past
        ``deadline`` (monotonic; the later groups are then only asked)."""
        for group in ROLE_ORDER:
            members = [r for r in self.roles.values() if r.launch.role in group
                       and r.proc is not None and r.proc.poll() is None]
            for r in members:
                try:
                    self.chan.send(ctrl("stop"), r.launch.ident.encode())
                except zmq.ZMQError:
                    pass
            end = time.monotonic() + grace
            if deadline is not None:
                end = min(end, deadline)
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
            own = self.own_ctrl(got)
            if own is not None and own[1].get("op") == "stats":
                r, body = own
                r.stats, r.state = body, "done"

    def abort(self, budget_s: float = ABORT_BUDGET_S) -> None:
        """Failure or Ctrl-C: ask every role to stop, in order, for at most ``budget_s``
        together, then SIGTERM what is left (a role ends at once on it, even inside a
        blocking call), SIGKILL it a second later, and end the fork servers (which exit
        without an interpreter teardown): all gone within about ``budget_s`` + 1 s."""
        self.state.training = False
        start = time.monotonic()
        try:
            self.stop(min(self.opts.stop_grace_s, budget_s), deadline=start + budget_s)
        except Exception:
            pass
        self.launcher.stop_all(grace=1.0)


__all__ = ["RoleState", "RoleTable", "SamplerSlot"]
