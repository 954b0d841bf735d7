"""Recovery: from a dead role back to training, re-planned if need be, from the last checkpoint.

The core catches a :class:`~.options.RoleFailure` and calls :meth:`Recovery.recover`; the
recovery decides and records, reads and rolls back where the run stands (the
:class:`~.state.RunState`), and asks the coordinator (a :class:`RecoveryHost`: a
:class:`~.messenger.Messenger` that also does the process work) to stop, relaunch and
resume. Decided as follows, and logged with the time it took:

1. *Where*: if the dead role's machine can still run processes (:meth:`Launcher.reachable`),
   the resource is not lost -- only a process died -- and the same plan is kept (``replan:
   auto``; a new placement would move healthy work and add planning time to the outage).
   If the machine is gone, the advisor's placer (the plan's own, else ``greedy``;
   ``replan_budget`` seconds) re-plans on ``cluster.without(machine)``, which moves that
   machine's partitions to the least-loaded live store host (shared/replicated storage;
   ``storage: local`` cannot recover). Seed ownership stays: trainer ``w`` keeps its
   partitions' seeds, only where its tasks run changes, so its mini-batches are the same.
   ``replan: always`` re-plans even for a process death; ``never`` refuses to run without
   the lost machine.
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
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from gnnsched.plan import Plan, TrainerPlan, plan_dict_diff
from gnnsched.runtime import checkpoints
from gnnsched.runtime.coordinator.advisor import Advisor
from gnnsched.runtime.coordinator.messenger import Messenger
from gnnsched.runtime.coordinator.options import RoleFailure, RuntimeOptions
from gnnsched.runtime.coordinator.state import RunState
from gnnsched.runtime.launcher import Launcher
from gnnsched.spec import ClusterSpec, JobSpec, SpecError


class RecoveryHost(Messenger, Protocol):
    """What recovery needs of the coordinator: its messenger, and the process work."""

    def stop_for_recovery(self, failed: str, machine_ok: bool) -> tuple[set[str], list[str]]:
        """Stop all roles but the live stores worth keeping: (kept, stopped)."""
        ...

    def relaunch(self, cluster: ClusterSpec, plan: Plan, keep: set[str], attempt: int,
                 resume: dict[str, Any] | None, stores_moved: bool) -> list[str]:
        """Adopt ``cluster``/``plan`` and start every role not kept; their names."""
        ...

    def resume_training(self, names: list[str], start: int) -> None:
        """Wait for ``names`` to be ready, then train again from step ``start``."""
        ...


class Recovery:
    """Recovers a run from dead roles (module docstring); owns the run's checkpoints list,
    the injected faults, and one record per recovery."""

    def __init__(self, host: RecoveryHost, state: RunState, *, opts: RuntimeOptions,
                 job: JobSpec, launcher: Launcher, run_dir: Path,
                 trainer_parts: list[tuple[int, ...]], trainer_shares: list[tuple[float, ...]],
                 advisor: Advisor | None, profile: Any, part_counts: list[dict[str, int]],
                 feature_dim: int, num_classes: int) -> None:
        self.host, self.state, self.opts, self.job = host, state, opts, job
        self.launcher, self.run_dir = launcher, run_dir
        self.trainer_parts, self.trainer_shares = trainer_parts, trainer_shares
        self.advisor, self.profile = advisor, profile
        self.data = {"part_counts": part_counts, "feature_dim": feature_dim,
                     "num_classes": num_classes}  # what a re-plan without a profile needs
        self.attempt = 0  # recoveries so far; the generation of every role launched since
        self.records: list[dict[str, Any]] = []
        self.checkpoints: list[tuple[int, int, str]] = []  # reported: (seq, epoch, path)
        self.written = 0  # checkpoints reported in all
        self.faults: list[dict[str, Any]] = []  # injected faults, in order
        self.catchup: dict[str, Any] | None = None  # the replay in progress

    # ------------------------------------------------------------------ what the core reports
    def checkpointed(self, seq: int, epoch: int, path: str) -> None:
        """Trainer 0 wrote a complete checkpoint after step ``seq``."""
        self.checkpoints.append((seq, epoch, path))
        self.written += 1

    def barrier(self, seq: int, now: float) -> None:
        """Every trainer finished step ``seq``: a replay may be over."""
        if self.catchup is not None and seq >= self.catchup["until"]:
            self._caught_up(now)

    def close(self, now: float) -> None:
        """The run ended: a replay still in progress ends too (failure in the last steps)."""
        if self.catchup is not None:
            self._caught_up(now)

    # ------------------------------------------------------------------ recovering
    def recover(self, f: RoleFailure) -> None:
        """Re-plan if a machine is lost, restart the affected roles from the last checkpoint
        (see the module docstring); raises RunError when recovery is off or impossible."""
        host, st, o = self.host, self.state, self.opts
        if self.catchup is not None:  # a failure during the replay of the previous one
            self._caught_up(host.now(), interrupted=True)
        fault = self.faults[-1] if self.faults else None
        detect_s = f.detected - fault["_t"] if fault and not fault.get("detected") else None
        if fault is not None:
            fault["detected"] = True
        host.log(f"FAILURE detected: {f.describe()}"
                 + (f"; {detect_s:.3f} s after the fault was injected"
                    if detect_s is not None else "")
                 + "".join(f"; then {c.splitlines()[0]}" for c in f.collateral))
        if not o.recover:
            raise f.fatal("(recovery is off)")
        if self.attempt >= o.max_recoveries:
            raise f.fatal(f"(gave up after {o.max_recoveries} recoveries)")
        self.attempt += 1
        items = st.items
        rec: dict[str, Any] = {
            "type": "recovery", "attempt": self.attempt, "role": f.name, "machine": f.machine,
            "pid": f.pid, "how": f.how, "doing": f.doing, "last_heard_s": f.last_heard_s,
            "collateral": [c.splitlines()[0] for c in f.collateral], "detect_s": detect_s,
            "detected_at": f.detected - st.t0, "epoch": items[max(
                0, min(st.last_barrier + 1, len(items) - 1))].epoch}
        # 1. is the machine still there?  2. stop what restarts
        machine_ok = self.launcher.reachable(f.machine)
        keep, stopped = host.stop_for_recovery(f.name, machine_ok)
        # 3. re-plan
        old_plan, old_cluster = st.plan, st.cluster
        cluster, plan, why = self._where(f, machine_ok)
        moved = {p: (old_cluster.machines[old_cluster.store_of(p)].name,
                     cluster.machines[cluster.store_of(p)].name)
                 for p in range(cluster.num_parts)
                 if old_cluster.machines[old_cluster.store_of(p)].name
                 != cluster.machines[cluster.store_of(p)].name}
        diff = plan_dict_diff(old_plan, plan)
        host.log(f"recovery {self.attempt}: {why}"
                 + ("; partitions moved: " + ", ".join(f"{p} {a}->{b}" for p, (a, b)
                                                        in moved.items()) if moved else "")
                 + (f"; plan changes: {'; '.join(diff)}" if diff else "; plan unchanged"))
        # 4. where to resume from
        ckpt, start, replay, until = self._rollback()
        resume = {"path": ckpt[2], "seq": ckpt[0]} if ckpt else None
        for tmp in (self.run_dir / "checkpoints").glob(".*.tmp-*"):
            tmp.unlink(missing_ok=True)  # what a killed trainer was writing
        # 5. the new roles
        names = host.relaunch(cluster, plan, keep, self.attempt, resume,
                              stores_moved=not machine_ok or bool(moved))
        rec.update(stopped=stopped, restarted=sorted(names), kept=sorted(keep),
                   replanned=bool(diff) or not machine_ok, why=why, plan_changes=diff,
                   moved_partitions={str(p): list(v) for p, v in moved.items()},
                   checkpoint_step=ckpt[0] if ckpt else None,
                   resume_step=start, replayed_steps=replay)
        self.records.append(rec)
        host.resume_training(names, start)
        rec["restart_s"] = time.monotonic() - f.detected
        host.log(f"recovery {self.attempt}: {len(names)} processes restarted, training "
                 f"resumed {rec['restart_s']:.2f} s after detection")
        until = max(until, start - 1)
        self.catchup = {"rec": rec, "until": until, "t": time.monotonic()}
        if until < start:
            self._caught_up(host.now())
        host.event({k: v for k, v in rec.items()})

    def _where(self, f: RoleFailure, machine_ok: bool) -> tuple[ClusterSpec, Plan, str]:
        """The cluster and plan to go on with, and why (step 1 of the module docstring)."""
        st, o = self.state, self.opts
        if not machine_ok:
            if o.replan == "never":
                raise f.fatal(f"and machine {f.machine} is unreachable (replan: never)")
            try:
                cluster = st.cluster.without(f.machine)
            except SpecError as exc:
                raise f.fatal(f"and machine {f.machine} is gone; cannot move its "
                              f"partitions: {exc}") from None
            return cluster, self._replan(cluster, f), \
                f"machine {f.machine} is unreachable: re-planned on the cluster without it"
        if o.replan == "always":
            return st.cluster, self._replan(st.cluster, f), \
                "re-planned on the same cluster (replan: always)"
        return st.cluster, st.plan, \
            f"machine {f.machine} is alive: only a process died, same plan, restarted in place"

    def _rollback(self) -> tuple[tuple[int, int, str] | None, int, list[int], int]:
        """The checkpoint to resume from -- the newest whose barrier we saw (so every
        trainer's record of every step before it is here) and whose file is intact -- the
        step to resume at, the training steps to replay, and the last step done before."""
        st = self.state
        ckpt = None
        for c in sorted((c for c in self.checkpoints if c[0] <= st.last_barrier),
                        reverse=True):  # the newest intact one; a corrupt one is said
            why = checkpoints.verify(Path(c[2]))
            if why is None:
                ckpt = c
                break
            self.host.log(f"recovery {self.attempt}: skipped the checkpoint of step {c[0]}: "
                          f"{why}")
        start = ckpt[0] + 1 if ckpt else 0
        replay = [s for s in range(start, st.last_barrier + 1) if st.items[s].phase == 0]
        until = st.last_barrier
        self.checkpoints = [c for c in self.checkpoints if ckpt and c[0] <= ckpt[0]]
        st.last_barrier = start - 1
        self.host.log(f"recovery {self.attempt}: rolling back to "
                 + (f"the checkpoint of step {ckpt[0]} (epoch {ckpt[1] + 1})"
                    if ckpt else "the start (no checkpoint yet)")
                 + f"; every trainer resumes at step {start}; replaying completed training "
                   f"steps {_span(replay)} ({len(replay)} steps, each from the model state it "
                   "first saw)")
        return ckpt, start, replay, until

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
        self.host.event({"type": "caught_up", "attempt": rec["attempt"],
                         "replay_s": rec["replay_s"], "lost_s": rec["lost_s"], "time": now})
        self.host.log(f"recovery {rec['attempt']}: caught up with step {c['until']} after "
                      f"{rec['replay_s']:.2f} s of replay; time lost to this failure "
                      f"{rec['lost_s']:.2f} s (detection "
                      + (f"{rec['detect_s']:.2f} s + " if rec["detect_s"] is not None
                         else "? + ")
                      + f"restart {rec['restart_s']:.2f} s + replay {rec['replay_s']:.2f} s)")

    # ------------------------------------------------------------------ re-planning
    def _replan(self, cluster: ClusterSpec, f: RoleFailure) -> Plan:
        """A placement on ``cluster`` by the advisor's placer; seeds stay with their trainers."""
        if self.advisor is None:
            raise f.fatal(f"and re-planning on {len(cluster.machines)} machines is "
                          "impossible: the coordinator was given no advisor")
        t0 = time.monotonic()
        try:
            plan, name = self.advisor.replan(
                cluster, self.job, self.state.plan, self.profile,
                placer=self.opts.replan_placer, budget=self.opts.replan_budget, **self.data)
            plan = self._pin_seeds(plan)
            plan.validate(cluster, self.job, f"re-plan by {name}")
        except (SpecError, ValueError, KeyError) as exc:
            raise f.fatal(f"and re-planning on {len(cluster.machines)} machines "
                          f"failed: {exc}") from None
        self.host.log(f"re-planned with placer {name!r} in {time.monotonic() - t0:.2f} s")
        return plan

    def _pin_seeds(self, plan: Plan) -> Plan:
        """Trainer ``w`` keeps the partitions whose seeds it owns (its mini-batches are a
        function of them): the new plan's trainer slots are matched to the old seed groups,
        same groups first."""
        W = len(self.trainer_parts)
        shares = self.trainer_shares or [()] * W
        slots = list(plan.trainers)
        out: list[TrainerPlan | None] = [None] * W
        for w, parts in enumerate(self.trainer_parts):
            for t in slots:
                if tuple(sorted(t.parts)) == tuple(sorted(parts)):
                    out[w] = replace(t, id=w, parts=parts, shares=shares[w])
                    slots.remove(t)
                    break
        for w in range(W):
            if out[w] is None:
                out[w] = replace(slots.pop(0), id=w, parts=self.trainer_parts[w],
                                 shares=shares[w])
        return replace(plan, trainers=tuple(t for t in out if t is not None),
                       notes=(*plan.notes, "re-planned by the runtime after a failure"))


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]}" if len(steps) > 1 else str(steps[0])


__all__ = ["Recovery", "RecoveryHost"]
