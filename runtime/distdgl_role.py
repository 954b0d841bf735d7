"""Entry point of one DistDGL process (a graph server or a trainer) started by ``run_distdgl``.

``python -m gnnsched.runtime.distdgl_role server --config RUN.json --part P`` or
``... trainer --config RUN.json --rank R``. DGL's own environment contract (``DGL_ROLE``,
``DGL_SERVER_ID``, ``DGL_IP_CONFIG``, ...) comes from the parent, exactly what DGL's
``tools/launch.py`` would set, so ``dgl.distributed.initialize`` runs unmodified; this module
only adds what emulating several machines on one box needs (see :func:`patch_dgl`).

Why a module and not DGL's example script: the trainer must use the job's hyper-parameters,
seeds and model, time epochs between barriers and write its numbers as JSON for the parent.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import gnnsched.compat  # noqa: F401  (GraphBolt stub before anything DGL)

SHM_ENV = "GNNSCHED_DGL_SHM"  # prefix of this process's "machine" shared-memory names
MACHINE_ENV = "GNNSCHED_DGL_MACHINE"  # ip_config line (= partition) this process sits on


def patch_dgl(shm_prefix: str, machine_id: int | None) -> None:
    """Make one box behave like separate machines for DGL.

    DGL names its shared-memory segments (partition graph, partition book, feature tensors)
    after the graph and tensor names only, and finds a client's machine by matching local IP
    addresses against ip_config. On one box (loopback, or network namespaces, which share
    ``/dev/shm``) two servers would write the same segments, and every trainer would claim the
    first machine with a local IP. So every segment name gets the prefix of its partition's
    emulated machine, and a trainer is told its machine (its home partition) explicitly.
    Semantics are DistDGL's: a trainer reads its own partition through shared memory and every
    other partition over the network, as on real separate machines.
    """
    from gnnsched.compat import dgl

    dist = dgl.distributed
    dg, gpb_mod, kv = dist.dist_graph, dist.graph_partition_book, dist.kvstore

    if not getattr(dg, "_gnnsched_patched", False):
        copy_graph, get_graph = dg._copy_graph_to_shared_mem, dg._get_graph_from_shared_mem
        get_book, move_meta = dg.get_shared_mem_partition_book, gpb_mod._move_metadata_to_shared_mem
        empty_shm = kv.empty_shared_mem

        def prefixed(name: str) -> str:
            return os.environ.get(SHM_ENV, "") + name

        # Every entry point that turns a graph or tensor name into a segment name, in the
        # module that calls it (server: copy graph, move book; client: get graph, get book;
        # both: the KV store's feature tensors).
        dg._copy_graph_to_shared_mem = lambda g, name, *a, **k: copy_graph(g, prefixed(name), *a,
                                                                          **k)
        dg._get_graph_from_shared_mem = lambda name, *a, **k: get_graph(prefixed(name), *a, **k)
        dg.get_shared_mem_partition_book = lambda name, *a, **k: get_book(prefixed(name), *a,
                                                                          **k)
        gpb_mod._move_metadata_to_shared_mem = lambda name, *a, **k: move_meta(prefixed(name),
                                                                               *a, **k)
        kv.empty_shared_mem = lambda name, *a, **k: empty_shm(prefixed(name), *a, **k)
        dg._gnnsched_patched = True
    os.environ[SHM_ENV] = shm_prefix
    if machine_id is not None:
        dist.rpc_client.get_local_machine_id = lambda namebook: machine_id


def _net_tx_bytes() -> int:
    """Bytes sent on this network namespace's interfaces other than ``lo``."""
    total = 0
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, data = line.partition(":")
        if name.strip() != "lo":
            total += int(data.split()[8])
    return total


def _iface_of(ip: str) -> str | None:
    """Name of the local interface holding ``ip`` (None if none does)."""
    import fcntl
    import socket
    import struct

    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                raw = fcntl.ioctl(sock.fileno(), 0x8915,  # SIOCGIFADDR
                                  struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
        if socket.inet_ntoa(raw[20:24]) == ip:
            return name
    return None


def _run_server(cfg: dict[str, Any], part: int) -> None:
    from gnnsched.compat import dgl

    patch_dgl(cfg["shm_prefixes"][part], None)
    dgl.seed(cfg["job"]["seed"] + part)  # remote sampling draws from the server's RNG
    dgl.distributed.initialize(cfg["ip_config"])  # DGL_ROLE=server: serves, then sys.exit


def build_model(in_dim: int, hidden: int, classes: int, layers: int, dropout: float) -> Any:
    """DGL's distributed GraphSAGE example's model (``dgl.nn.SAGEConv`` layers, mean
    aggregation): what DistDGL trains here, and what the box's compute limit times beside
    gnnsched's own model (:mod:`gnnsched.runtime.limit`)."""
    import torch
    from torch import nn

    from gnnsched.compat import dgl

    class Sage(nn.Module):
        """GraphSAGE with mean aggregation, as in DGL's distributed GraphSAGE example."""

        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [hidden] * (layers - 1) + [classes]
            self.layers = nn.ModuleList(
                dgl.nn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(layers))
            self.dropout = nn.Dropout(dropout)

        def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i != len(self.layers) - 1:
                    h = self.dropout(torch.relu(h))
            return h

    return Sage()


def _slot_nids(g: Any, mask_name: str, parts: list[int], node_ranges: list[list[int]]):
    """Nodes of ``parts`` whose mask is set (new ids): the split used when trainers < parts."""
    import torch

    out = []
    for p in parts:
        lo, hi = node_ranges[p]
        mask = g.ndata[mask_name][torch.arange(lo, hi)]
        out.append(torch.nonzero(mask.bool()).flatten() + lo)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


class _Stretch:
    """Emulates a device at ``speed`` < 1 of this CPU, as gnnsched's trainer does: a step's
    forward and backward compute of ``c`` CPU seconds is followed by ``c (1/speed - 1)``
    seconds of sleep (CPU, not wall, seconds: see :mod:`gnnsched.runtime.trainer`). A DDP
    communication hook runs when a gradient bucket is ready, before its all-reduce: it sleeps
    ``factor`` times the CPU seconds since the last mark (the step's start, then the previous
    bucket), so every bucket's share of the compute is stretched before its all-reduce.
    Outside a step (``mark`` None) the hook does not sleep: under ``join`` a trainer out of
    mini-batches runs the hook on zero buckets to match the others' all-reduces."""

    def __init__(self, speed: float) -> None:
        self.factor = (1.0 / speed - 1.0) if 0 < speed < 1 else 0.0
        self.mark: float | None = None

    def hook(self, state, bucket):  # unannotated: DDP rejects any annotation but its own
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        if self.mark is not None:
            time.sleep(max(0.0, time.process_time() - self.mark) * self.factor)
            self.mark = time.process_time()
        return allreduce_hook(state, bucket)


def _gathered_threshold(orig: Any, cap: int, seed: int) -> Any:
    """The sample's threshold over every trainer's nodes of one phase: each contributes its
    at most ``cap`` smallest keys (raw int64 tensors over gloo, no pickle)."""
    import numpy as np
    import torch
    import torch.distributed as tdist

    from gnnsched.runtime.coordinator.schedule import eval_threshold, lowest_keys

    mine = torch.from_numpy(lowest_keys(orig, cap, seed).view(np.int64).copy())
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(tdist.get_world_size())]
    tdist.all_gather(sizes, torch.tensor([len(mine)], dtype=torch.int64))
    most = max(int(n) for n in sizes)
    padded = torch.zeros(most, dtype=torch.int64)
    padded[:len(mine)] = mine
    every = [torch.zeros(most, dtype=torch.int64) for _ in sizes]
    tdist.all_gather(every, padded)
    keys = [e[:int(n)].numpy().view(np.uint64) for e, n in zip(every, sizes)]
    return eval_threshold(keys, cap, seed, keys=True)


def _run_trainer(cfg: dict[str, Any], rank: int) -> None:
    import numpy as np
    import torch
    import torch.distributed as tdist
    from torch.nn.parallel import DistributedDataParallel

    from gnnsched import metrics
    from gnnsched.compat import dgl

    torch.set_num_threads(1)
    slot = cfg["trainers"][rank]
    patch_dgl(cfg["shm_prefixes"][slot["home"]], slot["home"])
    dgl.distributed.initialize(cfg["ip_config"])
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        # gloo binds to what the hostname resolves to, which inside a network namespace is
        # not the host's address: bind it to the interface that holds this host's IP.
        iface = _iface_of(cfg["hosts"][slot["host"]])
        if iface and iface != "lo":
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    timeout = datetime.timedelta(seconds=float(cfg["timeout_s"]))
    tdist.init_process_group("gloo", rank=rank, world_size=len(cfg["trainers"]),
                             timeout=timeout)
    g = dgl.distributed.DistGraph(cfg["graph_name"])
    gpb = g.get_partition_book()
    job = cfg["job"]
    even = cfg["split"] == "node_split"

    def nids(mask_name: str):
        if even:  # DistDGL's own split: one trainer per partition
            return dgl.distributed.node_split(g.ndata[mask_name], gpb, force_even=True)
        return _slot_nids(g, mask_name, slot["parts"], cfg["node_ranges"])

    def capped(ids: Any) -> Any:
        """The members among ``ids`` of the job's ``evaluation.max_nodes`` sample: the
        nodes of gnnsched's schedule (:func:`~gnnsched.runtime.coordinator.schedule.
        eval_threshold`), the same in every plan and system of the job."""
        from gnnsched.runtime.coordinator.schedule import in_sample

        cap = cfg.get("eval_max_nodes")
        if not cap:
            return ids
        orig = np.asarray(np.load(cfg["orig_nids_file"], mmap_mode="r")[ids.numpy()])
        keep = in_sample(orig, _gathered_threshold(orig, int(cap), int(job["seed"])),
                         int(job["seed"]))
        return ids[torch.from_numpy(np.flatnonzero(keep))]

    train_nids, val_nids, test_nids = nids("train_mask"), nids("val_mask"), nids("test_mask")
    val_nids, test_nids = capped(val_nids), capped(test_nids)
    # the original ids this trainer tests, so a run shows which nodes every system scored
    np.save(Path(cfg["out_dir"]) / f"test-nodes-{rank}.npy",
            np.load(cfg["orig_nids_file"], mmap_mode="r")[test_nids.numpy()])
    torch.manual_seed(job["seed"])  # same initial weights on every trainer (DDP checks)
    dgl.seed(job["seed"] + rank)  # local sampling
    model = build_model(cfg["feature_dim"], job["hidden"], cfg["num_classes"],
                        len(job["fanouts"]), job["dropout"])
    ddp = DistributedDataParallel(model)
    stretch = _Stretch(float(slot.get("speed", 1.0)) if cfg.get("emulate_speed", True) else 1.0)
    if stretch.factor > 0:
        ddp.register_comm_hook(None, stretch.hook)
    opt = torch.optim.Adam(ddp.parameters(), lr=job["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    sampler = dgl.dataloading.NeighborSampler(list(job["fanouts"]))
    eval_sampler = dgl.dataloading.NeighborSampler(list(cfg["eval_fanouts"]))
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nids, sampler,
                                                batch_size=job["batch_size"], shuffle=True,
                                                drop_last=False)

    metric = metrics.resolve(job.get("metric", "auto"), cfg["num_classes"])

    def evaluation(ids) -> dict[str, Any]:
        """Accuracy, the job's metric and the majority-class rate over ``ids``: each trainer
        evaluates its own share, and every trainer scores the gathered whole."""
        ys, preds, probs = [], [], []
        model.eval()
        if len(ids):
            ev = dgl.dataloading.DistNodeDataLoader(g, ids, eval_sampler,
                                                    batch_size=cfg["eval_batch_size"],
                                                    shuffle=False, drop_last=False)
            with torch.no_grad():
                for input_nodes, seeds, blocks in ev:
                    out = model(blocks, g.ndata["feat"][input_nodes].float())
                    ys.append(g.ndata["label"][seeds].long().numpy())
                    preds.append(out.argmax(1).numpy())
                    if out.shape[1] == 2:
                        probs.append(torch.softmax(out, 1)[:, 1].numpy())
        mine = [np.concatenate(a) if a else np.zeros(0) for a in (ys, preds, probs)]
        every: list[Any] = [None] * tdist.get_world_size()
        tdist.all_gather_object(every, mine)  # gloo, inside DistDGL's own process group
        y, pred, prob = (np.concatenate([m[i] for m in every]) for i in range(3))
        if not len(y):
            return {"accuracy": None, "value": None, "majority_rate": None, "nodes": 0}
        return {"accuracy": metrics.score("accuracy", y, pred),
                "value": metrics.score(metric, y, pred, prob if len(prob) == len(y) else None),
                "majority_rate": metrics.majority_rate(y), "nodes": int(len(y))}

    epochs: list[dict[str, Any]] = []
    for epoch in range(cfg["epochs"]):
        model.train()
        tdist.barrier()
        tx = _net_tx_bytes()
        t0 = time.perf_counter()
        steps = 0
        loss_sum = 0.0
        stage = {"sample_s": 0.0, "fetch_s": 0.0, "train_s": 0.0}
        batches = iter(loader)
        with ddp.join():  # trainers may hold unequal numbers of mini-batches
            while True:
                t = time.perf_counter()
                try:  # sampling, remote hops included (num_samplers=0: in this process)
                    input_nodes, seeds, blocks = next(batches)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                feats = g.ndata["feat"][input_nodes].float()  # local shm + remote pulls
                labels = g.ndata["label"][seeds].long()
                t2 = time.perf_counter()
                stretch.mark = time.process_time()
                loss = loss_fn(ddp(blocks, feats), labels)
                opt.zero_grad()
                loss.backward()  # DDP all-reduces gradients here
                stretch.mark = None
                opt.step()
                t3 = time.perf_counter()
                stage["sample_s"] += t1 - t
                stage["fetch_s"] += t2 - t1
                stage["train_s"] += t3 - t2
                steps += 1
                loss_sum += float(loss.detach())
        tdist.barrier()
        seconds = time.perf_counter() - t0
        row: dict[str, Any] = {"epoch": epoch, "seconds": seconds, "steps": steps,
                               "loss": loss_sum / max(steps, 1), **stage,
                               "tx_bytes": _net_tx_bytes() - tx}
        last = epoch == cfg["epochs"] - 1
        if cfg["eval_every"] and ((epoch + 1) % cfg["eval_every"] == 0 or last):
            ev = evaluation(val_nids)
            row["val_accuracy"], row["val_metric"] = ev["accuracy"], ev["value"]
        epochs.append(row)
        print(f"rank {rank} epoch {epoch + 1}: {seconds:.3f}s {steps} steps "
              f"val={row.get('val_accuracy')}", flush=True)
    ev = evaluation(test_nids)
    result = {"rank": rank, "host": slot["host"], "home": slot["home"], "epochs": epochs,
              "test_accuracy": ev["accuracy"], "test_nodes": ev["nodes"], "metric": metric,
              "test_metric": ev["value"], "majority_rate": ev["majority_rate"],
              "train_nodes": int(len(train_nids))}
    out = Path(cfg["out_dir"]) / f"trainer-{rank}.json"
    out.write_text(json.dumps(result, indent=1))
    tdist.barrier()
    tdist.destroy_process_group()
    # DGL's atexit hook (exit_client) runs the client barrier and shuts the servers down.


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=("server", "trainer"))
    ap.add_argument("--config", required=True)
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--rank", type=int, default=0)
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    if args.role == "server":
        _run_server(cfg, args.part)
    else:
        _run_trainer(cfg, args.rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
