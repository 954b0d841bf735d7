"""Planning real clusters (issue 28): seven shapes at 8-256 hosts, two graph sizes, several seeds.

Run: ``python bench/bench_planning.py [--quick] [--seeds 0,1,2] [--budget 10]
[--large-budget 30] [--out docs/bench/planning.json]``

gnnsched plans each shape with ``--budget`` seconds (default 8), the 256-host ones with
``--large-budget`` (default 30, ``gnnsched plan``'s default ``--budget``): since issue 52 the
budget holds (planning took up to 12x it before), and a 256-host plan needs about that long to
race its starts and balance its seeds on this box.

Every placer (gnnsched, CP-SAT alone, greedy, random, colocation) plans each shape x size x
seed; every plan is simulated with the gnnsched policy and the runtime's network model; the
any-placement bound of :mod:`gnnsched.bounds` is computed on the same draws. The logic is
:mod:`gnnsched.evaluation.planning`; this script prints the table and writes the JSON (with its
``targets``), a Markdown table (``.md``) and a plot (``.png``) beside ``--out``.
``--quick`` (CI-size, about a minute): the shapes below 256 hosts, products-sized, two seeds,
1 s budgets.

Besides the six shapes coded in :mod:`gnnsched.evaluation.planning`, every folder of
``bench/planning_shapes/`` with a ``cluster.yaml`` is a shape (issue 52's ``stores256``: 64
GPU-less stores with 1,024 partitions, 192 hosts with 4 GPUs, all 768 training), planned at
both sizes like the others. Where it also has a ``job.yaml``, ``gnnsched plan``'s own work
(:func:`gnnsched.api.plan` on those two files, the comparison with the baselines and the bound
included) is timed at its default ``--budget`` and judged against the ``plan_time_s`` goal.
Every case reports the simulator's speed beside its plan time: events per second over every
simulation on the runtime's windowed network that it ran (the placer's and the judging ones).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnnsched.evaluation import planning  # noqa: E402
from gnnsched.evaluation.targets import load_targets, target_row  # noqa: E402
from gnnsched.placement.budget import OVERSHOOT, OVERSHOOT_S  # noqa: E402

SHAPES_DIR = ROOT / "bench" / "planning_shapes"
PLAN_BUDGET_S = 30.0  # `gnnsched plan --budget`'s default: the plan-time target's budget


# ---------------------------------------------------------------------------- file shapes


def _what(path: Path) -> str:
    """A shape's description: its cluster file's leading comment, in one line."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines).split(" The planning benchmark's")[0]


def file_shapes() -> list[planning.Shape]:
    """The shapes of ``bench/planning_shapes/*/cluster.yaml`` (trainers: the job file's, else
    one per GPU), 256-host ones with the same budget scale as the coded scale256."""
    import yaml

    out = []
    for d in sorted(p for p in SHAPES_DIR.glob("*") if (p / "cluster.yaml").is_file()):
        doc = yaml.safe_load((d / "cluster.yaml").read_text())
        ms = doc["machines"]
        parts = sum(len(m.get("partitions", ())) for m in ms)
        gpus = sum(g.get("count", 1) for m in ms for g in m.get("gpus", ()))
        job = d / "job.yaml"
        W = int(yaml.safe_load(job.read_text())["trainers"]) if job.is_file() else gpus
        big = len(ms) >= planning.LARGE_HOSTS
        out.append(planning.Shape(d.name, _what(d / "cluster.yaml"),
                                  lambda ms=ms: [dict(m) for m in ms], parts, W,
                                  budget_scale=planning.SHAPES["scale256"].budget_scale
                                  if big else 1.0))
    return out


@contextmanager
def with_file_shapes(large_s: float | None = None, budget: float | None = None
                     ) -> Iterator[list[planning.Shape]]:
    """:func:`file_shapes` among ``planning.SHAPES`` for the run, and only for it; with
    `large_s` (and the run's `budget`), every shape of 256 hosts or more is planned with
    `large_s` seconds instead of its scaled `budget`."""
    from dataclasses import replace

    extra = [s for s in file_shapes() if s.name not in planning.SHAPES]
    saved = dict(planning.SHAPES)
    for s in extra:
        planning.SHAPES[s.name] = s
    if large_s is not None and budget:
        for name, s in list(planning.SHAPES.items()):
            if s.hosts >= planning.LARGE_HOSTS:
                planning.SHAPES[name] = replace(s, budget_scale=large_s / budget)
    try:
        yield extra
    finally:
        planning.SHAPES.clear()
        planning.SHAPES.update(saved)


# ---------------------------------------------------------------------------- simulator speed


class SimSpeed:
    """The simulator's events and seconds, per case: :func:`planning.simulate_epoch` with the
    same arguments, through :func:`gnnsched.simulator.simulate` so that its result's event
    count is seen (windowed simulations only: the ideal network is a what-if)."""

    def __init__(self) -> None:
        self.events = self.sims = 0
        self.wall = 0.0

    def simulate_epoch(self, pb: Any, plan: Any, seed: int, iterations: int | None = None, *,
                       ideal: bool = False) -> float:
        from gnnsched.simulator import simulate

        its = iterations if iterations and iterations < pb.wl.iterations else None
        res = simulate(pb.wl, plan, policy="gnnsched", seed=seed, iterations=its,
                       validate=False, nic_window_s=None if ideal else planning.nic_window_s())
        if not ideal:
            self.events += res.events
            self.wall += res.wall_s
            self.sims += 1
        return float(res.epoch_time_s)

    def take(self) -> dict[str, Any]:
        """The counts since the last take (one case's), and start again."""
        out = {"simulations": self.sims, "events": self.events, "wall_s": self.wall,
               "events_per_s": self.events / self.wall if self.wall > 0 else None}
        self.events = self.sims = 0
        self.wall = 0.0
        return out


@contextmanager
def counting() -> Iterator[SimSpeed]:
    """The benchmark's simulations counted (:class:`SimSpeed`) for the run."""
    speed = SimSpeed()
    saved = planning.simulate_epoch
    planning.simulate_epoch = speed.simulate_epoch  # type: ignore[assignment]
    try:
        yield speed
    finally:
        planning.simulate_epoch = saved  # type: ignore[assignment]


# ---------------------------------------------------------------------------- gnnsched plan


def plan_command(shape: str, budget: float = PLAN_BUDGET_S) -> dict[str, Any]:
    """``gnnsched plan --placer gnnsched`` on a file shape's cluster and job at `budget`:
    :func:`gnnsched.api.plan` (the problem, the placer, the baselines and the bound), timed,
    with its phases, the budget's notes and the simulator's speed over its simulations."""
    from gnnsched import api, simulator

    d = SHAPES_DIR / shape
    saved = simulator.simulate
    counts = {"events": 0, "wall_s": 0.0, "simulations": 0}

    def sim(*a: Any, **kw: Any) -> Any:
        res = saved(*a, **kw)
        counts["events"] += res.events
        counts["wall_s"] += res.wall_s
        counts["simulations"] += 1
        return res

    simulator.simulate = sim  # the scorers look it up when they are made
    t0 = time.perf_counter()
    try:
        plan = api.plan(d / "cluster.yaml", d / "job.yaml", placer="gnnsched", budget=budget)
    finally:
        simulator.simulate = saved
    wall = time.perf_counter() - t0
    pr = plan.prediction
    return {"shape": shape, "budget_s": budget, "wall_s": wall,
            "planning_s": pr.planning_s, "phases_s": dict(pr.planning_phases_s or {}),
            "epoch_time_s": pr.epoch_time_s, "any_placement_bound_s": pr.lower_bound_s,
            "kept": pr.search.kept if pr.search else None,
            "budget_notes": [n for n in plan.notes if n.startswith("budget: ")],
            "simulator": {**counts, "events_per_s": counts["events"] / counts["wall_s"]
                          if counts["wall_s"] > 0 else None}}


def budget_limit(budget: float) -> float:
    """The seconds a plan at `budget` may take: the budget's stated overshoot on top."""
    return budget * (1 + OVERSHOOT) + OVERSHOOT_S


def plan_time_target(runs: list[dict[str, Any]], goal: float | None, quick: bool
                     ) -> list[dict[str, Any]]:
    """Issue 52's Done-when: ``gnnsched plan`` within the goal at its default budget on every
    file shape with a job."""
    if goal is None:
        return []
    name = (f"gnnsched plan (the whole comparison) <= {goal:.0f} s at its default --budget "
            f"{PLAN_BUDGET_S:g} s at 256 hosts, 1,024 partitions on 64 stores")
    if not runs:
        return [target_row(name, "stores256", None, goal, None,
                           "not run (--quick)" if quick else "not run (--only)")]
    worst = max(runs, key=lambda r: r["wall_s"])
    over = max(runs, key=lambda r: r["wall_s"] - budget_limit(r["budget_s"]))
    limit = budget_limit(over["budget_s"])
    held = [target_row(f"gnnsched plan keeps its --budget: <= budget x (1 + {OVERSHOOT:g}) + "
                       f"{OVERSHOOT_S:g} s (placement/budget.py's stated overshoot)",
                       f"{over['shape']} at --budget {over['budget_s']:g} s", over["wall_s"],
                       limit, over["wall_s"] <= limit, "; ".join(over["budget_notes"]),
                       over["wall_s"] - limit)]
    return held + [target_row(name, f"{worst['shape']} ({worst['simulator']['events_per_s'] or 0:.0f}"
                       " simulator events/s)", worst["wall_s"], goal, worst["wall_s"] <= goal,
                       "" if worst["wall_s"] <= goal else "; ".join(worst["budget_notes"]),
                       worst["wall_s"] - goal)]

COLOURS = {"gnnsched": "#2e7d32", "shares": "#a5d6a7", "cpsat": "#66bb6a", "greedy": "#1565c0",
           "random": "#9e9e9e", "colocation": "#c62828", "colocation-even": "#ef9a9a"}


def _cell(c: dict[str, Any], n: str) -> str:
    v = c["ratio_to_bound"].get(n)
    return "-" if v is None else f"{v:.3f}"


def _evs(c: dict[str, Any]) -> str:
    v = (c.get("simulator") or {}).get("events_per_s")
    return "-" if v is None else f"{v:.0f}"


def table_rows(cases: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    head = ["shape", "size", "hosts", "GPUs", "W/P", "K"] + [f"{p}/b" for p in planning.PLACERS] \
        + ["gn ideal/b", "gn/own b", "noise", "vs best", "best", "worst seed", "plan s",
           "sim ev/s", "GPUs used"]
    rows = []
    for c in cases:
        rows.append([c["shape"], c["size"], str(c["hosts"]), str(c["gpus"]),
                     f"{c['trainers']}/{c['partitions']}" + ("!" if c["note"] else ""),
                     str(c["iterations"])] + [_cell(c, p) for p in planning.PLACERS] + [
            f"{c['gnnsched_ideal_network_ratio_to_bound']:.3f}",
            f"{c['gnnsched_ratio_to_own_bound']:.3f}", f"{c['noise']:.3f}",
            f"{c['speedup_vs_best_baseline']:.3f}x" if c["speedup_vs_best_baseline"] else "-",
            c["best_baseline"] or "-",
            f"{c['worst_seed_speedup_vs_best_baseline']:.3f}x"
            if c["worst_seed_speedup_vs_best_baseline"] else "-",
            f"{c['planning_s']['gnnsched']:.1f}", _evs(c), str(c["gnnsched_gpus_used"])])
    return head, rows


LEGEND = ("columns <placer>/b: simulated epoch / any-placement bound, geometric mean over the "
          "seeds (gnnsched policy, the runtime's send-window network); shares: the seed-share "
          "CP-SAT model alone; cpsat: the whole-partition CP-SAT model alone; colocation-even: "
          "colocation with DistDGL's even seed split; gn ideal/b: gnnsched's plans on the ideal "
          "network (every NIC in the policy's order, no send windows) / the same bound; gn/own "
          "b: gnnsched's epoch / its plan's per-plan bound; noise: the largest "
          "spread (max-min)/min of a gnnsched plan's epoch over the seeds' draws; vs best: "
          "gnnsched's speed-up over the best simple baseline (every other column but shares, "
          "gnnsched's own seed-share stage) "
          "from those means; worst seed: its smallest per-seed speed-up; plan s: "
          "gnnsched's longest planning time (the placer alone); sim ev/s: the simulator's "
          "events per second over the case's windowed simulations; W/P: trainers / "
          "partitions, ! = fewer trainers "
          "than asked; -: the placer had no plan on "
          "some seed (its error is in the JSON)")


def print_table(cases: list[dict[str, Any]]) -> None:
    head, rows = table_rows(cases)
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w[i]) for i, h in enumerate(head)))
    print("-" * (sum(w) + 2 * len(w)))
    for r in rows:
        print("  ".join(x.rjust(w[i]) for i, x in enumerate(r)))
    print(f"({LEGEND})")


def _plan_command_md(runs: list[dict[str, Any]]) -> list[str]:
    """The section on ``gnnsched plan`` itself (issue 52): its seconds, phases, the
    simulator's speed and what the budget cut."""
    if not runs:
        return []
    out = ["", "## gnnsched plan at its default budget", "",
           "`gnnsched.api.plan` on the shape's `cluster.yaml` and `job.yaml` (placer, "
           "baselines and bound), timed whole:", "",
           "| shape | --budget | wall s | phases | sim events/s | simulations | kept | notes |",
           "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ph = ", ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items() if v >= 0.05)
        sim = r["simulator"]
        evs = "-" if sim["events_per_s"] is None else f"{sim['events_per_s']:.0f}"
        out.append(f"| {r['shape']} | {r['budget_s']:g} | {r['wall_s']:.1f} | {ph} | {evs} | "
                   f"{sim['simulations']} | {r['kept']} | {'; '.join(r['budget_notes'])} |")
    return out


def markdown(doc: dict[str, Any], command: str) -> str:
    head, rows = table_rows(doc["cases"])
    lines = ["# Planning real clusters (issue 28)", "",
             f"`{command}` — {len(doc['cases'])} shape x size cases, seeds {doc['seeds']}, "
             f"gnnsched budget {doc['budget_s']:g} s"
             + (f" ({doc['large_budget_s']:g} s at 256 hosts)" if doc.get("large_budget_s")
                else "") + f" ({doc['host']['cpus']} cores, "
             f"{doc['wall_s'] / 60:.1f} min); profiles: `{doc['profile_source']}`; network: "
             f"{doc['network_model']}.", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", LEGEND + ".", "", "## Shapes", ""]
    seen = set()
    for c in doc["cases"]:
        if c["shape"] not in seen:
            seen.add(c["shape"])
            lines.append(f"- **{c['shape']}**: {c['what']}" + (f" — {c['note']}" if c["note"]
                                                               else ""))
    lines += _plan_command_md(doc.get("plan_command") or [])
    lines += ["", "## Targets", "", "| target | config | value | goal | met | why |",
              "|---|---|---|---|---|---|"]
    for t in doc["targets"]:
        v = t["value"]
        v = f"{v:.3f}" if isinstance(v, float) else json.dumps(v)
        met = {True: "yes", False: "**no**", None: "not run"}[t["met"]]
        lines.append(f"| {t['target']} | {t['config']} | {v} | {json.dumps(t['goal'])} | "
                     f"{met} | {t['why']} |")
    return "\n".join(lines) + "\n"


def plot(cases: list[dict[str, Any]], path: Path, within: float | None = None) -> None:
    """The plot beside ``--out``: every placer's epoch over the bound per case (``within``:
    the goal's line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter

    names = [f"{c['shape']}\n{c['size']}" for c in cases]
    x = np.arange(len(cases))
    P = planning.PLACERS
    width = 0.8 / len(P)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(cases)), 4.4))
    for i, p in enumerate(P):
        ys, lo, hi = [], [], []
        for c in cases:
            vals = [r["placers"][p]["ratio_to_bound"] for r in c["seeds"]
                    if "ratio_to_bound" in r["placers"][p]]
            g = c["ratio_to_bound"].get(p, float("nan"))
            ys.append(g)
            lo.append(g - min(vals) if vals else 0)
            hi.append(max(vals) - g if vals else 0)
        ax.bar(x + (i - len(P) / 2 + 0.5) * width, ys, width, yerr=[lo, hi], capsize=1.5,
               label=p, color=COLOURS[p], error_kw={"lw": 0.6})
    ax.axhline(1.0, color="black", lw=0.8, ls="--", label="any-placement bound")
    if within is not None:
        ax.axhline(within, color="#2e7d32", lw=0.6, ls=":", label=f"{within}x bound")
    for xi, c in zip(x, cases):
        s = c["speedup_vs_best_baseline"]
        if s:
            top = max(v for v in c["ratio_to_bound"].values())
            ax.text(xi, top * 1.05, f"{s:.2f}x", ha="center", fontsize=7, weight="bold",
                    color=COLOURS["gnnsched"])
    ax.set_xticks(x)
    ax.set_xticklabels(names, fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_ylim(0.9, ax.get_ylim()[1] * 1.2)
    ax.set_ylabel("simulated epoch / any-placement bound")
    ax.set_title("Planning real clusters: simulated epoch over the any-placement bound\n(bars: "
                 "geometric mean over seeds, whiskers: min-max; labels: gnnsched vs the best "
                 "simple baseline)", fontsize=8)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="CI-size: shapes below 256 hosts, products-sized, short budgets")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds (default 0,1,2; quick 0,1)")
    ap.add_argument("--budget", type=float, default=None,
                    help="gnnsched planning seconds per plan (default 8, quick 1; the "
                         "256-host shapes get --large-budget)")
    ap.add_argument("--large-budget", type=float, default=PLAN_BUDGET_S,
                    help="gnnsched planning seconds per plan on the 256-host shapes (default "
                         "30: gnnsched plan's default --budget, which the plan-time target "
                         "is judged at)")
    ap.add_argument("--only", default=None, help="comma-separated shape names")
    ap.add_argument("--sizes", default=None, help="comma-separated: products,papers")
    ap.add_argument("--profile", default="auto", choices=planning.PROFILE_SOURCES,
                    help="profiles from graph statistics (stats), the shaped synthetic "
                         "generator (synthetic), or stats where available (auto)")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/planning.json"))
    ap.add_argument("--targets", default=str(ROOT / "bench" / "targets.yaml"),
                    help="the goals judged (their planning section; default: the project's)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--plan-budget", type=float, default=PLAN_BUDGET_S,
                    help="the --budget `gnnsched plan` is timed at on the shapes of "
                         "bench/planning_shapes with a job (default: its default, 30)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in (args.seeds or ("0,1" if args.quick else "0,1,2")).split(",")]
    budget = args.budget if args.budget is not None else (1.0 if args.quick else 8.0)
    only = args.only.split(",") if args.only else None
    sizes = args.sizes.split(",") if args.sizes else None
    large = None if args.quick else args.large_budget
    with with_file_shapes(large, budget):
        suite = [s for s in planning.shapes(args.quick) if not only or s.name in only]
    n_sizes = len(sizes or (("products",) if args.quick else planning.SIZES))
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(suite) * n_sizes, unit="case", file=sys.stderr)
    except ImportError:  # progress is optional
        bar = None
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        if bar is not None:
            bar.set_description(msg[:60])

    def on_case(c: dict[str, Any]) -> None:
        c["simulator"] = speed.take()
        if bar is not None:
            bar.update(1)
            bar.write(f"[{c['shape']}/{c['size']}] gnnsched {c['gnnsched_ratio_to_bound']:.3f}x "
                      f"bound, {c['speedup_vs_best_baseline'] or float('nan'):.3f}x "
                      f"{c['best_baseline']}, noise {c['noise']:.3f}, planned in "
                      f"{c['planning_s']['gnnsched']:.1f} s "
                      f"({time.perf_counter() - t0:.0f} s so far)")

    goals = load_targets(args.targets).planning
    with with_file_shapes(large, budget) as extra, counting() as speed:
        doc = planning.run(quick=args.quick, seeds=seeds, budget=budget, only=only,
                           sizes=sizes, source=args.profile, progress=progress,
                           on_case=on_case, goals=goals)
    runs = []
    for sh in extra:  # gnnsched plan itself, at its default budget (not --quick: 256 hosts)
        if args.quick or (only and sh.name not in only) or \
                not (SHAPES_DIR / sh.name / "job.yaml").is_file():
            continue
        progress(f"{sh.name}: gnnsched plan --budget {args.plan_budget:g}")
        runs.append(plan_command(sh.name, args.plan_budget))
        print(f"[{sh.name}] gnnsched plan --budget {args.plan_budget:g}: "
              f"{runs[-1]['wall_s']:.1f} s", file=sys.stderr)
    doc["plan_command"] = runs
    doc["large_budget_s"] = large
    doc["targets"] += plan_time_target(runs, goals.get("plan_time_s"), args.quick)
    if bar is not None:
        bar.close()
    command = "python bench/bench_planning.py" + (" --quick" if args.quick else "") + \
        (f" --seeds {args.seeds}" if args.seeds else "") + \
        (f" --budget {args.budget:g}" if args.budget is not None else "") + \
        (f" --profile {args.profile}" if args.profile != "auto" else "") + \
        (f" --plan-budget {args.plan_budget:g}" if args.plan_budget != PLAN_BUDGET_S else "") + \
        (f" --large-budget {args.large_budget:g}" if args.large_budget != PLAN_BUDGET_S else "")
    doc["command"] = command
    print()
    print_table(doc["cases"])
    print()
    for t in doc["targets"]:
        met = {True: "met", False: "MISSED", None: "not run"}[t["met"]]
        v = t["value"]
        v = f"{v:.3f}" if isinstance(v, float) else v
        print(f"[{met}] {t['target']}: {v} (goal {t['goal']}; {t['config']})"
              + (f" — {t['why']}" if t["why"] else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    out.with_suffix(".md").write_text(markdown(doc, command))
    written = [out, out.with_suffix(".md")]
    if not args.no_plot:
        plot(doc["cases"], out.with_suffix(".png"), goals.get("within_bound"))
        written.append(out.with_suffix(".png"))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
