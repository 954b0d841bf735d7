"""Draw a plan: machines as boxes with their tasks, the heaviest transfers as arrows.

A person checks a plan by eye: which machines train, where samplers and gathering run, and
which links carry the bulk of the bytes (usually the bottleneck). Matplotlib with the Agg
backend, so it works on headless machines.
"""

from __future__ import annotations

import math
from pathlib import Path

from gnnsched.placement.problem import Problem, plan_transfers
from gnnsched.plan import Plan

MAX_LABELLED = 40  # beyond this many machines, boxes show counts instead of task lists


def _tasks(problem: Problem, plan: Plan) -> dict[int, list[str]]:
    idx = problem.cluster.machine_index
    out: dict[int, list[str]] = {m: [] for m in range(problem.M)}
    for t in plan.trainers:
        parts = ",".join(map(str, t.parts[:4])) + ("…" if len(t.parts) > 4 else "")
        out[idx(t.machine)].append(f"T{t.id} gpu{t.device} [{parts}]")
        for m, c in t.samplers:
            out[idx(m)].append(f"S{t.id}×{c}")
        if t.fetch_at != t.machine:
            out[idx(t.fetch_at)].append(f"G{t.id} (relay)")
    return out


def draw(problem: Problem, plan: Plan, path: str | Path, *, arrows: int = 12,
         title: str | None = None) -> Path:
    """Write a PNG of `plan` on `problem`'s cluster; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    M = problem.M
    cols = max(1, math.ceil(math.sqrt(M * 1.6)))
    rows = math.ceil(M / cols)
    big = M > MAX_LABELLED
    w, h = (1.0, 0.7) if big else (2.2, 1.5)
    gap = 0.5 if big else 0.9
    fig_w = min(40.0, 1.0 + cols * (w + gap) * (0.35 if big else 1.0))
    fig_h = min(40.0, 1.6 + rows * (h + gap) * (0.35 if big else 1.0))
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    tasks = _tasks(problem, plan)
    centre: dict[int, tuple[float, float]] = {}
    trains = {problem.cluster.machine_index(t.machine) for t in plan.trainers}
    for m, mach in enumerate(problem.cluster.machines):
        r, c = divmod(m, cols)
        x, y = c * (w + gap), -r * (h + gap)
        centre[m] = (x + w / 2, y + h / 2)
        colour = "#cfe8cf" if m in trains else ("#dde6f5" if mach.partitions else "#eeeeee")
        ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="#555555", lw=0.8))
        gpus = f"{len(mach.gpus)}×{mach.gpus[0].kind}" if mach.gpus else "no GPU"
        head = mach.name if big else f"{mach.name}  ({gpus}, {mach.cpus} cores)"
        ax.text(x + 0.05, y + h - 0.06, head, fontsize=5 if big else 7, va="top",
                weight="bold")
        lines = tasks[m]
        if big:
            nt = sum(1 for s in lines if s.startswith("T"))
            body = f"T×{nt}" if nt else ""
        else:
            parts = mach.partitions
            store = f"store {len(parts)} part(s)" if parts else ""
            shown = lines[:6] + ([f"+{len(lines) - 6} more"] if len(lines) > 6 else [])
            body = "\n".join(([store] if store else []) + shown)
        ax.text(x + 0.05, y + h - (0.2 if big else 0.3), body, fontsize=4 if big else 6,
                va="top", family="monospace")
    flows = sorted(plan_transfers(problem, plan).items(), key=lambda kv: -kv[1])[:arrows]
    top = flows[0][1] if flows else 1.0
    for (src, dst), b in flows:
        if b < 0.01 * top:  # a trickle next to the main flows: an arrow would only clutter
            continue
        a = FancyArrowPatch(centre[src], centre[dst], arrowstyle="-|>", mutation_scale=8,
                            lw=0.5 + 3.0 * b / top, color="#c0392b", alpha=0.7,
                            connectionstyle="arc3,rad=0.15")
        ax.add_patch(a)
        mx = (centre[src][0] + centre[dst][0]) / 2
        my = (centre[src][1] + centre[dst][1]) / 2
        if not big:
            ax.text(mx, my, f"{b / 1e6:.2g} MB", fontsize=5, color="#c0392b")
    ep = plan.prediction.epoch_time_s if plan.prediction is not None else None
    bn = problem.seconds_per_iteration(plan)[1].split(' (')[0]
    ax.set_title(title or f"{plan.placer} on {plan.cluster}: "
                 + (f"epoch {ep:.3g} s, " if ep else "") + f"bottleneck {bn}; arrows: "
                 f"heaviest {len(flows)} transfers per iteration", fontsize=8)
    ax.set_xlim(-0.3, cols * (w + gap))
    ax.set_ylim(-rows * (h + gap) + gap - 0.3, h + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


__all__ = ["draw"]
