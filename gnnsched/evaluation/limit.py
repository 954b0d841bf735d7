"""The box's limit at the scale tier: the tighter of the compute bound (the single-process
pipeline, :func:`gnnsched.api.pipeline_limit`, measured in a child process, or the
single-process reference where that is faster) and the network bound (the plan's most loaded
NIC), in trained seeds per second; gnnsched's throughput is judged as a fraction of it."""

from __future__ import annotations

import statistics
from typing import Any

from gnnsched.spec import ClusterSpec, JobSpec


def network_bound(cluster: ClusterSpec, job: JobSpec, prof: Any, plan: Any) -> dict[str, Any]:
    """The plan's lower bound on the cluster's NICs: the most loaded NIC direction's seconds
    per iteration (profile's mean mini-batch) and the seeds/s it allows."""
    from gnnsched.workload import Workload

    loads = Workload(cluster, job, prof).loads(plan)
    names = [m.name for m in cluster.machines]
    worst = max([(f"egress of {names[i]}", float(v)) for i, v in enumerate(loads.egress)]
                + [(f"ingress of {names[i]}", float(v)) for i, v in enumerate(loads.ingress)],
                key=lambda x: x[1])
    seeds = job.trainers * job.batch_size
    return {"nic": worst[0], "nic_s_per_iter": worst[1], "seeds_per_iter": seeds,
            "seeds_per_s": seeds / worst[1] if worst[1] > 0 else None,
            "egress_s": [float(v) for v in loads.egress],
            "ingress_s": [float(v) for v in loads.ingress]}


def limit_text(limit: dict[str, Any]) -> str:
    """The single-process pipeline's measurement in a sentence."""
    one, two = limit["phases"]["1"], limit["phases"][str(limit["threads"])]

    def stages(d: dict[str, float]) -> str:
        return ", ".join(f"{k.removesuffix('_s')} {1e3 * v:.0f} ms" for k, v in d.items()
                         if v is not None)

    def by(ph: dict[str, Any]) -> str:
        return (f"sampled by {ph['sample_by']}, gathered by "
                f"{ph.get('gather_by', 'torch indexing')}, trained by {ph['train_by']}")

    return (f"The best single-process pipeline of the job's mini-batches "
            f"({one['input_nodes']:,.0f} input nodes each; medians over {limit['timed']} timed "
            f"mini-batches after {limit['warm']} warm-up): on 1 thread "
            f"{1e3 * limit['cpu_s_per_seed']:.2f} CPU-ms per seed ({by(one)}; CPU per "
            f"mini-batch: {stages(one['stage_cpu_s_per_batch'])}), so "
            f"{limit['cpu_bound_seeds_per_s']:.0f} seeds/s with all {limit['cores']} cores "
            f"busy; on {limit['threads']} threads {limit['wall_seeds_per_s']:.0f} seeds/s of "
            f"wall clock ({by(two)}; per mini-batch: {stages(two['stage_s_per_batch'])}).")


def compute_bound(limit: dict[str, Any], refs: dict[str, Any]) -> dict[str, Any]:
    """The compute bound in seeds/s: the single-process pipeline on 2 threads, or the
    reference's own throughput where that is higher (a bound below what one process
    reached would not be a bound). The pipeline's is the higher of its CPU bound (all cores
    busy with its 1-thread CPU-seconds per seed) and its wall clock on 2 threads."""
    pipe = limit.get("seeds_per_s")
    medians = {}
    for key, n in (("runs", 1), ("runs_threads", refs.get("threads"))):
        got = [r["seeds_per_s"] for r in refs.get(key) or [] if r.get("seeds_per_s")]
        if got:
            medians[n] = statistics.median(got)
    ref_n, ref_v = max(medians.items(), key=lambda kv: kv[1], default=(None, None))
    best = max((v for v in (pipe, ref_v) if v), default=None)
    return {"seeds_per_s": best, "pipeline_seeds_per_s": pipe, "reference_seeds_per_s": ref_v,
            "from": None if best is None else (
                ("the best single-process pipeline's CPU-seconds per seed, all cores busy"
                 if limit.get("by") == "CPU" else
                 "the best single-process pipeline on 2 threads")
                if best == pipe else f"the single-process reference ({ref_n} thread(s))")}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run at the median seeds/s (the lower one of an even count), as every system's row
    is its median repetition: the reference is not its first run. Empty without runs."""
    ok = sorted((r for r in runs if r.get("seeds_per_s")), key=lambda r: r["seeds_per_s"])
    if not ok:
        return runs[0] if runs else {}
    return ok[(len(ok) - 1) // 2]


def box_limit(compute: dict[str, Any], network: dict[str, Any] | None) -> dict[str, Any]:
    """The tighter of the compute and network bounds, in seeds/s."""
    c = compute.get("seeds_per_s")
    n = (network or {}).get("seeds_per_s")
    options = [(v, k) for v, k in ((c, "compute"), (n, "network")) if v]
    if not options:
        return {"seeds_per_s": None, "binds": None}
    v, k = min(options)
    return {"seeds_per_s": v, "binds": k, "compute_seeds_per_s": c, "network_seeds_per_s": n}
