"""The simulator's side of the evaluation: a plan's steady-state epoch, the prediction of every
measured run (from the profile alone and from the costs the run measured), and whether
planning on a run's measured costs would find a faster placement."""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING, Any

from gnnsched.calibrate import Steps, run_profile, steady_steps
from gnnsched.evaluation.config import (
    HEADLINE,
    SIM_SEEDS,
    SYSTEMS,
    Settings,
    canonical,
    error_text,
    plan_rows,
    predicted,
    say,
)
from gnnsched.plan import Plan
from gnnsched.profile import CostProfile
from gnnsched.spec import ClusterSpec, JobSpec

if TYPE_CHECKING:
    from gnnsched.simulator import SimResult

# The network every prediction here is simulated on: the runtime's (``gnnsched simulate``'s
# default, :data:`gnnsched.simulator.DEFAULT_NETWORK`, with the runtime's send window).
NETWORK = "windowed"


def runtime_window() -> float | None:
    """``nic_window_s`` of :data:`NETWORK` (:func:`gnnsched.simulator.network_window`)."""
    from gnnsched.simulator import network_window

    return network_window(NETWORK)[1]


def steady_epoch(cluster: ClusterSpec, job: JobSpec, plan: Plan, prof: CostProfile,
                 policy: str, seed: int, *, record: bool = False
                 ) -> tuple[float, float, SimResult]:
    """A measured run's epoch as the simulator predicts it: three epochs simulated back to
    back, on the runtime's network (:data:`NETWORK`: one TCP connection per store and
    receiver, each handed its next transfer while less than the runtime's per-receiver window
    of the store's egress is queued in it). Returns the middle epoch's seconds (the steady
    state: like a measured epoch after the first, it starts with mini-batches the epoch
    before prefetched and prefetches for the next; the last would only receive), the first
    epoch's, and the simulation."""
    from gnnsched.simulator import simulate

    K = prof.iterations_per_epoch(job.trainers, job.batch_size)
    r = simulate(cluster, job, plan, prof, policy, seed=seed, iterations=3 * K, record=record,
                 nic_window_s=runtime_window())
    return float(r.barriers[2 * K - 1] - r.barriers[K - 1]), float(r.barriers[K - 1]), r


def policy_gains(cluster: ClusterSpec, job: JobSpec, plan: Plan, prof: CostProfile,
                 policies: list[str], seed: int) -> dict[str, Any]:
    """Every policy's simulated epoch on one plan, from the profile alone (so it can be, and
    is, computed before the runs it predicts): the steady epoch on the runtime's network
    (:func:`steady_epoch`) and on the ideal one (every NIC in the policy's order), each the mean
    over :data:`SIM_SEEDS` simulator seeds, and each policy's predicted gain over the first
    (``gain_windowed``: the runtime's network; ``gain_ideal``). What a policy A/B compares its
    measured gain with (``bench/bench_policy.py``, ``gnnsched bench scale``)."""
    from gnnsched.simulator import simulate

    out: dict[str, dict[str, float]] = {}
    for p in policies:
        win = [steady_epoch(cluster, job, plan, prof, p, seed + i)[0] for i in range(SIM_SEEDS)]
        ideal = [simulate(cluster, job, plan, prof, p, seed=seed + i).epoch_time_s
                 for i in range(SIM_SEEDS)]
        out[p] = {"windowed_s": statistics.fmean(win), "ideal_s": statistics.fmean(ideal)}
    base = out[policies[0]]
    for v in out.values():
        v["gain_windowed"] = base["windowed_s"] / v["windowed_s"]
        v["gain_ideal"] = base["ideal_s"] / v["ideal_s"]
    return {"from": "the profile alone, before the runs", "policies": out}


def simulate_system(cluster: ClusterSpec, job: JobSpec, plan: Plan, prof: CostProfile,
                    policy: str, seed: int) -> dict[str, Any]:
    """Simulated epoch (full and steady-state, :func:`steady_epoch`, mean over
    ``SIM_SEEDS`` simulator seeds), per-plan bound, stages per iteration, all on the
    runtime's network (``network``, ``nic_window_s``)."""
    from gnnsched.simulator import simulate

    K = prof.iterations_per_epoch(job.trainers, job.batch_size)
    sims = [steady_epoch(cluster, job, plan, prof, policy, seed + i) for i in range(SIM_SEEDS)]
    steady = [s for s, _, _ in sims]
    first = [f for _, f, _ in sims]
    window = runtime_window()
    r0 = simulate(cluster, job, plan, prof, policy, seed=seed, nic_window_s=window)
    W = len(r0.stages)
    stages = {k: float(statistics.fmean(st[k] for st in sims[0][2].stages)) / (3 * K)
              for k in ("sample", "fetch", "train", "stall", "barrier")}
    bound_steady = None
    try:
        from gnnsched.bounds import instance_bound
        from gnnsched.instance import Instance, workload_for

        inst = Instance(workload_for(cluster, job, prof), plan, seed=seed)
        bound_steady = float(instance_bound(inst).iteration_s) * K
    except Exception:  # noqa: BLE001 - the bound is optional, the sim numbers are not
        bound_steady = None
    return {"epoch_time_s": float(statistics.fmean(steady)),
            "epoch_time_full_s": float(statistics.fmean(first)),
            "fill_s": float(statistics.fmean(first) - statistics.fmean(steady)),
            "epoch_time_seeds_s": steady, "lower_bound_s": bound_steady,
            "lower_bound_full_s": float(r0.lower_bound_s), "iterations": K, "trainers": W,
            "stages": {"input": stages["stall"], "train": stages["train"],
                       "barrier": stages["barrier"], "sample": stages["sample"],
                       "fetch": stages["fetch"]},
            "critical_share": dict(r0.critical_share), "network": NETWORK,
            "nic_window_s": window}


def dilation(row: dict[str, Any]) -> float:
    """D of the scale model a run row was measured on (1 off the model)."""
    return float(row.get("dilation") or 1.0)


def real_epoch(row: dict[str, Any]) -> float:
    """A run row's epoch in the real cluster's seconds: measured / D (the scale model)."""
    return float(row["epoch_time_s"]) / dilation(row)


def apriori_prediction(row: dict[str, Any], cluster: ClusterSpec, job: JobSpec, plan: Plan,
                       prof: CostProfile, apriori: CostProfile | None, policy: str,
                       seed: int) -> dict[str, Any]:
    """A run's prediction before it starts: from ``apriori`` (the profile with the box's
    runtime costs, on the scale model; ``box`` set) where given, the profile's own then kept
    as the row's ``sim_profile``; else from the profile."""
    out = simulate_system(cluster, job, plan, apriori or prof, policy, seed)
    if apriori is not None:
        out["box"] = True
        row["sim_profile"] = simulate_system(cluster, job, plan, prof, policy, seed)
    return out


def row_steps(row: dict[str, Any]) -> Steps:
    """A run row's steady steps in the real cluster's seconds (measured / D): stored in the
    row, else read from its run directory."""
    steps = row["steps"] if "steps" in row else (
        steady_steps(row["run_dir"]) if row.get("run_dir") else {})
    d = dilation(row)
    if d == 1:
        return steps
    return {w: {k: (list(v) if k == "seq" else [x / d for x in v]) for k, v in got.items()}
            for w, got in steps.items()}


def row_profile(row: dict[str, Any], prof: CostProfile, plan: Plan, cluster: ClusterSpec,
                job: JobSpec) -> tuple[CostProfile, dict[str, Any]]:
    """The in-situ profile of a measured run row (:func:`gnnsched.calibrate.run_profile`),
    from its times in the real cluster's seconds (on the scale model: measured / D)."""
    d = dilation(row)
    by_trainer = {w: {k: (v / d if isinstance(v, (int, float)) else v) for k, v in got.items()}
                  for w, got in row["stages_by_trainer"].items()}
    last = row.get("allreduce_last_s")
    return run_profile(prof, plan, cluster, job, by_trainer, row_steps(row),
                       last / d if last else last)


def predict_run(row: dict[str, Any], isolated: dict[str, Any], cluster: ClusterSpec,
                job: JobSpec, plan: Plan, prof: CostProfile, policy: str, seed: int) -> None:
    """Set a measured run's predictions: ``isolated`` (from the profile alone) and the one
    from the costs the run measured (:func:`gnnsched.calibrate.insitu_profile`), each with
    its error. If the in-situ simulation raises, ``sim`` stays the isolated prediction.
    Predictions are of the real cluster; on the scale model a run's times are compared as
    the real cluster's (measured / D)."""
    measured = real_epoch(row)
    row["sim_isolated"] = row["sim"] = isolated
    row["sim_error_isolated"] = row["sim_error"] = isolated["epoch_time_s"] / measured - 1.0
    cal, factors = row_profile(row, prof, plan, cluster, job)
    row["sim"] = {**simulate_system(cluster, job, plan, cal, policy, seed),
                  "insitu_factors": factors}
    row["sim_error"] = row["sim"]["epoch_time_s"] / measured - 1.0


def replan_insitu(cfg: dict[str, Any], cluster: ClusterSpec, job: JobSpec, prof: CostProfile,
                  plans: dict[str, Plan], budget: float, seed: int) -> dict[str, Any] | None:
    """Would planning on this box's real costs find the missing speed-up? The gnnsched placer
    run again on the costs the colocation run measured (the in-situ profile a user gets by
    running once, ``gnnsched profile --from-run``); the better of its plan and the one the
    evaluation ran (``epoch_time_s``), simulated with those costs beside colocation's in-situ
    prediction. A placement's headroom judged by the isolated profile alone could hide one
    that only the loaded box's costs reveal; this says whether it does.
    """
    from gnnsched.placement import get_placer

    row = cfg["systems"].get("colocation+fifo", {})
    colo = plans.get("colocation")
    colo_sim = row.get("sim", {}).get("epoch_time_s")
    if colo is None or not row.get("stages_by_trainer") or not colo_sim:
        return None
    t0 = time.perf_counter()
    cal, _ = row_profile(row, prof, colo, cluster, job)
    policy = SYSTEMS[HEADLINE].policy
    assert policy is not None
    plan = canonical(get_placer("gnnsched").place(cluster, job, cal, seed=seed, budget=budget))
    new = simulate_system(cluster, job, plan, cal, policy, seed)["epoch_time_s"]
    old = (simulate_system(cluster, job, plans["gnnsched"], cal, policy, seed)["epoch_time_s"]
           if "gnnsched" in plans else math.inf)
    best = min(new, old)
    same = next((k for k, p in plans.items() if p.key() == plan.key()), None)
    return {"epoch_time_s": best, "replanned_s": new, "planned_s": None if old == math.inf
            else old, "colocation_s": float(colo_sim), "speedup": float(colo_sim) / best,
            "bound_s": predicted(plan, "lower_bound_s"), "same_plan_as": same,
            "trainers": plan_rows(plan), "seconds": time.perf_counter() - t0}


def replan(cfg: dict[str, Any], cluster: ClusterSpec, job: JobSpec, prof: CostProfile,
           plans: dict[str, Plan], st: Settings, label: str) -> None:
    """Set ``cfg["replan_insitu"]`` (:func:`replan_insitu`), saying what it found."""
    try:
        rp = replan_insitu(cfg, cluster, job, prof, plans, st.budget, st.seed)
    except Exception as exc:  # noqa: BLE001 - an analysis, not a result
        rp = {"error": error_text(exc)}
    cfg["replan_insitu"] = rp
    if rp and "speedup" in rp:
        say(f"[{label}] re-planned on the colocation run's costs: {rp['epoch_time_s']:.3f} s "
            f"simulated, {rp['speedup']:.2f}x colocation's {rp['colocation_s']:.3f} s "
            f"({rp['seconds']:.0f} s)")
