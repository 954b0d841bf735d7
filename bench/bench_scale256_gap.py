"""Where the 256-host shape's gap to the any-placement bound goes (issue 28): a what-if study.

Run: ``python bench/bench_scale256_gap.py [--sizes products,papers] [--seed 0]
[--out docs/bench/scale256-gap.json]`` (about 2 minutes on 2 cores).

The planning benchmark (``bench/bench_planning.py``) judges every plan on the runtime's send
windows and finds gnnsched 1.22-1.24x the any-placement bound at 256 hosts, while each of its
plans is within 1.03x of its own per-plan bound. This script asks what would close the rest,
on the benchmark's own plan of one seed:

* **plans**: gnnsched's plan (as the benchmark makes it), and the same placement with its
  seeds recut (:func:`gnnsched.placement.balance.cut_seeds`): the T4s on the stores take
  ``--t4`` times their seeds, and alternate A100s and V100s take ``1 + --stagger`` and
  ``1 - --stagger`` of theirs, so every store's bytes can go first to trainers with long
  training and last to trainers with short (the order that fits an epoch of one or two
  iterations, where the pipeline's fill and drain are a third of it);
* **networks**: *ideal* (every NIC in the policy's order), *windowed* (the runtime's send
  windows, what the benchmark judges: ``NIC_WINDOW_S`` of egress, ``NIC_CHUNK_S`` chunks)
  and *small windows* (``--small-window`` of egress in ``--small-chunk`` pieces: what windows
  sized to a datacenter's round trip would give at 25-100 Gbit/s).

Every epoch is shown over the any-placement bound the benchmark stored for the same seed
(``docs/bench/planning.json``) and beside the plan's per-plan bound (:mod:`gnnsched.bounds`).
"""

from __future__ import annotations

import argparse
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
from gnnsched.placement.balance import cut_seeds, trainer_classes  # noqa: E402
from gnnsched.plan import Plan  # noqa: E402
from gnnsched.simulator import simulate  # noqa: E402
from gnnsched.workload import NIC_CHUNK_S, NIC_WINDOW_S  # noqa: E402

SHAPE = "scale256"


def recut(pb: Problem, plan: Plan, t4: float, stagger: float) -> Plan | None:
    """`plan`'s placement with its seeds recut: per class of alike trainers (GPU speed, NICs,
    on a store) the class's mean seeds, times `t4` on the stores, and alternately times
    ``1 + stagger`` and ``1 - stagger`` off them."""
    cls = trainer_classes(pb, plan)
    loads: dict[Any, list[float]] = {}
    for c, t in zip(cls, plan.trainers):
        loads.setdefault(c, []).append(pb.wl.load(t.parts, t.shares))
    seen: dict[Any, int] = {}
    weights = []
    for c in cls:
        i = seen[c] = seen.get(c, -1) + 1
        w = float(np.mean(loads[c]))
        on_store = bool(c[3])
        weights.append(w * t4 if on_store else w * (1 + stagger if i % 2 == 0 else 1 - stagger))
    return cut_seeds(pb, plan, weights)


def networks(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    return [("ideal", {}),
            ("windowed", {"nic_window_s": NIC_WINDOW_S}),
            ("small windows", {"nic_window_s": args.small_window,
                               "nic_chunk_s": args.small_chunk})]


def run_size(size: str, args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    sh = planning.SHAPES[SHAPE]
    sz = planning.SIZES[size]
    pb = Problem(sh.cluster(), planning.make_job(sh),
                 planning.graph_profile(sz, sh.num_parts, skew=sh.skew, source="stats"))
    t0 = time.perf_counter()
    plan, plan_s, _, err = planning._plan_one(pb, "gnnsched", args.seed,
                                              args.budget * sh.budget_scale)
    if plan is None:
        raise SystemExit(f"gnnsched found no plan of {SHAPE}/{size}: {err}")
    bound = stored.get(sz.name)
    rows = []
    variants = [("gnnsched", plan), (f"recut (T4 x{args.t4:g}, stagger {args.stagger:g})",
                                     recut(pb, plan, args.t4, args.stagger))]
    for name, p in variants:
        if p is None:
            continue
        row: dict[str, Any] = {"plan": name,
                               "per_plan_bound_s": per_plan_bound(pb.wl, p, args.seed).epoch_s}
        for net, kw in networks(args):
            row[net] = simulate(pb.wl, p, policy="gnnsched", seed=args.seed, validate=False,
                                **kw).epoch_time_s
        rows.append(row)
        print(f"[{size}] {name}: " + ", ".join(
            f"{k} {v * 1e3:.2f} ms" for k, v in row.items() if k != "plan"), file=sys.stderr)
    return {"size": sz.name, "any_placement_bound_s": bound, "plan_s": plan_s,
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
    nets = [n for n, _ in networks(argparse.Namespace(**doc["args"]))]
    head = ["size", "plan", "per-plan b"] + nets
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in doc["cases"]:
        b = case["any_placement_bound_s"]
        for r in case["rows"]:
            cells = [_cell(r["per_plan_bound_s"], b)] + [_cell(r[n], b) for n in nets]
            lines.append("| " + " | ".join([case["size"], r["plan"], *cells]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="products,papers", help="comma-separated: products,papers")
    ap.add_argument("--seed", type=int, default=0, help="the planner's and the draws' seed")
    ap.add_argument("--budget", type=float, default=8.0,
                    help="gnnsched planning seconds (times the shape's budget scale, as the "
                         "planning benchmark gives it)")
    ap.add_argument("--t4", type=float, default=1.4,
                    help="the recut: seeds of the T4s on the stores, times their plan's")
    ap.add_argument("--stagger", type=float, default=0.3,
                    help="the recut: alternate off-store trainers take 1 +/- this")
    ap.add_argument("--small-window", type=float, default=0.001,
                    help="the small windows' total send window, seconds of egress")
    ap.add_argument("--small-chunk", type=float, default=0.0002,
                    help="their pieces, seconds of egress (the runtime's chunks are "
                         f"{NIC_CHUNK_S * 1e3:g} ms here)")
    ap.add_argument("--bounds", default=str(ROOT / "docs/bench/planning.json"),
                    help="the planning benchmark's JSON, for the any-placement bound")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/scale256-gap.json"))
    args = ap.parse_args(argv)
    stored = stored_bounds(Path(args.bounds), args.seed)
    cases = [run_size(s, args, stored) for s in args.sizes.split(",")]
    doc = {"shape": SHAPE, "args": {k: v for k, v in vars(args).items()
                                    if k in ("t4", "stagger", "small_window", "small_chunk")},
           "seed": args.seed, "cases": cases,
           "command": "python bench/bench_scale256_gap.py " + " ".join(argv or sys.argv[1:])}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    md = table(doc)
    out.with_suffix(".md").write_text(
        f"# {SHAPE}: where the gap to the any-placement bound goes\n\n`{doc['command'].strip()}`"
        f" (seed {args.seed}; epochs, and over the any-placement bound of "
        f"docs/bench/planning.json)\n\n{md}\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
