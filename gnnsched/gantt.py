"""Draw a simulated schedule: one row per resource, coloured by stage.

NIC rows are stacked bands whose height is the share of the NIC's bandwidth each stage uses
(so fair sharing and priority sending look different at a glance); core rows show how many
cores are busy; device rows show training and the all-reduce barrier. Uses the Agg backend:
no display needed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gnnsched.simulator import SimResult, Span

STAGE_COLOURS = {
    "sample": "#4c72b0", "struct": "#8172b2", "block": "#64b5cd", "feat": "#dd8452",
    "relay": "#c44e52", "train": "#55a868", "allreduce": "#937860",
}


def _order(res: str) -> tuple:
    kind, _, name = res.partition(":")
    return ({"gpu": 0, "ingress": 1, "egress": 2, "cpu": 3}.get(kind, 4), name)


def _steps(spans: list[Span], cap: float) -> dict[str, list[tuple[float, float]]]:
    """Per stage: piecewise-constant share of capacity, as (time, share) change points."""
    out: dict[str, list[tuple[float, float]]] = {}
    by_stage: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        by_stage[s.stage].append((s.start, s.rate / cap))
        by_stage[s.stage].append((s.end, -s.rate / cap))
    for stage, ev in by_stage.items():
        ev.sort()
        cur, pts = 0.0, []
        for t, d in ev:
            cur += d
            pts.append((t, max(cur, 0.0)))
        out[stage] = pts
    return out


def draw(result: SimResult, path: str | Path, *, max_rows: int = 40,
         title: str | None = None, until: float | None = None) -> Path:
    """Write a Gantt chart of `result` (simulated with ``record=True``) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if result.timeline is None:
        raise ValueError("the result has no timeline: simulate with record=True")
    by_res: dict[str, list[Span]] = defaultdict(list)
    for s in result.timeline:
        by_res[s.resource].append(s)
    rows = sorted(by_res, key=_order)
    if len(rows) > max_rows:  # keep the busiest resources
        busy = sorted(rows, key=lambda r: -result.utilisation.get(r, 0.0))[:max_rows]
        rows = sorted(busy, key=_order)
    end = until or max(result.makespan_s, 1e-12)
    fig, ax = plt.subplots(figsize=(13, 0.42 * len(rows) + 1.6))
    for i, res in enumerate(rows):
        y0 = len(rows) - 1 - i
        spans = by_res[res]
        kind = res.split(":", 1)[0]
        if kind == "gpu":
            for s in spans:
                ax.broken_barh([(s.start, s.end - s.start)], (y0 + 0.1, 0.8),
                               facecolors=STAGE_COLOURS.get(s.stage, "grey"), linewidth=0)
            continue
        steps = _steps(spans, result.capacity.get(res, 1.0))
        base_t = sorted({t for pts in steps.values() for t, _ in pts} | {0.0, end})
        lower = dict.fromkeys(base_t, 0.0)
        for stage in STAGE_COLOURS:
            pts = steps.get(stage)
            if not pts:
                continue
            val, j, level = 0.0, 0, []
            for t in base_t:
                while j < len(pts) and pts[j][0] <= t:
                    val = pts[j][1]
                    j += 1
                level.append(val)
            lo = [lower[t] for t in base_t]
            hi = [a + b * 0.8 for a, b in zip(lo, level)]
            ax.fill_between(base_t, [y0 + 0.1 + v for v in lo], [y0 + 0.1 + v for v in hi],
                            step="post", color=STAGE_COLOURS[stage], linewidth=0)
            for t, h in zip(base_t, hi):
                lower[t] = h
    ax.set_yticks([len(rows) - 1 - i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels(rows, fontsize=7)
    ax.set_xlim(0, end)
    ax.set_ylim(0, len(rows))
    ax.set_xlabel("seconds")
    ax.set_title(title or f"{result.policy}: epoch {result.makespan_s:.4g} s "
                 f"(lower bound {result.lower_bound_s:.4g} s)", fontsize=10)
    used = {s.stage for s in result.timeline}
    ax.legend(handles=[Patch(color=c, label=s) for s, c in STAGE_COLOURS.items() if s in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.08 if len(rows) > 8 else -0.2),
              ncol=7, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["STAGE_COLOURS", "draw"]
