"""Where every role's CPU goes, per training iteration: the runtime's CPU ledger on a real run.

Run: ``python bench/bench_cpu.py [--nodes 200000] [--epochs 1] [--out docs/bench/cpu.json]``

A real training job on the local launcher (examples/lab4: 2 store hosts holding 4 METIS
parts, 2 trainers on 2 GPU-less "gpu" hosts; trainer 0 gathers its features through a relay
fetcher on store0, trainer 1 in its own process), on Cora by default or, with ``--nodes``, on
a seeded synthetic graph of that many nodes (``--degree``, ``--features``, ``--fanouts``,
``--batch``, ``--hidden`` shape the job; the defaults are the scale issue's job: SAGE 3 layers,
256 hidden, fan-out 15/10/5, batch 1024 per trainer, 100-d features). Evaluation is cut to one
test pass over at most ``--eval-nodes`` nodes at the end, so the CPU counted is training's.

Every role process reports its CPU ledger (:mod:`gnnsched.runtime.ledger`): thread CPU time
by category (work / copy / serialise / rpc / wait / other) from :func:`time.thread_time` in
the threads that do the work, ZeroMQ's I/O thread from ``/proc``, and the process's total
from :func:`time.process_time`. The table is CPU-seconds per training iteration (one
synchronous step of all trainers) per role process and class, the share of each process's CPU
the ledger explains, and CPU-s per mini-batch for samplers and relays. Also printed: the
sampler's CPU per mini-batch inside ``sample_blocks`` (the issue's "0.9 CPU-s per mini-batch"),
the feature bytes the stores sent per mini-batch, and the trainer's model time per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from labelled import write_labelled  # bench/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
LAB4 = ROOT / "examples" / "lab4"


def setup(tmp: Path, a: argparse.Namespace) -> tuple[Any, Any, Any, Path]:
    """The cluster, job, hand plan and partitions of the run."""
    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import load_cluster, load_job

    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    job = replace(job, epochs=a.epochs, eval_every=0, eval_max_nodes=a.eval_nodes)
    if a.nodes:
        syn = {"num_nodes": a.nodes, "avg_degree": a.degree, "feature_dim": a.features,
               "num_classes": a.classes, "homophily": 0.3, "feature_noise": 1.75,
               "seed": a.seed}
        job = replace(job, name=f"synthetic-{a.nodes}", dataset="synthetic", synthetic=syn,
                      fanouts=tuple(a.fanouts), batch_size=a.batch, hidden=a.hidden,
                      eval_batch_size=1024)
    elif a.batch:
        job = replace(job, batch_size=a.batch)
    parts = Path(a.parts) if a.parts else tmp / "parts"
    if not (parts / "gnnsched.json").is_file():
        t0 = time.perf_counter()
        graph = load_dataset(job.dataset, split=job.split, synthetic=job.synthetic or None)
        print(f"partitioning {graph.summary()} into {job.num_parts} parts -> {parts}",
              flush=True)
        partition_graph(graph, job.num_parts, parts, method=job.part_method, seed=job.seed)
        print(f"  partitioned in {time.perf_counter() - t0:.1f} s", flush=True)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    return cluster, job, plan, parts


def extras(res: Any, b: dict[str, Any]) -> dict[str, Any]:
    """The issue's three claims, as this run measured them."""
    procs = res.processes
    out: dict[str, Any] = {}
    samplers = {n: p for n, p in procs.items() if n.startswith("sampler:")}
    out["sampler_sample_cpu_s_per_batch"] = {
        n: round(p["sample_cpu_s"] / p["sampled"], 4) for n, p in samplers.items()
        if p.get("sampled") and "sample_cpu_s" in p}
    batches = sum(int(p.get("sampled", 0)) for p in samplers.values())
    feat = sum(int(p.get("by_kind", {}).get("FEAT_CHUNK", 0)) for n, p in procs.items()
               if n.startswith("store:"))
    out["store_feature_bytes_per_batch"] = round(feat / batches) if batches else None
    out["store_feature_bytes_local_share"] = round(
        sum(int(p.get("local_bytes", 0)) for n, p in procs.items() if n.startswith("store:"))
        / max(1, sum(int(p.get("bytes_sent", 0)) for n, p in procs.items()
                     if n.startswith("store:"))), 3)
    shm = sum(int(p.get("shm_bytes", 0)) for n, p in procs.items()
              if n.startswith(("fetcher:", "trainer:")))
    out["shm_feature_bytes_per_batch"] = round(shm / batches) if batches else None
    out["peak_rss_bytes"] = {n: p["peak_rss_bytes"] for n, p in procs.items()
                             if "peak_rss_bytes" in p}
    model = {}
    for n, p in procs.items():
        if not n.startswith("trainer:"):
            continue
        cats = p["ledger"]["categories"]
        fb = sum(v["cpu_s"] for c, v in cats.items()
                 if c in ("work:forward_backward", "work:optimizer"))
        model[n] = {"model_cpu_s_per_batch": round(fb / b["iterations"], 4),
                    "cpu_s_per_batch": round(b["processes"][n]["cpu_s_per_iter"], 4)}
    out["trainer"] = model
    return out


def dgl_reference(job: Any, parts: Path, batches: int = 5) -> dict[str, Any]:
    """DGL's own sampler on the whole graph for mini-batches of the same shape (fan-outs,
    batch size, seeds from the training nodes): CPU seconds of this thread per mini-batch,
    input nodes and the feature bytes they need (what the stores must ship per mini-batch)."""
    import numpy as np
    import torch

    from gnnsched.compat import dgl
    from gnnsched.datasets import open_partitions

    torch.set_num_threads(1)
    graph = open_partitions(parts).full_graph()
    g = graph.to_dgl().formats(["csc"])
    sampler = dgl.dataloading.NeighborSampler(list(job.fanouts))
    rng = np.random.default_rng(job.seed)
    train = np.nonzero(graph.train_mask)[0]
    sampler.sample_blocks(g, torch.from_numpy(train[:job.batch_size]))  # warm-up
    cpu, inputs, edges = [], [], []
    for _ in range(batches):
        seeds = torch.from_numpy(rng.choice(train, size=min(job.batch_size, len(train)),
                                            replace=False))
        t0 = time.thread_time()
        inp, _, blocks = sampler.sample_blocks(g, seeds)
        cpu.append(time.thread_time() - t0)
        inputs.append(len(inp))
        edges.append(sum(int(b.num_edges()) for b in blocks))
    feat = graph.features
    t0 = time.thread_time()
    for _ in range(batches):  # one gather of the input rows (what a colocated trainer does)
        feat[rng.choice(graph.num_nodes, size=int(np.mean(inputs)), replace=False)]
    gather = (time.thread_time() - t0) / batches
    return {"sample_cpu_s_per_batch": round(float(np.median(cpu)), 4),
            "input_nodes": int(np.mean(inputs)), "edges": int(np.mean(edges)),
            "feature_bytes": int(np.mean(inputs)) * graph.feature_dim * 4,
            "gather_cpu_s": round(gather, 4), "batches": batches}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=0, help="synthetic graph size (0: Cora)")
    p.add_argument("--degree", type=float, default=40.0, help="synthetic: mean out-degree")
    p.add_argument("--features", type=int, default=100, help="synthetic: feature width")
    p.add_argument("--classes", type=int, default=47)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch", type=int, default=0,
                   help="seeds per trainer per step (default: 1024 synthetic, the job's on Cora)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--eval-nodes", type=int, default=256, help="test nodes evaluated at the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", default=None, help="partition folder (reused if it exists)")
    p.add_argument("--keep", default=None, help="keep the run folder here")
    p.add_argument("--label", default="", help="a name for this measurement (before/after)")
    p.add_argument("--no-dgl", action="store_true",
                   help="skip DGL's sampler on the whole graph (the reference)")
    p.add_argument("--out", default=str(ROOT / "docs" / "bench" / "cpu.json"))
    a = p.parse_args(argv)
    if a.nodes and not a.batch:
        a.batch = 1024
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from gnnsched.api import train
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.runtime.ledger import breakdown, format_table

    opts = RuntimeOptions(start_timeout=600, request_timeout=300, stop_grace_s=20)
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmpdir:
        tmp = Path(tmpdir)
        cluster, job, plan, parts = setup(tmp, a)
        run_dir = Path(a.keep) if a.keep else tmp / "run"
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        res = train(cluster, job, plan, out_dir=run_dir, partitions=parts, options=opts)
        wall = time.perf_counter() - t0
        load1 = os.getloadavg()
        if a.keep:
            (run_dir / "result.json").write_text(json.dumps(res.to_dict(), indent=1))
        ref = None if a.no_dgl else dgl_reference(job, parts)
    b = breakdown(res)
    table = format_table(b)
    print(table)
    ext = extras(res, b)
    print()
    print("sampler CPU in sample_blocks per mini-batch:",
          ", ".join(f"{n} {v:.4f} s" for n, v in ext["sampler_sample_cpu_s_per_batch"].items()))
    fb = ext["store_feature_bytes_per_batch"]
    print(f"feature bytes the stores sent per mini-batch: {fb / 1e6:.2f} MB"
          if fb is not None else "no feature bytes")
    print(f"feature bytes read from same-machine shared memory per mini-batch: "
          f"{(ext['shm_feature_bytes_per_batch'] or 0) / 1e6:.2f} MB")
    for n, v in ext["trainer"].items():
        print(f"{n}: {v['cpu_s_per_batch']:.4f} CPU-s per batch, of which forward/backward + "
              f"optimizer {v['model_cpu_s_per_batch']:.4f}")
    if ref:
        print(f"DGL's sampler on the whole graph, same fan-outs and batch: "
              f"{ref['sample_cpu_s_per_batch']:.4f} CPU-s per mini-batch, "
              f"{ref['input_nodes']} input nodes, {ref['edges']} edges, "
              f"{ref['feature_bytes'] / 1e6:.2f} MB of input features, gathered in "
              f"{ref['gather_cpu_s']:.4f} CPU-s")
    print(f"{b['iterations']} iterations, epoch time {res.epoch_time_s:.2f} s, "
          f"wall {wall:.1f} s, test accuracy {res.test_accuracy:.3f}; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after ({os.cpu_count()} CPUs)")
    entry = {
        "label": a.label or ("cora" if not a.nodes else f"synthetic-{a.nodes}"),
        "command": "python bench/bench_cpu.py " + " ".join(argv if argv is not None
                                                           else sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    # other work on the box inflates CPU-seconds too (shared caches, SMT)
                    "load_avg_1min_before_after": [round(load0[0], 2), round(load1[0], 2)]},
        "job": {k: v for k, v in job.to_dict().items()
                if k in ("name", "dataset", "synthetic", "fanouts", "batch_size", "hidden",
                         "epochs", "trainers", "num_parts")},
        "epoch_time_s": res.epoch_time_s, "wall_s": wall, "test_accuracy": res.test_accuracy,
        "table": table.splitlines(), "breakdown": b, "claims": ext, "dgl_reference": ref,
        "ledgers": {n: p["ledger"] for n, p in res.processes.items() if "ledger" in p},
    }
    write_labelled(a.out, __doc__.split("\n\n")[0], entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
