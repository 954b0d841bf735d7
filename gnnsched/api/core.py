"""The forward path as the CLI walks it: plan, simulate, train and calibrate.

Each function takes objects or file paths and does the loading and checking once, in one
place, so the CLI, ``gnnsched demo``, the evaluation and a user's script all walk the same
forward path::

    cluster, job -> profile -> plan -> prediction (simulate) -> run (train) -> calibrate

A plan records the profile and cluster it was made with (``made_for``), so ``simulate`` and
``train`` find the profile again without being told (``cost=None``). Re-exported by
:mod:`gnnsched.api`, which is where to import it from.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsched.calibrate import (
    FoundCalibration,
    apply_calibration,
    find_calibration,
    is_calibrated,
)
from gnnsched.plan import Plan
from gnnsched.profile import CostProfile, profile_for
from gnnsched.spec import ClusterSpec, JobSpec, SpecError, check_compatible, load_cluster, load_job

if TYPE_CHECKING:
    from gnnsched.simulator import SimResult


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes: how a plan recognises the profile and cluster it was made for."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_pair(cluster: ClusterSpec | str | Path, job: JobSpec | str | Path,
              epochs: int | None = None) -> tuple[ClusterSpec, JobSpec]:
    """Cluster and job as objects, checked against each other (paths are loaded)."""
    if not isinstance(cluster, ClusterSpec):
        cluster = load_cluster(cluster)
    if not isinstance(job, JobSpec):
        job = load_job(job)
    if epochs is not None:
        job = replace(job, epochs=int(epochs))
    check_compatible(cluster, job)
    return cluster, job


def load_plan(plan: Plan | str | Path, cluster: ClusterSpec, job: JobSpec, verb: str,
              any_job: bool = False) -> tuple[Plan, str]:
    """A plan (path or object) checked against the job and the cluster; with its source."""
    if isinstance(plan, Plan):
        source = "plan"
    else:
        source = str(plan)
        plan = Plan.load(plan)
    check_plan_job(plan, job, source, verb, any_job)
    plan.validate(cluster, job, source)
    return plan, source


def plan_profile(plan: Plan, job: JobSpec, cost: CostProfile | str | Path | None,
                 source: str = "plan") -> CostProfile:
    """The profile to predict ``plan`` with: ``cost`` when given, else the one the plan was
    made with (its ``made_for.cost``, checked unchanged by its digest), else the job's
    synthetic profile."""
    if isinstance(cost, CostProfile):
        cost.check_job(job, "profile")
        return cost
    if cost is None:
        made = plan.prediction.made_for if plan.prediction is not None else None
        path = made.cost if made is not None else None
        if path:
            p = Path(path)
            if not p.is_file():
                raise SpecError(source, "predicted.made_for.cost",
                                f"the plan was made with profile {path}, which is not there "
                                "(from this folder)", "pass --cost PROFILE.json")
            digest = made.cost_sha256 if made is not None else None
            if digest and file_digest(p) != digest:
                raise SpecError(source, "predicted.made_for.cost",
                                f"profile {path} changed since the plan was made",
                                "pass --cost to use it anyway, or re-run `gnnsched plan`")
            cost = str(p)
    return profile_for(job, None if cost is None else str(cost))


# how ``plan`` and ``simulate`` choose a box calibration: "auto" (the plan's recorded one,
# else the one beside the cluster file, if any), None or False (none), or a file / a found one
Calibration = FoundCalibration | str | Path | bool | None


def resolve_calibration(calibration: Calibration, cluster: ClusterSpec | str | Path,
                        job: JobSpec, plan: Plan | None = None) -> FoundCalibration | None:
    """The box calibration to predict ``job`` on ``cluster`` with: ``"auto"`` takes the one
    ``plan`` was made with (``made_for.calibration``), else the one beside the cluster file
    (``CLUSTER.calibration.json``, :func:`gnnsched.calibrate.find_calibration`); a path takes
    that file's calibration of the job's dataset; None or False takes none."""
    if calibration is None or calibration is False:
        return None
    if isinstance(calibration, FoundCalibration):
        return calibration
    if calibration != "auto" and calibration is not True:
        return find_calibration(None, job, calibration)
    made = plan.prediction.made_for if plan is not None and plan.prediction else None
    if made is not None and made.calibration:
        if Path(made.calibration).is_file():
            return find_calibration(None, job, made.calibration)
        print(f"gnnsched: warning: the plan was predicted with calibration "
              f"{made.calibration}, which is not there (from this folder): predicting without "
              "it (pass --calibration FILE)", file=sys.stderr)
        return None
    if isinstance(cluster, ClusterSpec):
        src = Path(cluster.source)
        return find_calibration(src, job) if src.suffix in (".yaml", ".yml", ".json") else None
    return find_calibration(cluster, job)


def calibrated(profile: CostProfile, found: FoundCalibration | None) -> CostProfile:
    """``profile`` with ``found``'s box costs, unless it holds measured costs already (a
    profile from ``--from-run``, or one calibrated before)."""
    if found is None or is_calibrated(profile):
        return profile
    return apply_calibration(profile, found)


@dataclass(frozen=True)
class Inputs:
    """What simulate and train start from, loaded and checked once (:func:`prepare`)."""

    cluster: ClusterSpec
    job: JobSpec
    plan: Plan
    profile: CostProfile | None
    plan_source: str = "plan"
    calibration: FoundCalibration | None = None  # the box calibration applied to ``profile``


def prepare(cluster: ClusterSpec | str | Path, job: JobSpec | str | Path,
            plan: Plan | str | Path, cost: CostProfile | str | Path | None = None, *,
            verb: str = "simulate", any_job: bool = False, epochs: int | None = None,
            need_profile: bool = True, calibration: Calibration = "auto") -> Inputs:
    """Load and cross-check cluster, job, plan and profile, once. Without ``need_profile`` a
    profile is loaded only when ``cost`` names one (train learns its costs online). The
    profile gets the box calibration ``calibration`` chooses (:func:`resolve_calibration`:
    by default the plan's, else the one beside the cluster file)."""
    cluster_arg = cluster
    cluster, job = load_pair(cluster, job, epochs)
    plan, source = load_plan(plan, cluster, job, verb, any_job)
    if verb == "train":
        check_partitions_fit(cluster, job)
    profile = None
    found = None
    if need_profile:
        profile = plan_profile(plan, job, cost, source)
        found = None if is_calibrated(profile) else resolve_calibration(
            calibration, cluster_arg, job, plan)
        profile = calibrated(profile, found)
    elif isinstance(cost, CostProfile):
        profile = cost
    elif cost is not None:
        profile = CostProfile.load(str(cost))
        profile.check_job(job, str(cost))
    return Inputs(cluster, job, plan, profile, source, found)


def partition_bytes(path: str | Path) -> list[float]:
    """Bytes every partition of a partition directory keeps in its store's memory: its node
    features (with labels and masks) and its graph structure, as the files a store loads
    hold them (DGL's ``node_feats``, ``edge_feats`` and ``part_graph`` of each part)."""
    import json

    from gnnsched.datasets import open_partitions

    pset = open_partitions(path, verify=False)
    dgl_meta = pset.dgl_meta or json.loads(pset.config.read_text())
    out = []
    for i in range(pset.num_parts):
        entry = dgl_meta.get(f"part-{i}")
        if not isinstance(entry, dict):
            raise SpecError(str(pset.config), f"part-{i}", "is missing",
                            "a directory written by `gnnsched partition`")
        size = 0
        for key in ("node_feats", "edge_feats", "part_graph"):
            if not entry.get(key):
                continue
            f = pset.config.parent / str(entry[key])
            if not f.is_file():
                raise SpecError(str(pset.config), f"part-{i}.{key}", f"file {f} is missing",
                                "re-run `gnnsched partition`")
            size += f.stat().st_size
        out.append(float(size))
    return out


def job_partitions(job: JobSpec, partitions: str | Path | None = None) -> Path | None:
    """The partition directory whose sizes a plan is checked with, without partitioning
    anything: ``partitions`` when given, else the job's ``partitions`` field, else the
    directory the job's dataset was already partitioned into in the cache; None when none
    exists (the profile's estimate is used then)."""
    from gnnsched.datasets.cache import cache_path

    if partitions is not None or job.partitions:
        where, field = (("--partitions", "") if partitions is not None else
                        (job.source, "partitions"))
        path = Path(partitions if partitions is not None else job.partitions)
        if not path.is_dir():
            raise SpecError(where, field, f"directory {path} does not exist",
                            f"`gnnsched partition {job.dataset} --parts {job.num_parts} --out "
                            f"{path}` first")
        return path
    path = cache_path(job)  # where partitions_for keeps the job's partitions
    return path if (path / "gnnsched.json").is_file() else None


def check_partitions_fit(cluster: ClusterSpec, job: JobSpec,
                         partitions: str | Path | None = None) -> None:
    """Before training: every store holds its partitions' real bytes in its memory_gb
    (:func:`gnnsched.placement.placer.check_store_memory`), when the job's partition
    directory is already there (:func:`job_partitions`); a directory that is missing or
    unreadable is left to the run, which says so itself."""
    from gnnsched.placement.placer import check_store_memory

    try:
        path = job_partitions(job, partitions)
        sizes = partition_bytes(path) if path is not None else None
    except SpecError:
        return
    if sizes is not None and len(sizes) == cluster.num_parts:
        check_store_memory(cluster, sizes, f"measured on the partition files in {path}")


def planning_profile(cluster: ClusterSpec | str | Path, job: JobSpec,
                     cost: CostProfile | str | Path | None = None,
                     calibration: Calibration = "auto"
                     ) -> tuple[CostProfile, FoundCalibration | None]:
    """The profile ``plan`` predicts with: ``cost`` (else the job's synthetic one) with the
    box calibration ``calibration`` chooses (:func:`resolve_calibration`; by default the one
    beside the cluster file), and that calibration (None: none applied)."""
    profile = cost if isinstance(cost, CostProfile) else \
        profile_for(job, None if cost is None else str(cost))
    found = None if is_calibrated(profile) else resolve_calibration(calibration, cluster, job)
    return calibrated(profile, found), found


def plan_floors(cluster: ClusterSpec, plan: Plan | None, part_bytes: list[float],
                row_bytes: float = 0.0, num_nodes: int = 0) -> dict[str, Any]:
    """Per machine, its memory floor (:func:`gnnsched.memory.floor`) under ``plan``: the
    processes the runtime starts there (a store per host with partitions, the plan's
    trainers, samplers and relays, as its role table counts them), the partitions it stores
    (``part_bytes``) and the plan's feature caches. Without a plan, the stores alone: what a
    store host needs whatever is placed beside it."""
    from collections import Counter

    from gnnsched.memory import cache_bytes, floor

    roles: dict[str, Counter[str]] = {}
    for m in cluster.machines:
        if m.partitions:
            roles.setdefault(m.name, Counter())["store"] += 1
    gatherers: Counter[str] = Counter()
    for t in plan.trainers if plan is not None else ():
        roles.setdefault(t.machine, Counter())["trainer"] += 1
        for name, count in t.samplers:
            roles.setdefault(name, Counter())["sampler"] += int(count)
        if t.fetch_at == t.machine:  # gathers in its own process (else its relay does)
            gatherers[t.machine] += 1
    for relay in {t.fetch_at for t in plan.trainers if t.fetch_at != t.machine} \
            if plan is not None else ():
        roles.setdefault(relay, Counter())["fetcher"] += 1
        gatherers[relay] += 1
    caches = (getattr(plan, "caches", None) or {}) if plan is not None else {}
    out = {}
    for m in cluster.machines:
        if m.name in roles:
            stored = sum(part_bytes[p] for p in m.partitions if p < len(part_bytes))
            cache = cache_bytes(int(caches.get(m.name, 0) or 0), row_bytes, num_nodes,
                                gatherers[m.name])
            out[m.name] = floor(roles[m.name], stored, cache)
    return out


def check_floors(cluster: ClusterSpec, floors: dict[str, Any], sizes_from: str,
                 what: str) -> None:
    """A SpecError naming the first machine whose memory_gb is below its floor, the floor and
    what it is made of (``gnnsched.memory``, the number ``cluster up`` and ``train`` refuse
    by too), and the memory_gb that holds it."""
    from gnnsched.memory import refuse_below

    refuse_below(cluster, floors, lambda f: (
        f"{what} ({f.parts()}; partition sizes {sizes_from or 'estimated from the profile'}; "
        "gnnsched.memory)"))


def plan_problem(cluster: ClusterSpec | str | Path, job: JobSpec | str | Path,
                 cost: CostProfile | str | Path | None = None, *,
                 partitions: str | Path | None = None, calibration: Calibration = None) -> Any:
    """The placement :class:`~gnnsched.placement.Problem` of a job on a cluster, with the
    stored partitions' real sizes (:func:`job_partitions`, :func:`partition_bytes`) when a
    partition directory is at hand; a store that cannot hold them is a SpecError naming the
    host, the partitions, the bytes needed and available, and what would be valid. Its
    profile gets the box calibration ``calibration`` chooses (:func:`planning_profile`;
    default none, as given)."""
    from gnnsched.placement import Problem

    cluster_arg = cluster
    cluster, job = load_pair(cluster, job)
    profile, _ = planning_profile(cluster_arg, job, cost, calibration)
    path = job_partitions(job, partitions)
    if path is None:
        return Problem(cluster, job, profile)
    sizes = partition_bytes(path)
    if len(sizes) != cluster.num_parts:
        raise SpecError(str(path), "num_parts", f"holds {len(sizes)} partitions, cluster "
                        f"{cluster.source} stores {cluster.num_parts}",
                        "the partitions of this job")
    return Problem(cluster, job, profile, part_bytes=sizes,
                   part_bytes_from=f"measured on the partition files in {path}")


def plan(cluster: ClusterSpec | str | Path, job: JobSpec | str | Path,
         cost: CostProfile | str | Path | None = None, *, placer: str = "gnnsched",
         seed: int = 0, budget: float | None = None,
         partitions: str | Path | None = None, cache_share: float = 0.0,
         keep_colocation: float = 0.0, calibration: Calibration = "auto",
         progress: Callable[[str], None] | None = None) -> Plan:
    """Place every task of ``job`` on ``cluster`` with ``placer``, compared with the baselines
    (colocation, greedy, random) and the lower bound; the plan's ``predicted`` holds the
    comparison and ``made_for`` the files it was made from. Every machine's memory is checked
    against the partitions it stores (their real sizes when ``partitions``, the job's
    ``partitions`` or the job's cached partitions are there: :func:`plan_problem`) plus the
    processes the plan puts there. ``keep_colocation``: gnnsched keeps colocation's plan
    unless its own is predicted faster by more than this fraction on every draw. Every
    prediction is made with the box calibration ``calibration`` chooses (by default the one
    beside the cluster file, :func:`planning_profile`), which ``made_for.calibration``
    records. ``progress`` gets one line per planning phase (starts, race, scoring, search,
    bound) with the seconds since planning began."""
    from gnnsched.placement.compare import plan_and_compare

    cluster_file = None if isinstance(cluster, ClusterSpec) else str(cluster)
    job_file = None if isinstance(job, JobSpec) else str(job)
    cluster_arg = cluster
    cluster, job = load_pair(cluster, job)
    cost_file = None if cost is None or isinstance(cost, CostProfile) else str(cost)
    profile, found = planning_profile(cluster_arg, job, cost, calibration)
    problem = plan_problem(cluster, job, profile, partitions=partitions)
    check_floors(cluster, plan_floors(cluster, None, problem.part_bytes),
                 problem.part_bytes_from, "a store holding these partitions needs")
    result = plan_and_compare(problem, placer, seed=seed, budget=budget,
                              cache_share=cache_share, keep_colocation=keep_colocation,
                              progress=progress)
    nodes = int((profile.meta or {}).get("num_nodes", 0) or 0)
    check_floors(cluster, plan_floors(cluster, result, problem.part_bytes,
                                      float(profile.feature_bytes), nodes),
                 problem.part_bytes_from, f"the roles {placer}'s plan puts there need")
    made_for: dict[str, Any] = {"cost": cost_file, "cluster": cluster_file, "job": job_file}
    if problem.part_bytes_from:
        made_for["part_bytes_from"] = problem.part_bytes_from
    calibration_file = str(found.path) if found is not None else None
    if calibration_file:
        made_for["calibration"] = calibration_file
    for key, path in (("cost", cost_file), ("cluster", cluster_file),
                      ("calibration", calibration_file)):
        if path:
            made_for[f"{key}_sha256"] = file_digest(path)
    result = result.with_prediction(cluster_file=cluster_file, job_file=job_file,
                                    cost=cost_file or "synthetic", made_for=made_for)
    return result.for_job(job)


def simulate(cluster: Inputs | ClusterSpec | str | Path, job: JobSpec | str | Path | None = None,
             plan: Plan | str | Path | None = None,
             cost: CostProfile | str | Path | None = None, *, policy: Any = "gnnsched",
             seed: int = 0, iterations: int | None = None, record: bool = False,
             network: str | None = None, nic_window_s: float | None = None,
             any_job: bool = False, calibration: Calibration = "auto") -> SimResult:
    """Predict a plan's run with the simulator (``policy`` a name or a Policy). The first
    argument may be :class:`Inputs` from :func:`prepare` instead of cluster, job and plan.

    ``network`` is the NIC model (:data:`gnnsched.simulator.NETWORKS`): ``"windowed"``, the
    default, is what the runtime does (send windows of ``nic_window_s`` seconds of egress,
    default the runtime's :data:`gnnsched.workload.NIC_WINDOW_S`); ``"ideal"`` NICs serve
    their queue as the policy says. The result's ``meta["network"]`` names the model used
    (and ``meta["nic_window_s"]`` its window)."""
    from gnnsched.policy import get_policy
    from gnnsched.simulator import network_window
    from gnnsched.simulator import simulate as run_sim

    try:
        network, window = network_window(network, nic_window_s)
    except ValueError as exc:
        raise SpecError("--network" if network is not None else "--nic-window", "",
                        str(exc), "windowed (the runtime's NICs, the default) or ideal"
                        ) from None
    if isinstance(cluster, Inputs):
        inp = cluster
    else:
        if job is None or plan is None:
            raise TypeError("simulate needs cluster, job and plan (or Inputs from prepare)")
        inp = prepare(cluster, job, plan, cost, verb="simulate", any_job=any_job,
                      calibration=calibration)
    try:
        pol = get_policy(policy)
    except ValueError as exc:
        raise SpecError("--policy", "", str(exc)) from None
    res = run_sim(inp.cluster, inp.job, inp.plan, inp.profile, pol, seed=seed,
                  iterations=iterations, record=record, nic_window_s=window)
    res.meta["network"] = network
    res.meta["calibration"] = str(inp.calibration.path) if inp.calibration else None
    return res


def train(cluster: ClusterSpec | str | Path, job: JobSpec | str | Path, plan: Plan | str | Path,
          *, policy: Any = "gnnsched", launcher: Any = "local",
          out_dir: str | Path | None = None, partitions: str | Path | None = None,
          epochs: int | None = None, options: Any = None, profile: Any = None,
          progress: Any = None, data_dir: str | None = None,
          launcher_options: dict[str, Any] | None = None, force_plan: bool = False) -> Any:
    """Run one real training job and return its :class:`~gnnsched.runtime.coordinator.RunResult`.

    ``cluster`` / ``job`` / ``plan`` are objects or file paths; ``policy`` a name or a
    :class:`~gnnsched.policy.Policy`; ``launcher`` a name or a
    :class:`~gnnsched.runtime.launcher.Launcher`; ``profile`` a
    :class:`~gnnsched.profile.CostProfile` (or path) giving the policy its expected costs.
    A plan that records another job (:meth:`~gnnsched.plan.Plan.job_differences`) is refused
    unless ``force_plan``, which warns on stderr and trains it anyway.
    """
    from gnnsched.advisor import PlanAdvisor
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.policy import policies
    from gnnsched.runtime.coordinator import Coordinator
    from gnnsched.runtime.launcher import get_launcher

    if isinstance(policy, str) and policy not in policies():
        raise SpecError("--policy", "", f"unknown policy {policy!r}",
                        ", ".join(sorted(policies())))
    inp = prepare(cluster, job, plan, profile, verb="train", any_job=force_plan, epochs=epochs,
                  need_profile=False)
    cluster, job, plan, profile = inp.cluster, inp.job, inp.plan, inp.profile
    if options is not None and getattr(options, "faults", ()):
        check_faults(options.faults, cluster, plan)
        cut = next((f for f in options.faults if f.signal in ("CUT", "SLOW")), None)
        kind = getattr(launcher, "name", launcher)
        if cut is not None and kind != "netns":
            what = "cuts a machine off its network" if cut.signal == "CUT" else \
                "slows a machine's CPU down"
            raise SpecError("--kill-at", "", f"{cut.role}:{cut.at_step}:{cut.signal} {what}, "
                            f"which the {kind} launcher cannot",
                            "--launcher netns on an emulated cluster (gnnsched cluster up)")
    parts = Path(partitions) if partitions else partitions_for(job, data_dir, quiet=True)
    run_dir = Path(out_dir or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    plan.save(run_dir / "plan.json")
    launch = get_launcher(launcher, cluster, **(launcher_options or {}))
    coord = Coordinator(cluster, job, plan, str(parts), launch, run_dir, policy,
                        options=options, profile=profile, progress=progress,
                        advisor=PlanAdvisor())
    return coord.run()


def calibrate(run_dir: str | Path, **kwargs: Any) -> CostProfile:
    """The profile a measured run implies (:func:`gnnsched.calibrate.from_run`): re-plan from
    what the cluster really did."""
    from gnnsched.calibrate import from_run

    return from_run(run_dir, **kwargs)


def summary(result: Any) -> dict[str, Any]:
    """The ``--json`` object of one system run. Its times say what they are:
    ``measured_epoch_time_s`` is the wall-clock epoch the run measured (on a scale model,
    dilated: D times the real cluster's), ``real_cluster_epoch_time_s`` the real cluster's
    (measured / D; the same off the model), the one a plan's prediction is compared with.
    ``epoch_time_s`` and ``real_epoch_time_s`` are their old names, kept for one version."""
    return {"policy": result.policy, "placer": result.placer, "launcher": result.launcher,
            "measured_epoch_time_s": result.epoch_time_s,
            "real_cluster_epoch_time_s": result.real_epoch_time_s,
            "epoch_time_s": result.epoch_time_s, "test_accuracy": result.test_accuracy,
            "val_accuracy": result.val_accuracy[-1] if result.val_accuracy else None,
            "metric": result.metric, "test_metric": result.test_metric,
            "val_metric": result.val_metric[-1] if result.val_metric else None,
            "majority_rate": result.majority_rate,
            "dilation": result.dilation, "real_epoch_time_s": result.real_epoch_time_s,
            "bytes_sent": result.bytes_sent, "network_bytes": result.network_bytes,
            "allreduce_bytes": result.allreduce_bytes,
            "bytes_by_process": result.bytes_by_process, "stages": result.stages,
            "epoch_times_s": [e["epoch_time_s"] for e in result.epochs],
            "iterations_per_epoch": result.iterations_per_epoch,
            "startup_s": result.startup_s, "wall_s": result.wall_s, "run_dir": result.run_dir,
            "recoveries": getattr(result, "recoveries", [])}


def check_plan_job(plan: Plan, job: JobSpec, source: str, verb: str,
                   any_job: bool = False) -> None:
    """A plan made for another job's settings is refused (:meth:`Plan.check_job`), or with
    ``any_job`` (``--any-job``) used anyway after one stderr line naming what differs."""
    if not any_job:
        plan.check_job(job, source)
        return
    diff = plan.job_differences(job)
    if diff:
        print(f"gnnsched {verb}: warning: {source} was made for a job with other settings "
              f"than {job.source} ({'; '.join(diff)}); using it anyway (--any-job)",
              file=sys.stderr)


def check_faults(faults: Any, cluster: ClusterSpec, plan: Plan) -> None:
    """Every fault names a process (or machine) the plan runs; a SpecError naming the
    ``--kill-at`` value and the targets that exist, before anything is launched."""
    from gnnsched.spec import SpecError

    samplers = sum(t.num_samplers for t in plan.trainers)
    targets = {
        "trainer": [str(w) for w in range(len(plan.trainers))],
        "sampler": [str(s) for s in range(samplers)],
        "store": [m.name for m in cluster.machines if m.partitions],
        "fetcher": sorted({t.fetch_at for t in plan.trainers if t.fetch_at != t.machine}),
        "machine": [m.name for m in cluster.machines],
    }
    for f in faults:
        kind, _, ident = f.role.partition(":")
        known = targets.get(kind)
        if known is None or ident not in known:
            names = [f"{kind}:{k}" for k in (known or [])]
            valid = (", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8
                                             else "")) if names else \
                f"none: this plan runs no {kind} process"
            raise SpecError("--kill-at", "", f"no process {f.role!r} in this plan "
                            f"(step {f.at_step})", valid)


__all__ = ["Calibration", "Inputs", "calibrate", "calibrated", "check_faults", "check_floors",
           "check_partitions_fit", "check_plan_job", "file_digest", "job_partitions", "load_pair",
           "load_plan", "partition_bytes", "plan", "plan_floors", "plan_problem", "plan_profile",
           "planning_profile", "prepare", "resolve_calibration", "simulate", "summary", "train"]
