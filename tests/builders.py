"""The small cluster and plan builders several test folders share (the simulator's, the
policy's, the bounds' and the trace's tests): the simplest valid plans, trainers on GPU hosts
and samplers on the store of their first partition (placers live elsewhere)."""

from __future__ import annotations

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import synthetic_profile
from gnnsched.spec import GB, GBIT, GPU, ClusterSpec, JobSpec, Machine


def make_cluster(stores: int = 2, gpu_hosts: int = 2, parts: int = 4, *, gbps: float = 1.0,
                 gpu_gbps: float | None = None, cpus: int = 4, gpu_cpus: int = 2,
                 speeds: list[float] | None = None, gpus_per_host: int = 1,
                 latency: float = 0.0, memory_gb: float = 16.0) -> ClusterSpec:
    """Stores holding `parts` partitions round-robin, then GPU hosts."""
    ms = []
    for i in range(stores):
        owned = tuple(p for p in range(parts) if p % stores == i)
        ms.append(Machine(f"s{i}", cpus, memory_gb * GB, gbps * GBIT, gbps * GBIT, (), owned))
    for i in range(gpu_hosts):
        g = (gpu_gbps or gbps) * GBIT
        sp = speeds[i % len(speeds)] if speeds else 1.0
        ms.append(Machine(f"g{i}", gpu_cpus, memory_gb * GB, g, g,
                          tuple(GPU("gpu", sp) for _ in range(gpus_per_host))))
    return ClusterSpec("test", tuple(ms), latency=latency)


def make_plan(cluster: ClusterSpec, trainers: int, *, samplers: int = 1,
              fetch_at_store: bool = False, sampler_on_gpu: bool = False) -> Plan:
    """Trainer w owns partitions p % trainers == w; samplers on the store of its first one."""
    gpus = [(m.name, d) for m in cluster.machines for d in range(m.num_gpus)]
    out = []
    for w in range(trainers):
        parts = tuple(p for p in range(cluster.num_parts) if p % trainers == w)
        store = cluster.machines[cluster.store_of(parts[0])].name
        host, dev = gpus[w]
        out.append(TrainerPlan(w, host, dev, parts,
                               ((host if sampler_on_gpu else store, samplers),),
                               store if fetch_at_store else host))
    return Plan("test", cluster.name, cluster.fingerprint(), tuple(out))


def make_problem(trainers: int = 2, parts: int = 4, *, batch: int = 256, prefetch: int = 2,
                 seed: int = 0, skew: float = 0.0, **kw):
    plan_kw = {k: kw.pop(k) for k in ("samplers", "fetch_at_store", "sampler_on_gpu")
               if k in kw}
    cluster = make_cluster(parts=parts, **kw)
    job = JobSpec(num_parts=parts, trainers=trainers, batch_size=batch, fanouts=(10, 15),
                  prefetch=prefetch, dataset="synthetic")
    prof = synthetic_profile(parts, batch_size=batch, fanouts=(10, 15), seeds_per_part=1500,
                             seed=seed, skew=skew)
    return cluster, job, prof, make_plan(cluster, trainers, **plan_kw)
