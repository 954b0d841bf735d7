"""Part splits: whose training seeds each trainer owns, the placers' shared starting points.

DistDGL's split by store (:func:`store_groups`, :func:`store_slices`), seed-balanced runs in
store order (:func:`contiguous_split`, :func:`split_balanced`, :func:`seed_line`), the most
balanced split (:func:`lpt_split`), and the one placers start from (:func:`bundle_parts`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gnnsched.placement.problem import Problem
from gnnsched.plan import Plan


def split_balanced(items: Sequence[int], weights: Sequence[float], k: int) -> list[list[int]]:
    """Cut `items` (in order) into `k` non-empty contiguous runs of about equal weight."""
    n = len(items)
    if not 1 <= k <= n:
        raise ValueError(f"cannot cut {n} items into {k} non-empty runs")
    total = float(sum(weights))
    out: list[list[int]] = []
    cur: list[int] = []
    acc = 0.0
    for i, (x, w) in enumerate(zip(items, weights)):
        cur.append(x)
        acc += w
        left_items, left_runs = n - i - 1, k - len(out) - 1
        if left_runs == 0:
            continue
        if left_items == left_runs or (acc >= total * (len(out) + 1) / k - w / 2
                                       and left_items >= left_runs):
            out.append(cur)
            cur = []
    out.append(cur)
    return out


def seeds_of(problem: Problem, parts: Sequence[int]) -> float:
    return float(sum(max(problem.profile.parts[p].train_seeds, 1) for p in parts))


def store_groups(problem: Problem, W: int | None = None) -> list[tuple[int, list[int]]]:
    """DistDGL's split: (home store, parts) per trainer, every trainer on one store's data.

    With at least as many trainers as stores, every store gets one trainer and the rest go
    where the seeds are (largest seeds per trainer first, at most one per part); a store's
    parts are then cut into seed-balanced runs. With fewer trainers than stores, runs of
    neighbouring stores with balanced seeds share a trainer.
    """
    W = problem.W if W is None else W
    stores = sorted({problem.store_of[p] for p in range(problem.P)})
    parts_of = {s: sorted(problem.cluster.machines[s].partitions) for s in stores}
    seeds = {s: seeds_of(problem, parts_of[s]) for s in stores}
    groups: list[tuple[int, list[int]]] = []
    if W >= len(stores):
        count = {s: 1 for s in stores}
        for _ in range(W - len(stores)):
            open_ = [s for s in stores if count[s] < len(parts_of[s])]
            if not open_:
                break
            s = max(open_, key=lambda s: (seeds[s] / count[s], -s))
            count[s] += 1
        for s in stores:
            w = [seeds_of(problem, [p]) for p in parts_of[s]]
            groups.extend((s, g) for g in split_balanced(parts_of[s], w, count[s]))
    else:
        for run in split_balanced(stores, [seeds[s] for s in stores], W):
            groups.append((run[0], [p for s in run for p in parts_of[s]]))
    return groups


def seed_line(parts: Sequence[int], seeds: Sequence[float], k: int,
              sizes: Sequence[float] | None = None
              ) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Cut the seeds of `parts` (laid end to end, in order) into `k` runs: each run is
    (parts, shares of their seeds). Equal runs (DistDGL's even split of training seeds), or
    in proportion to ``sizes`` (e.g. GPU speeds); a part is cut where a run ends, so at most
    ``k - 1`` parts are split."""
    total = float(sum(seeds))
    if k < 1 or total <= 0:
        raise ValueError(f"cannot cut {total} seeds into {k} runs")
    rel = [1.0] * k if sizes is None else [float(v) for v in sizes]
    want = [total * v / sum(rel) for v in rel]
    out: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
    cur_p: list[int] = []
    cur_s: list[float] = []
    room = want[0]
    for p, n in zip(parts, seeds):
        left = float(n)
        while left > 1e-9 * total:
            take = min(left, room)
            cur_p.append(p)
            cur_s.append(take / n)
            left -= take
            room -= take
            if room <= 1e-9 * total and len(out) < k - 1:
                out.append((tuple(cur_p), tuple(cur_s)))
                cur_p, cur_s, room = [], [], want[len(out)]
    if cur_p:
        out.append((tuple(cur_p), tuple(cur_s)))
    # exact sums: the last share of each part is 1 minus its others
    seen: dict[int, list[tuple[int, int]]] = {}
    for i, (ps, _) in enumerate(out):
        for j, p in enumerate(ps):
            seen.setdefault(p, []).append((i, j))
    fixed = [list(sh) for _, sh in out]
    for where in seen.values():
        if len(where) == 1:
            i, j = where[0]
            fixed[i][j] = 1.0
        else:
            i, j = where[-1]
            fixed[i][j] = 1.0 - sum(fixed[a][b] for a, b in where[:-1])
    return [(ps, tuple(sh)) for (ps, _), sh in zip(out, fixed)]


def store_slices(problem: Problem, W: int | None = None
                 ) -> list[tuple[int, tuple[int, ...], tuple[float, ...]]]:
    """DistDGL's split with more trainers than partitions: (home store, parts, shares) per
    trainer. Every store gets a trainer, the rest go where the most seeds per trainer are
    (at most the GPUs a store may train on, when it has any), and each store's seeds are cut
    into equal runs (:func:`seed_line`)."""
    W = problem.W if W is None else W
    stores = sorted({problem.store_of[p] for p in range(problem.P)})
    parts_of = {s: sorted(problem.cluster.machines[s].partitions) for s in stores}
    seeds = {s: seeds_of(problem, parts_of[s]) for s in stores}
    gpus = {s: (len(problem.cluster.machines[s].gpus)
                if problem.cluster.machines[s].can("train") else 0) for s in stores}
    count = {s: 1 for s in stores}
    for _ in range(W - len(stores)):
        open_ = [s for s in stores if count[s] < gpus[s]] or stores
        s = max(open_, key=lambda s: (seeds[s] / count[s], -s))
        count[s] += 1
    out = []
    for s in stores:
        w = [seeds_of(problem, [p]) for p in parts_of[s]]
        out.extend((s, ps, sh) for ps, sh in seed_line(parts_of[s], w, count[s]))
    return out


def bundle_parts(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """The part split placers start from: whose seeds each trainer owns.

    :func:`store_groups` (a trainer's parts all on one store, so its mini-batches pull from
    few stores and it can sit next to its data), unless that needs more trainers than the
    stores can give a part each; then seed-balanced runs of parts in store order. Seeds stay
    balanced because every trainer runs the same number of iterations: a trainer owning more
    than its share would not visit all of them in an epoch.
    """
    W = problem.W if W is None else W
    P = problem.P
    if W >= P:
        return [(p,) for p in range(P)]
    groups = store_groups(problem, W)
    if len(groups) == W:
        return [tuple(g) for _, g in groups]
    return contiguous_split(problem, W)


def contiguous_split(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """Seed-balanced runs of parts in store order (runs may straddle two stores)."""
    W = problem.W if W is None else W
    if W >= problem.P:
        return [(p,) for p in range(problem.P)]
    order = sorted(range(problem.P), key=lambda p: (problem.store_of[p], p))
    runs = split_balanced(order, [seeds_of(problem, [p]) for p in order], W)
    return [tuple(sorted(r)) for r in runs]


def lpt_split(problem: Problem, W: int | None = None) -> list[tuple[int, ...]]:
    """The most seed-balanced split: largest part first, each to the lightest trainer.

    Balance matters beyond coverage: a trainer's mini-batches are drawn from its parts in
    proportion to their seeds, so a part in a light trainer is sampled more often per
    iteration and its store sends more; equal seeds spread the stores' egress evenly. Among
    equally light trainers, one already holding parts of the same store is preferred.
    """
    W = problem.W if W is None else W
    if W >= problem.P:
        return [(p,) for p in range(problem.P)]
    order = sorted(range(problem.P), key=lambda p: (-seeds_of(problem, [p]), p))
    groups: list[list[int]] = [[] for _ in range(W)]
    load = [0.0] * W
    for p in order:
        st = problem.store_of[p]
        i = min(range(W), key=lambda i: (load[i], not any(problem.store_of[q] == st
                                                          for q in groups[i]), i))
        groups[i].append(p)
        load[i] += seeds_of(problem, [p])
    return [tuple(sorted(g)) for g in groups]


def split_of(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """A plan's part split, canonical (sorted), for comparing splits across plans (with seed
    shares: (part, share) pairs, which no whole-part split equals)."""
    return tuple(sorted(tuple(sorted(t.parts)) if not t.shares else t.owned
                        for t in plan.trainers))


def has_shares(plan: Plan) -> bool:
    """Whether some trainer owns part of a partition's seeds (outside the CP-SAT bundle
    model's space: bounds use such a plan's own floor)."""
    return any(t.shares for t in plan.trainers)


def candidate_splits(problem: Problem) -> list[list[tuple[int, ...]]]:
    """Part splits the model is solved for when it cannot choose the split itself."""
    out: list[list[tuple[int, ...]]] = []
    seen: set[tuple] = set()
    for split in (bundle_parts(problem), contiguous_split(problem), lpt_split(problem)):
        key = tuple(sorted(split))
        if key not in seen:
            seen.add(key)
            out.append(split)
    return out


def main_store(problem: Problem, parts: Sequence[int]) -> int:
    """The machine that sends a trainer of `parts` the most feature bytes."""
    c = problem.cost(parts)
    return max(c.feat_from, key=lambda m: (c.feat_from[m], -m))


__all__ = ["bundle_parts", "candidate_splits", "contiguous_split", "has_shares", "lpt_split",
           "main_store", "seed_line", "seeds_of", "split_balanced", "split_of", "store_groups",
           "store_slices"]
