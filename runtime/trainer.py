"""Trainer: receives blocks + features, runs forward/backward, all-reduces, evaluates, saves.

Two threads, one owner per socket: the *I/O thread* (:class:`Inbox`) owns every ZeroMQ socket
of the process -- the data PULL socket where samplers push ``BLOCK`` and relays push ``FEATS``,
the store connections when this trainer gathers its own features (``fetch_at`` is its own
machine), and the coordinator's control socket -- and assembles complete mini-batches; the
*main thread* trains them in sequence order and hands events back through a queue.

Per mini-batch the main thread measures, at each stage boundary: ``wait_s`` (blocked waiting for
the next batch: the input pipeline was behind), ``train_s`` (forward + backward + optimizer
step, including the emulated slow-down below), ``allreduce_s`` (the gradient all-reduce with
``torch.distributed``: the synchronous barrier, waiting for the slowest trainer included) and
``barrier_at`` (wall-clock second the trainer reached it, so the evaluation can tell the
all-reduce itself from waiting and from trainers leaving it at different moments); the
batch itself carries ``sample_s`` and ``fetch_s`` measured where those stages ran.

Gradients are averaged over trainers only (gloo on CPU, NCCL when every trainer has its own
CUDA device). Dropout is seeded per (job seed, trainer, sequence number), so a run is
reproducible and equal to :mod:`~gnnsched.runtime.reference`.

Checkpoints (what recovery resumes from). Every ``checkpoint_every`` training steps and at the
end of every epoch, trainer 0 saves model + optimizer + the step (``seq``) and epoch it
completed: written to a temporary file, fsynced, then renamed, so a crash leaves the previous
checkpoint intact; ``latest.pt`` and ``epoch-NNN.pt`` (NNN: the log's 1-based epoch,
:mod:`~gnnsched.runtime.checkpoints`) are hard links swapped in the same way, and each file
has a SHA-256 digest beside it that is checked before a checkpoint is loaded.
Only then does it report ``checkpointed`` to the coordinator, which therefore only ever rolls
back to a complete file. Trainers are synchronous, so trainer 0's state is every trainer's.
Started with ``resume`` in its configuration, a trainer loads that checkpoint and trains the
steps after it: every mini-batch being a function of (seed, trainer, step), this replays
exactly the lost steps from exactly the model state they first saw.

Slower devices on a CPU box: a cluster may say a trainer's GPU has ``speed`` < 1 relative to the
profiling device. With ``emulate_speed`` (on by default only when there is no CUDA) each step
is stretched by sleeping ``c (1/speed - 1)`` after its compute, ``c`` being the process's CPU
seconds during the compute, so a step costs what it would at ``speed`` and decisions that depend
on device speed are visible in real runs. CPU seconds, not wall seconds: on a shared box the
wall time also holds waits for a core, which a slow device would not multiply (stretching it
multiplied that noise 1/speed times: steps of one plan ranged 30 ms..1.5 s at speed 1/4).
Faster-than-reference devices cannot be emulated and run at this machine's speed.

On the scale model (``speed_clock: wall``) the stretch is ``w (1/speed - 1)``, ``w`` being the
compute's wall time: there the trainer's control group holds one core / D whatever the
device's speed (:func:`gnnsched.runtime.cgroups.device_quota`), so the quota dilates the compute
and the sleep must be dilated alike; and the host's groups keep other roles' waits for a core
out of it. Process CPU seconds would also count the I/O thread's work during the compute.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from gnnsched.runtime import checkpoints, ledger
from gnnsched.runtime.fetcher import Gather, fill_cache, gather_stats, shm_of
from gnnsched.runtime.ledger import section
from gnnsched.runtime.model import Block, build_model
from gnnsched.runtime.role import PHASES, Role, seeds_hash
from gnnsched.runtime.step import (
    count_correct,
    evaluate,
    flat_grads,
    forward_backward,
    predictions,
    set_grads,
)
from gnnsched.runtime.store_client import StoreClient
from gnnsched.runtime.transport import BULK, Channel, Kind, Message, MessageError, ctrl


@dataclass
class Batch:
    """A complete mini-batch: blocks, input features, labels, and upstream stage times."""

    seq: int
    phase: int
    seeds: np.ndarray
    labels: np.ndarray
    blocks: list[Block]
    feats: np.ndarray
    sample_s: float
    fetch_s: float
    sample_wait_s: float = 0.0  # of sample_s: the sampler waiting for remote hops' answers


def blocks_of(msg: Message) -> list[Block]:
    """The blocks of a ``BLOCK`` message, with their index ranges checked."""
    out = []
    for i in range(msg["layers"]):
        src, dst = msg.arrays[f"src{i}"], msg.arrays[f"dst{i}"]
        ns, nd = msg[f"num_src{i}"], msg[f"num_dst{i}"]
        if len(src) != len(dst) or not 0 <= nd <= ns:
            raise MessageError(f"BLOCK.layer{i}: {len(src)} sources vs {len(dst)} "
                               f"destinations, {ns} src nodes, {nd} dst nodes")
        if len(src) and (src.min() < 0 or src.max() >= ns or dst.min() < 0 or dst.max() >= nd):
            raise MessageError(f"BLOCK.layer{i}: edge index outside the block")
        if i and msg[f"num_src{i}"] != msg[f"num_dst{i - 1}"]:
            raise MessageError(f"BLOCK.layer{i}: {ns} sources but layer {i - 1} has {nd} "
                               "destinations")
        with section("copy:blocks"):
            out.append(Block(torch.from_numpy(src.copy()), torch.from_numpy(dst.copy()), ns, nd))
    if out and out[0].num_src != len(msg.arrays["input_nodes"]):
        raise MessageError("BLOCK.input_nodes: does not match the first layer's sources")
    if out and out[-1].num_dst != len(msg.arrays["seeds"]):
        raise MessageError("BLOCK.seeds: does not match the last layer's destinations")
    return out


class Inbox(threading.Thread):
    """The I/O thread: assembles batches from BLOCK + FEATS (or its own gather)."""

    def __init__(self, trainer: Trainer) -> None:
        super().__init__(name="inbox", daemon=True)
        self.t = trainer
        self.cond = threading.Condition()
        self.ready: dict[int, Batch] = {}
        self.blocks: dict[int, Message] = {}
        self.feats: dict[int, tuple[np.ndarray, float]] = {}
        self.error: BaseException | None = None
        self.stopped = False
        self.abort = threading.Event()  # set by the main thread when it fails
        self.outbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        ctx = trainer.ctx
        self.wake_rx = ctx.socket(zmq.PULL)
        self.wake_rx.bind(f"inproc://wake-{id(self)}")
        self.wake_tx = ctx.socket(zmq.PUSH)  # used by the main thread only
        self.wake_tx.connect(f"inproc://wake-{id(self)}")

    # ---------------------------------------------------------------- main-thread API
    def get(self, seq: int, timeout: float) -> Batch:
        with section("wait:batch"), self.cond:
            ok = self.cond.wait_for(lambda: seq in self.ready or self.error is not None
                                    or self.stopped, timeout)
            if self.error is not None:
                raise RuntimeError(f"{self.t.name} I/O thread failed: {self.error}") \
                    from self.error
            if self.stopped:
                raise SystemExit(0)
            if not ok:
                raise TimeoutError(f"{self.t.name}: mini-batch {seq} did not arrive within "
                                   f"{timeout:.0f} s")
            return self.ready.pop(seq)

    def send(self, op: str, **fields: Any) -> None:
        with section("rpc:events"):  # to the I/O thread, which sends it to the coordinator
            self.outbox.put({"op": op, **fields})
            self.wake_tx.send(b"", flags=zmq.NOBLOCK)

    # ---------------------------------------------------------------- I/O thread
    def run(self) -> None:
        ledger.start_thread("inbox")
        try:
            with section("other:loop"):
                self.loop()
        except BaseException as exc:  # surfaced to the main thread by get()
            with self.cond:
                self.error = exc
                self.cond.notify_all()
        finally:
            ledger.finish_thread()

    def loop(self) -> None:
        t = self.t
        poller = zmq.Poller()
        socks = [t.data_sock, t.control.sock, self.wake_rx]
        gather = t.gather
        if gather is not None:
            socks += gather.stores.poll_sockets
        for s in socks:
            poller.register(s, zmq.POLLIN)
        while not self.abort.is_set():
            with section("wait:poll"):
                events = dict(poller.poll(200))
            for sock in events:
                if sock is t.data_sock:
                    self.drain(self.on_data)
                elif sock is t.control.sock:
                    t.poll_control()
                elif sock is self.wake_rx:
                    self.drain_wake()
                else:
                    gather.handle(sock)
            while True:  # forward the main thread's events
                try:
                    body = self.outbox.get_nowait()
                except queue.Empty:
                    break
                op = body.pop("op")
                t.control.send(ctrl(op, **body))
                if op == "done":
                    return self._stop_when_told(poller)
            if t.stopping:
                with self.cond:
                    self.stopped = True
                    self.cond.notify_all()
                return
            if gather is not None and gather.oldest() > t.timeout:
                raise TimeoutError(f"{t.name}: a feature gather waited more than "
                                   f"{t.timeout:.0f} s for the stores")

    def drain_wake(self) -> None:
        with section("rpc:events"):
            while True:
                try:
                    self.wake_rx.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break

    def _stop_when_told(self, poller: zmq.Poller) -> None:
        """After ``done``: wait for ``stop``, draining every socket so peers never block on
        us (each ready socket is read, or the poll would return at once, again and again)."""
        t = self.t
        while not t.stopping and not self.abort.is_set():
            with section("wait:poll"):
                ready = dict(poller.poll(200))
            for sock in ready:
                if sock is t.control.sock:
                    t.poll_control()
                elif sock is self.wake_rx:
                    self.drain_wake()
                elif sock is t.data_sock:
                    self.drain(lambda msg: None)
                elif t.gather is not None:
                    try:
                        t.gather.handle(sock)
                    except MessageError as exc:  # an answer to nothing we still need
                        t.log(f"dropped a late store answer: {exc}")
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def drain(self, handle: Any) -> None:
        """Every queued data message to ``handle``; malformed or unexpected ones (a bug, or a
        stranger on an unsecured cluster) are logged and dropped, never trusted."""
        t = self.t
        while True:
            try:
                got = t.data.recv_now()
                if got is None:
                    return
                handle(got[1])
            except MessageError as exc:
                t.rejected += 1
                t.log(f"rejected a data message: {exc}")

    def on_data(self, msg: Message) -> None:
        t = self.t
        if msg.kind in (Kind.BLOCK, Kind.FEATS) and (
                msg["trainer"] != t.rank or msg["seq"] not in t.expected):
            raise MessageError(f"{t.name}: {msg.kind.name} for trainer {msg['trainer']} step "
                               f"{msg['seq']}, which it does not train")
        if msg.kind == Kind.BLOCK:
            seq = msg["seq"]
            if seq in self.blocks:
                raise MessageError(f"{t.name}: a second BLOCK for step {seq}")
            self.blocks[seq] = msg
            if t.gather is not None:
                t.gather.start(t.rank, seq, msg.arrays["input_nodes"])
        elif msg.kind == Kind.FEATS:
            self.feats[msg["seq"]] = (msg.arrays["feats"], msg["fetch_us"] / 1e6)
        else:
            raise MessageError(f"{t.name}: unexpected {msg.kind.name} on the data socket")
        if t.trace:  # the done time of a sampler's (block) or relay's (relay) transfer
            t.control.send(ctrl("arrived", trainer=t.rank, seq=msg["seq"],
                                kind="block" if msg.kind == Kind.BLOCK else "relay",
                                bytes=sum(int(a.nbytes) for a in msg.arrays.values())))
        self.complete(msg["seq"])

    def on_gathered(self, trainer: int, seq: int, feats: np.ndarray, took: float) -> None:
        self.feats[seq] = (feats, took)
        self.complete(seq)

    def complete(self, seq: int) -> None:
        if seq not in self.blocks or seq not in self.feats:
            return
        msg = self.blocks.pop(seq)
        feats, fetch_s = self.feats.pop(seq)
        if feats.shape != (len(msg.arrays["input_nodes"]), self.t.feature_dim):
            raise MessageError(f"{self.t.name}: features of batch {seq} have shape "
                               f"{feats.shape}, blocks need "
                               f"({len(msg.arrays['input_nodes'])}, {self.t.feature_dim})")
        blocks = blocks_of(msg)
        with section("copy:batch"):
            seeds, labels = msg.arrays["seeds"].copy(), msg.arrays["labels"].copy()
            feats = feats if feats.flags.writeable else feats.copy()
        batch = Batch(seq, msg["phase"], seeds, labels, blocks, feats,
                      msg["sample_us"] / 1e6, fetch_s, msg["wait_us"] / 1e6)
        with self.cond:
            self.ready[seq] = batch
            self.cond.notify_all()


class Trainer(Role):
    """The trainer role (see the module docstring)."""

    role = "trainer"

    def setup(self) -> None:
        cfg = self.config
        self.rank = int(self.args.id)
        me = cfg["trainers"][self.rank]
        self.world = len(cfg["trainers"])
        self.machine_index = cfg["machines"].index(self.args.machine)
        self.feature_dim = int(cfg["feature_dim"])
        self.timeout = float(cfg.get("request_timeout", 120.0))
        self.trace = bool(cfg.get("trace"))  # report each BLOCK / FEATS received
        self.speed = float(me.get("speed", 1.0))
        self.has_cuda = torch.cuda.is_available()
        self.device = torch.device(f"cuda:{int(me['device']) % torch.cuda.device_count()}"
                                   if self.has_cuda else "cpu")
        emulate = cfg.get("emulate_speed")
        self.emulate = (not self.has_cuda) if emulate is None else bool(emulate)
        self.wall_clock = cfg.get("speed_clock") == "wall"  # the scale model (docstring)
        self.data_sock, self.data_endpoint = self.bind(zmq.PULL, BULK)
        self.data = Channel(self.data_sock, f"{self.name} data")
        self.rejected = 0
        # Model and optimizer now, while stores load their partitions (the first Adam imports
        # torch._dynamo: ~2 s that would otherwise delay the first iteration).
        job = cfg["job"]
        torch.manual_seed(int(job["seed"]))
        self.model = build_model(job["model"], self.feature_dim, int(job["hidden"]),
                                 int(cfg["num_classes"]), len(job["fanouts"]),
                                 float(job["dropout"])).to(self.device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=float(job["lr"]))
        self.resume_seq = -1
        resume = cfg.get("resume")
        if resume:
            self.doing = f"loading checkpoint of step {resume['seq']}"
            self.load_checkpoint(resume["path"], int(resume["seq"]))
        items = [tuple(int(v) for v in it) for it in cfg["items"]]
        self.items = [it for it in items if it[0] > self.resume_seq]
        self.expected = {it[0] for it in self.items}
        self.master_port = None
        self.tcp_store = None
        self.allreduce_bytes = 0
        self._grad_volume: int | None = None
        if self.world > 1 and self.rank == 0:
            import socket

            import torch.distributed as dist

            # torch's rendezvous store would listen on every interface; handed a socket we
            # bound, it listens only on this machine's address from the cluster file
            family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
            self.store_sock = socket.socket(family, socket.SOCK_STREAM)
            self.store_sock.bind((self.args.host, 0))
            self.store_sock.listen(128)
            self.tcp_store = dist.TCPStore(self.args.host, self.store_sock.getsockname()[1],
                                           self.world, is_master=True,
                                           wait_for_workers=False,
                                           timeout=timedelta(seconds=self.timeout),
                                           master_listen_fd=self.store_sock.fileno(),
                                           use_libuv=True)
            self.master_port = self.tcp_store.port

    def ready_fields(self) -> dict[str, Any]:
        cuda = f"{os.uname().nodename}:{self.device.index}" if self.has_cuda else None
        return {"data": self.data_endpoint, "master_port": self.master_port, "cuda": cuda}

    # ---------------------------------------------------------------- distributed
    def init_dist(self) -> None:
        if self.world == 1:
            return
        import torch.distributed as dist

        peers = self.peers
        store = self.tcp_store or dist.TCPStore(
            peers["master_addr"], int(peers["master_port"]), self.world, is_master=False,
            timeout=timedelta(seconds=self.timeout))
        dist.init_process_group(peers["backend"], store=store, rank=self.rank,
                                world_size=self.world, timeout=timedelta(seconds=self.timeout))

    def grad_volume(self, model: torch.nn.Module) -> int:
        """Bytes a ring all-reduce of ``model``'s gradients sends from each trainer (fixed by
        the model, so counted once)."""
        if self._grad_volume is None:
            n = sum(p.numel() * p.element_size() for p in model.parameters())
            self._grad_volume = int(2 * (self.world - 1) / self.world * n)
        return self._grad_volume

    def allreduce(self, model: torch.nn.Module) -> None:
        """Average gradients over trainers (one flat buffer: one collective per step)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        params = list(model.parameters())
        flat = flat_grads(params)
        dist.all_reduce(flat)
        # what a ring all-reduce sends from this trainer (gloo/NCCL traffic is not ours to count)
        self.allreduce_bytes += self.grad_volume(model)
        flat.div_(self.world)
        set_grads(params, flat)

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        cfg, peers = self.config, self.peers
        t0 = time.monotonic()
        with section("rpc:init_dist"):
            self.init_dist()
        self.log(f"torch.distributed ({peers.get('backend')}) up in {time.monotonic() - t0:.2f} s")
        model, opt = self.model, self.opt
        if self.world > 1:
            import torch.distributed as dist

            for p in model.parameters():  # identical start even if seeding ever differs
                dist.broadcast(p.data, 0)
        me = peers["trainers"][self.rank]
        self.gather = None
        self.inbox = Inbox(self)
        if me.get("relay") is None:  # fetch_at == this machine: gather in process
            node_part = np.load(cfg["node_part_file"], allow_pickle=False)
            stores = StoreClient.from_peers(self.ctx, peers,
                                 self.name, self.ident.encode(), self.machine_index,
                                 curve=self.curve, shm=shm_of(cfg, node_part), log=self.log)
            self.gather = Gather(stores, node_part, cfg["part_store"], self.feature_dim,
                                 self.machine_index, self.inbox.on_gathered)
            fill_cache(self.gather, cfg, self.machine_index)
        self.inbox.start()
        self.log(f"model on {self.device}, {sum(p.numel() for p in model.parameters())} "
                 f"parameters; fetching {'in process' if self.gather else 'via relay'}")
        try:
            self.train_items(model, opt)
        except BaseException:
            self.inbox.abort.set()  # the control socket is the I/O thread's until it exits
            self.inbox.join(5.0)
            raise
        self.inbox.join()
        if self.inbox.error is not None:
            raise RuntimeError(f"{self.name} I/O thread failed: {self.inbox.error}")

    def train_items(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        cfg, job = self.config, self.config["job"]
        self.grad_first = bool(cfg.get("grad_first")) and self.world > 1
        every = int(cfg.get("checkpoint_every", 0) or 0)
        last_train = {}
        for seq, epoch, phase, _ in cfg["items"]:
            if phase == 0:
                last_train[epoch] = seq
        loss_fn = torch.nn.CrossEntropyLoss()
        for seq, epoch, phase, index in self.items:
            t0 = time.monotonic()
            self.doing = f"waiting for the mini-batch of step {seq} (epoch {epoch + 1})"
            batch = self.inbox.get(seq, self.timeout)
            wait_s = time.monotonic() - t0
            self.doing = f"{PHASES[phase]} step {seq} (epoch {epoch + 1}, batch {index})"
            self.inbox.send("started", trainer=self.rank, seq=seq)  # opens the prefetch window
            with section("copy:to_device"):
                x = torch.from_numpy(batch.feats).to(self.device, non_blocking=True)
                y = torch.from_numpy(batch.labels).to(self.device)
                blocks = [b.to(self.device) for b in batch.blocks]
            rec: dict[str, Any] = {"trainer": self.rank, "seq": seq, "epoch": epoch,
                                   "phase": PHASES[phase], "index": index, "n": len(batch.seeds),
                                   "seeds": seeds_hash(batch.seeds), "wait_s": wait_s,
                                   "sample_s": batch.sample_s, "fetch_s": batch.fetch_s,
                                   "sample_wait_s": batch.sample_wait_s,
                                   "input_nodes": int(batch.feats.shape[0])}
            t1, cpu1 = time.monotonic(), time.process_time()
            if phase == 0:
                with section("work:forward_backward"):
                    out, loss = forward_backward(model, blocks, x, y, opt, loss_fn,
                                                 int(job["seed"]), self.rank, seq)
                    self.sync()
                self.stretch(t1, cpu1)
                t2, reached = time.monotonic(), time.time()
                if self.grad_first:  # stores hold traffic into this machine meanwhile
                    self.inbox.send("allreduce", trainer=self.rank, seq=seq, on=True,
                                    bytes=self.grad_volume(model))
                self.doing = f"all-reducing step {seq} (epoch {epoch + 1})"
                with section("rpc:allreduce"):  # the barrier: waiting for the others included
                    self.allreduce(model)
                    self.sync()
                t3 = time.monotonic()
                if self.grad_first:
                    self.inbox.send("allreduce", trainer=self.rank, seq=seq, on=False)
                with section("work:optimizer"):
                    opt.step()
                    self.sync()
                rec.update(loss=float(loss.detach()), allreduce_s=t3 - t2, barrier_at=reached,
                           train_s=(t2 - t1) + (time.monotonic() - t3))
            else:
                with section("work:evaluate"):
                    out = evaluate(model, blocks, x)
                    self.sync()
                self.stretch(t1, cpu1)
                rec.update(train_s=time.monotonic() - t1, allreduce_s=0.0)
                with section("work:evaluate"):
                    pred, prob = predictions(out)  # the coordinator scores the whole phase
                with section("serialise:results"):
                    rec.update(y=batch.labels.tolist(), pred=pred.tolist(),
                               prob=None if prob is None else prob.tolist())
            with section("work:accuracy"):
                rec["correct"] = count_correct(out, y)
            epoch_end = seq == last_train.get(epoch)
            if phase == 0 and self.rank == 0 and (epoch_end or (every and (index + 1) % every
                                                                == 0)):
                self.doing = f"checkpointing step {seq} (epoch {epoch + 1})"
                with section("other:checkpoint"):
                    self.checkpoint(model, opt, epoch, seq, epoch_end)
            self.inbox.send("trained", **rec)
        self.doing = "done: waiting for stop"
        self.inbox.send("done", trainer=self.rank)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def stretch(self, t1: float, cpu1: float) -> None:
        """Sleep so that the compute begun at ``t1`` (wall) / ``cpu1`` (CPU) costs what it
        would on a device of this trainer's speed (the module docstring)."""
        if self.emulate and 0 < self.speed < 1:
            compute = (time.monotonic() - t1 if self.wall_clock
                       else time.process_time() - cpu1)
            with section("wait:emulated_speed"):
                time.sleep(compute * (1.0 / self.speed - 1.0))

    def checkpoint(self, model: torch.nn.Module, opt: torch.optim.Optimizer, epoch: int,
                   seq: int, epoch_end: bool = True) -> None:
        """Atomic, with a digest (:func:`~gnnsched.runtime.checkpoints.save`); reported to
        the coordinator only once complete. A write that fails (a full disk) is reported as
        such and training goes on: the previous checkpoint is intact and stays the one
        recovery and ``--resume`` use."""
        t0 = time.monotonic()
        folder = Path(self.config["run_dir"]) / "checkpoints"
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                 "seq": seq, "job": self.config["job"], "version": checkpoints.VERSION}
        alias_of_epoch = checkpoints.epoch_file(epoch) if epoch_end else None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            checkpoints.mark(folder)  # epoch files named as the log numbers epochs
            name = checkpoints.save(folder, state, seq, ["latest.pt"] + (
                [alias_of_epoch] if alias_of_epoch else []), torch.save)
        except OSError as exc:  # CheckpointWriteError; mkdir / mark on a full disk
            self.log(f"{exc}; the previous checkpoint is intact, training goes on")
            self.inbox.send("checkpoint_failed", seq=seq, epoch=epoch, error=str(exc))
            return
        self.inbox.send("checkpointed", seq=seq, epoch=epoch, path=str(name),
                        epoch_file=alias_of_epoch, bytes=name.stat().st_size,
                        seconds=time.monotonic() - t0)

    def load_checkpoint(self, path: str, seq: int) -> None:
        """Model and optimizer as they were after step ``seq`` (tensors only: no pickle code
        runs, ``weights_only``)."""
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
        except (OSError, RuntimeError, ValueError) as exc:
            raise RuntimeError(f"{self.name}: cannot load checkpoint {path}: {exc}") from None
        if int(state.get("seq", -2)) != seq:
            raise RuntimeError(f"{self.name}: checkpoint {path} is of step {state.get('seq')}, "
                               f"the coordinator resumes after step {seq}")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.resume_seq = seq
        self.log(f"resumed from {path}: step {seq} (epoch {int(state.get('epoch', -1)) + 1})")

    def stats(self) -> dict[str, Any]:
        g = getattr(self, "gather", None)
        return {"fetched": g.fetched if g else 0, **gather_stats(g),
                "allreduce_bytes": getattr(self, "allreduce_bytes", 0),
                "rejected": getattr(self, "rejected", 0)}

    def close(self) -> None:
        if getattr(self, "world", 1) > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        inbox = getattr(self, "inbox", None)
        if inbox is not None:
            inbox.wake_rx.close(0)
            inbox.wake_tx.close(0)
        if getattr(self, "gather", None) is not None:
            self.gather.stores.close()
        if hasattr(self, "data"):
            self.data.close()
        if getattr(self, "store_sock", None) is not None:
            self.store_sock.close()
