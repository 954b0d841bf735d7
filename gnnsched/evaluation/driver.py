"""Running the evaluation end to end (:func:`evaluate`: ``gnnsched bench eval`` and
``scale-model``), measuring the box for the scale model (``calibrate-box``), and re-deriving
a stored one: ``resimulate`` (every prediction again from the stored measurements),
``accuracy-study`` (the study alone, then the targets judged again) and ``merge`` (a
scale-model folder into the evaluation's file)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsched.evaluation import merge
from gnnsched.evaluation.config import (
    SYSTEMS,
    Settings,
    load_shape,
    modern_spelling,
    resolve,
    say,
)
from gnnsched.evaluation.context import Context
from gnnsched.evaluation.judging import invariants, targets
from gnnsched.evaluation.predict import apriori_prediction, predict_run, replan
from gnnsched.evaluation.report import render
from gnnsched.evaluation.runs import describe, run_config, speedups
from gnnsched.evaluation.scaling import run_scaling
from gnnsched.plan import Plan


def versions() -> dict[str, str]:
    """Python's and the numeric libraries' versions, for a results document's host."""
    out = {"python": platform.python_version()}
    for mod in ("torch", "dgl", "ortools"):
        try:
            from importlib.metadata import version

            out[mod] = version(mod)
        except Exception:  # noqa: BLE001
            out[mod] = "?"
    return out


def json_default(o: Any) -> Any:
    """``json.dumps``' fallback for a results document: numpy scalars and arrays as numbers
    and lists, anything else as its string."""
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if isinstance(o, Path):
        return str(o)
    return str(o)


def command_as_run(fallback: str) -> str:
    """The ``gnnsched bench`` command as run (an old spelling in its subcommand form, minus an
    absolute ``--out`` / ``--work``: :func:`reproduce_flags`), else ``fallback``."""
    flags = reproduce_flags(sys.argv[1:] if Path(sys.argv[0]).name == "gnnsched" else [])
    if flags[:1] != ["bench"]:
        return fallback
    return " ".join(["gnnsched", *modern_spelling(flags)])


def stored_plan(cfg: dict[str, Any], placer: str, work: Path) -> Plan:
    """The plan a configuration ran: its file in the work directory, else rebuilt from the
    rows in results.json (what a fresh clone has)."""
    from gnnsched.plan import TrainerPlan

    f = work / "runs" / f"{cfg['shape']}-{cfg['dataset']}" / f"plan-{placer}.json"
    if f.is_file():
        return Plan.load(f)
    rows = cfg["plans"][placer]["trainers"]
    return Plan(placer, cfg["shape"], "", tuple(
        TrainerPlan(r["trainer"], r["machine"], int(r.get("device", 0)), tuple(r["parts"]),
                    tuple((m, int(c)) for m, c in (x.rsplit("x", 1) for x in r["samplers"])),
                    r["fetch_at"]) for r in rows))


def _stored(st: Settings, mode: str) -> tuple[Path, dict[str, Any]]:
    """``OUT/results.json`` of an earlier evaluation, which ``gnnsched bench MODE`` works
    from."""
    path = st.out / "results.json"
    if not path.is_file():
        raise SystemExit(f"gnnsched bench {mode}: {path} not found (run the "
                         "evaluation first)")
    return path, json.loads(path.read_text())


def _rejudge(path: Path, doc: dict[str, Any], ctx: Context) -> int:
    """Judge the targets again (the goals of ``--targets``; none without), rewrite
    ``results.json`` and the report, say the count."""
    ctx.spreads = doc.get("accuracy_spread", {})
    doc["targets"] = targets(doc["configs"], ctx)
    doc["targets_goal"] = ctx.st.goals
    if doc.get(merge.SECTION):  # the scale model's merged results: judged again with them
        doc["targets"] = merge.judged(doc, ctx.st.targets)
    path.write_text(json.dumps(doc, indent=1, default=json_default) + "\n")
    render(doc, ctx.st.out)
    missed = [t for t in doc["targets"] if t["met"] is False]
    say(f"targets: {sum(1 for t in doc['targets'] if t['met'])} met, {len(missed)} missed")
    _merge_into(ctx.st, doc)
    return 0


def merge_only(st: Settings) -> int:
    """``gnnsched bench merge``: OUT's stored scale-model results into ``--into``, nothing
    run again."""
    _, doc = _stored(st, "merge")
    if not (doc.get("settings") or {}).get("scale_model"):
        raise SystemExit(f"gnnsched bench merge: {st.out / 'results.json'} is not a "
                         "scale-model evaluation (only `gnnsched bench scale-model` results "
                         "merge)")
    if not st.into:
        raise SystemExit("gnnsched bench merge: nothing to merge into (--no-into)")
    _merge_into(st, doc)
    return 0


def _merge_into(st: Settings, doc: dict[str, Any]) -> None:
    """A scale-model evaluation's results into ``st.into`` (``--into``), whose report is
    rendered again when it is a full evaluation's."""
    if not st.into or not (doc.get("settings") or {}).get("scale_model"):
        return
    into = Path(st.into)
    merged = merge.merge(into, st.out, st.targets)
    if merged.get("configs"):
        render(merged, into.parent)
    sm = merged[merge.SECTION]
    tg = [t for t in merged["targets"] if str(t["target"]).endswith(merge.MARK)]
    say(f"merged {st.out} into {into} ({len(sm['sources'])} scale-model source(s), "
        f"{len(sm['configs'])} configurations): scale-model targets "
        f"{sum(1 for t in tg if t['met'])} met, {sum(1 for t in tg if t['met'] is False)} missed")


def _stored_settings(st: Settings, old: dict[str, Any], *keys: str) -> Settings:
    """``st`` with the stored run's settings ``keys`` (what re-deriving it must reuse)."""
    kinds = {"samples": int, "seed": int, "epochs": int, "quick": bool, "budget": float,
             "datasets": list, "shapes": list, "sizes": list}
    values: dict[str, Any] = {k: kinds[k](old[k]) for k in keys if k in kinds}
    if "own_datasets" in keys:
        values["own_datasets"] = dict(old.get("own_datasets") or {})
    if "normalize" in keys:
        values["normalize"] = old.get("normalize")
    values["launcher"] = str(old.get("launcher", st.launcher))  # the timed runs' (no runs here)
    return replace(st, **values)


def resimulate(st: Settings) -> int:
    """Re-derive every real run's in-situ prediction from ``st.out/results.json`` (the plans
    and profiles the run used, from ``st.work``) and the scaling sweep (unless ``--no-scale``),
    and rewrite the report: the numbers are those the full command computes from the same
    measurements."""
    path, doc = _stored(st, "resimulate")
    old = doc["settings"]
    st = _stored_settings(st, old, "samples", "seed", "epochs", "quick", "datasets", "shapes",
                          "own_datasets", "normalize", "sizes", "budget")
    st = replace(st, scale_model=bool(old.get("scale_model")))
    ctx = Context(st, from_results=True)
    boxes = {}
    if doc.get("box"):  # the scale model: a priori from the box calibration the run used
        from gnnsched.evaluation.box import BoxCalibration

        boxes = {ds: BoxCalibration(**b) for ds, b in doc["box"].items()}
    for c in doc["configs"]:
        ds, shape = c["dataset"], c["shape"]
        ctx.prepare(ds)
        cluster, job, prof = load_shape(shape), st.job(ds), ctx.profiles[ds]
        apriori = boxes[ds].apply(prof) if ds in boxes else None
        for sysname, row in c["systems"].items():
            s = SYSTEMS[sysname]
            if s.placer is None or not row.get("epoch_time_s") or "stages_by_trainer" not in row:
                continue
            assert s.policy is not None
            plan = stored_plan(c, s.placer, st.work)
            isolated = apriori_prediction(row, cluster, job, plan, prof, apriori, s.policy,
                                          st.seed)
            predict_run(row, isolated, cluster, job, plan, prof, s.policy, st.seed)
            say(f"[{shape}/{ds}] {sysname}: {describe(row)}")
        if c.get("limited"):
            plans = {p: stored_plan(c, p, st.work) for p in ("colocation", "gnnsched")
                     if "trainers" in c["plans"].get(p, {})}
            replan(c, cluster, job, prof, plans, st, f"{shape}/{ds}")
        speedups(c)
    if doc.get("scaling") and st.scale:  # simulated only: re-derived whole
        doc["scaling"] = run_scaling(ctx)
    ctx.studies = doc.get("accuracy_study", {})
    doc["resimulated"] = time.strftime("%Y-%m-%d %H:%M")
    return _rejudge(path, doc, ctx)


def study_only(st: Settings) -> int:
    """``gnnsched bench accuracy-study``: run the accuracy study for the results in
    ``OUT/results.json`` (their seed splits and DistDGL's), then re-judge the targets and
    rewrite the report."""
    if st.accuracy_seeds < 2:
        raise SystemExit("gnnsched bench accuracy-study: needs --accuracy-seeds >= 2")
    path, doc = _stored(st, "accuracy-study")
    st = _stored_settings(st, doc["settings"], "samples", "seed", "epochs", "datasets",
                          "own_datasets", "normalize")
    ctx = Context(st, from_results=True)
    for ref in doc.get("references", []):  # the timed runs' references: not trained again
        if "dataset" in ref and ref.get("test_accuracy") is not None:
            ctx.references[(ref["dataset"], json.dumps(ref["split"]), int(ref["seed"]))] = ref
    command = command_as_run("gnnsched bench accuracy-study")
    for ds in st.datasets:
        ctx.prepare(ds)
        ctx.accuracy_study(ds, doc["configs"])["command"] = command
    doc["references"] = list(ctx.references.values())
    doc["accuracy_study"] = ctx.studies
    doc["settings"]["accuracy_seeds"] = st.accuracy_seeds
    return _rejudge(path, doc, ctx)


def reproduce_flags(argv: list[str]) -> list[str]:
    """The command line as run, minus an absolute ``--out`` / ``--work`` (a path on this box:
    the defaults reproduce into the same places). A relative one stays, so a report written
    to ``docs/results-bands`` reproduces there and not over ``docs/results``."""
    flags: list[str] = []
    it = iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if name in ("--out", "--work"):
            value = value if eq else next(it, "")
            if value and not Path(value).is_absolute():
                flags += [name, value]
            continue
        flags.append(a)
    return flags


def evaluate(args: argparse.Namespace) -> int:
    """Run the mode ``args`` describe (``gnnsched bench``'s flags, parsed: the evaluation, or
    with ``merge``, ``resimulate``, ``accuracy_study`` or ``calibrate_box`` set, that mode);
    0 when every invariant holds."""
    st = resolve(args)
    if getattr(args, "merge", False):
        return merge_only(st)
    if getattr(args, "resimulate", False):
        return resimulate(st)
    if getattr(args, "accuracy_study", False):
        return study_only(st)
    if getattr(args, "calibrate_box", False):
        return calibrate_box(st)
    return run(st, auto_launcher=args.launcher == "auto")


def _start(st: Settings) -> Context:
    """Say what runs, make the folders, and partition and profile every dataset."""
    st.out.mkdir(parents=True, exist_ok=True)
    st.work.mkdir(parents=True, exist_ok=True)
    say(f"gnnsched bench{' --quick' if st.quick else ''}: shapes {', '.join(st.shapes)}; "
        f"datasets {', '.join(st.datasets)}; {st.epochs} epochs; launcher {st.launcher} "
        f"({st.launcher_reason}); results -> {st.out}, runs -> {st.work}")
    for note in st.notes:
        say(f"note: {note}")
    ctx = Context(st)
    for ds in st.datasets:
        ctx.prepare(ds)
    return ctx


def calibrate_box(st: Settings) -> int:
    """``gnnsched bench calibrate-box``: this box's constants for the scale model, written to
    ``--box`` (default OUT/box.json); nothing else runs."""
    from gnnsched.evaluation.box import calibrate, save_box

    t0 = time.perf_counter()
    ctx = _start(st)
    boxes = {ds: calibrate(ctx, ds) for ds in st.datasets}
    path = Path(st.box) if st.box else st.out / "box.json"
    save_box(path, boxes, st)
    say(f"wrote {path} in {(time.perf_counter() - t0) / 60:.1f} min")
    return 0


def _accuracy(ctx: Context, configs: list[dict[str, Any]]) -> None:
    """The accuracy noise floor (a full run) and the accuracy study (``--accuracy-seeds``)."""
    st = ctx.st
    if st.real and st.reference and not st.quick:
        for ds in st.datasets:
            split = next((c["plans"]["colocation"]["split"] for c in configs
                          if c["dataset"] == ds and "split" in c["plans"].get("colocation", {})),
                         None)
            if split:
                ctx.spread(ds, split)
    if st.real and st.reference and st.accuracy_seeds:
        for ds in st.datasets:
            ctx.accuracy_study(ds, configs)


def run(st: Settings, auto_launcher: bool = True) -> int:
    """``gnnsched bench eval`` (and ``scale-model``): real runs, fidelity, scaling, judged;
    0 when every invariant holds (the full mode: when every configuration produced a
    number)."""
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    ctx = _start(st)
    boxes = None
    if st.scale_model:
        from gnnsched.evaluation.box import ensure_box

        boxes = ensure_box(ctx)
        ctx.apriori = {ds: boxes[ds].apply(ctx.profiles[ds]) for ds in st.datasets}
    configs = [run_config(ctx, shape, ds) for ds in st.datasets for shape in st.shapes]
    _accuracy(ctx, configs)
    scaling = run_scaling(ctx) if st.scale else []
    inv = invariants(configs, scaling, st)
    tg = targets(configs, ctx) if st.real else []
    reproduce = command_as_run(
        "gnnsched bench eval" + (" --quick" if st.quick else "")
        + (f" --repeats {st.repeats}" if st.repeats > 1 else "")
        + ("" if st.launcher == "netns" or auto_launcher else f" --launcher {st.launcher}")
        + st.targets.flag())
    doc = {
        "bench": "eval", "version": 1, "quick": st.quick, "reproduce": reproduce,
        "command": st.command, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_s": time.perf_counter() - t0,
        "host": {"cpus": os.cpu_count(), "load_start": load0, "load_end": os.getloadavg()[0],
                 "platform": platform.platform(), **versions()},
        "launcher": {"name": st.launcher, "reason": st.launcher_reason},
        "settings": st.to_dict(), "targets_goal": st.goals, "datasets": ctx.info,
        "configs": configs, "scaling": scaling,
        "references": list(ctx.references.values()), "accuracy_spread": ctx.spreads,
        "accuracy_study": ctx.studies,
        "invariants": inv, "targets": tg,
        **({"box": {ds: b.to_dict() for ds, b in boxes.items()}} if boxes else {}),
    }
    doc["started"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() - doc["wall_s"]))
    # the scale model's merged results stay
    merge.carry_over(st.out / "results.json", doc, st.targets)
    (st.out / "results.json").write_text(json.dumps(doc, indent=1, default=json_default) + "\n")
    plots = render(doc, st.out)
    _summary(st, doc, tg, plots, t0)
    _merge_into(st, doc)
    if st.quick:
        return 0 if all(i["ok"] for i in inv) else 1
    return 0 if inv and inv[0]["ok"] else 1


def _summary(st: Settings, doc: dict[str, Any], tg: list[dict[str, Any]], plots: list[str],
             t0: float) -> None:
    """The report's headline, the invariants and the count of this run's targets ``tg``, on
    stdout."""
    say("")
    say((st.out / "report.md").read_text().split("## Targets")[0].strip())
    say("")
    for i in doc["invariants"]:
        say(f"{'PASS' if i['ok'] else 'FAIL'}: {i['name']}: {i['detail'][:400]}")
    missed = [t for t in tg if t["met"] is False]
    say(f"targets: {sum(1 for t in tg if t['met'])} met, {len(missed)} missed (see report)")
    say(f"wrote {st.out / 'results.json'}, {st.out / 'report.md'}"
        + (f", {', '.join(plots)}" if plots else "")
        + f" in {(time.perf_counter() - t0) / 60:.1f} min")
