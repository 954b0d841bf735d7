"""The policy driver: the coordinator's component that plays the simulator's part for a Policy.

Event by event it asks the same :class:`~gnnsched.policy.Policy` object the simulator drives:

* **which mini-batch a free sampler builds** -- each machine runs at most ``cpus`` sampling
  tasks at once; when a core is free and several trainers' samplers there are idle with an
  open prefetch window, :func:`~gnnsched.policy.choose_sampling` (``pick_batch``) chooses (a
  trainer's batches go in order); the coordinator sends that sampler a ``BATCH`` with the
  seeds;
* **the prefetch window** -- batch ``k`` of a trainer may start once batch
  ``k - prefetch(trainer)`` started training (trainers report ``started``);
* **the order of every store NIC** -- stores report ``queued`` transfers; the coordinator asks
  ``priority`` once per transfer and sends the keys (``prio``), and the store's
  :class:`~gnnsched.runtime.store.NicQueue` sends in that order (``sharing: priority``) or
  round robin (``fair``);
* **gradients first** -- while trainers' gradients are on the wire, stores and relays that
  would share a NIC with them hold later traffic (``hold``);
* **events** -- ``on_sampled`` (with the batch's measured sizes), ``on_transfer_done`` (store
  reports ``sent``), ``on_trained``; the core reports ``on_barrier``.

Expected costs in the policy's context come from the :class:`~.advisor.Advisor` when the run
has a cost profile (exactly what the simulator uses); otherwise they are learnt during the
run (moving averages of the measured train time per edge and fetch time per trainer).

:class:`PolicyDriver` is a component the :class:`~.core.Coordinator` owns: it reads the plan
and the clock from the :class:`~.state.RunState`, the processes from the
:class:`~.roles.RoleTable`, and talks through a :class:`~.messenger.Messenger`; the core
dispatches the control ops in :meth:`PolicyDriver.handlers` to it.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gnnsched.policy import (
    BatchInfo,
    BatchKey,
    Policy,
    PolicyContext,
    Transfer,
    choose_sampling,
    gradient_contenders,
)
from gnnsched.runtime.coordinator.messenger import Messenger
from gnnsched.runtime.coordinator.options import RuntimeOptions
from gnnsched.runtime.coordinator.schedule import Item, Schedule
from gnnsched.runtime.coordinator.state import RunState
from gnnsched.runtime.role import seeds_hash
from gnnsched.runtime.transport import Kind, Message, MessageError, ctrl
from gnnsched.spec import JobSpec
from gnnsched.workload import ring_wire_s

if TYPE_CHECKING:
    from gnnsched.runtime.coordinator.advisor import Advisor
    from gnnsched.runtime.coordinator.roles import RoleState, RoleTable

LEARN_RATE = 0.3  # weight of the newest measurement in the learnt stage times
Handler = Callable[[str, "RoleState", dict[str, Any]], None]  # (role, its state, body)


class PolicyDriver:
    """Dispatches sampling, ranks transfers and holds NICs for gradients (module docstring)."""

    def __init__(self, state: RunState, messenger: Messenger, table: RoleTable, *,
                 policy: Policy, opts: RuntimeOptions, job: JobSpec, schedule: Schedule,
                 advisor: Advisor | None, profile: Any) -> None:
        self.state, self.table = state, table
        self.policy, self.opts, self.job, self.schedule = policy, opts, job, schedule
        self.advisor, self.profile = advisor, profile
        # the messenger's verbs, bound once (a test replaces them on a bare instance)
        self.send, self.event, self.now = messenger.send, messenger.event, messenger.now
        self.per_edge = [0.0] * state.W  # learnt train seconds per sampled edge, per trainer
        self.tseq = 0  # transfers ranked so far (the policy's tie-break order)
        self.learn = False  # whether expected stage times are learnt (no cost profile)

    def handlers(self) -> dict[str, Handler]:
        """The control ops the driver handles; the coordinator dispatches them here."""
        return {"sampled": self._on_sampled, "started": self._on_started,
                "queued": self._on_queued, "sent": self._on_sent,
                "allreduce": self._on_allreduce, "fetched": self._on_fetched,
                "arrived": self._on_arrived}

    # ------------------------------------------------------------------ set-up
    def _context(self) -> PolicyContext:
        """The policy's view of the run: the advisor's expected stage times when there is a
        cost profile, else zeros that :meth:`_learn` fills from measurements."""
        st = self.state
        cl, W = st.net, st.W
        ctx = PolicyContext(
            trainers=W, iterations=len(st.items), prefetch=self.job.prefetch,
            egress=[m.egress for m in cl.machines], ingress=[m.ingress for m in cl.machines],
            trainer_machine=list(st.T), fetch_machine=list(st.F))
        if self.profile is not None and self.advisor is not None:
            ctx.train_s, ctx.fetch_s, ctx.sample_s, ctx.buffer_batches = \
                self.advisor.reference(cl, self.job, st.plan, self.profile)
            if st.dilation != 1:  # compute runs at 1/D of the profile's speed on the model
                ctx.train_s = [t * st.dilation for t in ctx.train_s]
                ctx.sample_s = [t * st.dilation for t in ctx.sample_s]
            self.learn = False
        else:  # learnt online from measurements
            ctx.train_s, ctx.fetch_s, ctx.sample_s = [0.0] * W, [0.0] * W, [0.0] * W
            self.learn = True
        return ctx

    def reset(self, start: int, now: float, cfg: dict[str, Any]) -> None:
        """Fresh driver state for training from step ``start`` with the roles' ``cfg``: every
        core free, no transfer known, the policy reset with a new context and its prefetch
        depths read."""
        st, roles = self.state, self.table.roles
        W = st.W
        self.cores_free = [m.cpus for m in st.cluster.machines]
        self.next_disp = [start] * W
        self.started = [start] * W
        self.ready_since = [now] * W
        self.expected: dict[tuple[int, int], str] = {}
        self.queues: dict[int, dict[int, Transfer]] = defaultdict(dict)
        self.keyed: dict[tuple[int, int], list] = {}  # (store, tid) -> the policy's key
        self.floor: dict[int, list | None] = {}  # receiver -> its first key (or level) sent
        # receiver -> heap of (key, store, tid) of its keyed transfers; entries of transfers
        # already sent are dropped when they reach the top (_floor_of)
        self.rx_keys: dict[int, list[tuple[list, int, int]]] = defaultdict(list)
        self.urgent_band = bool(cfg.get("urgent_band"))
        self.wire_levels = bool(cfg.get("wire_levels"))
        self.stores = {st.cluster.machine_index(r.launch.machine): name
                       for name, r in roles.items() if r.launch.role == "store"}
        self.fetchers = [name for name, r in roles.items() if r.launch.role == "fetcher"]
        self.ranked: dict[tuple[int, int, int, str], list] = {}
        self.reducing: dict[int, int] = defaultdict(int)  # machine -> trainers all-reducing
        self.entered: dict[int, int] = defaultdict(int)  # step -> trainers in its all-reduce
        self.grad_bytes: dict[int, int] = defaultdict(int)  # step -> largest ring volume
        self.holding: set[int] = set()  # machines the stores hold traffic into
        self.contending = self._contending()
        self.sampled_info: dict[tuple[int, int], dict[str, Any]] = {}
        # --trace: half-known sampler / relay transfers, (trainer, seq, kind) -> what is known
        self.handoffs: dict[tuple[int, int, str], dict[str, Any]] = {}
        for s in self.table.samplers.values():
            s.busy = False
        self.policy.reset(self._context())
        self.pf = [max(1, int(self.policy.prefetch(w))) for w in range(W)]

    def assigned(self, key: tuple[int, int]) -> str | None:
        """The hash of the seeds dispatched for ``(trainer, step)``, forgotten once asked."""
        return self.expected.pop(key, None)

    # ------------------------------------------------------------------ sampling
    def dispatch_batches(self, m: int) -> None:
        """Start sampling tasks on machine ``m`` while it has a free core (policy picks)."""
        items, samplers = self.state.items, self.table.samplers
        n = len(items)
        while self.cores_free[m] > 0:
            cands = []
            seen = set()
            for s in samplers.values():
                w = s.trainer
                if s.machine != m or s.busy or w in seen:
                    continue
                nd = self.next_disp[w]
                if nd < n and nd < self.started[w] + self.pf[w]:
                    cands.append((self.ready_since[w], w))
                    seen.add(w)
            if not cands:
                return
            w = choose_sampling(cands, self.next_disp, self.policy, self.now())
            seq = self.next_disp[w]
            self.next_disp[w] = seq + 1
            self.ready_since[w] = self.now()
            s = next(s for s in samplers.values()
                     if s.machine == m and s.trainer == w and not s.busy)
            s.busy = True
            self.cores_free[m] -= 1
            item = items[seq]
            self.table.roles[s.name].doing = \
                f"sampling trainer {w} step {seq} (epoch {item.epoch + 1})"
            seeds, labels = self.schedule.batch(w, item)
            self.expected[(w, seq)] = seeds_hash(seeds)
            self._rank(w, seq, "struct", [(st, m, 0.0) for st in self.stores if st != m])
            if self.opts.trace:
                self.event({"type": "dispatch", "trainer": w, "seq": seq, "t": self.now(),
                            "machine": self.state.cluster.machines[m].name})
            self.send(s.name, Message(Kind.BATCH, {"trainer": w, "seq": seq,
                                                   "epoch": item.epoch, "phase": item.phase,
                                                   "index": item.index},
                                      {"seeds": seeds, "labels": labels}))

    def _on_sampled(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        s = self.table.samplers[name]
        T, F = self.state.T, self.state.F
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
            if s.machine != T[w]:  # the sampler sends BLOCK right after this report
                self._handoff(w, seq, "block", src=s.machine, queued=self.now())
        self._rank(w, seq, "feat", [(m, F[w], b) for m, b in info.feat_from if m != F[w]])
        s.busy = False
        r.doing = f"idle (sampled trainer {w} step {seq})"
        self.cores_free[s.machine] += 1
        self.dispatch_batches(s.machine)

    def _on_started(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        """A trainer started a step: its prefetch window moves on (and faults may fire)."""
        w, seq = int(body["trainer"]), int(body["seq"])
        r.doing = f"training step {seq} (epoch {self.state.items[seq].epoch + 1})"
        self.started[w] = seq + 1
        if self.next_disp[w] == self.started[w] - 1 + self.pf[w]:
            self.ready_since[w] = self.now()  # the window just opened
        for m in {s.machine for s in self.table.samplers.values() if s.trainer == w}:
            self.dispatch_batches(m)
        self.table.fire_faults(seq)

    # ------------------------------------------------------------------ NICs
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

    def _on_queued(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        m = int(body["machine"])
        now = self.now()
        keys = []
        for tid, trainer, seq, kind, dst, nbytes, ranked in body["transfers"]:
            self.tseq += 1
            tr = Transfer(BatchKey(int(trainer), int(seq)), str(kind), m, int(dst),
                          float(nbytes), now, self.tseq)
            self.queues[m][int(tid)] = tr
            if self.policy.sharing == "priority":
                key = self.ranked.get((m, int(trainer), int(seq), str(kind)))
                key = key if key is not None else list(self.policy.priority(tr))
                self.keyed[(m, int(tid))] = key
                if self.urgent_band or self.wire_levels:
                    heapq.heappush(self.rx_keys[tr.dst], (key, m, int(tid)))
                if not ranked:
                    keys.append([int(tid), key])
        if keys:
            self.send(name, ctrl("prio", keys=keys))
        self._floors({int(t[4]) for t in body["transfers"]})

    def _floors(self, dsts: set[int]) -> None:
        """Every receiver's floor, the first key among all stores' unfinished transfers to
        it, sent to every store when it changes. The urgent band's grants: a store may send a
        transfer on it only if its key is at most the floor. Without this a store's head is
        only *its* first, and at a receiver's NIC one store's next-iteration prefetch passes
        another store's bytes for the current iteration. The wire levels (without the band:
        only the floor's level, so only its changes are sent): a store holds a transfer of a
        higher level than its receiver's floor (:class:`~gnnsched.runtime.store.NicQueue`)."""
        if not (self.urgent_band or self.wire_levels):
            return
        for d in dsts:
            floor = self._floor_of(d)
            if floor is not None and not self.urgent_band:
                floor = floor[:1]  # the level
            if floor != self.floor.get(d):
                self.floor[d] = floor
                for store in self.stores.values():
                    self.send(store, ctrl("floor", machine=d, key=floor))

    def _floor_of(self, d: int) -> list | None:
        """The first key among the unfinished transfers to receiver `d`, from its heap
        (amortised O(log n) per transfer, where a scan of every queue was O(n) per event)."""
        heap = self.rx_keys.get(d)
        while heap:
            key, m, tid = heap[0]
            tr = self.queues[m].get(tid)
            if tr is not None and tr.dst == d and self.keyed.get((m, tid)) == key:
                return key
            heapq.heappop(heap)
        return None

    def _on_sent(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        m = int(body["machine"])
        now = self.now()
        dsts = set()
        for tid in body["tids"]:
            tr = self.queues[m].pop(int(tid), None)
            key = self.keyed.pop((m, int(tid)), None)
            if tr is not None:
                dsts.add(tr.dst)
                self.policy.on_transfer_done(tr, now)
                if self.opts.trace:
                    ms = self.state.cluster.machines
                    self.event({"type": "transfer", "trainer": tr.batch.trainer,
                                "seq": tr.batch.iteration, "kind": tr.kind,
                                "src": ms[tr.src].name, "dst": ms[tr.dst].name,
                                "bytes": tr.nbytes, "queued": tr.created, "done": now,
                                "key": key if key is not None
                                else list(self.policy.priority(tr))})
        self._floors(dsts)

    def _on_allreduce(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        """Gradients first, as in the cost model: once *every* trainer has entered all-reduce
        ``k`` (gradients are on the wire; before that a trainer only waits at the barrier),
        a store or relay that would share a NIC with the gradients sends the reducing
        machines nothing of later iterations until their all-reduce ends. What any trainer
        needs for barrier ``k`` is never held."""
        m, seq = self.state.T[int(body["trainer"])], int(body["seq"])
        r.doing = f"{'all-reducing' if body['on'] else 'stepping'} step {seq}"
        extra: dict[str, Any] = {}
        if body["on"]:
            self.reducing[m] += 1
            self.entered[seq] += 1
            self.grad_bytes[seq] = max(self.grad_bytes[seq], int(body.get("bytes", 0)))
            if self.entered[seq] < self.state.W:
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
        net = self.state.net
        ms = net.machines
        return ring_wire_s(volume, list(self.state.T), [m.egress for m in ms],
                           [m.ingress for m in ms], net.latency)

    def _contending(self) -> dict[int, list[str]]:
        """Per trainer machine, the stores and relays whose traffic into it would slow its
        gradients (:func:`gnnsched.policy.gradient_contenders`). Fixed by the plan, so
        computed once per (re)start."""
        st = self.state
        ms = st.net.machines
        senders = [*((n, i) for i, n in self.stores.items()),
                   *((n, st.cluster.machine_index(self.table.roles[n].launch.machine))
                     for n in self.fetchers)]
        rule = gradient_contenders([x.egress for x in ms], [x.ingress for x in ms], st.T,
                                   {at for _, at in senders})
        return {m: [peer for peer, at in senders if at in cont] for m, cont in rule.items()}

    # ------------------------------------------------------------------ --trace handoffs
    def _on_fetched(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
        # the trainer reports the fetch time with the batch; a relay reports this when a
        # gathered batch enters its send queue (a gradient hold may keep it there, as in a
        # store's NIC queue): for --trace, the queued time of that relay transfer
        if self.opts.trace:
            w, m = int(body["trainer"]), self.state.cluster.machine_index(r.launch.machine)
            if m != self.state.T[w]:
                self._handoff(w, int(body["seq"]), "relay", src=m, queued=self.now())

    def _on_arrived(self, name: str, r: RoleState, body: dict[str, Any]) -> None:
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
        ms = self.state.cluster.machines
        self.event({"type": "transfer", "trainer": w, "seq": seq, "kind": kind,
                    "src": ms[h["src"]].name, "dst": ms[self.state.T[w]].name,
                    "bytes": h["bytes"],
                    "queued": h["queued"], "done": max(h["done"], h["queued"])})

    # ------------------------------------------------------------------ trained
    def on_trained(self, w: int, seq: int, item: Item, body: dict[str, Any], now: float) -> None:
        """Tell the policy ``(w, seq)`` is trained, learn from its times, forget the batch."""
        key = (w, seq)
        self.policy.on_trained(BatchKey(w, seq), now)
        if self.learn and item.phase == 0:
            self._learn(w, self.sampled_info.get(key, {}).get("edges", 0), body)
        self.sampled_info.pop(key, None)
        for k in [k for k in self.ranked if k[1] == w and k[2] == seq]:
            del self.ranked[k]
        for kind in ("block", "relay"):  # a same-machine BLOCK's receipt (--trace)
            self.handoffs.pop((w, seq, kind), None)

    def _learn(self, w: int, edges: int, body: dict[str, Any]) -> None:
        """Without a profile: moving averages of trainer ``w``'s measured stage times (and
        train time per sampled edge, which prices the next batch once its size is known)."""
        a = LEARN_RATE
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


__all__ = ["PolicyDriver"]
