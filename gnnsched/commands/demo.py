"""The whole path on the bundled Cora graph and the examples/uneven4 cluster (a lab where
placement decides the epoch), measured where the cluster's NICs exist.

Loads the bundled graph, partitions it (METIS, 4 parts), profiles real mini-batches, plans with
gnnsched and with colocation, trains both for real, and prints each system's measured epoch
beside its prediction. As root it runs on the emulated cluster: one network namespace per
host, NICs shaped to the cluster file's rates, each host's CPU in a control group, everything
slowed by one factor D so the cluster fits this box (the scale model; times / D are the real
cluster's). It calibrates this box first (``gnnsched cluster calibrate``, kept in the run
folder and reused), so the predictions are made, before each run, with the runtime's own
costs. Elsewhere (no root, or ``--local``) it trains on local processes over loopback, which
has none of the cluster's NICs, and says so: the measured times there are CPU-bound and are
not compared with the predictions.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsched.commands import epochs_int, output_dir, positive_int, seconds
from gnnsched.evaluation.config import PREDICTION_ERROR, SHAPES

HELP = ("run the whole path on the bundled Cora graph (examples/uneven4, where placement "
        "matters; the emulated cluster as root, else local processes)")
DEFAULT_EXAMPLE = "uneven4"  # a cluster where placement's effect is real (lab4's is ~1.0x)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYSTEMS = (  # (label, placer, policy): gnnsched beside the DistDGL-style baseline
    ("gnnsched", "gnnsched", "gnnsched"),
    ("colocation", "colocation", "fifo"),
)
DEMO_EPOCHS = 4  # on the emulated cluster: a warm-up and three measured epochs (--epochs N)
# the emulated NICs: three priority bands by IP TOS (`cluster up --bands`, a switch with QoS),
# so gradients overtake queued graph data, as the simulator's all-reduce does; the box is
# calibrated on the same NICs
DEMO_NIC: dict[str, Any] = {"bands": True}


def examples() -> list[str]:
    """The folders under examples/ (next to the package) that hold a cluster and a job."""
    if not EXAMPLES.is_dir():
        return []
    return sorted(d.name for d in EXAMPLES.iterdir()
                  if (d / "cluster.yaml").is_file() and (d / "job.yaml").is_file())


def _example(name: str) -> Path:
    from gnnsched.spec import SpecError

    here = EXAMPLES / name
    if name in examples():
        return here
    raise SpecError("--example", "", f"no cluster.yaml and job.yaml in {here}",
                    ", ".join(examples()) or "a repository checkout with examples/")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--example", default=DEFAULT_EXAMPLE, choices=examples() or None,  # none: _example says why
                   help="folder under examples/ with cluster.yaml and job.yaml (default "
                        f"{DEFAULT_EXAMPLE}: GPU hosts on faster NICs than the stores, where "
                        "placement decides the epoch; lab4: GPU-less stores, where every "
                        "placement's trainers sit on the same two GPU hosts)")
    p.add_argument("--shape", default=None, choices=sorted(SHAPES),
                   help="run on this cluster shape of the evaluation instead of the example's "
                        "cluster (with the example's job; hetero is uneven4's cluster)")
    p.add_argument("--epochs", type=epochs_int, default=None,
                   help=f"override the job's epochs (default on the emulated cluster: "
                        f"{DEMO_EPOCHS}, the first a warm-up; on local processes the job's)")
    p.add_argument("--samples", type=positive_int, default=8, help="mini-batches profiled per partition")
    p.add_argument("--out", type=output_dir, default="runs/demo", help="run directory (plans, cost, metrics)")
    p.add_argument("--budget", type=seconds, default=10.0, help="planning seconds for gnnsched")
    p.add_argument("--local", action="store_true",
                   help="train on local processes even as root (no NIC shaping: measured "
                        "times are CPU-bound and not compared with the predictions)")
    p.add_argument("--json", action="store_true",
                   help="end by printing one JSON object with every system's results")


def where_it_runs(local: bool) -> tuple[bool, str]:
    """(emulated, why): the emulated cluster where this box can build one and ``--local`` is
    not given, else local processes, with the reason in words."""
    if local:
        return False, "local processes (--local)"
    from gnnsched import api

    why = api.netns_unavailable_reason()
    if why is None:
        return True, ("the emulated cluster: a network namespace per host, NICs shaped to the "
                      "cluster file's rates, each host's CPU in a control group (the scale "
                      "model, times / D are the real cluster's)")
    return False, (f"local processes, because no emulated cluster can be built here ({why}): "
                   "loopback has none of the cluster's NICs, so the measured times are "
                   "CPU-bound and are not compared with the predictions (run as root for the "
                   "emulated cluster)")


def run(args: argparse.Namespace) -> int:
    from gnnsched import api
    from gnnsched.commands.profile import summarize, table
    from gnnsched.spec import check_compatible, load_cluster, load_job

    say = (lambda *a: None) if args.json else print
    ex = _example(args.example)
    cluster_file = ex / "cluster.yaml"
    if args.shape:
        import yaml

        from gnnsched.evaluation.config import load_shape

        Path(args.out).mkdir(parents=True, exist_ok=True)
        cluster_file = Path(args.out) / f"{args.shape}.yaml"
        cluster_file.write_text(yaml.safe_dump(load_shape(args.shape).to_dict(),
                                               sort_keys=False))
    cluster, job = load_cluster(cluster_file), load_job(ex / "job.yaml")
    check_compatible(cluster, job)
    emulated, how = where_it_runs(args.local)
    epochs = args.epochs or (DEMO_EPOCHS if emulated else None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = 5 if emulated else 4
    say(f"runs on {how}")
    graph = api.load_dataset(job.dataset, split=job.split, feature_dim=job.feature_dim,
                             seed=job.seed)
    say(f"[1/{steps}] loaded {graph.summary()}")
    pset = api.open_job_partitions(job, quiet=args.json)
    meta = pset.meta if hasattr(pset, "meta") else {}
    say(f"[2/{steps}] {job.num_parts} {job.part_method} partitions in {pset.root}"
        + (f": edge cut {meta.get('edge_cut', float('nan')):.1%}, "
           f"balance {meta.get('balance', float('nan')):.2f}" if meta else ""))
    prof = api.profile_partitions(pset, job, samples=args.samples, seed=job.seed)
    prof.save(out / "cost.json")
    summary = summarize(prof)
    say(f"[3/{steps}] profiled {args.samples} real mini-batches per partition -> "
        f"{out / 'cost.json'}")
    say(table(summary))
    result: dict = {"dataset": graph.name, "partitions": str(pset.root), "profile": summary,
                    "emulated": emulated, "runs_on": how, "systems": {}}
    found = None
    if emulated:
        found = demo_calibration(cluster_file, job, prof, Path(pset.root), out,
                                 say, f"[4/{steps}]")
        result["calibration"] = {"file": str(found.path), **{
            k: getattr(found.box, k) for k in ("train", "sample", "allreduce_overhead_s",
                                               "wire_overhead", "dilation")}}
    say(f"[{steps}/{steps}] plan with gnnsched and with colocation, then train both for real")
    result["systems"] = plan_and_train(cluster, job, prof, out, epochs=epochs,
                                       budget=args.budget, quiet=args.json, emulated=emulated,
                                       calibration=found, parts=Path(pset.root))
    if args.json:
        print(json.dumps(result, default=float))
    return 0


def demo_calibration(cluster_file: Path, job: Any, prof: Any, parts: Path, out: Path,
                     say: Any, step: str) -> Any:
    """This box's calibration for the job (``gnnsched cluster calibrate``'s, kept as
    ``OUT/calibration.json`` and reused while it calibrates this dataset)."""
    from gnnsched.calibrate import find_calibration
    from gnnsched.evaluation.box import calibrate_cluster

    path = out / "calibration.json"
    found = find_calibration(None, job, path) if path.is_file() else None
    nic = {k: DEMO_NIC.get(k) for k in ("bands",)}
    if found is None or {k: (found.header.get("nic") or {}).get(k) for k in nic} != nic:
        say(f"{step} calibrating this box (one short colocation + fifo run on a 2-host "
            "calibration cluster, as `gnnsched cluster calibrate` does)...")
        calibrate_cluster(cluster_file, job, prof, parts, work=out / "calibrate", out=path,
                          nic=DEMO_NIC)
        found = find_calibration(None, job, path)
    else:
        say(f"{step} this box's calibration, from {path} (delete it to calibrate again)")
    say(f"  {found.box.describe()}")
    return found


def _steady(cluster: Any, job: Any, plan: Any, prof: Any, policy: str, seed: int) -> float:
    """The epoch ``train`` reports (the median after the first: the pipeline already full), as
    the evaluation predicts it: the steady simulated epoch on the runtime's network."""
    from gnnsched.evaluation.predict import simulate_system

    return float(simulate_system(cluster, job, plan, prof, policy, seed)["epoch_time_s"])


def plan_and_train(cluster: Any, job: Any, prof: Any, out: Path, *, epochs: int | None = None,
                   budget: float = 10.0, quiet: bool = False, emulated: bool = False,
                   calibration: Any = None, parts: Path | None = None) -> dict:
    """Plan and really train every system in :data:`SYSTEMS` (on the emulated cluster when
    ``emulated``, with the box ``calibration`` applied to the predictions); print them side by
    side."""
    from gnnsched import api
    from gnnsched.commands.progress import Progress

    say = (lambda *a: None) if quiet else print
    spec = cluster
    if emulated:  # its own name and addresses: a lab4 of the user's may be up beside it
        from gnnsched.spec import cluster_from_dict

        data = cluster.to_dict()
        data["name"] = f"demo-{cluster.name}"[:40]
        for m in data["machines"]:
            m.pop("address", None)
        spec = cluster_from_dict(data, source=cluster.source)
    predict_with = api.calibrated(prof, calibration)
    job = job if epochs is None else replace(job, epochs=epochs)
    made_for = _files(out, spec, job)
    net = None
    if emulated:
        net = api.cluster_up(spec, **DEMO_NIC)
        say(f"  emulated cluster {spec.name} is up: dilation D = {net.dilation:.3g} (times "
            f"measured on it / D are the real cluster's)")
    systems: dict = {}
    plans = {label: _place(placer, spec, job, predict_with, budget)
             for label, placer, _ in SYSTEMS}
    kept = plans["gnnsched"].key() == plans["colocation"].key()
    try:
        for label, _placer, policy in SYSTEMS:
            plan = plans[label]
            predicted = _steady(spec, job, plan, predict_with, policy, job.seed)
            plan = plan.with_prediction(epoch_time_s=predicted, policy=policy,
                                        made_for=made_for)
            plan.save(out / f"plan-{label}.json")
            what = system_name(label, plan, kept)
            say(f"  {label}: planned ({what}, {policy} policy), predicted epoch "
                f"{predicted:.3f} s; training...")
            progress = Progress(quiet=True)
            lopts = {"emulated": net} if net is not None else None
            try:
                res = api.train(spec, job, plan, policy=policy, out_dir=out / label,
                                launcher="netns" if net is not None else "local",
                                partitions=parts, profile=prof, progress=progress,
                                launcher_options=lopts, options=_options())
            finally:
                progress.close()
            systems[label] = {**api.summary(res), "predicted_epoch_time_s": predicted,
                              "placement": what}
    finally:
        if net is not None:
            net.down()
    _table(systems, emulated, say)
    return systems


# gnnsched keeps colocation's placement unless its own is predicted faster by more than two
# predictions within this error can misjudge (1.1 / 0.9 = 1.22x), as the evaluation plans
KEEP_COLOCATION = (1 + PREDICTION_ERROR) / (1 - PREDICTION_ERROR) - 1


def _place(placer: str, spec: Any, job: Any, prof: Any, budget: float) -> Any:
    """A system's plan as the evaluation makes it: gnnsched keeps colocation's placement
    unless its own is predicted clearly faster (:data:`KEEP_COLOCATION`), trainers in
    canonical order (so two plans with one seed split train the same mini-batches)."""
    from gnnsched import api
    from gnnsched.evaluation.config import canonical

    kw = {"keep_colocation": KEEP_COLOCATION} if placer == "gnnsched" else {}
    return canonical(api.get_placer(placer, **kw).place(
        spec, job, prof, seed=job.seed, budget=budget if placer == "gnnsched" else None))


def _files(out: Path, spec: Any, job: Any) -> dict[str, str]:
    """The cluster and job the demo ran, as files beside its runs, which its plans record
    (``made_for``), so ``gnnsched profile --from-run OUT/LABEL`` and ``simulate`` find them."""
    import yaml

    files = {"cluster": out / "cluster.yaml", "job": out / "job.yaml"}
    files["cluster"].write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    files["job"].write_text(yaml.safe_dump(job.to_dict(), sort_keys=False))
    return {"cluster": str(files["cluster"]), "job": str(files["job"]),
            "cost": str(out / "cost.json")}


def _options() -> Any:
    """Generous timeouts: a loaded 2-core box starts a dozen processes slowly (as the
    evaluation's runs)."""
    from gnnsched.evaluation.measure import runtime_options

    return runtime_options()


def system_name(label: str, plan: Any, kept: bool = False) -> str:
    """What a system's placement is, in words (colocation's fallback named as such; ``kept``:
    gnnsched kept colocation's placement)."""
    from gnnsched.commands.plan import FALLBACK

    if label == "colocation":
        feasible = plan.prediction.colocation_feasible if plan.prediction else None
        return FALLBACK if feasible is False else "colocation placement"
    if kept:
        return (f"colocation's placement kept (its own not predicted over "
                f"{1 + KEEP_COLOCATION:.2f}x faster)")
    return f"{plan.placer} placement"


def _table(systems: dict, emulated: bool, say: Any) -> None:
    """Measured (the real cluster's seconds) beside predicted, per system, and the speed-up."""
    say("")
    say(f"{'system':<11} {'epoch s':>8} {'predicted':>9} {'error':>7} {'test acc':>8} "
        f"{'MB sent':>8}  placement")
    for label, r in systems.items():
        real = r["real_cluster_epoch_time_s"]
        pred = r["predicted_epoch_time_s"]
        err = f"{pred / real - 1:+.1%}" if emulated and real else "-"
        say(f"{label:<11} {real:>8.3f} {pred:>9.3f} {err:>7} {r['test_accuracy']:>8.3f} "
            f"{r['bytes_sent'] / 1e6:>8.1f}  {r['placement']}")
    g, c = systems["gnnsched"], systems["colocation"]
    pa, pb = c["predicted_epoch_time_s"], g["predicted_epoch_time_s"]
    a, b = c["real_cluster_epoch_time_s"], g["real_cluster_epoch_time_s"]
    if emulated:
        say(f"(epoch s: the median epoch after the first, the real cluster's seconds: measured "
            f"on the scale model / D {g.get('dilation') or 1:.3g}; predicted: the simulator, "
            "before each run, from the profile with this box's calibration)")
        say(f"gnnsched measured {a / b:.2f}x the speed of colocation on the emulated cluster "
            f"(predicted {pa / pb:.2f}x)")
        if g["placement"].startswith("colocation's placement kept"):
            say("gnnsched kept colocation's placement here (no placement is predicted clearly "
                "faster), so the difference is its online policy; `gnnsched demo --example "
                f"{DEFAULT_EXAMPLE}` (the default) runs a cluster where placement matters")
    else:
        say("(local processes talk over an unshaped loopback, so measured times are CPU-bound "
            "here and not compared; as root the demo runs on the emulated cluster)")
        say(f"on the cluster's NICs gnnsched is predicted at {pa / pb:.2f}x the speed of "
            f"colocation; on these local processes (CPU-bound, which the plans do not target) "
            f"it measured {a / b:.2f}x")
    sys.stdout.flush()
