"""At scale (simulated): each shape replicated to 16..256 machines, the measured profile
scaled to as many partitions, colocation and gnnsched planned and simulated on each."""

from __future__ import annotations

import time
import traceback
from dataclasses import replace
from typing import Any

from gnnsched.evaluation.config import (
    HEADLINE,
    RUNTIME_SYSTEMS,
    SYSTEMS,
    error_text,
    load_shape,
    predicted,
    say,
)
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.predict import simulate_system
from gnnsched.profile import CostProfile
from gnnsched.spec import ClusterSpec, JobSpec


def scale_profile(base: CostProfile, job: JobSpec) -> CostProfile:
    """``base`` (measured on 4 parts) scaled to ``job.num_parts``: partition ``p`` reuses the
    measured mini-batches of partition ``p mod 4`` unchanged, with each owner relabelled by
    its ring offset from the seed partition (METIS-like band locality, as
    :func:`gnnsched.profile.synthetic_profile` assumes, with measured shares)."""
    import numpy as np

    from gnnsched.profile import PartProfile

    P, B = job.num_parts, base.num_parts

    def offset(q: int, s: int) -> int:
        d = (q - s) % B
        return d if d <= B // 2 else d - B

    parts = []
    for p in range(P):
        src = base.parts[p % B]

        def remap(ids: Any, src: Any = src, p: int = p) -> Any:
            return np.array([(p + offset(int(q), src.part)) % P for q in ids], dtype=np.int32)

        parts.append(PartProfile(
            p, src.train_seeds, src.sample_s.copy(), src.train_s.copy(), src.edges.copy(),
            [remap(a) for a in src.input_parts], [c.copy() for c in src.input_nodes],
            [remap(a) for a in src.edge_parts], [c.copy() for c in src.edge_counts]))
    return CostProfile(job.profile_key(), P, base.feature_bytes, base.grad_bytes,
                       base.model_bytes, parts, base.reference, False,
                       meta={**base.meta, "scaled_from_parts": B,
                             "scaling": "measured batches of part p mod B, owners by ring offset"})


def replicate(cluster: ClusterSpec, copies: int) -> ClusterSpec:
    """``copies`` copies of a shape on one switch, partitions renumbered, no addresses."""
    P0 = cluster.num_parts
    machines = [replace(m, name=f"{m.name}-{r:03d}", address=None,
                        partitions=tuple(p + r * P0 for p in m.partitions))
                for r in range(copies) for m in cluster.machines]
    return ClusterSpec(f"{cluster.name}x{len(machines)}", tuple(machines), cluster.storage,
                       cluster.latency, source=f"{cluster.source} x {copies}")


def scale_point(ctx: Context, ds: str, shape: str, base: ClusterSpec, M: int) -> dict[str, Any]:
    """One size of one shape: plan colocation and gnnsched, simulate every runtime system."""
    from gnnsched.placement import get_placer

    st = ctx.st
    base_job = st.job(ds, epochs=1)
    copies = max(1, M // len(base.machines))
    cluster = replicate(base, copies)
    job = replace(base_job, num_parts=base.num_parts * copies,
                  trainers=base_job.trainers * copies, source=f"bench:{ds} x {copies}")
    prof = scale_profile(ctx.profiles[ds], job)
    row: dict[str, Any] = {"dataset": ds, "shape": shape, "machines": len(cluster.machines),
                           "train_seeds": prof.total_train_seeds, "partitions": job.num_parts,
                           "trainers": job.trainers,
                           "iterations": prof.iterations_per_epoch(job.trainers,
                                                                   job.batch_size),
                           "systems": {}}
    t0 = time.perf_counter()
    try:
        plans = {}
        for placer in ("colocation", "gnnsched"):
            t1 = time.perf_counter()
            plans[placer] = get_placer(placer).place(
                cluster, job, prof, seed=st.seed,
                budget=st.budget if placer == "gnnsched" else None)
            row[f"{placer}_planning_s"] = time.perf_counter() - t1
        for sysname in RUNTIME_SYSTEMS:
            s = SYSTEMS[sysname]
            assert s.placer is not None and s.policy is not None
            sim = simulate_system(cluster, job, plans[s.placer], prof, s.policy, st.seed)
            row["systems"][sysname] = {k: sim[k] for k in (
                "epoch_time_s", "epoch_time_full_s", "lower_bound_s", "lower_bound_full_s")}
        row["bound_any_placement_s"] = predicted(plans["gnnsched"], "lower_bound_s")
        colo = row["systems"]["colocation+fifo"]["epoch_time_s"]
        me = row["systems"][HEADLINE]["epoch_time_s"]
        row["speedup_vs_colocation"] = colo / me if me else None
        row["colocation_feasible"] = predicted(plans["colocation"], "colocation_feasible")
        row["ok"] = True
    except Exception as exc:  # noqa: BLE001
        row.update(ok=False, error=error_text(exc))
        traceback.print_exc()
    row["seconds"] = time.perf_counter() - t0
    if row["ok"]:
        say(f"[scale {shape}/{ds}] {row['machines']} machines, {row['partitions']}"
            f" parts, {row['trainers']} trainers: colocation {colo:.3f} s, "
            f"gnnsched {me:.3f} s ({row['speedup_vs_colocation']:.2f}x) in "
            f"{row['seconds']:.0f} s")
    else:
        say(f"[scale {shape}/{ds}] {M} machines FAILED: {row['error'][:300]}")
    return row


def run_scaling(ctx: Context) -> list[dict[str, Any]]:
    """Simulated epochs of colocation and gnnsched on replicated shapes, 16..256 machines."""
    st = ctx.st
    return [scale_point(ctx, ds, shape, load_shape(shape), M)
            for ds in st.datasets for shape in st.shapes for M in st.sizes]
