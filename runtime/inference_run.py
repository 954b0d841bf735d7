"""``gnnsched predict``: distributed layer-wise inference, coordinated from this process.

One ``infer`` role (:mod:`.inference_role`) runs on every machine of the cluster file that
stores partitions, started by the same launchers as training (local, netns, ssh, ray: fork
servers, CURVE keys, heartbeats, no orphans) through the same role life cycle (hello ->
config -> ready -> start, :mod:`.role`). The coordinator here then runs the layers as
barriers: ``layer l`` to every host at once, once every host has reported ``layer_done`` for
``l-1`` (so each layer's rows are complete in every store before anyone reads them). After the
last layer each host writes its partitions' outputs into a staging folder and reports
``written`` with its test nodes' labels and predictions; the coordinator scores the
full-neighbour test metric, writes the manifest and renames the folder to ``--out``. Any
failure (a role's error, a dead process, a timeout) stops every process and removes the
staging folder, so nothing partial is left that looks complete.

Everything is checked before a process starts (:func:`check_inputs`): the run folder and its
checkpoint, the partitions against the model and the cluster, the output folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from gnnsched.runtime.coordinator.options import RunError
from gnnsched.runtime.inference import (
    CHUNK_NODES,
    TrainedModel,
    check_out_dir,
    check_partitions,
    discard,
    load_trained,
    part_files,
    publish,
    sampled_metric,
    staging_dir,
)
from gnnsched.runtime.role_process import RoleLaunch
from gnnsched.runtime.transport import (
    CONTROL,
    Channel,
    Kind,
    MessageError,
    bind_random,
    ctrl,
    ctrl_body,
    load_keys,
    make_socket,
    start_authenticator,
)
from gnnsched.spec import ClusterSpec, SpecError, job_from_dict, load_cluster

Progress = Callable[..., None]


@dataclass
class Inputs:
    """What a distributed prediction starts from, every part checked."""

    trained: TrainedModel
    cluster: ClusterSpec
    pset: Any
    out: Path
    hosts: list[str] = field(default_factory=list)


def check_inputs(run_dir: str | Path, cluster: ClusterSpec | str | Path,
                 partitions: str | Path | None = None, out: str | Path | None = None,
                 checkpoint: str | Path | None = None, job: dict[str, Any] | None = None,
                 data_dir: str | None = None) -> Inputs:
    """Refuse bad input before any work, each refusal naming the file and the fix."""
    from gnnsched.datasets import open_partitions

    trained = load_trained(run_dir, checkpoint, job)
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    if partitions is None:
        from gnnsched.datasets.cache import partitions_for

        partitions = partitions_for(job_from_dict(
            {k: v for k, v in trained.job.items() if v is not None}, str(trained.checkpoint)),
            data_dir, quiet=True)
    pset = open_partitions(str(partitions), verify=False)
    check_partitions(trained, pset)
    if pset.num_parts != spec.num_parts:
        raise SpecError(spec.source, "machines[*].partitions", f"the cluster stores "
                        f"{spec.num_parts} partitions, {pset.root} has {pset.num_parts}",
                        "the cluster file the run was trained on")
    out_dir = check_out_dir(Path(out) if out is not None else Path(run_dir) / "predictions")
    hosts = [m.name for m in spec.machines if m.partitions]
    return Inputs(trained, spec, pset, out_dir, hosts)


class InferenceCoordinator:
    """The control loop of one distributed prediction (see the module docstring)."""

    def __init__(self, inp: Inputs, launcher: Any, *, embeddings: bool, chunk: int,
                 threads: int, timeout_s: float, progress: Progress | None) -> None:
        self.inp, self.launcher = inp, launcher
        self.embeddings, self.chunk, self.threads = embeddings, chunk, threads
        self.timeout = timeout_s
        self.progress = progress or (lambda *a, **k: None)
        self.stage = staging_dir(inp.out)
        # kept after a failure (the error names them); moved to OUT/logs on success
        self.logs = self.stage.parent / f".{inp.out.name}.predict-logs-{time.time_ns() % 10**9}"
        self.roles: dict[str, dict[str, Any]] = {}
        self.early: dict[str, dict[str, dict[str, Any]]] = {}  # by op, by role
        self.keys = None
        cl = inp.cluster
        if cl.curve:
            if not cl.keys_dir:
                raise SpecError(cl.source, "keys_dir", "is missing: curve: true needs the "
                                "folder with the cluster's keys", f"gnnsched keys --cluster "
                                f"{cl.source}")
            self.keys = load_keys(cl.keys_dir)

    def config(self) -> dict[str, Any]:
        cl, pset = self.inp.cluster, self.inp.pset
        return {"partitions": str(Path(str(pset.root)).resolve()),
                "machines": [m.name for m in cl.machines], "part_store": cl.part_stores,
                "run_dir": str(self.inp.trained.run_dir.resolve()),
                "checkpoint": str(self.inp.trained.checkpoint.resolve()),
                "chunk": self.chunk, "embeddings": self.embeddings,
                "stage": str(self.stage), "request_timeout": self.timeout}

    def run(self) -> dict[str, Any]:
        self.stage.mkdir(parents=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        ctx = zmq.Context(io_threads=1)
        auth = start_authenticator(ctx, self.keys) if self.keys else None
        sock = make_socket(ctx, zmq.ROUTER, CONTROL, curve=self.keys, server=True)
        self.chan = Channel(sock, "predict coordinator")
        ok = False
        try:
            self.endpoint = bind_random(sock, self.launcher.coordinator_host())
            self.start_roles()
            result = self.drive()
            ok = True
            return result
        finally:
            try:
                self.stop(ok)
            finally:
                self.chan.close()
                if auth is not None:
                    auth.stop()
                ctx.destroy(linger=200)
                if not ok:
                    discard(self.stage)

    def start_roles(self) -> None:
        bind = getattr(self.launcher, "bind_run", None)
        if bind is not None:
            bind(partitions=self.config()["partitions"], run_dir=str(self.inp.trained.run_dir),
                 endpoint=self.endpoint)
        self.launcher.preflight(self.inp.hosts)
        launches = [RoleLaunch("infer", m, m, self.endpoint, self.logs / f"infer-{m}.log",
                               self.threads, start_timeout=self.timeout * 2,
                               curve_keys=self.keys.folder if self.keys else None)
                    for m in self.inp.hosts]
        self.launcher.prepare(launches)
        for la in launches:
            self.roles[la.name] = {"launch": la, "proc": self.launcher.start(la),
                                   "state": "started"}
        self.progress("log", msg=f"started {len(launches)} infer roles on "
                                 f"{', '.join(self.inp.hosts)}")

    def recv(self, until: float) -> tuple[str, dict[str, Any]] | None:
        """One control message from a role (heartbeats answered here); None on timeout."""
        while time.monotonic() < until:
            self.check_procs()
            if not self.chan.sock.poll(200, zmq.POLLIN):
                continue
            try:
                ident, msg = self.chan.recv(1.0)
            except MessageError:
                continue
            who = (ident or b"?").decode(errors="replace")
            if who.endswith("/hb"):
                try:
                    self.chan.send(ctrl("hb"), ident)
                except zmq.ZMQError:
                    pass
                continue
            name = who.rpartition("/")[0]
            if name not in self.roles or msg.kind != Kind.CTRL:
                continue
            body = ctrl_body(msg, name)
            if body.get("op") == "error":
                raise RunError(f"{name} on {self.roles[name]['launch'].machine}: "
                               f"{body.get('error')} (log: {self.roles[name]['launch'].log})")
            return name, body
        return None

    def check_procs(self) -> None:
        for name, r in self.roles.items():
            code = r["proc"].poll()
            if code is not None and r["state"] != "stopped":
                tail = r["proc"].log_tail() if hasattr(r["proc"], "log_tail") else ""
                raise RunError(f"{name} exited with code {code} before the end "
                               f"(log {r['launch'].log}):\n{tail}")

    def send_all(self, op: str, **fields: Any) -> None:
        for r in self.roles.values():
            self.chan.send(ctrl(op, **fields), r["launch"].ident.encode())

    def expect(self, op: str, what: str) -> dict[str, dict[str, Any]]:
        """Wait for ``op`` from every role (others' ``hello`` answered with the config)."""
        got: dict[str, dict[str, Any]] = self.early.pop(op, {})
        until = time.monotonic() + self.timeout * 2
        while len(got) < len(self.roles):
            m = self.recv(until)
            if m is None:
                missing = sorted(set(self.roles) - set(got))
                raise RunError(f"no {op!r} from {', '.join(missing)} within "
                               f"{self.timeout * 2:.0f} s ({what})")
            name, body = m
            if body["op"] == "hello":
                self.chan.send(ctrl("config", **self.config()),
                               self.roles[name]["launch"].ident.encode())
            elif body["op"] == op:
                got[name] = body
            else:  # a faster host's next step (its outputs written while others compute)
                self.early.setdefault(body["op"], {})[name] = body
        return got

    def drive(self) -> dict[str, Any]:
        t_start = time.monotonic()
        ready = self.expect("ready", "loading partitions")
        machines = [m.name for m in self.inp.cluster.machines]
        servers = {str(machines.index(self.roles[n]["launch"].machine)): b["endpoint"]
                   for n, b in ready.items()}
        self.send_all("start", servers=servers)
        t0 = time.monotonic()
        layers, layer_s = self.inp.trained.layers, []
        for i in range(layers):
            t1 = time.monotonic()
            self.send_all("layer", layer=i)
            done = self.expect("layer_done", f"layer {i + 1}")
            layer_s.append(time.monotonic() - t1)
            rows = sum(int(b.get("remote_rows", 0)) for b in done.values())
            self.progress("log", msg=f"layer {i + 1}/{layers}: {layer_s[-1]:.2f} s, "
                                     f"{rows} rows read from other hosts")
        written = self.expect("written", "writing outputs")
        seconds = time.monotonic() - t0
        return self.finish(written, seconds, layer_s, t0 - t_start)

    def finish(self, written: dict[str, dict[str, Any]], seconds: float, layer_s: list[float],
               startup_s: float) -> dict[str, Any]:
        from gnnsched import metrics

        tr, pset = self.inp.trained, self.inp.pset
        y = np.concatenate([np.asarray(b["test_labels"], np.int64) for b in written.values()])
        p = np.concatenate([np.asarray(b["test_pred"], np.int64) for b in written.values()])
        pos = None
        if all(b.get("test_pos") is not None for b in written.values()):
            pos = np.concatenate([np.asarray(b["test_pos"], np.float64)
                                  for b in written.values()])
        name = metrics.resolve(str(tr.job.get("metric", "auto")), pset.num_classes)
        full = {"metric": name, "test_metric": metrics.score(name, y, p, pos),
                "test_accuracy": metrics.score("accuracy", y, p), "test_nodes": int(len(y)),
                "neighbourhoods": "full"}
        summary = {"mode": "distributed", "launcher": getattr(self.launcher, "name", "?"),
                   "hosts": self.inp.hosts, "model": tr.describe(),
                   "partitions": self.config()["partitions"], "nodes": int(pset.num_nodes),
                   "seconds": seconds, "layer_seconds": layer_s, "startup_s": startup_s,
                   "nodes_per_s": pset.num_nodes * tr.layers / seconds if seconds else None,
                   "full": full, "sampled": sampled_metric(tr.run_dir),
                   "embeddings": self.embeddings,
                   "files": {str(q): part_files(q, self.embeddings)
                             for q in range(pset.num_parts)}}
        self.summary = summary
        return summary

    def stop(self, ok: bool) -> None:
        stats: dict[str, Any] = {}
        if ok:
            try:
                self.send_all("stop")
                until = time.monotonic() + 10.0
                while len(stats) < len(self.roles) and time.monotonic() < until:
                    m = self.recv(until)
                    if m is None:
                        break
                    if m[1]["op"] == "stats":
                        stats[m[0]] = m[1]
                        self.roles[m[0]]["state"] = "stopped"
            except (RunError, zmq.ZMQError):
                pass
        for r in self.roles.values():
            r["state"] = "stopped"
        self.stats = stats
        self.launcher.stop_all(grace=2.0 if ok else 0.5)


def predict_distributed(run_dir: str | Path, cluster: ClusterSpec | str | Path, *,
                        partitions: str | Path | None = None, out: str | Path | None = None,
                        checkpoint: str | Path | None = None, embeddings: bool = False,
                        launcher: Any = "local", launcher_options: dict[str, Any] | None = None,
                        chunk: int = CHUNK_NODES, threads: int = 1, timeout_s: float = 120.0,
                        job: dict[str, Any] | None = None, data_dir: str | None = None,
                        progress: Progress | None = None) -> dict[str, Any]:
    """Distributed full-neighbour inference of every node with a run's checkpoint; outputs
    per partition in ``out`` (default ``RUN/predictions``). Returns the manifest's summary
    (with ``out``, per-role ``stats`` and bytes read per layer)."""
    from gnnsched.runtime.launcher import get_launcher

    inp = check_inputs(run_dir, cluster, partitions, out, checkpoint, job, data_dir)
    launch = launcher if not isinstance(launcher, str) else \
        get_launcher(launcher, inp.cluster, **(launcher_options or {}))
    coord = InferenceCoordinator(inp, launch, embeddings=embeddings, chunk=chunk,
                                 threads=threads, timeout_s=timeout_s, progress=progress)
    summary = coord.run()
    summary["roles"] = {n: {k: s.get(k) for k in ("fetched_rows", "fetched_bytes", "served",
                                                  "cpu_s", "peak_rss_bytes", "layers")}
                        for n, s in coord.stats.items()}
    summary["bytes_read"] = sum(int(s.get("fetched_bytes") or 0) for s in coord.stats.values())
    try:
        publish(coord.stage, inp.out, summary)
    except BaseException:
        discard(coord.stage)
        raise
    logs = inp.out / "logs"
    coord.logs.rename(logs)
    return {**summary, "out": str(inp.out)}


__all__ = ["InferenceCoordinator", "Inputs", "check_inputs", "predict_distributed"]
