"""Real runs: plan every system on one shape x dataset, train each for real (the gnnsched
runtime or DistDGL, on network namespaces or local processes), repeat, and aggregate; and
the scale tier's runs of the same two systems, measured per process (CPU over the training
window, peak memory, the runtime's CPU ledger). Both tiers start a run the same way
(:func:`train_system`, :func:`run_distdgl_on`, :func:`result_row`)."""

from __future__ import annotations

import math
import re
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

from gnnsched.calibrate import allreduce_last_s, steady_steps
from gnnsched.evaluation.config import (
    EVAL_BATCH,
    PREDICTION_ERROR,
    SHAPES,
    SYSTEMS,
    Settings,
    canonical,
    error_text,
    fmt,
    job_for_repeat,
    load_shape,
    mean_accuracy,
    metric_fields,
    metric_text,
    plan_rows,
    predicted_scalars,
    say,
    seed_split,
)
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.measure import (
    NicCounters,
    ProcWatch,
    Tracker,
    bytes_between,
    runtime_options,
)
from gnnsched.evaluation.predict import apriori_prediction, predict_run, replan
from gnnsched.evaluation.scale_steps import steady_seeds_per_s
from gnnsched.plan import Plan
from gnnsched.profile import CostProfile
from gnnsched.spec import ClusterSpec, JobSpec


def train_system(launcher: str, cluster: ClusterSpec, job: JobSpec, plan: Plan,
                 prof: CostProfile, policy: str, part_dir: Path, run_dir: Path, net: Any,
                 progress: Any) -> Any:
    """One real run of the gnnsched runtime (:func:`gnnsched.api.train`) with the benchmark's
    runtime knobs, on the emulated cluster ``net`` (netns) or local processes."""
    from gnnsched.api import train

    lopts = {"emulated": net} if launcher == "netns" else None
    return train(cluster, job, plan, policy=policy, launcher=launcher, out_dir=run_dir,
                 partitions=part_dir, profile=prof, options=runtime_options(),
                 progress=progress, launcher_options=lopts)


def result_row(res: Any) -> dict[str, Any]:
    """A run's summary (:func:`gnnsched.api.summary`) with its task metric, where the runtime
    reports one, without the per-process bytes."""
    from gnnsched.api import summary

    row = summary(res)
    row.update(metric_fields(res))
    row.pop("bytes_by_process", None)
    return row


def run_distdgl_on(launcher: str, cluster: ClusterSpec, job: JobSpec, part_dir: Path,
                   out_dir: Path, net: Any, **kw: Any) -> Any:
    """One DistDGL run (:func:`gnnsched.api.run_distdgl`) inside the emulated cluster's
    namespaces (netns) or on local processes."""
    from gnnsched.api import run_distdgl

    if launcher == "netns":
        kw.update(exec_prefix=net.exec_prefix,
                  hosts={m.name: net.address(m.name) for m in cluster.machines})
    return run_distdgl(cluster, job, part_dir, out_dir=out_dir, **kw)


def run_runtime_once(st: Settings, cluster: ClusterSpec, job: JobSpec, plan: Plan,
                     prof: CostProfile, sysname: str, part_dir: Path, run_dir: Path, net: Any,
                     counters: NicCounters | None, rep: int) -> dict[str, Any]:
    """Really train once with the gnnsched runtime; the run's summary plus NIC bytes."""
    s = SYSTEMS[sysname]
    assert s.policy is not None
    tag = sysname if st.repeats == 1 else f"{sysname} #{rep + 1}"
    tracker = Tracker(tag, counters)
    t0 = time.perf_counter()
    before = counters.read() if counters else None
    res = train_system(st.launcher, cluster, job, plan, prof, s.policy, part_dir,
                       run_dir / (sysname.replace("+", "-") + f"-{rep}"), net, tracker)
    row = result_row(res)
    row["steps"] = steady_steps(res.run_dir)
    row["allreduce_last_s"] = allreduce_last_s(row["steps"])
    row["nic_bytes_run"] = bytes_between(before, counters.read()) if counters else None
    if row.get("recoveries"):
        say(f"    {tag}: recovered {len(row['recoveries'])} time(s): timing is suspect")
    # where each store's NIC queue spent the run (idle / window / held / pipe / send seconds):
    # a NIC the runtime leaves idle shows up as "window" or "held" here
    row["nic_queue_waits_s"] = {n: p["waits_s"] for n, p in res.processes.items()
                                if p.get("waits_s")}
    per_host, note = tracker.bytes_per_epoch(job.epochs)
    row["nic_bytes_per_epoch"] = per_host
    row["nic_bytes_note"] = note
    row["seconds"] = time.perf_counter() - t0
    return row


def _median_rep(reps: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["epoch_time_s"] for r in reps]
    med = statistics.median(times)
    return reps[min(range(len(reps)), key=lambda i: abs(times[i] - med))]


def _repeats(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """What every system reports over its repetitions: median epoch, mean accuracy (and mean
    task metric, where the runtime reports one), seeds."""
    times = [r["epoch_time_s"] for r in reps]
    out = {"epoch_time_s": float(statistics.median(times)),
           "epoch_times_s": _median_rep(reps)["epoch_times_s"], "repeat_epoch_times_s": times,
           "test_accuracy": mean_accuracy([r["test_accuracy"] for r in reps])}
    return {**out, **mean_metric(reps)}


def mean_metric(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The task metric over repetitions: its name, mean and per-run values (empty when no
    run reported one)."""
    names = {r["metric"] for r in rows if r.get("metric")}
    if not names:
        return {}
    name = names.pop() if len(names) == 1 else "/".join(sorted(names))
    vals = [r.get("test_metric") for r in rows]
    return {"metric": name, "test_metric": mean_accuracy(vals), "repeat_test_metric": vals}


def aggregate_runtime(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Median epoch time over repetitions; the other numbers from the median repetition."""
    best = _median_rep(reps)
    st_ = best["stages"]
    mean = {k: float(statistics.fmean(v[k] for v in st_.values())) for k in
            ("sample_s", "fetch_s", "wait_s", "train_s", "allreduce_s")}
    nic = best["nic_bytes_per_epoch"]
    return {
        "ok": True, **_repeats(reps), "val_accuracy": best["val_accuracy"],
        **{k: best[k] for k in ("val_metric", "majority_rate") if k in best},
        "repeat_test_accuracy": [r["test_accuracy"] for r in reps],
        "repeat_job_seeds": [r.get("job_seed") for r in reps],
        "bytes_per_epoch": float(sum(nic.values())) if nic else None,
        "bytes_by_host_per_epoch": nic, "bytes_note": best["nic_bytes_note"] or
        "not measured per epoch (local launcher: no NICs)",
        "bytes_run": best["nic_bytes_run"],
        "run_network_bytes": best["network_bytes"], "run_bytes_sent": best["bytes_sent"],
        "allreduce_bytes": best["allreduce_bytes"],
        "iterations_per_epoch": best["iterations_per_epoch"],
        "stages": {"input": mean["wait_s"], "train": mean["train_s"],
                   "barrier": mean["allreduce_s"], "sample": mean["sample_s"],
                   "fetch": mean["fetch_s"]},
        "stages_by_trainer": st_, "startup_s": best["startup_s"], "wall_s": best["wall_s"],
        "run_dir": best["run_dir"], "allreduce_last_s": best.get("allreduce_last_s"),
        "steps": best.get("steps", {}),
        "nic_queue_waits_s": best.get("nic_queue_waits_s"),
        "seconds": sum(r["seconds"] for r in reps),
        "recoveries": [rc for r in reps for rc in r.get("recoveries", [])],
        # the scale model: D, and the epoch as the real cluster's seconds (measured / D)
        **({"dilation": best["dilation"],
            "real_epoch_time_s": float(statistics.median(
                r["epoch_time_s"] for r in reps)) / best["dilation"]}
           if (best.get("dilation") or 1.0) != 1.0 else {}),
    }


def distdgl_split(plan: Plan | None) -> list[list[int]] | None:
    """Colocation's seed split where DistDGL can train it (trainer t holds partition t, since
    it sits with partition t's server), else None (DistDGL's own split)."""
    if plan is None:
        return None
    split = seed_split(plan)
    return split if all(t in g for t, g in enumerate(split)) else None


def run_distdgl_once(st: Settings, cluster: ClusterSpec, job: JobSpec, part_dir: Path,
                     run_dir: Path, net: Any, counters: NicCounters | None, rep: int,
                     split: list[list[int]] | None = None) -> dict[str, Any]:
    """One DistDGL run (``feasible: False`` and nothing started where it cannot run)."""
    t0 = time.perf_counter()
    before = counters.read() if counters else None
    r = run_distdgl_on(st.launcher, cluster, job, part_dir, run_dir / f"distdgl-{rep}", net,
                       timeout_s=900, eval_fanouts=list(job.fanouts),
                       eval_batch_size=EVAL_BATCH, split=split)
    if not r.feasible:
        return {"feasible": False, "reason": r.reason}
    d = r.to_dict()
    d.update(metric_fields(r))  # the task metric, where DistDGL's runner reports one
    d["nic_bytes_run"] = bytes_between(before, counters.read()) if counters else None
    d["seconds"] = time.perf_counter() - t0
    return d


def aggregate_distdgl(reps: list[dict[str, Any]], cluster: ClusterSpec,
                      job: JobSpec) -> dict[str, Any]:
    if reps and reps[0].get("feasible") is False:
        return {"ok": True, "feasible": False, "reason": reps[0]["reason"]}
    best = _median_rep(reps)
    steps = max(math.ceil(t["train_nodes"] / job.batch_size) for t in best["trainers"])
    stage = {k: v / max(steps, 1) for k, v in best["stage_s"].items()}
    bytes_host = best["bytes_sent"]
    missing = sorted({m.name for m in cluster.machines if m.partitions}
                     - set(bytes_host or {}))
    per_epoch = ({h: b / job.epochs for h, b in bytes_host.items()} if bytes_host else None)
    note = best.get("bytes_note", "")
    if bytes_host:
        note = (f"DistDGL's own count: {note}; mean over all {job.epochs} epochs"
                + (f"; hosts not counted: {', '.join(missing)} (no trainer there)"
                   if missing else ""))
    return {
        "ok": True, "feasible": True, **_repeats(reps),
        "repeat_test_accuracy": [r["test_accuracy"] for r in reps],
        "repeat_job_seeds": [r.get("job_seed") for r in reps],
        "bytes_per_epoch": float(sum(per_epoch.values())) if per_epoch else None,
        "bytes_by_host_per_epoch": per_epoch, "bytes_note": note or "not measured",
        "bytes_hosts_missing": missing if bytes_host else None,
        "bytes_run": best["nic_bytes_run"],
        "iterations_per_epoch": steps,
        "stages": {"input": stage.get("sample_s", 0.0) + stage.get("fetch_s", 0.0),
                   "train": stage.get("train_s", 0.0), "barrier": 0.0,
                   "sample": stage.get("sample_s", 0.0), "fetch": stage.get("fetch_s", 0.0)},
        "trainers": best["trainers"], "wall_s": best["wall_s"], "run_dir": best["out_dir"],
        # not "split": DistDGL trains other mini-batches than a gnnsched run of that split
        "seed_split": sorted(sorted(t["parts"]) for t in best["trainers"]),
        "seconds": sum(r["seconds"] for r in reps),
    }


def make_plans(cfg: dict[str, Any], st: Settings, cluster: ClusterSpec, job: JobSpec,
               prof: CostProfile, run_dir: Path, label: str,
               apriori: CostProfile | None = None) -> dict[str, Plan]:
    """Every placer the systems need, run once (canonical plans, saved in ``run_dir``);
    ``cfg["plans"]`` gets each plan's rows, notes and prediction, or its error.

    With ``apriori`` (the scale model: the profile with the box's runtime costs) the placers
    plan on what the runs are predicted from, and gnnsched keeps colocation's plan unless its
    own is predicted faster by more than two predictions within the error the method allows
    (``PREDICTION_ERROR``, 10%) can misjudge: 1.1 / 0.9 = 1.22x (:func:`margin_for`)."""
    from gnnsched.placement import get_placer
    from gnnsched.placement.search import margin_for

    plans: dict[str, Plan] = {}
    for placer in sorted({SYSTEMS[s].placer for s in st.systems if SYSTEMS[s].placer}):
        t0 = time.perf_counter()
        kw = ({"keep_colocation": margin_for(PREDICTION_ERROR)}
              if placer == "gnnsched" and apriori is not None else {})
        try:
            plan = get_placer(placer, **kw).place(
                cluster, job, apriori or prof, seed=st.seed,
                budget=st.budget if placer == "gnnsched" else None)
        except Exception as exc:  # noqa: BLE001 - recorded per system below
            cfg["plans"][placer] = {"error": error_text(exc)}
            say(f"[{label}] {placer} placement failed: {exc}")
            continue
        plan = canonical(plan)
        plans[placer] = plan
        plan.save(run_dir / f"plan-{placer}.json")
        pred = predicted_scalars(plan)
        cfg["plans"][placer] = {"trainers": plan_rows(plan), "notes": list(plan.notes),
                                "predicted": pred, "split": seed_split(plan),
                                "planning_s": time.perf_counter() - t0}
        for note in plan.notes:
            say(f"[{label}] {placer}: {note}")
    return plans


def _simulated_rows(cfg: dict[str, Any], st: Settings, cluster: ClusterSpec, job: JobSpec,
                    prof: CostProfile, plans: dict[str, Plan],
                    apriori: CostProfile | None = None) -> dict[str, dict[str, Any]]:
    """One row per system with its plan's split and simulated epoch (no processes): from
    ``apriori`` (the profile with the box's runtime costs, on the scale model) where given,
    the profile's own prediction then kept as ``sim_profile``."""
    rows: dict[str, dict[str, Any]] = {}
    for sysname in st.systems:
        s = SYSTEMS[sysname]
        row: dict[str, Any] = {"label": s.label, "placer": s.placer, "policy": s.policy}
        rows[sysname] = cfg["systems"][sysname] = row
        if s.placer is None:
            if not st.real:
                from gnnsched.api import distdgl_infeasible_reason

                why = distdgl_infeasible_reason(cluster)
                row.update(ok=True, feasible=not why, reason=why, skipped="--no-real")
            continue
        plan = plans.get(s.placer)
        if plan is None:
            row.update(ok=False, error=cfg["plans"][s.placer]["error"])
            continue
        row["split"] = seed_split(plan)
        if s.placer != "colocation" and "colocation" in plans:
            row["same_plan_as_colocation"] = plan.key() == plans["colocation"].key()
        try:
            row["sim"] = apriori_prediction(row, cluster, job, plan, prof, apriori, s.policy,
                                            st.seed)
        except Exception as exc:  # noqa: BLE001
            row["sim"] = {"error": error_text(exc)}
        if not st.real:
            row.update(ok=True, skipped="--no-real")
    return rows


class Testbed:
    """The emulated cluster of one configuration (netns) and its NIC counters, brought up
    again if another session takes the namespaces down under the evaluation."""

    def __init__(self, st: Settings, cluster: ClusterSpec, cfg: dict[str, Any],
                 label: str) -> None:
        self.net: Any = None
        self.counters: NicCounters | None = None
        if st.real and st.launcher == "netns":
            from gnnsched.api import EmulatedCluster

            self.net = EmulatedCluster(cluster, payload_rates=True, queue_ms=st.nic_queue_ms,
                                       bands=st.nic_bands, cgroups=st.scale_model,
                                       dilation=st.dilation, cores=st.cores).up()
            if st.scale_model:
                cfg["dilation"] = self.net.dilation
                cfg["compute_cores"] = self.net.compute_cores
                say(f"[{label}] scale model: dilation D = {self.net.dilation:.4g} (cluster "
                    f"compute {self.net.compute_cores:g} cores on {self.net.box_cores:g}); "
                    "real-cluster time = measured / D")
            try:
                self.counters = NicCounters(self.net)
            except BaseException:
                self.net.down()
                raise
            cfg["nic_queues"] = self.net.queues
            if st.nic_bands and self.net.queues != "tos bands":
                say(f"[{label}] NIC queues: {self.net.queues}")

    def ensure_up(self, label: str) -> None:
        if self.net is not None and not self.net.is_up():
            # another session took the namespaces down (`cluster down --all`)
            say(f"[{label}] the emulated cluster went away: bringing it up again")
            self.net.up()
            if self.counters is not None:
                self.counters.close()
            self.counters = NicCounters(self.net)

    def vanished(self) -> bool:
        return self.net is not None and not self.net.is_up()

    def close(self) -> None:
        if self.counters is not None:
            self.counters.close()
        if self.net is not None:
            self.net.down()


def run_config(ctx: Context, shape: str, ds: str) -> dict[str, Any]:
    """Plan, simulate and really run every system on one shape x dataset."""
    st = ctx.st
    cluster = load_shape(shape)
    job = st.job(ds)
    prof, part_dir = ctx.profiles[ds], ctx.parts[ds]
    what, limited = SHAPES[shape]
    label = f"{shape}/{ds}"
    run_dir = st.work / "runs" / f"{shape}-{ds}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"shape": shape, "dataset": ds, "what": what, "limited": limited,
                           "machines": len(cluster.machines), "trainers": job.trainers,
                           "partitions": job.num_parts, "plans": {}, "systems": {}}
    plans = make_plans(cfg, st, cluster, job, prof, run_dir, label, ctx.apriori.get(ds))
    colo = cfg["plans"].get("colocation", {})
    cfg["colocation_feasible"] = colo.get("predicted", {}).get("colocation_feasible")
    gp = cfg["plans"].get("gnnsched", {}).get("predicted", {})
    cfg["bound_any_placement_s"] = gp.get("lower_bound_s")
    cfg["bound_scope"] = gp.get("lower_bound_scope")

    bed: Testbed | None = None
    try:
        bed = Testbed(st, cluster, cfg, label)
        rows = _simulated_rows(cfg, st, cluster, job, prof, plans, ctx.apriori.get(ds))
        raw: dict[str, list[dict[str, Any]]] = {n: [] for n in rows}
        failed: set[str] = set()
        for rep in range(st.repeats if st.real else 0):  # repetitions interleaved
            # repeat r trains with job seed seed + r in every system: accuracy is compared
            # as a mean over seeds (one seed's accuracy moves by points on Cora)
            rep_job = job_for_repeat(ds, st, rep)
            for sysname, row in rows.items():
                s = SYSTEMS[sysname]
                if sysname in failed or (s.placer is not None and s.placer not in plans):
                    continue
                if raw[sysname] and raw[sysname][0].get("feasible") is False:
                    continue
                t0 = time.perf_counter()
                one = None
                for attempt in (0, 1):
                    bed.ensure_up(label)
                    try:
                        if s.placer is None:
                            one = run_distdgl_once(st, cluster, rep_job, part_dir, run_dir,
                                                   bed.net, bed.counters, rep,
                                                   distdgl_split(plans.get("colocation")))
                        else:
                            one = run_runtime_once(st, cluster, rep_job, plans[s.placer], prof,
                                                   sysname, part_dir, run_dir, bed.net,
                                                   bed.counters, rep)
                        one["job_seed"] = rep_job.seed
                        break
                    except Exception as exc:  # noqa: BLE001 - a failed run is a result too
                        traceback.print_exc()
                        if attempt == 0 and bed.vanished():
                            continue  # the cluster vanished under the run: once more
                        row.update(ok=False, error=error_text(exc))
                        failed.add(sysname)
                        say(f"[{label}] {sysname}: FAILED: {error_text(exc)[:300]}")
                if one is None:
                    continue
                raw[sysname].append(one)
                if one.get("feasible") is False:
                    say(f"[{label}] {sysname}: infeasible: {one['reason']}")
                else:
                    say(f"[{label}] {sysname}"
                        + (f" #{rep + 1}" if st.repeats > 1 else "")
                        + f": epoch {one['epoch_time_s']:.3f} s, acc "
                        f"{fmt(one.get('test_accuracy'), '.3f')}{metric_text(one, '.3f')} "
                        f"({time.perf_counter() - t0:.0f} s)")
        for sysname, row in rows.items():
            if sysname in failed or not raw[sysname]:
                continue
            _finish_row(ctx, ds, sysname, row, raw[sysname], cluster, job, plans, label)
        if limited and st.real:
            replan(cfg, cluster, job, prof, plans, st, label)
    finally:
        if bed is not None:
            bed.close()
    cfg["distdgl_feasible"] = cfg["systems"].get("distdgl", {}).get("feasible")
    speedups(cfg)
    return cfg


def _finish_row(ctx: Context, ds: str, sysname: str, row: dict[str, Any],
                raw: list[dict[str, Any]], cluster: ClusterSpec, job: JobSpec,
                plans: dict[str, Plan], label: str) -> None:
    """A system's row from its runs: aggregate, references, in-situ prediction."""
    st, s = ctx.st, SYSTEMS[sysname]
    row.update(aggregate_distdgl(raw, cluster, job) if s.placer is None
               else aggregate_runtime(raw))
    if s.placer is not None and st.reference:
        refs = [ctx.reference(ds, st.job(ds, seed), row["split"])
                for seed in row["repeat_job_seeds"]]
        row["repeat_reference_accuracy"] = [r.get("test_accuracy") for r in refs]
        row["reference_accuracy"] = mean_accuracy(row["repeat_reference_accuracy"])
        ref_metric = mean_metric(refs)
        if ref_metric:
            row["reference_metric"] = ref_metric["test_metric"]
            row["repeat_reference_metric"] = ref_metric["repeat_test_metric"]
    sim = row.get("sim", {})
    if row.get("epoch_time_s") and sim.get("epoch_time_s"):
        try:
            assert s.placer is not None and s.policy is not None
            predict_run(row, sim, cluster, job, plans[s.placer], ctx.profiles[ds], s.policy,
                        st.seed)
        except Exception as exc:  # noqa: BLE001 - keep the isolated prediction
            say(f"[{label}] {sysname}: in-situ simulation failed: {error_text(exc)}")
    say(f"[{label}] {sysname}: {describe(row)}")


def describe(row: dict[str, Any]) -> str:
    """One system's result in one line."""
    if not row.get("ok"):
        return f"FAILED: {row.get('error', '?')[:300]}"
    if row.get("feasible") is False:
        return f"infeasible: {row.get('reason')}"
    parts = []
    if row.get("epoch_time_s"):
        parts.append(f"epoch {row['epoch_time_s']:.3f} s")
    sim = row.get("sim", {})
    if sim.get("epoch_time_s"):
        err = row.get("sim_error")
        parts.append(f"sim {sim['epoch_time_s']:.3f} s"
                     + (f" ({err:+.1%})" if err is not None else ""))
    if row.get("test_accuracy") is not None:
        parts.append(f"acc {row['test_accuracy']:.3f}")
    if row.get("reference_accuracy") is not None:
        parts.append(f"ref {row['reference_accuracy']:.3f}")
    if metric_text(row):
        parts.append(f"{row['metric']} {fmt(row.get('test_metric'), '.3f')}"
                     + (f" (ref {row['reference_metric']:.3f})"
                        if row.get("reference_metric") is not None else ""))
    if row.get("bytes_per_epoch"):
        parts.append(f"{row['bytes_per_epoch'] / 1e6:.1f} MB/epoch")
    return ", ".join(parts) or "planned only"


def speedups(cfg: dict[str, Any]) -> None:
    """Speed-ups of every system over colocation + fifo and over DistDGL (measured, sim)."""
    sy = cfg["systems"]

    def t(name: str, sim: bool = False) -> float | None:
        r = sy.get(name, {})
        v = r.get("sim", {}).get("epoch_time_s") if sim else r.get("epoch_time_s")
        return float(v) if v else None

    for name, r in sy.items():
        me, me_sim = t(name), t(name, sim=True)
        colo, colo_sim, dd = t("colocation+fifo"), t("colocation+fifo", True), t("distdgl")
        r["speedup_vs_colocation"] = colo / me if colo and me else None
        r["sim_speedup_vs_colocation"] = colo_sim / me_sim if colo_sim and me_sim else None
        r["speedup_vs_distdgl"] = dd / me if dd and me else None


# ------------------------------------------------------------------------------ the scale tier


class ScaleProgress:
    """The scale tier's progress callback: prints epochs, remembers when training started
    and ended (for the CPU window) and snapshots NIC counters there."""

    def __init__(self, label: str, counters: Any, epochs: int) -> None:
        self.label, self.counters, self.epochs = label, counters, epochs
        self.t_start: float | None = None
        self.t_end: float | None = None
        self.nic0: dict[str, int] | None = None
        self.nic1: dict[str, int] | None = None
        self.last_say = 0.0

    def __call__(self, kind: str, **kw: Any) -> None:
        now = time.perf_counter()
        if kind == "epoch_start" and kw.get("epoch") == 0 and self.t_start is None:
            self.t_start = now
            self.nic0 = self.counters.read() if self.counters else None
        elif kind == "batch":
            if kw.get("done") == kw.get("total") and kw.get("epoch") == self.epochs - 1:
                self.t_end = now
                self.nic1 = self.counters.read() if self.counters else None
            if now - self.last_say > 20 or kw.get("done") == kw.get("total"):
                self.last_say = now
                say(f"    {self.label}: epoch {kw.get('epoch', 0) + 1}, step {kw.get('done')}"
                    f"/{kw.get('total')} ({now - (self.t_start or now):.0f} s)")
        elif kind == "eval" and kw.get("done") == kw.get("total"):
            say(f"    {self.label}: {kw.get('phase')} evaluated ({kw.get('total')} steps)")
        elif kind == "epoch_end":
            r = kw["record"]
            say(f"    {self.label}: epoch {r['epoch'] + 1}: {r['epoch_time_s']:.2f} s, "
                f"{r.get('throughput_seeds_s', 0):.0f} seeds/s, loss {r['train_loss']:.3f}")


def _runtime_roles(res: Any, watch: ProcWatch, t0: float | None,
                   t1: float | None) -> dict[str, dict[str, Any]]:
    """Every role of a gnnsched run and the coordinator: machine, peak memory (the runtime's
    own, else the poller's), CPU in total and over the training window, feature caches."""
    roles: dict[str, dict[str, Any]] = {}
    for name, p in res.processes.items():
        pid = p.get("pid")
        seen = watch.procs.get(pid, {}) if pid else {}
        peak = p.get("peak_rss_bytes")
        roles[name] = {"machine": p.get("machine"),
                       "peak_rss_bytes": int(peak) if peak else seen.get("rss"),
                       "pss_bytes": p.get("pss_bytes"),
                       "peak_from": "runtime" if peak else ("/proc poll" if seen else None),
                       "cpu_s_total": p.get("cpu_s"),
                       "cpu_s_window": (watch.cpu_between(t0, t1, [pid])
                                        if pid and t0 and t1 else None),
                       # a gatherer's feature cache: rows, bytes, fill time, hits / lookups
                       **{k: v for k, v in p.items()
                          if k.startswith("cache_") or k == "shm_rows"}}
    coord = watch.procs.get(-1, {})
    roles["coordinator"] = {"machine": "(this process)", "peak_rss_bytes": coord.get("rss"),
                            "peak_from": "/proc poll",
                            "cpu_s_window": (watch.cpu_between(t0, t1, [-1])
                                             if t0 and t1 else None)}
    return roles


def _runtime_cpu(row: dict[str, Any], res: Any, watch: ProcWatch, prog: ScaleProgress,
                 seeds: int) -> None:
    """A gnnsched run's CPU over its training window: the system's (every role and the
    coordinator), other processes', the rest of the box's, and per trained seed."""
    t0, t1 = prog.t_start, prog.t_end
    if not (t0 and t1):
        return
    roles = row["roles"]
    known = {p.get("pid") for p in res.processes.values() if p.get("pid")} | {-1}
    win = sum(r["cpu_s_window"] or 0.0 for r in roles.values())
    other = watch.cpu_between(t0, t1, [p for p in watch.procs if p not in known])
    row["cpu_window_s"] = t1 - t0
    row["cpu_s"] = win
    row["cpu_s_other_processes"] = other  # fork servers, counters: not the system's
    box = watch.box_between(t0, t1)
    if box is not None:  # everything else on the box: other work, if any
        row["cpu_s_elsewhere"] = max(0.0, box - win - other)
    row["cpu_s_per_seed"] = win / seeds if seeds and win > 0 else None


def _runtime_ledger(res: Any) -> dict[str, Any]:
    """The runtime's CPU ledger of a run, by role and class per iteration."""
    from gnnsched.api import ledger_breakdown, ledger_table

    try:
        b = ledger_breakdown(res)
        return {"iterations": b["iterations"], "roles": b["roles"],
                "processes": {n: {k: v for k, v in r.items() if k != "top"}
                              for n, r in b["processes"].items()},
                "cpu_s_per_iter": b["cpu_s_per_iter"],
                "table": ledger_table(b, details=False).splitlines()}
    except Exception as exc:  # noqa: BLE001 - a run without ledgers still has its numbers
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_scale_runtime(launcher: str, cluster: ClusterSpec, job: JobSpec, plan: Plan,
                      prof: Any, parts: Path, sysname: str, run_dir: Path, net: Any,
                      counters: Any) -> dict[str, Any]:
    """One scale-tier run of the gnnsched runtime, measured as :mod:`.scale`'s Method says:
    steady seeds/s, CPU per trained seed, per-role memory and CPU, bytes per iteration."""
    prog = ScaleProgress(sysname, counters, job.epochs)
    with ProcWatch(self_too=True) as watch:
        res = train_system(launcher, cluster, job, plan, prof, sysname.split("+")[1], parts,
                           run_dir, net, prog)
    row = result_row(res)
    seeds_epoch = [int(e.get("seeds", 0)) for e in res.epochs]
    times = [float(e["epoch_time_s"]) for e in res.epochs]
    row["seeds_per_epoch"] = seeds_epoch[0] if seeds_epoch else 0
    row["seeds_per_s"] = steady_seeds_per_s(row["seeds_per_epoch"], times)
    row["iterations"] = res.iterations_per_epoch * len(res.epochs)
    row["roles"] = _runtime_roles(res, watch, prog.t_start, prog.t_end)
    _runtime_cpu(row, res, watch, prog, sum(seeds_epoch))
    if prog.nic0 is not None and prog.nic1 is not None:
        moved = sum(prog.nic1[h] - prog.nic0.get(h, 0) for h in prog.nic1)
        row["bytes_per_iter"] = moved / max(row["iterations"], 1)
        row["bytes_note"] = ("NIC tx bytes of every host from the first epoch's start to the "
                             "last training step, per iteration")
    else:
        row["bytes_per_iter"] = res.network_bytes / max(row["iterations"], 1)
        row["bytes_note"] = ("the runtime's count of payload bytes that crossed machines over "
                             "the whole run (evaluation included), per training iteration")
    row["ledger"] = _runtime_ledger(res)
    row["stages"] = res.stages
    return row


def _role_of_cmd(cmd: str) -> str | None:
    """A DistDGL process's role (``server:P``, ``trainer:R``) from its command line."""
    m = re.search(r"distdgl_role (server|trainer) .*--(?:part|rank) (\d+)", cmd)
    return f"{m.group(1)}:{m.group(2)}" if m else None


def _distdgl_roles(cluster: ClusterSpec, r: Any, watch: ProcWatch, t0: float | None,
                   t1: float | None) -> dict[str, dict[str, Any]]:
    """Every DistDGL server and trainer: machine, peak memory and CPU (the poller's)."""
    hosts = {f"server:{p}": cluster.machines[cluster.store_of(p)].name
             for p in range(cluster.num_parts)}
    hosts.update({f"trainer:{t['rank']}": t["host"] for t in r.trainers})
    roles: dict[str, dict[str, Any]] = {}
    for pid, rec in watch.procs.items():
        name = _role_of_cmd(rec["cmd"])
        if name is None:
            continue
        roles[name] = {"machine": hosts.get(name), "peak_rss_bytes": rec["rss"],
                       "peak_from": "/proc poll",
                       "cpu_s_total": rec["cpu"][-1][1] if rec["cpu"] else None,
                       "cpu_s_window": watch.cpu_between(t0, t1, [pid]) if t0 and t1 else None}
    return dict(sorted(roles.items()))


def run_scale_distdgl(launcher: str, cluster: ClusterSpec, job: JobSpec, parts: Path,
                      run_dir: Path, net: Any, split: list[list[int]] | None
                      ) -> dict[str, Any]:
    """One scale-tier DistDGL run on the same partitions, job, fan-outs, batch and seed
    split, measured like the gnnsched runtime's (:func:`run_scale_runtime`)."""
    log = run_dir / "logs" / "trainer-0.log"
    log.unlink(missing_ok=True)  # an earlier run's lines would mark its epochs as this one's
    with ProcWatch() as watch:
        watch.watch(log, r"rank 0 epoch (\d+):", "epoch{}")
        r = run_distdgl_on(launcher, cluster, job, parts, run_dir, net, timeout_s=3600,
                           eval_fanouts=list(job.evaluation_fanouts),
                           eval_batch_size=job.eval_batch_size, split=split)
    if not r.feasible:
        return {"feasible": False, "reason": r.reason}
    d = r.to_dict()
    d.update(metric_fields(r))
    seeds = sum(int(t["train_nodes"]) for t in r.trainers)
    steps = max(math.ceil(int(t["train_nodes"]) / job.batch_size) for t in r.trainers)
    d["seeds_per_epoch"] = seeds
    d["seeds_per_s"] = steady_seeds_per_s(seeds, r.epoch_times_s)
    d["iterations"] = steps * len(r.epoch_times_s)
    ends = [watch.marks.get(f"epoch{e}") for e in range(len(r.epoch_times_s))]
    t1 = ends[-1] if ends and ends[-1] else None
    t0 = (ends[0] - r.epoch_times_s[0]) if ends and ends[0] else None
    d["roles"] = _distdgl_roles(cluster, r, watch, t0, t1)
    if t0 and t1:
        d["cpu_window_s"] = t1 - t0
        d["cpu_s"] = sum(x["cpu_s_window"] or 0.0 for x in d["roles"].values())
        box = watch.box_between(t0, t1)
        if box is not None:  # everything else on the box: other work, if any
            d["cpu_s_elsewhere"] = max(0.0, box - watch.cpu_between(t0, t1))
        d["cpu_s_per_seed"] = (d["cpu_s"] / (seeds * len(r.epoch_times_s))
                               if seeds and d["cpu_s"] > 0 else None)
    d["bytes_per_iter"] = (sum(r.bytes_sent.values()) / max(d["iterations"], 1)
                           if r.bytes_sent else None)
    d["bytes_note"] = r.bytes_note
    return d
