"""Where the 256-host shape's gap to the any-placement bound goes (issue 28): a what-if study.

Run: ``python bench/bench_scale256_gap.py [--sizes products,papers] [--seed 0]
[--out docs/bench/scale256-gap.json]`` (about 6 minutes on 2 cores; writes the JSON, a
table beside it and a plot).

The planning benchmark (``bench/bench_planning.py``) judges every plan on the runtime's send
windows and finds gnnsched 1.2-1.24x the any-placement bound at 256 hosts, while each of its
plans is within 1.03x of its own per-plan bound. This script asks what would close the rest,
on the benchmark's own plan of one seed:

* **plans**: gnnsched's plan (as the benchmark makes it), and the same placement with its
  seeds recut (:func:`gnnsched.placement.balance.cut_seeds`), on a grid: the T4s on the
  stores take ``t4`` (``--t4s``) times their class's mean seeds, and alternate A100s and
  V100s take ``1 + stagger`` and ``1 - stagger`` (``--staggers``) of theirs, so every
  store's bytes can go first to trainers with long training and last to trainers with short
  (the order that fits an epoch of one or two iterations, where the pipeline's fill and
  drain are a third of it). Each network keeps its best recut;
* **networks**: *ideal* (every NIC in the policy's order) and the runtime's window model at
  every size of ``--windows`` (seconds of egress, sent in pieces of the runtime's chunk
  time or a fifth of the window, whichever is smaller): the first is the runtime's own
  (``NIC_WINDOW_S``, what the benchmark judges), the smaller ones what windows sized to a
  datacenter's round trip would give at 25-100 Gbit/s.

Every epoch is shown over the any-placement bound the benchmark stored for the same seed
(``docs/bench/planning.json``), beside the plan's per-plan bound (:mod:`gnnsched.bounds`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gnnsched  # noqa: E402,F401  (DGL's import stub)
from gnnsched.bounds import per_plan_bound  # noqa: E402
from gnnsched.evaluation import planning  # noqa: E402
from gnnsched.placement import Problem  # noqa: E402
from gnnsched.placement.balance import cut_seeds, trainer_classes, weights  # noqa: E402
from gnnsched.plan import Plan  # noqa: E402
from gnnsched.simulator import simulate  # noqa: E402
from gnnsched.workload import NIC_CHUNK_S, NIC_WINDOW_S  # noqa: E402

SHAPE = "scale256"
IDEAL = "ideal"


def recut(pb: Problem, plan: Plan, t4: float, stagger: float) -> Plan | None:
    """`plan`'s placement with its seeds recut: per class of alike trainers (GPU speed, NICs,
    on a store) the class's mean seeds, times `t4` on the stores, and alternately times
    ``1 + stagger`` and ``1 - stagger`` off them."""
    cls = trainer_classes(pb, plan)
    loads: dict[Any, list[float]] = {}
    for c, t in zip(cls, plan.trainers):
        loads.setdefault(c, []).append(pb.wl.load(t.parts, t.shares))
    wts = {c: float(np.mean(v)) * (t4 if c[3] else 1.0) for c, v in loads.items()}
    return cut_seeds(pb, plan, weights(cls, wts, {c: stagger for c in wts if not c[3]}))


def network_kw(window: float | None) -> dict[str, Any]:
    """simulate's keywords for a window of `window` seconds of egress (None: ideal)."""
    if window is None:
        return {}
    return {"nic_window_s": window, "nic_chunk_s": min(NIC_CHUNK_S, window / 5)}


def network_name(window: float | None) -> str:
    if window is None:
        return IDEAL
    mark = " (the runtime's)" if window == NIC_WINDOW_S else ""
    return f"{window * 1e3:g} ms windows{mark}"


def run_size(size: str, args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    sh = planning.SHAPES[SHAPE]
    sz = planning.SIZES[size]
    pb = Problem(sh.cluster(), planning.make_job(sh),
                 planning.graph_profile(sz, sh.num_parts, skew=sh.skew, source="stats"))
    t0 = time.perf_counter()
    plan, plan_s, _, err = planning.plan_one(pb, "gnnsched", args.seed,
                                              args.budget * sh.budget_scale)
    if plan is None:
        raise SystemExit(f"gnnsched found no plan of {SHAPE}/{size}: {err}")
    bound = stored.get(sz.name)
    plans: list[tuple[str, Plan]] = [("gnnsched", plan)]
    for t4, st in itertools.product(args.t4s, args.staggers):
        q = recut(pb, plan, t4, st)
        if q is not None:
            plans.append((f"recut (T4 x{t4:g}, stagger {st:g})", q))
    per = {name: per_plan_bound(pb.wl, p, args.seed).epoch_s for name, p in plans}
    rows = []
    for window in [None, *args.windows]:
        eps = {name: simulate(pb.wl, p, policy="gnnsched", seed=args.seed, validate=False,
                              **network_kw(window)).epoch_time_s for name, p in plans}
        best = min((n for n in eps if n != "gnnsched"), key=eps.__getitem__)
        row = {"network": network_name(window), "window_s": window,
               "gnnsched_s": eps["gnnsched"], "best_recut": best, "best_recut_s": eps[best],
               "best_recut_per_plan_bound_s": per[best], "epochs_s": eps}
        rows.append(row)
        print(f"[{size}] {row['network']}: gnnsched {eps['gnnsched'] * 1e3:.2f} ms, "
              f"best {best} {eps[best] * 1e3:.2f} ms", file=sys.stderr, flush=True)
    return {"size": sz.name, "any_placement_bound_s": bound, "plan_s": plan_s,
            "gnnsched_per_plan_bound_s": per["gnnsched"],
            "wall_s": time.perf_counter() - t0, "rows": rows}


def stored_bounds(path: Path, seed: int) -> dict[str, float]:
    """The any-placement bound of every size of the shape, for `seed`, from the planning
    benchmark's JSON (the draws and placers are the same, so it holds for these plans)."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    return {c["size"]: r["any_placement_bound_s"] for c in doc["cases"] if c["shape"] == SHAPE
            for r in c["seeds"] if r["seed"] == seed}


def _cell(v: float, bound: float | None) -> str:
    return f"{v * 1e3:.2f} ms" + (f" ({v / bound:.3f}x)" if bound else "")


def table(doc: dict[str, Any]) -> str:
    head = ["size", "network", "gnnsched", "best recut", "its epoch", "its per-plan b"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in doc["cases"]:
        b = case["any_placement_bound_s"]
        for r in case["rows"]:
            cells = [case["size"], r["network"], _cell(r["gnnsched_s"], b),
                     r["best_recut"].removeprefix("recut "), _cell(r["best_recut_s"], b),
                     _cell(r["best_recut_per_plan_bound_s"], b)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Epoch over the any-placement bound against the send window, one panel per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in doc["cases"] if c["any_placement_bound_s"]]
    if not cases:
        return
    fig, axes = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        b = case["any_placement_bound_s"]
        rows = [r for r in case["rows"] if r["window_s"] is not None]
        ideal = next(r for r in case["rows"] if r["window_s"] is None)
        x = [r["window_s"] * 1e3 for r in rows]
        ax.plot(x, [r["gnnsched_s"] / b for r in rows], "o-", label="gnnsched's plan")
        ax.plot(x, [r["best_recut_s"] / b for r in rows], "s-", label="best recut")
        ax.axhline(ideal["gnnsched_s"] / b, color="C0", ls=":", label="gnnsched, ideal network")
        ax.axhline(ideal["best_recut_s"] / b, color="C1", ls=":", label="best recut, ideal")
        ax.axhline(1.10, color="k", ls="--", lw=0.8, label="target 1.10x")
        ax.axvline(NIC_WINDOW_S * 1e3, color="grey", lw=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("send window, ms of egress (grey: the runtime's)")
        ax.set_ylabel("epoch / any-placement bound")
        ax.set_title(f"{SHAPE} / {case['size']} (seed {doc['seed']})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="products,papers", help="comma-separated: products,papers")
    ap.add_argument("--seed", type=int, default=0, help="the planner's and the draws' seed")
    ap.add_argument("--budget", type=float, default=8.0,
                    help="gnnsched planning seconds (times the shape's budget scale, as the "
                         "planning benchmark gives it)")
    ap.add_argument("--t4s", type=_floats, default=[1.0, 1.2, 1.4],
                    help="the recuts: seeds of the T4s on the stores, times their class's mean")
    ap.add_argument("--staggers", type=_floats, default=[0.0, 0.15, 0.3],
                    help="the recuts: alternate off-store trainers take 1 +/- this")
    ap.add_argument("--windows", type=_floats, default=[NIC_WINDOW_S, 0.02, 0.005, 0.002, 0.001],
                    help="send windows, seconds of egress (the first: the runtime's)")
    ap.add_argument("--bounds", default=str(ROOT / "docs/bench/planning.json"),
                    help="the planning benchmark's JSON, for the any-placement bound")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/scale256-gap.json"))
    args = ap.parse_args(argv)
    stored = stored_bounds(Path(args.bounds), args.seed)
    cases = [run_size(s, args, stored) for s in args.sizes.split(",")]
    doc = {"shape": SHAPE, "args": {k: v for k, v in vars(args).items()
                                    if k in ("t4s", "staggers", "windows", "budget")},
           "seed": args.seed, "cases": cases,
           "command": "python bench/bench_scale256_gap.py " + " ".join(argv or sys.argv[1:])}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out.with_suffix(".png"))
    md = table(doc)
    out.with_suffix(".md").write_text(
        f"# {SHAPE}: where the gap to the any-placement bound goes\n\n`{doc['command'].strip()}`"
        f" (seed {args.seed}; epochs, and over the any-placement bound of "
        f"docs/bench/planning.json; best recut: the best of the grid on that network)\n\n"
        f"{md}\n\n![epoch over the bound against the send window]({out.with_suffix('.png').name})\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
