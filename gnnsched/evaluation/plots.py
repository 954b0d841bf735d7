"""The evaluation's plots (speed-ups, per-stage breakdown, scaling, simulator fidelity) and
the scale tier's (throughput against the box's limit, CPU per trained seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnnsched.evaluation.config import COLOURS, HEADLINE, RUNTIME_SYSTEMS, SHAPES, SYSTEMS
from gnnsched.evaluation.limit import median_run
from gnnsched.evaluation.scale_config import COLOURS as SCALE_COLOURS
from gnnsched.evaluation.scale_config import LABELS as SCALE_LABELS


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display on a benchmarking box)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, plt: Any, out: Path, name: str, dpi: int = 120) -> str:
    """Write ``fig`` to ``out/name`` and free it; the name, for the list of files written."""
    fig.savefig(out / name, dpi=dpi)
    plt.close(fig)
    return name


def _speedups(doc: dict[str, Any], out: Path, plt: Any) -> str:
    """speedup.png: speed-up bars over colocation + fifo, measured and simulated."""
    import numpy as np

    configs = doc["configs"]
    names = [f"{c['shape']}\n{c['dataset']}" for c in configs]
    x = np.arange(len(configs))
    # speed-up bars over colocation + fifo, measured (bars) and simulated (markers)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.5 * len(configs) + 2), 4.2))
    systems = ["distdgl", "gnnsched+fifo", HEADLINE]
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        xs = x + (i - len(systems) / 2 + 0.5) * width
        ys = [c["systems"].get(s, {}).get("speedup_vs_colocation") or 0.0 for c in configs]
        ax.bar(xs, ys, width, label=SYSTEMS[s].label, color=COLOURS[s])
        sim = [c["systems"].get(s, {}).get("sim_speedup_vs_colocation") for c in configs]
        ax.scatter([a for a, v in zip(xs, sim) if v], [v for v in sim if v], marker="_",
                   s=300, color="black", zorder=3,
                   label="simulated" if i == len(systems) - 1 else None)
        for a, c in zip(xs, configs):
            if s == "distdgl" and c["systems"].get(s, {}).get("feasible") is False:
                ax.text(a, 0.05, "infeasible", rotation=90, ha="center", va="bottom",
                        fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    goal = (doc.get("targets_goal") or {}).get("speedup_vs_colocation_limited")
    if goal is not None:
        ax.axhline(goal, color="grey", lw=0.8, ls="--", label=f"{goal}x target (limited shapes)")
    ax.set_xticks(x)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("speed-up over colocation + fifo (measured)")
    where = "emulated cluster" if doc["launcher"]["name"] != "local" else "local processes"
    ax.set_title(f"Epoch-time speed-up over colocation + fifo, {where}", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=5)
    fig.tight_layout()
    return _save(fig, plt, out, "speedup.png")


def _stages(doc: dict[str, Any], out: Path, plt: Any) -> str:
    """stages.png: input / train / barrier per iteration, measured and simulated."""
    configs = doc["configs"]
    names = [f"{c['shape']}\n{c['dataset']}" for c in configs]
    # per-stage breakdown: stacked input / train / barrier, measured and simulated
    fig, ax = plt.subplots(figsize=(max(7, 2.2 * len(configs) + 2), 4.4))
    order = [s for s in SYSTEMS if any(s in c["systems"] for c in configs)]
    slot = 0.9 / (len(order) * 2)
    stage_col = {"input": "#90caf9", "train": "#ffb74d", "barrier": "#e57373"}
    ticks, labels = [], []
    for ci, c in enumerate(configs):
        for si, s in enumerate(order):
            r = c["systems"].get(s, {})
            for k, (what, stages) in enumerate((("m", r.get("stages")),
                                                ("s", r.get("sim", {}).get("stages")))):
                if not stages or (what == "m" and not r.get("ok")):
                    continue
                pos = ci + (si * 2 + k - len(order) + 0.5) * slot
                bottom = 0.0
                d = float(r.get("dilation") or 1.0) if what == "m" else 1.0  # real ms
                for stg in ("input", "train", "barrier"):
                    v = 1e3 * stages.get(stg, 0.0) / d
                    ax.bar(pos, v, slot * 0.9, bottom=bottom, color=stage_col[stg],
                           hatch="//" if what == "s" else None, edgecolor="white", lw=0.3)
                    bottom += v
                ticks.append(pos)
                labels.append(("DD" if s == "distdgl" else
                               {"colocation+fifo": "C", "gnnsched+fifo": "G/f",
                                HEADLINE: "G"}[s]) + ("*" if what == "s" else ""))
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=6)
    for ci, n in enumerate(names):
        ax.text(ci, -0.16, n.replace("\n", " / "), transform=ax.get_xaxis_transform(),
                ha="center", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=stage_col[k]) for k in stage_col]
    ax.legend(handles, ["input (wait / sample + fetch)", "train", "barrier (all-reduce)"],
              fontsize=7, loc="upper left")
    ax.set_ylabel("ms per iteration")
    ax.set_title("Per-stage breakdown (DD DistDGL, C colocation+fifo, G/f gnnsched+fifo, "
                 "G gnnsched; * simulated)", fontsize=9)
    fig.subplots_adjust(bottom=0.2, top=0.9, left=0.08, right=0.98)
    return _save(fig, plt, out, "stages.png")


def _scaling(doc: dict[str, Any], out: Path, plt: Any) -> str | None:
    """scaling.png: weak scaling and the speed-up at 16..256 machines (simulated)."""
    # scaling curve: weak scaling (seeds per partition fixed) and the speed-up
    sc = [s for s in doc["scaling"] if s.get("ok")]
    if sc:
        datasets = sorted({s["dataset"] for s in sc})
        shapes = [k for k in SHAPES if any(s["shape"] == k for s in sc)]
        fig, axes = plt.subplots(1, len(datasets) + 1, figsize=(4.4 * (len(datasets) + 1), 4.2))
        cmap = plt.get_cmap("tab10")
        for shape in shapes:
            col = cmap(shapes.index(shape))
            for di, dsn in enumerate(datasets):
                rows = sorted((s for s in sc if s["shape"] == shape and s["dataset"] == dsn),
                              key=lambda s: s["machines"])
                if not rows:
                    continue
                m = [s["machines"] for s in rows]
                ax = axes[di]
                for sysname, ls, mk in (("colocation+fifo", "--", "x"), (HEADLINE, "-", "o")):
                    ax.plot(m, [s["train_seeds"] / s["systems"][sysname]["epoch_time_s"]
                                for s in rows], ls, marker=mk, color=col,
                            label=f"{shape}: {SYSTEMS[sysname].label}")
                axes[-1].plot(m, [s["speedup_vs_colocation"] for s in rows],
                              "-" if di == 0 else "--", marker="o", color=col,
                              label=f"{shape} / {dsn}")
        for di, dsn in enumerate(datasets):
            ax = axes[di]
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("machines")
            ax.set_ylabel("training seeds per second (simulated)")
            ax.set_title(f"Weak scaling, {doc['datasets'][dsn]['label']}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=6)
        a = axes[-1]
        a.set_xscale("log", base=2)
        a.set_xlabel("machines")
        a.axhline(1.0, color="black", lw=0.8)
        a.set_ylabel("gnnsched speed-up over colocation + fifo")
        a.set_title("Speed-up at scale (simulated)", fontsize=10)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
        fig.tight_layout()
        return _save(fig, plt, out, "scaling.png")
    return None


def _fidelity(doc: dict[str, Any], out: Path, plt: Any) -> str | None:
    """fidelity.png: simulated against measured epoch, every real run."""
    import numpy as np

    configs = doc["configs"]
    # fidelity scatter
    pts = [(c, n, r) for c in configs for n, r in c["systems"].items()
           if r.get("sim_error") is not None]
    if pts:
        fig, ax = plt.subplots(figsize=(5.2, 5))

        def real(r: dict[str, Any]) -> float:  # the real cluster's (the scale model: / D)
            return float(r.get("real_epoch_time_s") or r["epoch_time_s"])

        apriori = bool(doc.get("box"))  # the scale model: the prediction made before the run
        for c, n, r in pts:
            mk = {"plentiful": "o", "gpuless": "s", "hetero": "^"}.get(c["shape"], "o")
            ax.scatter(real(r), r["sim"]["epoch_time_s"], color=COLOURS[n], marker=mk, s=40)
            if apriori and r.get("sim_isolated"):
                ax.scatter(real(r), r["sim_isolated"]["epoch_time_s"], facecolors="none",
                           edgecolors=COLOURS[n], marker=mk, s=40)
        vals = [v for _, _, r in pts for v in (real(r), r["sim"]["epoch_time_s"],
                                               (r.get("sim_isolated") or {}).get(
                                                   "epoch_time_s") if apriori else None) if v]
        lo, hi = min(vals) * 0.7, max(vals) * 1.3
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", lw=0.8, label="simulated = measured")
        ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2,
                        label="within 10%")
        for n in RUNTIME_SYSTEMS:
            ax.scatter([], [], color=COLOURS[n], label=SYSTEMS[n].label)
        for shp, mk in (("plentiful", "o"), ("gpuless", "s"), ("hetero", "^")):
            ax.scatter([], [], color="grey", marker=mk, label=shp)
        if apriori:
            ax.scatter([], [], facecolors="none", edgecolors="grey",
                       label="a priori (before the run)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured epoch (s" + (", real cluster: measured / D)" if apriori
                                             else ")"))
        ax.set_ylabel("simulated epoch (s)")
        ax.set_title("Simulator fidelity, every real run", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return _save(fig, plt, out, "fidelity.png")
    return None


def plot_all(doc: dict[str, Any], out: Path) -> list[str]:
    """speedup.png, stages.png, scaling.png, fidelity.png; returns the files written."""
    plt = _pyplot()
    written = [plot(doc, out, plt) for plot in (_speedups, _stages, _scaling, _fidelity)]
    return [f for f in written if f]


def plot_scale(doc: dict[str, Any], out: Path) -> str:
    """scale.png: seeds/s per system against the limit (left), CPU-ms per trained seed by
    role (right), one row per shape."""
    plt = _pyplot()
    configs = doc["configs"]
    fig, axes = plt.subplots(len(configs), 2, figsize=(12.5, 3.6 * len(configs)), squeeze=False)
    goal = (doc.get("goals") or {}).get("limit_fraction")
    for (ax, ax2), c in zip(axes, configs):
        names = ["reference"] + list(c["systems"])
        ref = median_run(doc["reference"]["runs"])
        rows = {"reference": ref, **c["systems"]}
        vals = [rows[n].get("seeds_per_s") or 0.0 for n in names]
        ax.bar(range(len(names)), vals, color=[SCALE_COLOURS.get(n, "#777") for n in names])
        lim = c.get("limit") or {}
        if lim.get("compute_seeds_per_s"):
            ax.axhline(lim["compute_seeds_per_s"], color="black", lw=1,
                       label="compute bound (one process)")
            if goal is not None:
                ax.axhline(goal * lim["seeds_per_s"], color="black", lw=0.8, ls="--",
                           label=f"{goal} of the limit")
        top = 1.15 * max(max(vals), lim.get("seeds_per_s") or 0) or 1
        nb = lim.get("network_seeds_per_s")
        if nb:
            ax.axhline(min(nb, 0.99 * top), color="#1565c0", lw=1, ls=":",
                       label=f"network bound (NICs): {nb:,.0f}"
                       + (" (above the chart)" if nb > top else ""))
        ax.set_ylim(0, top)
        for i, n in enumerate(names):
            if rows[n].get("feasible") is False:
                ax.text(i, 0, "infeasible", rotation=90, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([SCALE_LABELS.get(n, n).replace(" (", "\n(") for n in names], fontsize=7)
        ax.set_ylabel("trained seeds / s")
        ax.set_title(f"{c['shape']}: steady-state throughput", fontsize=9)
        ax.legend(fontsize=7)
        # CPU per seed by role kind
        kinds = ["store", "sampler", "fetcher", "trainer", "server", "coordinator"]
        sysn = [n for n in c["systems"] if c["systems"][n].get("roles")]
        bottom = [0.0] * len(sysn)
        for k in kinds:
            hs = []
            for n in sysn:
                r = c["systems"][n]
                seeds = (r.get("seeds_per_epoch") or 0) * len(r.get("epoch_times_s") or [])
                cpu = sum(x.get("cpu_s_window") or 0.0 for name, x in r["roles"].items()
                          if name.split(":")[0] == k)
                hs.append(1e3 * cpu / seeds if seeds else 0.0)
            if any(hs):
                ax2.bar(range(len(sysn)), hs, bottom=bottom, label=k)
                bottom = [b + h for b, h in zip(bottom, hs)]
        cl = doc["limit"]["compute"].get("cpu_s_per_seed")
        if cl:
            ax2.axhline(1e3 * cl, color="black", lw=1, label="single-process pipeline")
        ax2.set_xticks(range(len(sysn)))
        ax2.set_xticklabels([SCALE_LABELS.get(n, n).replace(" (", "\n(") for n in sysn], fontsize=7)
        ax2.set_ylabel("CPU-ms per trained seed")
        ax2.set_title(f"{c['shape']}: CPU per trained seed by role", fontsize=9)
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _save(fig, plt, out, "scale.png", dpi=110)
