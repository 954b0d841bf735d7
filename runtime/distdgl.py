"""Run real DistDGL (DGL 2.1.0's own distributed training) as the peer gnnsched is measured
against: same partitions, hosts, model and hyper-parameters, and no hand-written ip_config.

DistDGL's model is *colocation*: every partition has a ``DistGraphServer`` on the machine
that stores it, and the trainers run on those same machines, reading their own partition
through shared memory and every other one over the network. So:

* ip_config has one line per partition (DGL requires as many ip_config "machines" as
  partitions): the IP of the machine storing it and a port chosen free up front; a host
  storing several partitions gets several lines with distinct ports.
* A store machine without a GPU cannot host its trainers, so DistDGL cannot run the cluster:
  :func:`run_distdgl` returns ``feasible=False`` naming the host(s), and starts nothing.
  (Trainers then run on CPU on this box; the cluster's GPU is emulated.)
* ``job.trainers`` trainers. With one per partition (``trainers == num_parts``) trainer ``p``
  sits with partition ``p`` and its seeds come from DGL's ``node_split`` -- DistDGL proper.
  With fewer, DGL's role ranking requires the trainers' machine ids to be ``0..T-1``
  (``dgl.distributed.role.init_role``), so trainer ``t`` sits with partition ``t``; the
  seeds of the partitions ``T..P-1`` (no trainer of their own) go to a trainer on the same
  host if there is one, else to the least loaded, and DDP's ``join`` absorbs the uneven
  mini-batch counts. ``node_split`` cannot be used there (it needs ``P | T``).
* ``DGL_NUM_SAMPLER=0``: sampling runs inside the trainer process (no sampler pool), to keep
  the process count small on few cores; DGL_NUM_SERVER=1 (no backup servers).
* Slower devices are emulated as in gnnsched's trainer (``emulate_speed``, on by default, since
  DistDGL trains on this box's CPU): a trainer whose host's GPU has ``speed`` < 1 sleeps
  ``c (1/speed - 1)`` after each step's forward and backward compute of ``c`` CPU seconds (a
  DDP communication hook, before each gradient bucket's all-reduce), so both systems pay the
  same for an old GPU and the comparison stays fair on mixed-generation clusters.

Processes are started directly with DGL's environment contract (what ``tools/launch.py``
sets): servers get ``DGL_ROLE=server DGL_SERVER_ID DGL_NUM_SERVER DGL_NUM_CLIENT
DGL_IP_CONFIG DGL_CONF_PATH DGL_GRAPH_FORMAT``, trainers ``DGL_ROLE=client DGL_NUM_SAMPLER
DGL_NUM_SERVER DGL_IP_CONFIG DGL_CONF_PATH DGL_GROUP_ID`` plus torch's ``MASTER_ADDR
MASTER_PORT RANK WORLD_SIZE`` for gloo. Each process runs in its own process group (own
session), logs to ``out_dir/logs/``, and is killed and reaped in ``finally``; the shared-memory
segments of a run carry a unique token and are removed afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gnnsched.runtime.procs import Child, start_in_session, stop_groups
from gnnsched.spec import ClusterSpec, JobSpec, SpecError

LOOPBACK = "127.0.0.1"
ROLE_MODULE = "gnnsched.runtime.distdgl_role"
SHM_DIR = Path("/dev/shm")


class DistDGLError(RuntimeError):
    """A DistDGL run that was feasible but failed: timeout, a crashed process, bad output."""


@dataclass
class TrainerSlot:
    """Where one trainer runs: ``home`` is the partition it sits with (its DGL machine id);
    ``parts`` are the partitions whose seeds it trains on; ``speed`` is its device's speed
    relative to the profiling device (the host's GPUs in turn, one per trainer there)."""

    rank: int
    host: str
    home: int
    parts: list[int]
    speed: float = 1.0


@dataclass
class DistDGLResult:
    """Outcome of one DistDGL run. ``epoch_time_s`` is the median over epochs after the first
    (the first pays connection and cache warm-up); epoch times are barrier to barrier, without
    evaluation. ``stage_s``: seconds per epoch in sampling (remote hops included), feature
    fetching and training (forward, backward with DDP's all-reduce, step), the mean over
    trainers of the median over epochs after the first. ``bytes_sent`` (host -> bytes sent on its non-loopback interfaces during the
    training epochs, evaluation excluded; read from ``/proc/self/net/dev`` of one trainer per
    host namespace) is only measured when each host is its own network namespace
    (``exec_prefix``); on loopback every host shares ``lo`` and it is ``None``."""

    feasible: bool
    reason: str = ""
    epoch_times_s: list[float] = field(default_factory=list)
    epoch_time_s: float | None = None
    test_accuracy: float | None = None
    val_accuracy: list[float | None] = field(default_factory=list)
    metric: str = "accuracy"  # the job's metric, resolved for the task (gnnsched.metrics)
    test_metric: float | None = None
    val_metric: list[float | None] = field(default_factory=list)
    majority_rate: float | None = None  # test accuracy of always predicting the commonest class
    stage_s: dict[str, float] = field(default_factory=dict)
    bytes_sent: dict[str, int] | None = None
    bytes_note: str = ""
    wall_s: float = 0.0
    trainers: list[dict[str, Any]] = field(default_factory=list)
    ip_config: list[str] = field(default_factory=list)
    out_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------
# Pure planning: feasibility, trainer slots, ports


def infeasible_reason(cluster: ClusterSpec) -> str:
    """Why DistDGL cannot run ``cluster`` (empty if it can): a store host without a GPU."""
    bad = [m for m in cluster.machines if m.partitions and not m.gpus]
    if not bad:
        return ""
    names = ", ".join(f"{m.name!r} (partitions {', '.join(map(str, m.partitions))})"
                      for m in bad)
    return (f"DistDGL colocates each partition's trainer with its graph server, but store "
            f"host{'s' if len(bad) > 1 else ''} {names} ha{'ve' if len(bad) > 1 else 's'} no "
            f"GPU")


def plan_trainers(cluster: ClusterSpec, trainers: int,
                  train_counts: list[int] | None = None,
                  split: list[list[int]] | None = None) -> list[TrainerSlot]:
    """Place ``trainers`` DistDGL trainers: trainer ``t`` with partition ``t`` (see module doc);
    partitions without a trainer give their seeds to one on the same host, else to the
    trainer with the fewest seeds so far (``train_counts[p]``: seeds of part ``p``).

    ``split`` fixes the seed split instead (trainer ``t`` trains the seeds of ``split[t]``,
    which must hold partition ``t``): an evaluation then trains DistDGL on the same split as
    the system it is compared with."""
    P = cluster.num_parts
    if not 1 <= trainers <= P:
        raise SpecError(cluster.source, "trainers", f"DistDGL needs 1..{P} trainers (one "
                        f"machine id per trainer, at most one per partition), got {trainers}")
    if split is not None:
        flat = sorted(p for g in split for p in g)
        if (len(split) != trainers or flat != list(range(P))
                or any(t not in g for t, g in enumerate(split))):
            raise SpecError(cluster.source, "split", f"{split} is not a DistDGL seed split",
                            f"{trainers} groups covering partitions 0..{P - 1} once, group t "
                            "holding partition t (trainer t sits with partition t)")
    counts = list(train_counts) if train_counts is not None else [1] * P
    host_of = [cluster.machines[cluster.store_of(p)].name for p in range(P)]
    slots = []
    for t in range(trainers):
        m = cluster.machines[cluster.store_of(t)]
        nth = sum(s.host == m.name for s in slots)
        speed = m.gpus[nth % len(m.gpus)].speed if m.gpus else 1.0
        parts = sorted(split[t]) if split is not None else [t]
        slots.append(TrainerSlot(t, host_of[t], t, parts, float(speed)))
    if split is not None:
        return slots
    load = [counts[t] for t in range(trainers)]
    for p in range(trainers, P):
        same = [s.rank for s in slots if s.host == host_of[p]]
        pool = same or [s.rank for s in slots]
        best = min(pool, key=lambda r: (load[r], r))
        slots[best].parts.append(p)
        load[best] += counts[p]
    return slots


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct TCP ports free right now (all sockets held until every one is found)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host if host == LOOPBACK else "", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------
# Processes


def _start(name: str, argv: list[str], env: dict[str, str], log: Path) -> Child:
    return Child(name, start_in_session(argv, env, log, append=False), log)


def _stop(procs: list[Child], grace_s: float = 3.0) -> None:
    """SIGTERM every process group, SIGKILL what is left after ``grace_s``, reap all; the
    groups of leaders that already exited too (they may leave children behind)."""
    stop_groups(procs, grace_s, kill_wait=10.0, orphans=True)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _remove_shm(token: str) -> None:
    if SHM_DIR.is_dir():
        for f in SHM_DIR.iterdir():
            if token in f.name:
                try:
                    f.unlink()
                except OSError:
                    pass


# --------------------------------------------------------------------------------------
# The run


def run_distdgl(
    cluster: ClusterSpec,
    job: JobSpec,
    part_dir: str | Path,
    *,
    hosts: dict[str, str] | None = None,
    exec_prefix: Callable[[str], list[str]] | None = None,
    epochs: int | None = None,
    out_dir: str | Path,
    timeout_s: float = 600.0,
    eval_fanouts: list[int] | None = None,
    eval_batch_size: int | None = None,
    emulate_speed: bool = True,
    split: list[list[int]] | None = None,
    python: str = sys.executable,
) -> DistDGLResult:
    """Train ``job`` with DistDGL on ``cluster``'s store hosts over the partitions in
    ``part_dir`` and return the measured epoch times and accuracies.

    ``hosts`` maps machine name to IP (default: ``machine.address`` when ``exec_prefix`` is
    given, else 127.0.0.1 for all). ``exec_prefix(host)`` wraps a host's commands (e.g.
    ``["ip", "netns", "exec", ns]``); the DGL environment is passed on the command line via
    ``env`` too, so prefixes that drop the environment (ssh) still work. Evaluation uses
    ``eval_fanouts`` (default: the job's ``evaluation.fanouts``, else all neighbours, ``-1``
    per layer, so accuracy does not depend on sampling) in batches of ``eval_batch_size``
    (default: the job's). The job's ``evaluation.max_nodes`` sample is gnnsched's: the same
    nodes as every plan of the job evaluates; each trainer writes the original ids it tested
    to ``test-nodes-RANK.npy`` in ``out_dir``. ``emulate_speed`` stretches training steps of
    trainers on slower GPUs (see the module doc). ``split`` fixes the trainers' seed split (:func:`plan_trainers`).
    Infeasible clusters return ``feasible=False`` without starting anything;
    a feasible run that fails or exceeds ``timeout_s`` raises :class:`DistDGLError`.
    """
    from gnnsched.datasets import open_partitions

    t_start, deadline = time.perf_counter(), time.monotonic() + timeout_s
    out = Path(out_dir)
    reason = infeasible_reason(cluster)
    if reason:
        return DistDGLResult(feasible=False, reason=reason, out_dir=str(out))
    pset = open_partitions(part_dir, verify=False)
    if pset.num_parts != cluster.num_parts:
        raise SpecError(cluster.source, "machines[*].partitions", f"cluster stores "
                        f"{cluster.num_parts} partitions but {part_dir} holds {pset.num_parts}",
                        "the partitions written for this cluster")
    P = pset.num_parts
    if job.trainers > P:
        raise SpecError(job.source, "trainers", f"{job.trainers} trainers but {P} partitions",
                        f"at most {P}")
    dgl_meta = json.loads(pset.config.read_text())
    node_ranges = [[int(a), int(b)] for a, b in next(iter(dgl_meta["node_map"].values()))]
    train_counts = [int(p.get("train", 1)) for p in pset.meta.get("parts", [])] or None
    slots = plan_trainers(cluster, job.trainers, train_counts, split)

    hosts = _store_hosts(cluster, hosts, exec_prefix)
    host_of = [cluster.machines[cluster.store_of(p)].name for p in range(P)]
    ports = free_ports(P + 1)
    ip_lines = [f"{hosts[host_of[p]]} {ports[p]}" for p in range(P)]
    master_port = ports[P]

    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    for stale in [*out.glob("trainer-*.json"), *out.glob("test-nodes-*.npy")]:
        stale.unlink()
    ip_config = out / "ip_config.txt"
    ip_config.write_text("\n".join(ip_lines) + "\n")
    token = f"gs{uuid.uuid4().hex[:10]}"
    n_epochs = int(epochs if epochs is not None else job.epochs)
    layers = len(job.fanouts)
    cfg = {
        "ip_config": str(ip_config.resolve()), "part_config": str(pset.config.resolve()),
        "graph_name": dgl_meta["graph_name"], "feature_dim": pset.feature_dim,
        "num_classes": pset.num_classes, "node_ranges": node_ranges,
        "shm_prefixes": [f"{token}p{p}_" for p in range(P)],
        "trainers": [asdict(s) for s in slots], "hosts": {h: hosts[h] for h in set(host_of)},
        "split": "node_split" if job.trainers == P else "by_partition",
        "job": {"hidden": job.hidden, "fanouts": list(job.fanouts), "dropout": job.dropout,
                "metric": job.metric,
                "lr": job.lr, "batch_size": job.batch_size, "seed": job.seed},
        "epochs": n_epochs, "eval_every": job.eval_every,
        "eval_fanouts": list(eval_fanouts or job.eval_fanouts or [-1] * layers),
        "eval_batch_size": int(eval_batch_size or job.eval_batch_size),
        # the job's cap on evaluated nodes: the sample of gnnsched's schedule
        "eval_max_nodes": job.eval_max_nodes,
        "orig_nids_file": str((pset.root / pset.meta.get("orig_nids", "orig_nids.npy"))
                              .resolve()),
        "out_dir": str(out.resolve()), "timeout_s": timeout_s,
        "emulate_speed": bool(emulate_speed),
    }
    config = out / "run.json"
    config.write_text(json.dumps(cfg, indent=1))

    common = {
        "DGL_DIST_MODE": "distributed", "DGLBACKEND": "pytorch",
        "DGL_IP_CONFIG": str(ip_config.resolve()), "DGL_CONF_PATH": str(pset.config.resolve()),
        "DGL_NUM_SERVER": "1", "DGL_NUM_SAMPLER": "0", "DGL_NUM_CLIENT": str(len(slots)),
        "DGL_GRAPH_FORMAT": "csc", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }

    def argv(host: str, extra: dict[str, str], role_args: list[str]) -> tuple[list[str], dict]:
        env_vars = {**common, **extra}
        cmd = ["env", *[f"{k}={v}" for k, v in env_vars.items()], python, "-m", ROLE_MODULE,
               *role_args, "--config", str(config.resolve())]
        prefix = exec_prefix(host) if exec_prefix is not None else []
        return prefix + cmd, {**os.environ, **env_vars}

    procs: list[Child] = []
    servers: list[Child] = []
    trainers: list[Child] = []
    try:
        for p in range(P):
            cmd, env = argv(host_of[p], {"DGL_ROLE": "server", "DGL_SERVER_ID": str(p)},
                            ["server", "--part", str(p)])
            servers.append(_start(f"server-{p}", cmd, env, logs / f"server-{p}.log"))
        procs += servers
        master = hosts[slots[0].host]
        for s in slots:
            cmd, env = argv(s.host, {"DGL_ROLE": "client", "DGL_GROUP_ID": "0",
                                     "MASTER_ADDR": master, "MASTER_PORT": str(master_port),
                                     "RANK": str(s.rank), "WORLD_SIZE": str(len(slots)),
                                     "LOCAL_RANK": "0"},
                            ["trainer", "--rank", str(s.rank)])
            trainers.append(_start(f"trainer-{s.rank}", cmd, env, logs / f"trainer-{s.rank}.log"))
        procs += trainers
        _wait(servers, trainers, deadline, timeout_s)
    finally:
        _stop(procs)
        _remove_shm(token)

    return _result(out, logs, slots, n_epochs, host_of, exec_prefix is not None, ip_lines,
                   time.perf_counter() - t_start)


def _store_hosts(cluster: ClusterSpec, hosts: dict[str, str] | None,
                 exec_prefix: Callable[[str], list[str]] | None) -> dict[str, str]:
    """Every store host's IP: ``hosts``, else its ``address`` (with ``exec_prefix``: each
    host in its own namespace or machine), else loopback for all."""
    if hosts is None:
        hosts = {}
        for m in cluster.machines:
            if exec_prefix is not None and m.address is None and m.partitions:
                raise SpecError(cluster.source, f"machines[{m.name}].address", "is missing",
                                "an IP per store host, or pass hosts={machine: ip}")
            hosts[m.name] = (m.address or LOOPBACK) if exec_prefix is not None else LOOPBACK
    for p in range(cluster.num_parts):
        h = cluster.machines[cluster.store_of(p)].name
        if h not in hosts:
            raise SpecError(cluster.source, f"machines[{h}]", "has no IP in hosts",
                            ", ".join(sorted(hosts)))
    return hosts


def _result(out: Path, logs: Path, slots: list[Any], n_epochs: int, host_of: list[str],
            namespaced: bool, ip_lines: list[str], wall_s: float) -> DistDGLResult:
    """The run's result from every trainer's JSON: the slowest trainer's epochs, the median
    stage times, bytes each host sent (measured only where hosts have their own NICs)."""
    rows = []
    for s in slots:
        f = out / f"trainer-{s.rank}.json"
        if not f.is_file():
            raise DistDGLError(f"trainer {s.rank} exited without writing {f}; log:\n"
                               f"{_tail(logs / f'trainer-{s.rank}.log')}")
        rows.append(json.loads(f.read_text()))
    per_epoch = [max(r["epochs"][e]["seconds"] for r in rows) for e in range(n_epochs)]
    steady = per_epoch[1:] or per_epoch
    first = 1 if n_epochs > 1 else 0
    stage_s = {k: statistics.fmean(statistics.median(e[k] for e in r["epochs"][first:])
                                   for r in rows)
               for k in ("sample_s", "fetch_s", "train_s")}
    bytes_sent = None
    note = "not measured: all hosts share the loopback interface (no exec_prefix)"
    if namespaced:
        bytes_sent, seen = {}, set()
        for r in rows:
            if r["host"] not in seen:  # one trainer per host reads its namespace's counters
                seen.add(r["host"])
                bytes_sent[r["host"]] = int(sum(e["tx_bytes"] for e in r["epochs"]))
        missing = sorted(set(host_of) - seen)
        note = ("tx bytes of each host namespace's non-lo interfaces during training epochs "
                "(servers and trainers of that host), from /proc/self/net/dev of a trainer")
        if missing:
            note += f"; hosts without a trainer not measured: {', '.join(missing)}"
    return DistDGLResult(
        feasible=True, epoch_times_s=per_epoch, epoch_time_s=statistics.median(steady),
        test_accuracy=rows[0]["test_accuracy"],
        val_accuracy=[e.get("val_accuracy") for e in rows[0]["epochs"]],
        metric=rows[0].get("metric", "accuracy"), test_metric=rows[0].get("test_metric"),
        val_metric=[e.get("val_metric") for e in rows[0]["epochs"]],
        majority_rate=rows[0].get("majority_rate"),
        stage_s=stage_s, bytes_sent=bytes_sent, bytes_note=note, wall_s=wall_s,
        trainers=[{**asdict(s), "train_nodes": r["train_nodes"],
                   "test_nodes": r.get("test_nodes")} for s, r in zip(slots, rows)],
        ip_config=ip_lines, out_dir=str(out),
    )


def _wait(servers: list[Child], trainers: list[Child], deadline: float,
          timeout_s: float) -> None:
    """Until every trainer exited 0 and the servers shut down; raise on a crash or timeout."""
    while True:
        for p in trainers:
            rc = p.popen.poll()
            if rc not in (None, 0):
                raise DistDGLError(f"DistDGL {p.name} exited with status {rc}; last lines of "
                                   f"{p.log}:\n{_tail(p.log)}")
        done = all(p.popen.poll() == 0 for p in trainers)
        for p in servers:
            rc = p.popen.poll()
            if rc not in (None, 0) and not done:  # 0: shut down by rank 0's exit
                raise DistDGLError(f"DistDGL {p.name} exited with status {rc} before training "
                                   f"ended; last lines of {p.log}:\n{_tail(p.log)}")
        if done:
            # Rank 0's exit asks the servers to shut down; give them a moment, then _stop.
            end = min(deadline, time.monotonic() + 10.0)
            while time.monotonic() < end and any(p.popen.poll() is None for p in servers):
                time.sleep(0.1)
            return
        if time.monotonic() > deadline:
            names = [p.name for p in servers + trainers if p.popen.poll() is None]
            raise DistDGLError(f"DistDGL run timed out after {timeout_s:.0f} s (still running: "
                               f"{', '.join(names)}); logs in {trainers[0].log.parent}")
        time.sleep(0.2)
