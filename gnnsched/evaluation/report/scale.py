"""report.md of the scale tier (``gnnsched bench scale``): the steps, the box's limit, every
system's throughput, CPU, memory and bytes per shape, the policy A/B, the CPU ledgers, the
targets, the invariants and the method (the docstring of :mod:`gnnsched.evaluation.scale`,
which passes it in)."""

from __future__ import annotations

import re
import statistics
from typing import Any

from gnnsched.evaluation.config import fmt, row_metric
from gnnsched.evaluation.limit import limit_text, median_run
from gnnsched.evaluation.measure import GB
from gnnsched.evaluation.scale_config import LABELS, PRESET

METHOD_MARK = "The rest of this docstring is the report's Method section."


def _mb(v: Any) -> str:
    return "–" if not v else f"{v / 1e6:,.0f}"


def _intro(doc: dict[str, Any], L: list[str]) -> None:
    """Title, how to reproduce, the graph and the job."""
    st, g, p = doc["settings"], doc["graph"], doc["partition"]
    L += [f"# gnnsched at scale{' (quick mode)' if doc['quick'] else ''}", ""]
    L.append(f"Reproduce: `{doc['reproduce']}` (run {doc['started']}, {doc['wall_s'] / 60:.1f} "
             f"min, commit {doc.get('commit') or '?'}; {doc['host']['cpus']} CPUs, load "
             f"{doc['host']['load_start']:.1f} at start and {doc['host']['load_end']:.1f} at "
             f"the end; launcher {doc['launcher']['name']}: {doc['launcher']['reason']}).")
    L.append("")
    L.append(f"Graph: synthetic preset `{PRESET}` at {g['num_nodes']:,} nodes, "
             f"{p.get('num_edges', 0):,} directed edges, {g['feature_dim']}-d features, "
             f"{g['num_classes']} classes, homophily {g['homophily']}, feature noise "
             f"{g['feature_noise']} ({p['graph_bytes'] / GB:.2f} GB in memory). Job: SAGE "
             f"{len(st['fanouts'])} layers x {st['hidden']}, fan-outs "
             f"{'/'.join(map(str, st['fanouts']))}, batch {st['batch']} per trainer, 4 trainers,"
             f" 4 METIS parts, {st['epochs']} epoch(s), test on {st['test_nodes']:,} nodes.")
    L.append("")


def _steps(doc: dict[str, Any], L: list[str]) -> None:
    """Every step's seconds and peak memory, then the compute bound."""
    p, pm = doc["partition"], doc["profile"]
    L += ["## Steps", "", "| step | seconds | peak memory |", "|---|---:|---:|"]
    for name, secs in doc["steps_s"].items():
        peak = ""
        if name == "partition":
            peak = (f"{p['peak_rss_bytes'] / GB:.2f} GB"
                    + (f" (when made, {p['seconds']:.0f} s)" if p.get("cached") else ""))
        elif name == "profile" and pm.get("peak_rss_bytes"):
            peak = f"{pm['peak_rss_bytes'] / GB:.2f} GB"
        elif name == "limit":
            peak = f"{doc['limit']['compute']['process']['peak_rss_bytes'] / GB:.2f} GB"
        elif name.startswith("reference") and doc["reference"]["runs"]:
            r = median_run(doc["reference"]["runs"])
            peak = f"{r['peak_rss_bytes'] / GB:.2f} GB" if r.get("peak_rss_bytes") else ""
        L.append(f"| {name} | {secs:.1f} | {peak} |")
    L.append("")
    lim = doc["limit"]
    L.append(f"Compute bound: {fmt(lim.get('seeds_per_s'), '.0f')} seeds/s, from "
             f"{lim.get('from')}. {limit_text(lim['compute'])}")
    L.append("")


def _judged(doc: dict[str, Any], L: list[str]) -> None:
    """The targets (their goals, met, why) and the invariants."""
    L += ["## Targets", "", "| target | config | value | goal | met | why (when missed) |",
          "|---|---|---:|---:|---|---|"]
    for t in doc["targets"]:
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        L.append(f"| {t['target']} | {t['config']} | {fmt(t['value'], '.3f')} | {t['goal']} | "
                 f"{met} | {(t.get('why') or t.get('note') or '').replace('|', '/')} |")
    L += ["", "## Invariants", ""]
    for i in doc["invariants"]:
        L.append(f"- {'PASS' if i['ok'] else 'FAIL'}: {i['name']}: {i['detail']}")
    L += ["", "![throughput](scale.png)", ""]


def _method(method: str, L: list[str]) -> None:
    """The Method section: ``method`` (reST, as in a docstring) in Markdown."""
    L += ["## Method", ""]
    method = re.sub(r":(?:mod|func|meth|data|class):`~?([^`]+)`", r"`\1`", method)
    L.append(method.replace("``", "`").strip())


def report(doc: dict[str, Any], method: str) -> str:
    """report.md: the scale run's numbers, targets, CPU breakdown and ``method`` (the scale
    module's docstring after :data:`METHOD_MARK`)."""
    L: list[str] = []
    _intro(doc, L)
    _steps(doc, L)
    for c in doc["configs"]:
        _shape_section(doc, c, L)
    _judged(doc, L)
    _method(method, L)
    return "\n".join(L) + "\n"


def _system_row(name: str, r: dict[str, Any], lim: dict[str, Any]) -> str:
    """One system's line of a shape's table."""
    label = LABELS.get(name, name)
    if r.get("feasible") is False:
        return f"| {label} | infeasible: {r.get('reason', '')[:120]} | | | | | | | | | |"
    if r.get("error"):
        return f"| {label} | failed: {r['error'][:120].replace('|', '/')} | | | | | | | | | |"
    sps = r.get("seeds_per_s")
    frac = sps / lim["seeds_per_s"] if sps and lim.get("seeds_per_s") else None
    roles = r.get("roles") or {}
    peaks = [x.get("peak_rss_bytes") for x in roles.values() if x.get("peak_rss_bytes")]
    if name == "reference-threads":
        label = f"single-process reference ({r.get('threads', 2)} threads)"
    if name.startswith("reference"):
        peaks = [r.get("peak_rss_bytes")] if r.get("peak_rss_bytes") else []
    epochs = r.get("epoch_times_s") or []
    ep = statistics.median(epochs[1:] or epochs) if epochs else None
    m = r.get("test_metric_mean", row_metric(r))
    la = r.get("load_before_after")
    load = f"{la[0]:.1f} → {la[1]:.1f}" if la else ""
    first = fmt(epochs[0], '.1f') if len(epochs) > 1 else "(the same)"
    return (f"| {label} | {fmt(sps, '.0f')} | {fmt(frac, '.2f')} | {fmt(ep, '.1f')} | "
            f"{first} | "
            f"{fmt(1e3 * r['cpu_s_per_seed'] if r.get('cpu_s_per_seed') else None, '.2f')}"
            f" | {_mb(max(peaks) if peaks else None)} | {_mb(sum(peaks) if peaks else None)}"
            f" | {_mb(r.get('bytes_per_iter'))} | {fmt(m, '.4f')} | {load} |")


def _systems_table(doc: dict[str, Any], c: dict[str, Any], L: list[str]) -> None:
    """A shape's limit and every system's throughput, CPU, memory, bytes and metric."""
    lim = c.get("limit") or {}
    nb = c.get("network_bound") or {}
    L += [f"## {c['shape']}: {c['what']}", ""]
    L.append(f"Limit: {fmt(lim.get('seeds_per_s'), '.0f')} seeds/s ({lim.get('binds')} binds; "
             f"compute {fmt(lim.get('compute_seeds_per_s'), '.0f')}, network "
             f"{fmt(lim.get('network_seeds_per_s'), '.0f')}: {nb.get('nic', '?')} busy "
             f"{1e3 * (nb.get('nic_s_per_iter') or 0):.0f} ms per iteration under gnnsched's "
             "plan).")
    L.append("")
    L.append("| system | seeds/s | of the limit | epoch s | first epoch s | CPU-ms / seed |"
             " largest role peak MB | sum of roles' peaks MB | MB moved / iteration |"
             " test metric | box load |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ref = doc["reference"]
    rr = median_run(ref["runs"])
    rows = [("reference", {**rr, "test_metric_mean": ref.get("test_metric")})]
    if ref.get("runs_threads"):  # the same batches on more threads: the faster peer
        rows.append(("reference-threads", median_run(ref["runs_threads"])))
    rows += list(c["systems"].items())
    for name, r in rows:
        L.append(_system_row(name, r, lim))
    L.append("")


def _policy_ab(c: dict[str, Any], L: list[str]) -> None:
    """The online policy's measured gain on one plan beside the simulator's."""
    for ab in c.get("policy_ab") or []:
        pg = ab["predicted"]["policies"]["gnnsched"]
        L.append(f"**The online policy, A/B** ({LABELS.get(ab['gnnsched'], ab['gnnsched'])} "
                 f"against {LABELS.get(ab['fifo'], ab['fifo'])}: the same {ab['plan']} plan, "
                 "repeat r of each on job seed SEED + r): measured gain "
                 f"{fmt(ab.get('measured_gain'), '.3f')}x (paired by seed: "
                 + ", ".join(f"{x:.3f}" for x in ab.get("paired_gains") or []) +
                 f"; noise {fmt(ab.get('noise'), '.3f')}), predicted before the runs "
                 f"{pg['gain_windowed']:.3f}x on the runtime's network ({pg['gain_ideal']:.3f}x "
                 "if every NIC sent in the policy's order); within 10% of the prediction: "
                 f"{'yes' if ab.get('met') else 'no' if ab.get('met') is False else '–'}.")
        L.append("")


def _roles(c: dict[str, Any], L: list[str]) -> None:
    """Every system's roles: CPU per training iteration and memory."""
    L.append("A role's peak resident memory counts the pages it shares with others (the "
             "libraries of its fork server, a store's feature table mapped by a gatherer on "
             "its machine) in full, so the sum of the peaks overstates the box's memory; the "
             "proportional share (PSS, at the run's end) splits shared pages among their "
             "users, where the runtime reports it.")
    L.append("")
    L.append("Per role (CPU-seconds per training iteration over the training window, from "
             "/proc; memory):")
    L.append("")
    L.append("| system | role | machine | CPU-s / iteration | peak RSS MB | PSS MB |")
    L.append("|---|---|---|---:|---:|---:|")
    for name, r in c["systems"].items():
        its = r.get("iterations") or 0
        for role, x in (r.get("roles") or {}).items():
            cpu = x.get("cpu_s_window")
            L.append(f"| {LABELS.get(name, name)} | {role} | {x.get('machine', '')} | "
                     f"{fmt(cpu / its if cpu is not None and its else None, '.3f')} | "
                     f"{_mb(x.get('peak_rss_bytes'))} | {_mb(x.get('pss_bytes'))} |")
    L.append("")


def _ledgers(c: dict[str, Any], before: dict[str, Any], L: list[str]) -> None:
    """Every gnnsched run's CPU ledger by role and class, beside the previous results'."""
    for name, r in c["systems"].items():
        led = r.get("ledger") or {}
        if not led.get("roles"):
            continue
        L.append(f"CPU ledger of {LABELS.get(name, name)} (CPU-seconds per training iteration"
                 f" by role and class, {led['iterations']} iterations):")
        L.append("")
        classes = list(next(iter(led["roles"].values()))["per_iter"])
        L.append("| role | " + " | ".join(classes) + " | total | before |")
        L.append("|---|" + "---:|" * (len(classes) + 2))
        old = ((before.get(name) or {}).get("ledger") or {}).get("roles") or {}
        for role, gr in led["roles"].items():
            was = old.get(role, {}).get("cpu_s_per_iter")
            L.append(f"| {role} (x{gr['processes']}) | "
                     + " | ".join(f"{gr['per_iter'][k]:.3f}" for k in classes)
                     + f" | {gr['cpu_s_per_iter']:.3f} | {fmt(was, '.3f')} |")
        L.append("")


def _shape_section(doc: dict[str, Any], c: dict[str, Any], L: list[str]) -> None:
    """One shape: its systems, the policy A/B, roles, ledgers and the previous results."""
    _systems_table(doc, c, L)
    _policy_ab(c, L)
    _roles(c, L)
    before = (doc.get("before") or {}).get("configs", {}).get(c["shape"], {})
    _ledgers(c, before, L)
    if before:
        bd = doc["before"]
        L.append(f"Before (results of {bd.get('started')}, commit {bd.get('commit') or '?'}, "
                 f"{bd.get('nodes') or '?':,} nodes): " + "; ".join(
                     f"{LABELS.get(s, s)} {fmt(r.get('seeds_per_s'), '.0f')} seeds/s, "
                     f"{fmt(1e3 * r['cpu_s_per_seed'] if r.get('cpu_s_per_seed') else None, '.2f')}"
                     " CPU-ms/seed" for s, r in before.items()) + ".")
        L.append("")


__all__ = ["METHOD_MARK", "report"]
