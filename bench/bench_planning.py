"""Planning real clusters (issue 28): six shapes at 8-256 hosts, two graph sizes, several seeds.

Run: ``python bench/bench_planning.py [--quick] [--seeds 0,1,2] [--budget 10]
[--out docs/bench/planning.json]``

Every placer (gnnsched, CP-SAT alone, greedy, random, colocation) plans each shape x size x
seed; every plan is simulated with the gnnsched policy and the runtime's network model; the
any-placement bound of :mod:`gnnsched.bounds` is computed on the same draws. The logic is
:mod:`gnnsched.evaluation.planning`; this script prints the table and writes the JSON (with its
``targets``), a Markdown table (``.md``) and a plot (``.png``) beside ``--out``.
``--quick`` (CI-size, about a minute): the shapes below 256 hosts, products-sized, two seeds,
1 s budgets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnnsched.evaluation import planning  # noqa: E402
from gnnsched.evaluation.targets import load_targets  # noqa: E402

COLOURS = {"gnnsched": "#2e7d32", "shares": "#a5d6a7", "cpsat": "#66bb6a", "greedy": "#1565c0",
           "random": "#9e9e9e", "colocation": "#c62828", "colocation-even": "#ef9a9a"}


def _cell(c: dict[str, Any], n: str) -> str:
    v = c["ratio_to_bound"].get(n)
    return "-" if v is None else f"{v:.3f}"


def table_rows(cases: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    head = ["shape", "size", "hosts", "GPUs", "W/P", "K"] + [f"{p}/b" for p in planning.PLACERS] \
        + ["gn ideal/b", "gn/own b", "noise", "vs best", "best", "worst seed", "plan s",
           "GPUs used"]
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
            f"{c['planning_s']['gnnsched']:.1f}", str(c["gnnsched_gpus_used"])])
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
          "gnnsched's longest planning time; W/P: trainers / partitions, ! = fewer trainers "
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


def markdown(doc: dict[str, Any], command: str) -> str:
    head, rows = table_rows(doc["cases"])
    lines = ["# Planning real clusters (issue 28)", "",
             f"`{command}` — {len(doc['cases'])} shape x size cases, seeds {doc['seeds']}, "
             f"gnnsched budget {doc['budget_s']:g} s ({doc['host']['cpus']} cores, "
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
                         "256-host shape gets 2.5x)")
    ap.add_argument("--only", default=None, help="comma-separated shape names")
    ap.add_argument("--sizes", default=None, help="comma-separated: products,papers")
    ap.add_argument("--profile", default="auto", choices=planning.PROFILE_SOURCES,
                    help="profiles from graph statistics (stats), the shaped synthetic "
                         "generator (synthetic), or stats where available (auto)")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/planning.json"))
    ap.add_argument("--targets", default=str(ROOT / "bench" / "targets.yaml"),
                    help="the goals judged (their planning section; default: the project's)")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in (args.seeds or ("0,1" if args.quick else "0,1,2")).split(",")]
    budget = args.budget if args.budget is not None else (1.0 if args.quick else 8.0)
    only = args.only.split(",") if args.only else None
    sizes = args.sizes.split(",") if args.sizes else None
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
        if bar is not None:
            bar.update(1)
            bar.write(f"[{c['shape']}/{c['size']}] gnnsched {c['gnnsched_ratio_to_bound']:.3f}x "
                      f"bound, {c['speedup_vs_best_baseline'] or float('nan'):.3f}x "
                      f"{c['best_baseline']}, noise {c['noise']:.3f}, planned in "
                      f"{c['planning_s']['gnnsched']:.1f} s "
                      f"({time.perf_counter() - t0:.0f} s so far)")

    goals = load_targets(args.targets).planning
    doc = planning.run(quick=args.quick, seeds=seeds, budget=budget, only=only, sizes=sizes,
                       source=args.profile, progress=progress, on_case=on_case, goals=goals)
    if bar is not None:
        bar.close()
    command = "python bench/bench_planning.py" + (" --quick" if args.quick else "") + \
        (f" --seeds {args.seeds}" if args.seeds else "") + \
        (f" --budget {args.budget:g}" if args.budget is not None else "") + \
        (f" --profile {args.profile}" if args.profile != "auto" else "")
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
