"""Seed balancing: recut a placement's training seeds so its trainers finish together.

DistDGL splits the seeds evenly. Behind GPUs of three speeds and NICs of two rates that
makes the slowest trainer every iteration's straggler, and with few iterations per epoch
(256 hosts: one or two) the epoch is one pipeline fill, one batch and one drain, where a
load model (:mod:`.shares`: the most loaded resource per iteration) does not see what
binds. Here the placement (devices, samplers, gathering) is kept and only the seeds move,
scored by the simulator:

* **classes** (:func:`trainer_classes`): trainers alike for the epoch — the same GPU speed,
  the same NIC rates, on a store or not — share one weight, so the search is over a few
  numbers (three at 256 hosts), not one per trainer;
* **cut** (:func:`cut_seeds`): a trainer on a store takes its weight's seeds from that
  store's partitions (they never cross a NIC); the other stores' seeds, laid end to end in
  store order, go to the other trainers in an order that interleaves the classes, so every
  store feeds a like mix of them and no store's egress is the straggler's;
* **search** (:func:`balance_seeds`): coordinate descent on the class weights (relative:
  the first class's stays 1), each up or down by a step, the direction that helped first,
  the step halved when no move helps, scored by the caller's scorer (the
  planner's simulation), from weights in inverse proportion to a rough time per mini-batch
  where each class runs (:func:`unit_seconds`); then on a **spread** per class off the
  stores, whose trainers take alternately ``1 + spread`` and ``1 - spread`` of its weight
  (:func:`weights`), from where the weights stopped and never worse than them. In an
  epoch of one or two batches a store then has long batches to send to first and short
  ones last, where alike batches all wait for its last bytes (256 hosts, papers100M-sized:
  about 1.5% faster on the runtime's send windows).

A second recut keeps every trainer's parts and staggers alike trainers instead
(:func:`stagger_seeds`): trainers that own the same seeds of the same parts (four GPUs of a
host splitting its partition) ask the same NICs for the same bytes at the same time, and on
the runtime's network, where each receiver's connection gets a fair share, they finish
fetching together and then all train while those NICs idle. Spreading their shares a little
around the mean (:func:`stagger`) lets one train while another still fetches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

import numpy as np

from gnnsched.placement.feasibility import fill_samplers, usage
from gnnsched.placement.problem import Problem
from gnnsched.placement.splits import seeds_of
from gnnsched.plan import Plan

STEP = 0.15  # the first step of a weight: x (1 + STEP) or / (1 + STEP)
MIN_STEP = 0.04  # the search stops when the step is below this
MAX_EVALS = 40  # scored cuts per call
SPREAD0 = 0.15  # the spreads' start (see balance_seeds)
SPREAD_EVALS = 16  # scored cuts for the spreads, after the weights' descent
SPREAD_SHARE = 0.4  # and seconds for them, of the weights' budget
MAX_SPREAD = 0.5  # a class's alternating spread of its weight: at most 1.5x and 0.5x
SPREADS = (0.05, 0.1, 0.2)  # stagger spreads tried: shares from (1 - x/2) to (1 + x/2) of the mean


def trainer_classes(problem: Problem, plan: Plan) -> list[Hashable]:
    """Per trainer, what the epoch sees of its place: GPU speed, NIC rates, on a store."""
    cl = problem.cluster
    out: list[Hashable] = []
    for t in plan.trainers:
        m = cl.machine(t.machine)
        out.append((m.gpus[t.device].speed, m.ingress, m.egress, bool(m.partitions)))
    return out


def unit_seconds(problem: Problem, plan: Plan) -> list[float]:
    """Per trainer, a rough time for one full mini-batch where it runs: sampling on one
    core, the bytes its machine does not hold at its share of that machine's ingress, and
    training at its GPU's speed. Equal finishing wants seeds in inverse proportion: the
    search starts there."""
    cl, wl = problem.cluster, problem.wl
    idx = cl.machine_index
    on: dict[int, int] = {}
    for t in plan.trainers:
        on[idx(t.machine)] = on.get(idx(t.machine), 0) + 1
    out = []
    for t in plan.trainers:
        m = idx(t.machine)
        ld = wl.load(t.parts, t.shares)
        c = problem.cost(t.parts, t.shares)
        far = c.feat_bytes - c.feat_from.get(m, 0.0)
        if t.samplers[0][0] != t.machine:
            far += c.block_bytes
        share = float(wl.ingress_bw[m]) / on[m]
        out.append((c.sample_s + far / share + c.train_s / wl.speed(t)) / max(ld, 1e-12))
    return out


def cut_seeds(problem: Problem, plan: Plan, weights: Sequence[float]) -> Plan | None:
    """`plan`'s placement with trainer ``w`` owning ``weights[w] / sum(weights)`` of the
    training seeds (see the module's docstring); None where some trainer would own none or
    no trainer runs off the stores (then the cut has nothing to move)."""
    ts = plan.trainers
    idx = problem.cluster.machine_index
    total = seeds_of(problem, range(problem.P))
    want = np.asarray(weights, float)
    want = want / want.sum() * total
    eps = 1e-9 * total
    stores = sorted({problem.store_of[p] for p in range(problem.P)})
    on_store = {s: [w for w, t in enumerate(ts) if idx(t.machine) == s] for s in stores}
    local = {w for ws in on_store.values() for w in ws}
    remote = [w for w in range(len(ts)) if w not in local]
    if not remote:
        return None
    owned: list[dict[int, float]] = [{} for _ in ts]

    def take(w: int, segs: list[list], need: float, i: int = 0) -> int:
        """Trainer `w` takes `need` seeds from `segs` (``[part, seeds]``) from index `i` on;
        returns the index of the first segment left."""
        while need > eps and i < len(segs):
            p, a = segs[i]
            got = min(a, need)
            owned[w][p] = owned[w].get(p, 0.0) + got
            need -= got
            segs[i][1] = a - got
            if segs[i][1] <= eps:
                i += 1
        return i

    line: list[list] = []
    for s in stores:
        segs = [[p, seeds_of(problem, [p])] for p in sorted(problem.cluster.machines[s].partitions)]
        i = 0
        for w in on_store[s]:
            i = take(w, segs, want[w], i)
        line += [sg for sg in segs[i:] if sg[1] > eps]
    # the other trainers: each class spread evenly along the line, in trainer order
    cls = trainer_classes(problem, plan)
    pos: list[tuple[float, int]] = []
    for c in dict.fromkeys(cls[w] for w in remote):
        mine = [w for w in remote if cls[w] == c]
        pos += [((k + 0.5) / len(mine), w) for k, w in enumerate(mine)]
    order = [w for _, w in sorted(pos)]
    left = sum(a for _, a in line)
    scale = left / sum(want[w] for w in order)
    i = 0
    for w in order:
        i = take(w, line, want[w] * scale, i)
    for p, a in line[i:]:  # rounding: what is left goes to the last one
        if a > eps:
            owned[order[-1]][p] = owned[order[-1]].get(p, 0.0) + a
    if not all(owned):
        return None
    share = [{p: a / seeds_of(problem, [p]) for p, a in o.items()} for o in owned]
    last: dict[int, int] = {}  # exact sums: a part's last owner gets 1 minus the others
    summed: dict[int, float] = {}
    for w in sorted(range(len(ts)), key=lambda w: ts[w].id):
        for p, v in share[w].items():
            last[p] = w
            summed[p] = summed.get(p, 0.0) + v
    for p, w in last.items():
        share[w][p] = 1.0 - (summed[p] - share[w][p])
    trainers = []
    for w, t in enumerate(ts):
        ps = sorted(owned[w])
        sh = tuple(min(1.0, share[w][p]) for p in ps)
        whole = all(x >= 1 - 1e-9 for x in sh)
        host = t.samplers[0][0]
        if w not in local:  # sample on the store of most of its seeds, where it may
            s = problem.store_of[max(ps, key=lambda p: owned[w][p])]
            host = problem.names[s] if problem.can_sample[s] else host
        trainers.append(replace(t, parts=tuple(ps), shares=() if whole else sh,
                                samplers=((host, 1),)))
    # one sampler each where it samples, then every machine's spare cores to them
    return fill_samplers(problem, replace(plan, trainers=tuple(trainers)))


def balance_seeds(problem: Problem, plan: Plan, score: Callable[[Plan], float], *,
                  budget: float = 10.0, max_evals: int = MAX_EVALS, spread: bool = True
                  ) -> tuple[Plan, float] | None:
    """The best cut of `plan`'s placement the coordinate descent finds, and its score; None
    where the placement has nothing to cut (:func:`cut_seeds`) or one class of trainers
    (nothing to weigh). `budget` caps the weights' seconds (the spreads get a share more).

    The coordinates are every class's weight (relative: the first class's stays 1) and,
    for every class off the stores with two or more trainers, a spread: its trainers take
    ``1 + spread`` and ``1 - spread`` of the class's weight alternately (:func:`weights`), so
    a store can send first to long batches and last to short ones (`spread` False: the
    weights alone)."""
    cls = trainer_classes(problem, plan)
    keys = list(dict.fromkeys(cls))
    if len(keys) < 2:
        return None
    unit = unit_seconds(problem, plan)
    mean = {c: float(np.mean([1.0 / u for u, k in zip(unit, cls) if k == c])) for c in keys}
    wts = {c: mean[c] / mean[keys[0]] for c in keys}
    spreads = {c: 0.0 for c in keys if spread and not c[3] and cls.count(c) > 1}

    def cut(w: dict, sp: dict) -> Plan | None:
        p = cut_seeds(problem, plan, weights(cls, w, sp))
        return None if p is None or usage(problem, p).problems else p

    best_plan = cut(wts, spreads)
    if best_plan is None:
        return None
    best = score(best_plan)
    evals = 1

    def better(w: dict, sp: dict) -> bool | None:
        """Score the cut of `w` and `sp`; keep it where it beats the best so far (None: no
        such cut)."""
        nonlocal best, best_plan, wts, spreads, evals
        p = cut(w, sp)
        if p is None:
            return None
        v = score(p)
        evals += 1
        if v < best * (1 - 1e-4):
            best, best_plan, wts, spreads = v, p, w, sp
            return True
        return False

    # the weights first (each coordinate tries first the direction that helped it last);
    # then, on top of `budget` (SPREAD_SHARE of it) and from where the weights stopped, the
    # spreads at SPREAD0 and the descent on spreads and weights: never worse than the
    # weights alone on `score`
    up: dict[tuple[str, Hashable], bool] = {}
    coords: list[tuple[str, Hashable]] = [("weight", c) for c in keys[1:]]
    phases = [(coords, budget, max_evals)]
    if spreads:
        phases.append(([("spread", c) for c in spreads] + coords, SPREAD_SHARE * budget,
                       SPREAD_EVALS))
    for n, (cos, secs, most) in enumerate(phases):
        t0, cap, step = time.perf_counter(), evals + most, STEP
        if n == 1 and better(wts, dict.fromkeys(spreads, SPREAD0)) is None:
            break  # the spreads' start has no cut
        while step >= MIN_STEP and evals < cap and time.perf_counter() - t0 < secs:
            moved = False
            for co in cos:
                kind, c = co
                first = up.get(co, True)
                for go_up in (first, not first):
                    if evals >= cap or time.perf_counter() - t0 >= secs:
                        break
                    w, sp = wts, spreads
                    if kind == "weight":
                        w = {**wts, c: wts[c] * (1 + step if go_up else 1 / (1 + step))}
                    else:
                        x = spreads[c] + (step if go_up else -step)
                        if not 0 <= x <= MAX_SPREAD:
                            continue
                        sp = {**spreads, c: x}
                    if better(w, sp):
                        moved, up[co] = True, go_up
                        break
            if not moved:
                step /= 2
    return best_plan, best


def weights(cls: Sequence[Hashable], wts: dict, spreads: dict) -> list[float]:
    """Per trainer, its class's weight, times ``1 + spread`` and ``1 - spread`` alternately
    within the class (in trainer order) where the class has a spread."""
    seen: dict[Hashable, int] = {}
    out = []
    for c in cls:
        i = seen[c] = seen.get(c, -1) + 1
        x = spreads.get(c, 0.0)
        out.append(wts[c] * (1 + x if i % 2 == 0 else 1 - x))
    return out


def alike_groups(plan: Plan) -> list[list[int]]:
    """Trainers (by index) that own the same shares of the same parts, two or more to a
    group, each group in trainer order."""
    groups: dict[tuple, list[int]] = {}
    for w, t in enumerate(plan.trainers):
        if t.shares:
            groups.setdefault(t.owned, []).append(w)
    return [g for g in groups.values() if len(g) > 1]


def stagger(plan: Plan, spread: float) -> Plan | None:
    """`plan` with each group of alike trainers (:func:`alike_groups`) owning shares spread
    evenly from ``1 - spread / 2`` to ``1 + spread / 2`` of their common share, in trainer
    order (the group's last takes what the others leave, so every part's shares still sum
    to 1); None where there is no such group."""
    groups = alike_groups(plan)
    if not groups or not 0 < spread < 2:
        return None
    ts = list(plan.trainers)
    for g in groups:
        n = len(g)
        total = [n * x for x in ts[g[0]].shares]
        given = [0.0] * len(total)
        for i, w in enumerate(g):
            t = ts[w]
            if i < n - 1:
                f = 1 + spread * (i / (n - 1) - 0.5)
                sh = tuple(x * f for x in t.shares)
                given = [a + b for a, b in zip(given, sh)]
            else:
                sh = tuple(a - b for a, b in zip(total, given))
            ts[w] = replace(t, shares=sh)
    return replace(plan, trainers=tuple(ts))


def stagger_seeds(problem: Problem, plan: Plan, score: Callable[[Plan], float], *,
                  spreads: Sequence[float] = SPREADS) -> tuple[Plan, float] | None:
    """The best of `plan` staggered by each of `spreads` (:func:`stagger`) by `score`, and
    its score; None where `plan` has no alike trainers. The caller compares it with `plan`
    (the placer's race and search: it is one start among others)."""
    best: tuple[Plan, float] | None = None
    for x in spreads:
        p = stagger(plan, x)
        if p is None or usage(problem, p).problems:
            continue
        v = score(p)
        if best is None or v < best[1]:
            best = (p, v)
    return best
