"""The scale tier: ``gnnsched bench scale``. A products-like graph (1M nodes, 40M directed
edges, 100-d features, 47 classes: :data:`gnnsched.datasets.synthetic.PRESETS` ``products``)
taken through partition, profile, plan and train on the emulated cluster, for the single-process
reference, DistDGL, colocation + fifo and gnnsched, in one command. Writes ``results.json``
(with the ``targets`` of ``--targets``' ``scale`` goals), ``report.md`` and ``scale.png`` to
``--out`` (default ``docs/results/scale``; ``--quick``: ``runs/bench-scale-quick``).

This module runs it (:func:`run_scale`, :func:`run`) from its parts: the settings, graph,
job and clusters (:mod:`.scale_config`), the steps in child processes (:mod:`.scale_steps`),
the box's limit (:mod:`.limit`), the systems' runs (:mod:`.runs`), the judging
(:mod:`.judging.scale`), the report (:mod:`.report.scale`) and the plot (:mod:`.plots`).

The rest of this docstring is the report's Method section.

**Graph and job.** The ``products`` preset of the synthetic generator (DC-SBM, edge homophily
0.3, feature noise 1.0, label noise 0.2: see :mod:`gnnsched.datasets.synthetic`), ``--nodes``
nodes (default 1M) at mean out-degree 40. 14% of the nodes train (140,000 at 1M: one epoch is 35 synchronous
iterations of 4 x 1024 seeds, as in the issue's measurement; a smaller ``--nodes`` keeps
140,000 training nodes, up to half the graph); the test set is a seeded sample of at most
``TEST_NODES`` nodes (20,000: the generator's ``val_frac`` takes the rest, and no run
validates, ``eval_every: 0``), so every system evaluates the same test nodes, DistDGL
included, which evaluates its whole test set. The job: GraphSAGE, 3 layers, 256 hidden,
fan-outs 15/10/5, batch 1024 per trainer, 4 trainers over 4 METIS parts, Adam lr 0.003,
dropout 0.5, features standardised per column (``features: {normalize: standard}``); evaluation with the training fan-outs in batches of 1024, over at most
``TEST_NODES`` nodes.

**Cluster.** *plentiful*: 4 hosts, each storing one partition with one trainer device of
speed 1.0 (a device of speed 1.0 trains as fast as one core of this box), 2 cores, 1 Gbit/s
NICs (network namespaces with ``tc``-shaped NICs when root, else local processes). This is
where DistDGL runs and compute, not the network, should bind. *limited* (``--shapes``):
2 GPU-less stores (2 cores) holding 2 partitions each and 2 hosts with 2 devices and 4 cores
each, 1 Gbit/s.
No control groups and no dilation: every emulated host shares this box's cores, as the
systems do on one real machine.

**Steps.** (1) Partition through the cache (:func:`gnnsched.datasets.cache.partitions_for`)
in a child process; its peak memory is the child's ``ru_maxrss`` (generation and METIS
included), against the graph's in-memory size (int64 source and destination of every
directed edge, float32 features, int64 labels, three boolean masks). (2) Profile with
``gnnsched profile`` in a child process (peak memory likewise). (3) Plan with
:func:`gnnsched.api.plan`: the ``gnnsched`` placer (with its comparison and lower bound) and
``colocation``. (4) The box's compute limit and the single-process reference, each in a child
process. (5) Train every system on the cluster for the same number of epochs, one at a time.

**Throughput.** Trained seeds per second in steady state: with ``E >= 2`` epochs (the
default, 2), the training nodes (each trained once per epoch, in every system) divided by the
median epoch time over epochs 2..E; with one epoch (``--epochs 1``, and ``--quick``), by that
epoch's time, warm-up included (the same for every system). The first epoch carries each
system's warm-up (gnnsched's feature caches fill while its first batches wait; DistDGL and
the reference start their samplers), so the report shows it in its own column. An epoch is
timed barrier to barrier over its training steps (no evaluation).

**The box's limit** is the tighter of two bounds. *Compute*: the job's own mini-batches (the
runtime's schedule: the same seeds per trainer and step) sampled and trained in one process
with both cores (torch and DGL on 2 threads), each stage by its fastest implementation at hand:
sampling by DGL's C++ sampler on the whole graph or by gnnsched's sampler on all partitions in
process (the faster), the input features gathered, and forward, backward and the optimizer
step by gnnsched's model or by ``dgl.nn.SAGEConv`` (the faster); limit = seeds / (sample +
gather + train) over the timed batches, after warm-up. *Network*: the plan's lower bound on the
cluster's NICs: the most loaded NIC direction's seconds per iteration under gnnsched's plan
(:meth:`gnnsched.workload.Workload.loads`: feature, structure and gradient bytes from the
profile), for ``trainers x batch`` seeds per iteration. gnnsched's seeds/s is reported as a
fraction of the limit.

**CPU.** CPU-seconds per trained seed: the user + system CPU of every process of the system
(gnnsched: every role and the coordinator; DistDGL: its servers and trainers) over the
training window (first epoch's start to the last training step), read from ``/proc`` every
``POLL_S`` seconds (interpolated at the window's edges), divided by the seeds trained in it.
The reference's is its process's CPU over its epochs (one thread). For gnnsched's runs the
report also breaks every role's CPU down by class (work, copy, serialise, rpc, wait, other)
per training iteration from the runtime's CPU ledger (:func:`gnnsched.runtime.ledger.breakdown`),
and keeps the previous results' breakdown beside it ("before").

**Memory.** Per role, the peak resident set: the runtime's own ``peak_rss_bytes`` where a role
reports it, else the largest RSS the ``/proc`` poller saw (every ``POLL_S`` seconds).

**Bytes.** Bytes moved per iteration: NIC tx bytes of every emulated host over the training
epochs (gnnsched: NIC counters at the epoch barriers; DistDGL: each host namespace's counters
during its training epochs) divided by the iterations; on local processes, gnnsched's own
count of the bytes that crossed machines (none for DistDGL).

**Test metric.** The job's metric (accuracy for 47 classes) on the test sample after the last
epoch. The targets compare gnnsched with DistDGL and with the single-process reference of
gnnsched's seed split (which trains exactly gnnsched's mini-batches); one job seed each
(n = 1) unless ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

from gnnsched import api
from gnnsched.evaluation.config import (
    canonical,
    error_text,
    mean_row_metric,
    plan_rows,
    predicted_scalars,
    row_metric,
    say,
    seed_split,
)
from gnnsched.evaluation.driver import json_default, versions
from gnnsched.evaluation.judging.scale import invariants, targets
from gnnsched.evaluation.limit import box_limit, compute_bound, limit_text, network_bound
from gnnsched.evaluation.measure import GB, NicCounters
from gnnsched.evaluation.plots import plot_scale
from gnnsched.evaluation.predict import policy_gains
from gnnsched.evaluation.report.scale import METHOD_MARK
from gnnsched.evaluation.report.scale import report as _report
from gnnsched.evaluation.runs import run_scale_distdgl, run_scale_runtime
from gnnsched.evaluation.scale_config import (
    CLUSTER_SYSTEMS,
    DEFAULT_SYSTEMS,
    HEADLINE,
    LABELS,
    PRESET,
    SCALE_SHAPES,
    ScaleSettings,
    graph_bytes,
    graph_params,
    make_cluster,
    make_job,
    plan_key,
    policy_pairs,
    reproduce,
    resolve,
)
from gnnsched.evaluation.scale_steps import Steps, steady_seeds_per_s
from gnnsched.profile import CostProfile
from gnnsched.spec import ClusterSpec, JobSpec

METHOD = (__doc__ or "").split(METHOD_MARK)[1]  # the report's Method section


def report(doc: dict[str, Any]) -> str:
    """report.md of a results document, with this module's Method."""
    return _report(doc, METHOD)


def _describe(row: dict[str, Any]) -> str:
    """One run's numbers in one line."""
    if row.get("feasible") is False:
        return f"infeasible: {row.get('reason')}"
    if row.get("error"):
        return f"FAILED: {row['error'][:300]}"
    parts = []
    if row.get("seeds_per_s"):
        parts.append(f"{row['seeds_per_s']:.0f} seeds/s")
    if row.get("cpu_s_per_seed"):
        parts.append(f"{1e3 * row['cpu_s_per_seed']:.2f} CPU-ms/seed")
    if row.get("bytes_per_iter"):
        parts.append(f"{row['bytes_per_iter'] / 1e6:.0f} MB/iteration")
    if row_metric(row) is not None:
        parts.append(f"test {row.get('metric') or 'accuracy'} {row_metric(row):.4f}")
    return ", ".join(parts) or "no numbers"


def policy_ab(fifo: dict[str, Any], ours: dict[str, Any], predicted: dict[str, Any]
              ) -> dict[str, Any]:
    """The measured gain of gnnsched over fifo on one plan beside the simulator's: the median
    of the paired ratios (repeat r of each ran job seed SEED + r), their range, and the
    noise (the larger relative spread of one system's repeats)."""
    a = dict(zip(fifo.get("job_seeds") or [], fifo.get("repeat_seeds_per_s") or []))
    b = dict(zip(ours.get("job_seeds") or [], ours.get("repeat_seeds_per_s") or []))
    ratios = [b[k] / a[k] for k in a if k in b and a[k]]
    if not ratios:
        return {"measured_gain": None, "met": None}
    noise = max((max(v) - min(v)) / min(v) for v in (list(a.values()), list(b.values())))
    gain = statistics.median(ratios)
    want = predicted["policies"]["gnnsched"]["gain_windowed"]
    return {"measured_gain": gain, "paired_gains": ratios, "noise": noise,
            "predicted_gain": want, "met": abs(gain / want - 1.0) <= 0.10}


def _plan_shape(st: ScaleSettings, steps: Steps, shape: str, cluster: ClusterSpec,
                parts: Path, cost: Path, prof: Any, cfg: dict[str, Any],
                made: dict[str, Any] | None) -> dict[str, Any]:
    """Every plan the shape's systems run (``made``: already made, by key), canonical and
    saved; ``cfg["plans"]`` gets each one's rows, notes, prediction and network bound."""
    job, run_dir = steps.job, st.work / "runs" / shape
    plans: dict[str, Any] = {}
    need = {plan_key(s) for s in st.systems if s != "distdgl"} | {"gnnsched"}
    for key in sorted(need):
        placer = key.split("+")[0]
        with steps.timed(f"plan/{shape}/{key}", f"placing with {key} on {shape}"):
            try:
                plan = (made or {}).get(key) or api.plan(
                    cluster, job, str(cost), placer=placer, seed=st.seed,
                    budget=st.budget if placer == "gnnsched" else None, partitions=parts,
                    cache_share=st.cache_share if key.endswith("+cache") else 0.0)
            except Exception as exc:  # noqa: BLE001 - recorded, the others still run
                traceback.print_exc()
                cfg["plans"][key] = {"error": error_text(exc)}
                continue
        plan = canonical(plan)
        plan.save(run_dir / f"plan-{key}.json")
        plans[key] = plan
        pred = predicted_scalars(plan)
        cfg["plans"][key] = {"trainers": plan_rows(plan), "notes": list(plan.notes),
                             "predicted": pred, "split": seed_split(plan),
                             "network_bound": network_bound(cluster, job, prof, plan)}
        for note in plan.notes[:6]:
            say(f"    {key}: {note}")
    return plans


def _predict_ab(st: ScaleSettings, steps: Steps, shape: str, cluster: ClusterSpec,
                plans: dict[str, Any], prof: Any) -> list[dict[str, Any]]:
    """The simulator's gain of gnnsched over fifo on every plan a policy A/B runs, made
    before the runs it predicts."""
    out = []
    for fifo, ours in policy_pairs(st.systems):
        key = plan_key(ours)
        if key not in plans:
            continue
        with steps.timed(f"predict/{shape}/{key}", f"the simulator's fifo and gnnsched epochs "
                         f"on the {key} plan (before the runs)"):
            pred = policy_gains(cluster, steps.job, plans[key], prof, ["fifo", "gnnsched"],
                                st.seed)
        g = pred["policies"]["gnnsched"]
        say(f"[scale] {shape}: predicted gain of gnnsched over fifo on the {key} plan: "
            f"{g['gain_windowed']:.3f}x (ideal network {g['gain_ideal']:.3f}x)")
        out.append({"plan": key, "fifo": fifo, "gnnsched": ours, "predicted": pred})
    return out


def _run_system(st: ScaleSettings, steps: Steps, shape: str, cluster: ClusterSpec,
                sysname: str, plans: dict[str, Any], cfg: dict[str, Any], parts: Path,
                prof: Any, net: Any, counters: Any) -> list[dict[str, Any]]:
    """Every repeat of one system on the shape (repeat r on job seed SEED + r); stops at an
    infeasible or failed one."""
    reps: list[dict[str, Any]] = []
    for rep in range(st.repeats):
        rjob = make_job(st, st.seed + rep) if rep else steps.job
        tag = sysname + (f" #{rep + 1}" if st.repeats > 1 else "")
        rdir = st.work / "runs" / shape / f"{sysname.replace('+', '-')}-{rep}"
        load0 = os.getloadavg()[0]
        try:
            with steps.timed(f"train/{shape}/{tag}", f"training {LABELS[sysname]} on "
                             f"{shape} ({rjob.epochs} epoch(s))"):
                one = _run_once(st, cluster, rjob, sysname, plans, cfg, parts, prof, rdir,
                                net, counters)
        except Exception as exc:  # noqa: BLE001 - a failed run is a result too
            traceback.print_exc()
            one = {"error": error_text(exc)}
        one["job_seed"] = rjob.seed
        # other work on the box slows every system: each run says how busy it was
        one["load_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        reps.append(one)
        say(f"[scale] {shape}/{tag}: {_describe(one)}")
        if one.get("feasible") is False or one.get("error"):
            break
    return reps


def _run_once(st: ScaleSettings, cluster: ClusterSpec, rjob: JobSpec, sysname: str,
              plans: dict[str, Any], cfg: dict[str, Any], parts: Path, prof: Any, rdir: Path,
              net: Any, counters: Any) -> dict[str, Any]:
    """One run of one system: DistDGL on colocation's seed split where it can train it,
    else the gnnsched runtime on the system's plan."""
    if sysname == "distdgl":
        split = None
        colo = plans.get("colocation")
        if colo is not None:
            sp = seed_split(colo)
            split = sp if all(t in g for t, g in enumerate(sp)) else None
        return run_scale_distdgl(st.launcher, cluster, rjob, parts, rdir, net, split)
    key = plan_key(sysname)
    if key not in plans:
        raise RuntimeError(cfg["plans"][key].get("error", "no plan"))
    one = run_scale_runtime(st.launcher, cluster, rjob, plans[key], prof, parts, sysname, rdir,
                            net, counters)
    one["split"] = seed_split(plans[key])
    return one


def run_shape(st: ScaleSettings, steps: Steps, shape: str, parts: Path, cost: Path,
              prof: Any, refs: dict[str, Any], made: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """Plan and really run every system on one shape (``made``: plans already made for it,
    by placer)."""
    cluster = make_cluster(st, shape)
    cfg: dict[str, Any] = {"shape": shape, "what": SCALE_SHAPES[shape],
                           "cluster": cluster.to_dict(), "plans": {}, "systems": {}}
    (st.work / "runs" / shape).mkdir(parents=True, exist_ok=True)
    plans = _plan_shape(st, steps, shape, cluster, parts, cost, prof, cfg, made)
    nb = cfg["plans"].get("gnnsched", {}).get("network_bound")
    cfg["network_bound"] = nb
    if nb:
        say(f"[scale] {shape}: network bound (gnnsched's plan): {nb['nic']} busy "
            f"{1e3 * nb['nic_s_per_iter']:.0f} ms per iteration -> "
            f"{nb['seeds_per_s']:.0f} seeds/s")
    cfg["policy_ab"] = _predict_ab(st, steps, shape, cluster, plans, prof)
    net = counters = None
    try:
        if st.launcher == "netns":
            with steps.timed(f"cluster/{shape}", f"bringing up the emulated cluster "
                                                 f"({len(cluster.machines)} namespaces)"):
                net = api.EmulatedCluster(cluster, payload_rates=True).up()
                counters = NicCounters(net)
        for sysname in st.systems:
            row: dict[str, Any] = {"label": LABELS[sysname]}
            cfg["systems"][sysname] = row
            _aggregate(row, _run_system(st, steps, shape, cluster, sysname, plans, cfg, parts,
                                        prof, net, counters))
        for ab in cfg["policy_ab"]:
            ab.update(policy_ab(cfg["systems"].get(ab["fifo"], {}),
                                cfg["systems"].get(ab["gnnsched"], {}), ab["predicted"]))
        ref_rows = [r for r in refs.get("runs", []) if r.get("test_accuracy") is not None]
        for sysname, row in cfg["systems"].items():
            if sysname != "distdgl" and row.get("split") == refs.get("split"):
                row["reference_metric"] = mean_row_metric(ref_rows)
    finally:
        if counters is not None:
            counters.close()
        if net is not None:
            net.down()
    return cfg


def _aggregate(row: dict[str, Any], reps: list[dict[str, Any]]) -> None:
    """A system's row from its repetitions: the median-throughput run's numbers, the mean
    test metric over all."""
    ok = [r for r in reps if r.get("seeds_per_s")]
    if not ok:
        row.update(reps[0] if reps else {"error": "no run"})
        return
    vals = [r["seeds_per_s"] for r in ok]
    med = statistics.median(vals)
    best = ok[min(range(len(ok)), key=lambda i: abs(vals[i] - med))]
    row.update(best)
    row["seeds_per_s"] = med
    row["repeat_seeds_per_s"] = vals
    row["repeat_test_metric"] = [row_metric(r) for r in ok]
    row["test_metric_mean"] = mean_row_metric(ok)
    row["job_seeds"] = [r.get("job_seed") for r in ok]


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=False, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _prepare(st: ScaleSettings, steps: Steps) -> tuple[Path, dict[str, Any], Path,
                                                       dict[str, Any]]:
    """The job file, then the partitions and the profile (each measured in a child)."""
    import yaml

    job = steps.job
    job_file = st.work / "job.yaml"
    job_file.write_text(yaml.safe_dump(job.to_dict(), sort_keys=False))
    with steps.timed("partition", f"partitioning the graph into {job.num_parts} METIS parts "
                     "(a child process; cached after the first run)"):
        parts, part_m = steps.partition()
    ratio = part_m["peak_rss_bytes"] / part_m["graph_bytes"]
    say(f"[scale] partition: {parts}; peak {part_m['peak_rss_bytes'] / GB:.2f} GB for a graph "
        f"of {part_m['graph_bytes'] / GB:.2f} GB ({ratio:.1f}x)")
    with steps.timed("profile", f"gnnsched profile: {st.samples} mini-batches per partition "
                     "(a child process)"):
        cost, prof_m = steps.profile(parts, job_file)
    return parts, part_m, cost, prof_m


def _say_start(st: ScaleSettings, job: JobSpec, params: dict[str, Any]) -> None:
    say(f"gnnsched bench scale{' --quick' if st.quick else ''}: {st.nodes:,} nodes (preset "
        f"{PRESET}: mean degree {st.degree:g}, {params['feature_dim']}-d, "
        f"{params['num_classes']} classes, homophily {params['homophily']}, feature noise "
        f"{params['feature_noise']}); SAGE {job.layers}x{job.hidden}, fan-outs "
        f"{'/'.join(map(str, job.fanouts))}, batch {job.batch_size}, {job.epochs} epoch(s); "
        f"shapes {', '.join(st.shapes)}; launcher {st.launcher} ({st.launcher_reason}); "
        f"results -> {st.out}, runs -> {st.work}")


def run_scale(args: argparse.Namespace) -> int:
    """``gnnsched bench scale [--quick]`` from its parsed flags (:func:`run`)."""
    return run(resolve(args))


def run(st: ScaleSettings) -> int:
    """Every step of the scale tier with settings ``st``, the results and their judgement;
    0 unless a system produced no number (``--quick``: unless an invariant fails)."""
    t_all = time.perf_counter()
    load0 = os.getloadavg()[0]
    st.out.mkdir(parents=True, exist_ok=True)
    st.work.mkdir(parents=True, exist_ok=True)
    previous = _previous(st.out / "results.json")
    steps = Steps(st)
    job = steps.job
    params = graph_params(st)
    _say_start(st, job, params)
    parts, part_m, cost, prof_m = _prepare(st, steps)
    prof = CostProfile.load(cost)
    # the seed split every system trains: gnnsched's plan on the first shape (one part per
    # trainer on the plentiful shape, where every placement agrees)
    with steps.timed(f"plan/{st.shapes[0]}/gnnsched", f"placing with gnnsched on "
                     f"{st.shapes[0]} (its seed split is the reference's)"):
        plan0 = canonical(api.plan(make_cluster(st, st.shapes[0]), job, str(cost),
                                   placer="gnnsched", seed=st.seed, budget=st.budget,
                                   partitions=parts))
    split = seed_split(plan0)
    limit = steps.limit(parts, split)
    say(f"[scale] compute limit: {limit_text(limit)}")
    refs = steps.references(parts, split, _describe)
    refs["test_metric"] = mean_row_metric(refs["runs"])
    configs = [run_shape(st, steps, shape, parts, cost, prof, refs,
                         {"gnnsched": plan0} if i == 0 else None)
               for i, shape in enumerate(st.shapes)]
    doc = _document(st, steps, t_all, load0, params, parts, part_m, prof_m, limit, refs,
                    configs)
    if previous is not None:
        doc["before"] = previous
    plots = render(doc, st.out)
    _summary(st, doc, plots)
    if st.quick:
        return 0 if all(i["ok"] for i in doc["invariants"]) else 1
    return 0 if doc["invariants"] and doc["invariants"][0]["ok"] else 1


def _document(st: ScaleSettings, steps: Steps, t_all: float, load0: float,
              params: dict[str, Any], parts: Path, part_m: dict[str, Any],
              prof_m: dict[str, Any], limit: dict[str, Any], refs: dict[str, Any],
              configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The results document (before its targets and invariants are judged)."""
    doc: dict[str, Any] = {
        "bench": "scale", "version": 1, "quick": st.quick,
        "reproduce": reproduce(st),
        "command": st.command, "commit": _git_head(),
        "started": time.strftime("%Y-%m-%d %H:%M",
                                 time.localtime(time.time() - (time.perf_counter() - t_all))),
        "host": {"cpus": os.cpu_count(), "load_start": load0, "platform": platform.platform(),
                 **versions()},
        "launcher": {"name": st.launcher, "reason": st.launcher_reason},
        "settings": st.to_dict(), "graph": params, "job": steps.job.to_dict(),
        "partition": {**part_m, "path": str(parts)}, "profile": prof_m,
        "limit": {"compute": limit}, "reference": refs, "configs": configs,
        "steps_s": steps.timings, "goals": st.targets.scale,
    }
    doc["host"]["load_end"] = os.getloadavg()[0]
    doc["wall_s"] = time.perf_counter() - t_all
    doc["limit"].update(compute_bound(limit, refs))
    for c in configs:
        c["limit"] = box_limit(doc["limit"], c.get("network_bound"))
    return doc


def _summary(st: ScaleSettings, doc: dict[str, Any], plots: list[str]) -> None:
    """The report's numbers, the invariants and the targets' count, on stdout."""
    say("")
    say(report(doc).split("## Method")[0].strip())
    say("")
    for inv in doc["invariants"]:
        say(f"{'PASS' if inv['ok'] else 'FAIL'}: {inv['name']}: {inv['detail']}")
    met = sum(1 for t in doc["targets"] if t["met"])
    say(f"targets: {met} met, {sum(1 for t in doc['targets'] if t['met'] is False)} missed")
    say(f"wrote {st.out / 'results.json'}, {st.out / 'report.md'}"
        + (f", {', '.join(str(st.out / p) for p in plots)}" if plots else "")
        + f" in {doc['wall_s'] / 60:.1f} min")


def render(doc: dict[str, Any], out: Path) -> list[str]:
    """Judge the targets (against the document's own ``goals``) and invariants of a results
    document again, and write ``results.json``, ``report.md`` and ``scale.png`` to ``out``
    (also to re-render stored results: ``render(json.load(...), out)``); returns the plots
    written."""
    doc["targets"] = targets(doc)
    doc["invariants"] = invariants(doc)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=json_default) + "\n")
    plots = []
    try:
        plots = [plot_scale(doc, out)]
    except Exception:  # noqa: BLE001 - the plot must not hide the numbers
        traceback.print_exc()
    (out / "report.md").write_text(report(doc))
    return plots


def _previous(path: Path) -> dict[str, Any] | None:
    """What the last results in ``path`` said per system (the report's "before")."""
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return None
    if old.get("bench") != "scale":
        return None
    keep = ("seeds_per_s", "cpu_s_per_seed", "bytes_per_iter", "test_metric", "test_accuracy",
            "ledger", "roles", "feasible", "error")
    return {"started": old.get("started"), "commit": old.get("commit"),
            "nodes": old.get("settings", {}).get("nodes"),
            "epochs": old.get("settings", {}).get("epochs"),
            "limit": {c["shape"]: c.get("limit") for c in old.get("configs", [])},
            "configs": {c["shape"]: {s: {k: r.get(k) for k in keep if k in r}
                                     for s, r in c.get("systems", {}).items()}
                        for c in old.get("configs", [])}}


__all__ = ["CLUSTER_SYSTEMS", "DEFAULT_SYSTEMS", "HEADLINE", "SCALE_SHAPES", "ScaleSettings",
           "Steps", "box_limit", "compute_bound", "graph_bytes", "graph_params", "invariants",
           "make_cluster", "make_job", "plan_key", "policy_ab", "policy_pairs", "render",
           "reproduce", "resolve", "run", "run_scale", "run_shape", "steady_seeds_per_s",
           "targets"]
