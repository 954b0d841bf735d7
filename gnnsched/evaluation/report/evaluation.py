"""report.md of the evaluation (``gnnsched bench eval``): its numbers as text, section by
section (also re-rendered from a stored results.json by ``resimulate`` and
``accuracy-study``)."""

from __future__ import annotations

import statistics
import traceback
from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import (
    HEADLINE,
    RUNTIME_SYSTEMS,
    SIM_SEEDS,
    acc,
    fmt,
)


def study_lines(doc: dict[str, Any]) -> list[str]:
    """The accuracy study's table (empty when it did not run)."""
    studies = {k: v for k, v in doc.get("accuracy_study", {}).items() if v.get("splits")}
    if not studies:
        return []
    first = next(iter(studies.values()))
    L = [f"Accuracy study — test accuracy over job seeds {first['seeds'][0]}.."
         f"{first['seeds'][-1]} on each side (run {first.get('ran', '?')}"
         + (f" by `{first['command']}`" if first.get("command") else ", part of the command "
            "above") + "): DistDGL on local "
         "processes with its timed runs' seed split, and single-process training of each seed "
         "split a gnnsched-runtime plan used (every timed run matched it: see Invariants). "
         "The accuracy targets compare these means; one seed's accuracy moves by points on "
         "Cora, so three seeds' means are about 1 point apart by chance.", "",
         "| dataset | side | seed split | mean ± std | range | vs DistDGL |",
         "|---|---|---|---:|---:|---:|"]
    for ds, v in studies.items():
        label = doc["datasets"].get(ds, {}).get("label", ds)
        dd = v.get("distdgl", {})
        if dd.get("mean") is not None:
            L.append(f"| {label} | DistDGL | {dd.get('split')} | {dd['mean']:.3f} ± "
                     f"{dd['std']:.3f} | {dd['min']:.3f}..{dd['max']:.3f} | – |")
        elif dd.get("error"):
            L.append(f"| {label} | DistDGL | {dd.get('split')} | failed: "
                     f"{str(dd['error'])[:120].replace('|', '/')} | – | – |")
        for x in v["splits"]:
            vs = (f"{100 * (x['mean'] - dd['mean']):+.1f} pt" if dd.get("mean") is not None
                  else "–")
            L.append(f"| {label} | gnnsched runtime (reference) | {x['split']} | "
                     f"{x['mean']:.3f} ± {x['std']:.3f} | {x['min']:.3f}..{x['max']:.3f} | "
                     f"{vs} |")
    L.append("")
    return L


def _intro(doc: dict[str, Any], L: list[str]) -> None:
    """Title, how to reproduce, on what box and launcher."""
    st = doc["settings"]
    L.append("# gnnsched evaluation" + (" (quick mode)" if st["quick"] else ""))
    L.append("")
    spread = [max(t) / min(t) - 1 for c in doc["configs"] for r in c["systems"].values()
              if len(t := r.get("repeat_epoch_times_s") or []) > 1]
    L.append(f"Reproduce: `{doc['reproduce']}` — {doc['wall_s'] / 60:.1f} min on this box "
             f"({doc['host']['cpus']} cores, load average {doc['host']['load_start']:.1f} at "
             f"the start, {doc['host']['load_end']:.1f} at the end; started "
             f"{doc['started']}). Launcher: {doc['launcher']['name']} — "
             f"{doc['launcher']['reason']}. {st['epochs']} epochs per run, epoch time = "
             f"median over epochs 2..{st['epochs']}; {st['repeats']} run(s) per system"
             + (f", run r with job seed {st['seed']} + r in every system (epoch time: "
                f"median over runs; test accuracy: mean over runs)" if st["repeats"] > 1
                else "")
             + (f" (repeats of one system differ by up to {max(spread):.0%}, median "
                f"{statistics.median(spread):.0%})." if spread else ".")
             + (f" Simulated predictions re-derived from these measurements on "
                f"{doc['resimulated']} (`gnnsched bench resimulate`, formerly `gnnsched bench "
                "--resimulate`; the command above computes the same)."
                if doc.get("resimulated") else ""))
    for note in st.get("notes") or []:
        L.append("")
        L.append(f"Note: {note}.")
    fifo = sorted({f"{c['shape']}/{c['dataset']}: {c['nic_queues']}" for c in doc["configs"]
                   if c.get("nic_queues", "tos bands") != "tos bands"})
    if st.get("nic_bands") and fifo:
        L.append("")
        L.append("--nic-bands asked for priority bands, but this kernel could not band these "
                 "NIC queues (gradients share one FIFO with bulk data there): "
                 + "; ".join(fifo) + ".")
    L.append("")


def _headline(doc: dict[str, Any], L: list[str]) -> None:
    """Measured (and simulated) epochs of every system, speed-ups, accuracy, sim error."""
    L.append("## Headline")
    L.append("")
    where = ("on the emulated cluster" if doc["launcher"]["name"] != "local" else
             "on local processes (NICs not shaped, so not comparable with the simulated "
             "epochs or the targets)")
    scored = _scored(doc)  # a task metric other than accuracy: its own column
    L.append(f"Epoch seconds measured {where} (simulated steady-state epoch in "
             "brackets), speed-up of gnnsched (placement + policy) over colocation + fifo and "
             "over DistDGL, test accuracy"
             + (", the job's task metric on the test set (named in its cell)" if scored else "")
             + ", and the largest simulator error over the three gnnsched-runtime systems.")
    L.append("")
    L.append("| shape | dataset | DistDGL | colocation + fifo | gnnsched + fifo | gnnsched | "
             "bound | vs colocation | vs DistDGL | accuracy (DistDGL / colo / gnnsched) | "
             + ("task metric (DistDGL / colo / gnnsched) | " if scored else "")
             + "sim error |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|" + ("---|" if scored else "")
             + "---:|")
    for c in doc["configs"]:
        sy = c["systems"]

        def cell(name: str, sy: dict[str, Any] = sy) -> str:
            r = sy.get(name)
            if r is None:
                return "–"
            if r.get("feasible") is False:
                return "infeasible"
            if not r.get("ok"):
                return "failed"
            sim = r.get("sim", {}).get("epoch_time_s")
            m = fmt(r.get("real_epoch_time_s") or r.get("epoch_time_s"))  # the real cluster's
            return (m + (f" ({sim:.3f})" if sim else "")
                    + (" =" if r.get("same_plan_as_colocation") else ""))

        me = sy.get(HEADLINE, {})
        errs = [abs(sy[n]["sim_error"]) for n in RUNTIME_SYSTEMS
                if n in sy and sy[n].get("sim_error") is not None]
        accs = " / ".join(fmt(acc(sy.get(n, {})), ".3f") for n in
                          ("distdgl", "colocation+fifo", HEADLINE))
        if scored:
            names = sorted({sy[n]["metric"] for n in ("distdgl", "colocation+fifo", HEADLINE)
                            if sy.get(n, {}).get("metric")})
            accs += " | " + ("/".join(names) + " " if names else "") + " / ".join(
                fmt(sy.get(n, {}).get("test_metric"), ".3f")
                for n in ("distdgl", "colocation+fifo", HEADLINE))
        L.append(f"| {c['shape']} | {doc['datasets'][c['dataset']]['label']} | "
                 f"{cell('distdgl')} | {cell('colocation+fifo')} | {cell('gnnsched+fifo')} | "
                 f"{cell(HEADLINE)} | {fmt(c.get('bound_any_placement_s'))} | "
                 f"{fmt(me.get('speedup_vs_colocation'), '.2f')}x | "
                 f"{fmt(me.get('speedup_vs_distdgl'), '.2f')}"
                 f"{'x' if me.get('speedup_vs_distdgl') else ''} | {accs} | "
                 f"{fmt(max(errs) if errs else None, '.1%')} |")
    L.append("")
    L.append("*bound*: the lower bound of any placement's steady-state epoch (CP-SAT's proven "
             "per-iteration bound x iterations, from the gnnsched placer). *infeasible*: "
             "DistDGL colocates each partition's trainer with its server and a store host has "
             "no GPU. *=*: gnnsched's placer chose colocation's plan, so the difference to "
             "colocation + fifo is the policy (gnnsched) or run-to-run noise (fifo).")
    L.append("")
    spreads = {k: v for k, v in doc.get("accuracy_spread", {}).items() if v.get("test_accuracy")}
    if spreads:
        L.append("Accuracy noise floor — single-process training of the same job and seed "
                 "split with job seeds " + ", ".join(
                     f"{doc['datasets'][k]['label']}: {v['mean']:.3f} ± {v['std']:.3f} "
                     f"(range {v['min']:.3f}..{v['max']:.3f}, seeds "
                     f"{v['seeds'][0]}..{v['seeds'][-1]})" for k, v in spreads.items())
                 + ". Systems with other mini-batches (DistDGL, another seed split) differ "
                 "by this much for that reason alone.")
        L.append("")
    L.extend(study_lines(doc))
    L.append("![speed-ups](speedup.png)")
    L.append("")


def _scored(doc: dict[str, Any]) -> bool:
    """Whether any run was scored by a task metric other than accuracy."""
    return any(r.get("metric") not in (None, "accuracy") for c in doc["configs"]
               for r in c["systems"].values())


def _targets(doc: dict[str, Any], L: list[str]) -> None:
    """Every target: value, met, by how much, why."""
    L.append("## Targets")
    L.append("")
    tg = doc["targets"]
    if not tg:
        L.append("No real runs: no targets evaluated.")
    else:
        L.append("| target | configuration | value | met | by | why (when missed); basis |")
        L.append("|---|---|---:|:-:|---:|---|")
        for t in tg:
            if t["value"] is None:
                val, met, by = "–", "n/a", "–"
            else:
                sm = t["target"].endswith("(scale model)")
                # the scale model's: an error, a share or a count, beside its speed-ups
                err = sm and ("a-priori" in t["target"])
                count = sm and "ranks" in t["target"]
                pct = "simulated" in t["target"] or "accuracy" in t["target"] or err
                val = (f"{t['value']:+.1%}" if "simulated" in t["target"] or err else
                       f"{int(t['value'])} wrong" if count else
                       f"{100 * t['value']:+.1f} pt" if "accuracy" in t["target"] else
                       f"{t['value']:.3f}x" if t["by"] is not None and abs(t["by"]) < 0.01
                       else
                       f"{t['value']:.2f}x")
                met = "n/a" if t["met"] is None else "yes" if t["met"] else "**no**"
                by = ("–" if t["met"] is not False else
                      f"{int(t['by'])} pair(s)" if count else
                      f"{100 * abs(t['by']):.1f} pt {'short' if t['by'] < 0 else 'over'}"
                      if pct else
                      f"{-t['by']:.1%} short" if -t["by"] < 0.01 else f"{-t['by']:.0%} short")
            L.append(f"| {t['target']} | {t['config']} | {val} | {met} | {by} | "
                     f"{t['why'].replace('|', '/')} |")
        met = sum(1 for t in tg if t["met"])
        judged = sum(1 for t in tg if t["met"] is not None)
        L.append("")
        L.append(f"{met} of {judged} targets met." if judged else
                 "No target judged here (see the rows' reasons).")
    L.append("")


def _invariants(doc: dict[str, Any], L: list[str]) -> None:
    """What must hold in every run."""
    L.append("## Invariants")
    L.append("")
    for inv in doc["invariants"]:
        L.append(f"- {'PASS' if inv['ok'] else '**FAIL**'} — {inv['name']}: {inv['detail']}")
    L.append("")


def _fidelity(doc: dict[str, Any], L: list[str]) -> None:
    """Simulated against measured epochs, stage by stage."""
    L.append("## Fidelity: simulated vs measured")
    L.append("")
    L.append("Simulated steady-state epoch (the middle of three simulated epochs, mean "
             f"of {SIM_SEEDS} simulator seeds) against the measured median epoch, per gnnsched-"
             "runtime run; per-iteration stages (input wait / train / barrier) measured and "
             "simulated.")
    L.append("")
    L.append("*Simulated* uses the task costs the run measured (in-situ: on this box a dozen "
             "processes of four emulated hosts share two cores, so each sampling and training "
             "step takes several times what the profiler measured alone, sampling a mini-batch "
             "is a round of requests per layer through busy processes (its measured seconds "
             "per mini-batch replace the profiled CPU seconds), and gloo's all-reduce "
             "takes longer than bytes / bandwidth (measured per iteration from the last "
             "trainer's arrival to the first trainer's departure, so no barrier wait is in "
             "it), which is added as a fixed overhead with the NICs idle, while trainers leave "
             "it apart (how long after the first, drawn per trainer and iteration from the "
             "run's own); each part's per-batch training and sampling costs "
             "also take the spread its trainer's steps had in the run, at the same means, "
             "since the box's scheduling jitter decides how far apart trainers reach the "
             "barrier; all per run in results.json, `sim.insitu_factors`); the simulator "
             "still predicts queueing, NIC "
             "sharing, the pipeline and the barrier. Its NICs are the runtime's: a store "
             "hands each receiver's TCP connection its next transfer, in the policy's order, "
             "while less than 120 ms of the store's egress is queued in that connection; "
             "each connection sends in that order, and connections share the NICs fairly. *Isolated* is the "
             "prediction from the "
             "profile alone, before the run.")
    L.append("")
    L.append("| configuration | measured s | simulated s | error | isolated-profile s (error) "
             "| measured input/train/barrier ms | simulated input/train/barrier ms | "
             "sampling ms (runtime / profile) |")
    L.append("|---|---:|---:|---:|---:|---|---|---|")
    for c in doc["configs"]:
        prof = doc["datasets"][c["dataset"]]["profile"]
        for name in RUNTIME_SYSTEMS:
            r = c["systems"].get(name)
            if not r or r.get("sim_error") is None:
                continue
            d = float(r.get("dilation") or 1.0)  # the scale model: the real cluster's ms
            ms, ss = {k: v / d for k, v in r["stages"].items()}, r["sim"]["stages"]
            iso = r.get("sim_isolated", {}).get("epoch_time_s")
            iso_s = (f"{iso:.3f} ({r['sim_error_isolated']:+.1%})" if iso is not None
                     else "–")
            L.append(f"| {c['shape']}/{c['dataset']}/{name} | "
                     f"{r.get('real_epoch_time_s') or r['epoch_time_s']:.3f} | "
                     f"{r['sim']['epoch_time_s']:.3f} | {r['sim_error']:+.1%} | {iso_s} | "
                     f"{1e3 * ms['input']:.0f} / {1e3 * ms['train']:.0f} / "
                     f"{1e3 * ms['barrier']:.0f} | {1e3 * ss['input']:.0f} / "
                     f"{1e3 * ss['train']:.0f} / {1e3 * ss['barrier']:.0f} | "
                     f"{1e3 * ms['sample']:.0f} / {1e3 * prof['sample_s']:.1f} |")
    L.append("")
    errs = [abs(r["sim_error"]) for c in doc["configs"] for n in RUNTIME_SYSTEMS
            if (r := c["systems"].get(n)) and r.get("sim_error") is not None]
    goal = (doc.get("targets_goal") or {}).get("sim_error")
    if errs:
        within = (f"{sum(e <= goal for e in errs)} of {len(errs)} runs within {goal:.0%}; "
                  if goal is not None else "")
        L.append(f"{within}{'m' if within else 'M'}edian |error| "
                 f"{statistics.median(errs):.1%}, largest {max(errs):.1%}.")
        L.append("")
    L.append("![fidelity](fidelity.png)")
    L.append("")


def _stages(doc: dict[str, Any], L: list[str]) -> None:
    """Per-stage seconds per iteration, bytes, and each plan."""
    L.append("## Per-stage breakdown and bytes")
    L.append("")
    L.append("Mean seconds per iteration and trainer. gnnsched runtime: *input* is the "
             "trainer waiting for its next mini-batch (sampling and fetching overlap "
             "training), *barrier* the gradient all-reduce including waiting for the slower "
             "trainer. DistDGL (sampling in the trainer process): *input* is sampling + "
             "feature fetching, in sequence with training; its *train* includes DDP's "
             "all-reduce. *MB per epoch*: NIC bytes per training epoch (see the notes); *MB "
             "per run*: NIC bytes of every host from start to end of the run, evaluation of "
             "the validation and test sets included (the same for every system).")
    L.append("")
    L.append("| configuration | system | input ms | train ms | barrier ms | sample ms | fetch ms "
             "| MB per epoch | MB per run | plan (trainer: machine [parts] samplers -> fetch "
             "at) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in doc["configs"]:
        for name, r in c["systems"].items():
            if not r.get("ok") or r.get("feasible") is False or not r.get("stages"):
                continue
            d = float(r.get("dilation") or 1.0)  # the scale model: the real cluster's ms
            s = {k: v / d for k, v in r["stages"].items()}
            plan = c["plans"].get(r.get("placer") or "", {}).get("trainers", [])
            ptxt = "; ".join(f"{t['trainer']}: {t['machine']} {t['parts']} "
                             f"{','.join(t['samplers'])} -> {t['fetch_at']}" for t in plan)
            if name == "distdgl":
                ptxt = "; ".join(f"{t['rank']}: {t['host']} {t['parts']}"
                                 for t in r.get("trainers", []))
            mb = fmt(r["bytes_per_epoch"] / 1e6 if r.get("bytes_per_epoch") else None, ".1f")
            L.append(f"| {c['shape']}/{c['dataset']} | {name} | {1e3 * s['input']:.0f} | "
                     f"{1e3 * s['train']:.0f} | {1e3 * s['barrier']:.0f} | "
                     f"{1e3 * s['sample']:.0f} | {1e3 * s['fetch']:.0f} | {mb} | "
                     f"{fmt(r['bytes_run'] / 1e6 if r.get('bytes_run') else None, '.0f')} | "
                     f"{ptxt} |")
    notes = sorted({r.get("bytes_note", "") for c in doc["configs"]
                    for r in c["systems"].values() if r.get("bytes_note")})
    if notes:
        L.append("")
        L.extend(f"- bytes: {n}" for n in notes)
    L.append("")
    L.append("![stages](stages.png)")


def _scaling(doc: dict[str, Any], L: list[str]) -> None:
    """The simulated sweep at 16..256 machines."""
    L.append("")
    if doc["scaling"]:
        L.append("## At scale (simulated)")
        L.append("")
        L.append("Each shape replicated to M machines (2 trainers and 4 partitions per 4 "
                 "hosts), the measured profile scaled to M partitions (see Method). Simulated "
                 "steady-state epoch seconds; *one-epoch speed-up* compares whole simulated "
                 "epochs, pipeline fill included (what the placer's search scores). *gnnsched "
                 "plan's bound*: the most loaded resource of that plan's drawn mini-batches x "
                 "iterations; *any placement*: CP-SAT's bound over all placements within the "
                 "planning budget (only as tight as CP-SAT proved it).")
        L.append("")
        L.append("| shape | dataset | machines | parts / trainers | colocation + fifo | "
                 "gnnsched + fifo | gnnsched | gnnsched plan's bound | bound, any placement | "
                 "speed-up | one-epoch speed-up | planning s |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in doc["scaling"]:
            if not s.get("ok"):
                L.append(f"| {s['shape']} | {s['dataset']} | {s['machines']} | "
                         f"{s['partitions']} / {s['trainers']} | failed | | | | | | | |")
                continue
            sy = s["systems"]
            one_epoch = (sy["colocation+fifo"]["epoch_time_full_s"]
                         / sy[HEADLINE]["epoch_time_full_s"])
            L.append(f"| {s['shape']} | {s['dataset']} | {s['machines']} | {s['partitions']} "
                     f"/ {s['trainers']} | {sy['colocation+fifo']['epoch_time_s']:.3f} | "
                     f"{sy['gnnsched+fifo']['epoch_time_s']:.3f} | "
                     f"{sy[HEADLINE]['epoch_time_s']:.3f} | "
                     f"{fmt(sy[HEADLINE].get('lower_bound_s'))} | "
                     f"{fmt(s.get('bound_any_placement_s'))} | "
                     f"{fmt(s.get('speedup_vs_colocation'), '.2f')}x | "
                     f"{one_epoch:.2f}x | "
                     f"{s.get('gnnsched_planning_s', 0):.1f} |")
        L.append("")
        L.append("![scaling](scaling.png)")
        L.append("")


def _datasets(doc: dict[str, Any], L: list[str]) -> None:
    """The datasets and their profiles."""
    L.append("## Datasets and profiles")
    L.append("")
    L.append("| dataset | nodes | features | train / val / test | batch (per trainer) | "
             "iterations / epoch | profiled sample ms | train ms | input nodes | local share |")
    L.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for d in doc["datasets"].values():
        p = d["profile"]
        feat = f"{d['feature_dim']}" + (" (projected)" if d["projected"] else "") + (
            f", {d['normalize']}-normalised" if d.get("normalize", "none") != "none" else "")
        label = d["label"] + (f" (`{d['file']}`, split {d.get('split', 0)})"
                              if d.get("file") else "")
        L.append(f"| {label} | {d['num_nodes']:,} | {feat} | {d['train']} / {d['val']} / "
                 f"{d['test']} | {d['batch_size']} | {d['iterations_per_epoch']} | "
                 f"{1e3 * p['sample_s']:.1f} | {1e3 * p['train_s']:.1f} | "
                 f"{p['input_nodes']:.0f} | {p['local_input_share']:.0%} |")
    L.append("")


def _method(doc: dict[str, Any], L: list[str]) -> None:
    """How it was measured: the package docstring's method."""
    from gnnsched import evaluation

    L.append("## Method")
    L.append("")
    doc_text = (evaluation.__doc__ or "").split("\n\n", 1)[1].strip()
    L.extend(doc_text.splitlines())
    L.append("")


def _scale_model(doc: dict[str, Any], L: list[str]) -> None:
    """The scale model: D per shape, the measured and the real cluster's epochs, and the
    prediction made before each run (from the profile and the box's calibration) beside the
    profile's alone and the in-situ one."""
    merged = doc.get("scale_model") if not doc.get("box") else None
    boxes = doc.get("box") or (merged or {}).get("box")
    if not boxes:
        return
    configs = (merged or doc)["configs"]
    L.append("## The scale model: predicted before the run")
    L.append("")
    if merged:
        L.append("Merged from the scale-model evaluations below (`--into`); their targets are "
                 "judged together in the Targets section. Each folder's own report has its "
                 "per-stage tables.")
        L.append("")
        for src in merged["sources"]:
            L.append(f"- [{src['dir']}]({src['dir']}/report.md) ({', '.join(src['configs'])}; started "
                     f"{src.get('started')}): `{src.get('command')}`")
        L.append("")
    L.append("Every host ran in its own control groups (CPU quota, memory limit) with CPUs, "
             "NICs and latency slowed by one dilation factor D (docs/scale-model.md). Times in "
             "the other tables are the real cluster's: measured / D. *A priori* is the "
             "simulator's epoch from the profile with this box's calibration (the runtime's "
             "own costs, measured once on the calibration cluster, which is none of these "
             "shapes: `gnnsched bench calibrate-box`), computed before the run; *profile* "
             "the profile's alone; *in-situ* from the costs the run itself measured (a "
             "diagnostic, not a prediction).")
    L.append("")
    for ds, b in boxes.items():
        L.append(f"Box calibration ({ds}): training x{b['train']:.2f}, sampling "
                 f"x{b['sample']:.2f}, all-reduce +{1e3 * b['allreduce_overhead_s']:.1f} ms "
                 f"over its bytes at line rate (calibration run at D = {b['dilation']:.3g}, "
                 f"epoch {b['epoch_time_s']:.3f} s of the real cluster).")
    L.append("")
    L.append("| configuration | D | measured on the model s | real cluster s | a priori s "
             "(error) | profile s (error) | in-situ s (error) |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    errs = []
    for c in configs:
        for name in RUNTIME_SYSTEMS:
            r = c["systems"].get(name)
            if not r or not r.get("real_epoch_time_s"):
                continue
            real = r["real_epoch_time_s"]

            def cell(v: float | None, real: float = real) -> str:
                return f"{v:.3f} ({v / real - 1:+.1%})" if v else "–"

            ap = (r.get("sim_isolated") or {}).get("epoch_time_s")
            if ap:
                errs.append(abs(ap / real - 1))
            L.append(f"| {c['shape']}/{c['dataset']}/{name} | {r['dilation']:.3g} | "
                     f"{r['epoch_time_s']:.3f} | {real:.3f} | {cell(ap)} | "
                     f"{cell((r.get('sim_profile') or {}).get('epoch_time_s'))} | "
                     f"{cell((r.get('sim') or {}).get('epoch_time_s'))} |")
    L.append("")
    if errs:
        L.append(f"A priori: {sum(e <= 0.10 for e in errs)} of {len(errs)} runs within 10%, "
                 f"{sum(e <= 0.20 for e in errs)} within 20%; median |error| "
                 f"{statistics.median(errs):.1%}, largest {max(errs):.1%}.")
        L.append("")


def write_report(doc: dict[str, Any], out: Path) -> None:
    """``report.md``: headline table, targets, fidelity, per-stage, bytes, scaling, method."""
    L: list[str] = []
    for section in (_intro, _headline, _targets, _invariants, _scale_model, _fidelity, _stages,
                    _scaling, _datasets, _method):
        section(doc, L)
    out.joinpath("report.md").write_text("\n".join(L) + "\n")


def render(doc: dict[str, Any], out: Path) -> list[str]:
    """Plots and report.md from a results document (also to re-render a results.json)."""
    from gnnsched.evaluation.plots import plot_all

    plots: list[str] = []
    try:
        plots = plot_all(doc, out)
    except Exception:  # noqa: BLE001 - plots must not hide the numbers
        traceback.print_exc()
    write_report(doc, out)
    return plots
