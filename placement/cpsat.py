"""OR-Tools CP-SAT placement: instance -> model -> solution -> plan, and the bounds it proves.

The steps, one module each:

* :mod:`.cpsat_instance` — :func:`build_instance`: the bundles of parts a trainer may own and
  every option to run each (device, sampler host), with their loads in seconds;
* :mod:`.cpsat_model` — :func:`solve`: the bottleneck model (minimise the time per iteration
  no schedule can beat) and what CP-SAT found and proved (:class:`CpSatResult`);
* :mod:`.cpsat_solution` — :func:`to_plan` and :func:`solution_from_plan`: assignments to
  plans and back (warm starts);
* this module — :func:`run_cpsat` over the part splits, the placer ``cpsat``
  (:class:`CpSatPlacer`) and the lower bounds every reported plan is compared with
  (:func:`lower_bound`, :func:`simulated_lower_bound`, :func:`barrier_chain_bound`,
  :func:`plan_floor`).

Sampler counts: the model first gives every trainer one sampler and a per-option lower bound
on sampling time (its sampler host's cores all to itself). When spreading the spare cores
afterwards (:func:`fill_samplers`) leaves sampling below ``L``, that relaxation was exact. When
not, the model is solved again with integer sampler counts per (trainer, host) — the exact
CPU model — which is larger, so it is only built when the cores can bind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from gnnsched.bounds import per_plan_bound
from gnnsched.placement.base import Placer, register
from gnnsched.placement.cpsat_instance import (
    BALANCE,
    AssignmentInstance,
    Host,
    Option,
    build_instance,
    is_balanced,
    quick_bound,
)
from gnnsched.placement.cpsat_model import CpSatResult, solve
from gnnsched.placement.cpsat_solution import Solution, solution_from_plan, to_plan
from gnnsched.placement.problem import MAX_SAMPLERS, Problem
from gnnsched.placement.splits import bundle_parts, candidate_splits, has_shares, split_of
from gnnsched.plan import Plan
from gnnsched.prediction import CpSatRecord, Prediction
from gnnsched.profile import EDGE_BYTES
from gnnsched.spec import SpecError


@dataclass
class CpSatOutcome:
    """The model's plan, its pool of good alternatives, and the proven bound."""

    plan: Plan
    pool: list[Plan]
    result: CpSatResult  # of the split whose plan won
    lower_bound_iter_s: float  # proven, per iteration, over every split solved
    exact_parts: bool  # the model chose among all seed-balanced splits
    splits: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)  # fixed splits solved
    bounds: dict[tuple, float] = field(default_factory=dict)  # split -> its bound

    def covers(self, split: tuple[tuple[int, ...], ...]) -> bool:
        """Whether the bound holds for placements with this part split."""
        return split in self.bounds

    only_split: bool = False  # one part per trainer: there is no other split
    warm_starts: list[Plan] = field(default_factory=list)  # greedy's, first split first
    drawn: dict[int, dict] = field(default_factory=dict)  # seed -> split -> (bound, instance)

    def scope(self) -> str:
        if self.only_split:
            s = "every placement"
        elif self.exact_parts:
            s = "every placement with a seed-balanced part split"
        else:
            s = f"placements with the {len(self.bounds)} part splits solved"
        return s + " and every plan compared (with the drawn mini-batches when simulated)"

    def record(self, with_aggregated: bool = True) -> CpSatRecord:
        """What the prediction records of this run (the cpsat placer's has never said
        whether the model was aggregated)."""
        r = self.result
        return CpSatRecord(r.status, r.objective_s, self.lower_bound_iter_s, r.wall_s,
                           r.variables, r.instance.exact_parts,
                           r.instance.aggregated if with_aggregated else None, r.cpu_model)


def _solve_once(problem: Problem, inst: AssignmentInstance, *, time_limit: float, seed: int,
                workers: int, placer: str) -> tuple[list[Plan], CpSatResult]:
    """One instance: greedy warm start, relaxed CPU model, exact CPU model if cores bind."""
    from gnnsched.placement.baselines import greedy_plan

    t0 = time.perf_counter()
    split = bundle_parts(problem) if inst.exact_parts else inst.bundles
    start = greedy_plan(problem, split, placer=placer)
    upper, _ = problem.seconds_per_iteration(start)
    hint = solution_from_plan(inst, start)
    res = solve(inst, time_limit=time_limit, workers=workers, seed=seed, hint=hint,
                upper_s=upper)
    plans = [to_plan(inst, s, placer) for s in res.pool]
    best_plan = plans[-1] if plans else start
    sampling = max(problem.wl.loads(best_plan).sampler.values())
    if res.best is not None and sampling > res.objective_s + 2 * res.unit_s \
            and not inst.aggregated:
        # spare cores could not bring sampling under L: model the sampler counts exactly
        left = time_limit - (time.perf_counter() - t0)
        hint2 = solution_from_plan(inst, best_plan)
        res2 = solve(inst, time_limit=max(left, 0.5), workers=workers, seed=seed, hint=hint2,
                     upper_s=upper, cpu_model="exact")
        if res2.best is not None:
            res2.bound_s = max(res.bound_s, res2.bound_s)  # both are valid bounds
            plans += [to_plan(inst, s, placer) for s in res2.pool]
            res2.notes.append(f"cores bind: exact sampler-count model ({res2.status})")
            res = res2
    return plans + [start], res


def run_cpsat(problem: Problem, *, time_limit: float = 10.0, seed: int = 0,
              workers: int = 2, placer: str = "cpsat",
              splits: list[list[tuple[int, ...]]] | None = None) -> CpSatOutcome:
    """Solve the model: over all part splits when they are few, else once per candidate
    split (:func:`candidate_splits`); the best plan wins and the bound is the smallest."""
    t0 = time.perf_counter()
    inst = build_instance(problem) if splits is None else None
    if inst is not None and inst.exact_parts:
        todo: list[AssignmentInstance | list[tuple[int, ...]]] = [inst]
    else:
        todo = list(splits or candidate_splits(problem))
    plans: list[Plan] = []
    warm: list[Plan] = []
    results: list[CpSatResult] = []
    bounds: dict[tuple, float] = {}
    for i, item in enumerate(todo):
        left = time_limit - (time.perf_counter() - t0)
        share = max(0.3, left / (len(todo) - i))
        one = item if isinstance(item, AssignmentInstance) else (
            inst if inst is not None and not inst.exact_parts and i == 0
            and sorted(inst.bundles) == sorted(item) else build_instance(problem, list(item)))
        ps, res = _solve_once(problem, one, time_limit=share, seed=seed, workers=workers,
                              placer=placer)
        plans += ps
        warm.append(ps[-1])
        results.append(res)
        if not one.exact_parts:
            bounds[tuple(sorted(one.bundles))] = res.bound_s
    seen: dict[tuple, Plan] = {}
    for p in plans:
        seen.setdefault(p.key(), p)
    scored = sorted(seen.values(), key=lambda p: problem.seconds_per_iteration(p)[0])
    best = scored[0]
    exact = isinstance(todo[0], AssignmentInstance)
    bound = results[0].bound_s if exact else min(bounds.values())
    won = split_of(best)
    res = next((r for r in results if r.instance.exact_parts
                or tuple(sorted(r.instance.bundles)) == won), results[0])
    return CpSatOutcome(best, scored, res, bound, exact, list(bounds), bounds,
                        only_split=problem.W >= problem.P, warm_starts=warm)


def lower_bound(problem: Problem, outcome: CpSatOutcome, plans: list[Plan], *,
                time_limit: float = 5.0, seed: int = 0) -> float:
    """The outcome's bound, made to hold for every plan in `plans` too.

    Each fixed split's CP-SAT bound holds for placements with that split, so a plan whose
    split is not covered and whose own time per iteration is below the bound gets its split
    solved, and the bound becomes the smallest (when the model chose the split itself it
    covers every seed-balanced one already, but not an unbalanced baseline's).
    """
    bound = outcome.lower_bound_iter_s
    for p in plans:
        if has_shares(p):  # outside the bundle model's space: only its own load holds
            bound = min(bound, problem.seconds_per_iteration(p)[0])
            continue
        sp = split_of(p)
        if outcome.covers(sp) or outcome.only_split:
            continue
        if outcome.exact_parts and is_balanced(problem, sp):
            continue
        if problem.seconds_per_iteration(p)[0] >= bound:
            continue  # this plan's own load is above the bound already
        one = build_instance(problem, [tuple(b) for b in sp])
        try:
            _, res = _solve_once(problem, one, time_limit=time_limit, seed=seed, workers=2,
                                 placer="bound")
        except SpecError:  # no warm start for this split: its quick bound still holds
            bound = min(bound, quick_bound(one))
            continue
        outcome.bounds[sp] = res.bound_s
        bound = min(bound, res.bound_s)
    outcome.lower_bound_iter_s = bound
    return bound


def plan_floor(problem: Problem, plan: Plan) -> float:
    """Seconds per iteration no schedule of `plan` can beat, under `problem`'s costs.

    Its most loaded resource (:meth:`Workload.loads`) and the prefetch window of every trainer
    that samples on one machine. With a :meth:`Problem.drawn` problem, ``iterations`` times
    this is at most the simulated epoch of `plan` (the window by convexity: the average of the
    drawn batches' sample + gather chains is at least the chain of their average batch).
    """
    v = problem.wl.loads(plan).bottleneck()[1]
    idx = problem.cluster.machine_index
    for t in plan.trainers:
        if len(t.samplers) == 1:
            v = max(v, problem.window_s(problem.cost(t.parts, t.shares), idx(t.machine),
                                        [idx(t.samplers[0][0])], idx(t.fetch_at)))
    return v


class Floors(NamedTuple):
    """What no placement of a split avoids (:func:`_batch_floors`)."""

    chain: np.ndarray  # [W, K] per batch: sampling, hops and features before training
    train: np.ndarray  # [W, K] its training on the fastest GPU that fits the bundle
    samp: np.ndarray  # [W, K] its sampling CPU seconds
    A: float  # the all-reduce's floor
    sent: np.ndarray  # [W, M] bytes each machine stores for each bundle over the epoch
    match: np.ndarray  # [K] the slowest training a one-trainer-per-GPU assignment contains
    ref: np.ndarray  # [W, K] training on a speed-1 GPU
    gpu_bytes: np.ndarray  # [W] GPU memory a bundle's trainer needs


def _batch_floors(problem: Problem, split: Sequence[tuple[int, ...]], seed: int,
                  trainers: int | None = None
                  ) -> Floors | None:
    """Per drawn batch of every bundle of `split`, what no placement avoids: its chain to
    training (sampling, remote hops, features; see :func:`barrier_chain_bound`), its training
    on the fastest GPU that fits it and its sampling time, the all-reduce's floor ``A`` for a
    ring of `trainers` (default one per bundle), the bytes every machine stores for each
    bundle over the epoch (features, and edges at most its block), per iteration the slowest
    training any one-trainer-per-GPU assignment must contain (:func:`_matching_floor`), each
    batch's training on a speed-1 GPU and the GPU memory each bundle's trainer needs; None
    where some bundle fits no GPU."""
    wl = problem.wl
    K = wl.iterations
    base = getattr(problem, "base", problem)
    cl = problem.cluster
    eg, ig = np.asarray(wl.egress_bw, float), np.asarray(wl.ingress_bw, float)
    Ts = sorted({s.machine for s in problem.slots})
    igT = ig[Ts]
    lat = float(cl.latency)
    W = len(split)
    R = trainers or W  # the ring
    gpus_on: dict[int, int] = {}
    for sl in problem.slots:
        gpus_on[sl.machine] = gpus_on.get(sl.machine, 0) + sl.count
    if R <= 1 or max(gpus_on.values()) >= R:
        A = 0.0
    else:  # some two trainers sit on different machines: a ring through shared NICs
        vol = 2.0 * (R - 1) / R * problem.profile.grad_bytes
        A = (vol / _ring_share(gpus_on, np.minimum(eg, ig), R) + 2 * (R - 1) * lat
             + problem.profile.allreduce_overhead_s)
    fb = problem.profile.feature_bytes
    store = wl.store
    rate = np.minimum(eg[:, None], igT[None, :])  # [M, T]: store m to a trainer on T
    own = np.zeros((problem.M, len(Ts)), dtype=bool)
    own[Ts, np.arange(len(Ts))] = True  # a trainer's own machine sends it nothing
    Ss = [m for m in range(problem.M) if problem.can_sample[m]]
    igS = ig[Ss]
    srate = np.minimum(eg[:, None], igS[None, :])  # [M, S]: store m to a sampler on S
    sown = np.zeros((problem.M, len(Ss)), dtype=bool)
    sown[Ss, np.arange(len(Ss))] = True
    chain = np.zeros((W, K))
    train = np.zeros((W, K))
    ref = np.zeros((W, K))  # training on a speed-1 device
    samp_s = np.zeros((W, K))
    sent = np.zeros((W, problem.M))
    gpu_bytes = np.zeros(W)
    for w, parts in enumerate(split):
        c = base.size_cost(parts)
        need = gpu_bytes[w] = base.trainer_gpu_bytes(c)
        speed = max((s.speed for s in problem.slots if s.gpu_memory >= need), default=0.0)
        if speed <= 0:
            return None
        ld = wl.load(parts)
        for k, mix in enumerate(wl.draws(parts, seed, K)):
            v = np.zeros(problem.M)
            e = np.zeros(problem.M)
            samp = tr = blk = 0.0
            for q, i, f in mix:  # the batch mixes the parts by their seeds, times the load
                pp = problem.profile.part(q)
                np.add.at(v, store[pp.input_parts[i]], ld * f * pp.input_nodes[i] * fb)
                np.add.at(e, store[pp.edge_parts[i]], ld * f * pp.edge_counts[i] * EDGE_BYTES)
                blk += ld * f * float(pp.edges[i]) * EDGE_BYTES
                samp += ld * f * float(pp.sample_s[i])
                tr += ld * f * float(pp.train_s[i])
            per = np.where(own, 0.0, v[:, None] / rate)
            remote = v.sum() - v[Ts]
            fetch = np.maximum(per.max(axis=0), remote / igT) + np.where(remote > 0, lat, 0.0)
            sper = np.where(sown, 0.0, e[:, None] / srate)
            sremote = e.sum() - e[Ss]
            hops = np.maximum(sper.max(axis=0), sremote / igS) + np.where(sremote > 0, lat, 0.0)
            chain[w, k] = samp + float(hops.min()) + float(fetch.min())
            train[w, k] = tr / speed
            ref[w, k] = tr
            samp_s[w, k] = samp
            # the batch's edges stored on m leave m unless its sampler runs there too, and
            # then its block leaves m unless its trainer does (at least the smaller of both)
            sent[w] += v + np.minimum(e, blk)
    speeds = [s.speed for s in problem.slots for _ in range(s.count)]
    return Floors(chain, train, samp_s, A, sent, _matching_floor(ref, speeds), ref, gpu_bytes)


def _ring_share(gpus_on: dict[int, int], bw: np.ndarray, R: int) -> float:
    """The most NIC rate the slowest trainer of a ring of `R` can have: the ring runs at
    the least ``bw[m] / n_m`` over its machines (``n_m`` trainers on ``m`` split its NIC,
    :func:`gnnsched.workload.ring_wire_s`), and a machine gives ``n`` trainers at least ``x``
    each only if ``bw[m] / n >= x``, so the best any placement of one trainer per GPU gets
    is the ``R``-th largest ``bw[m] / n`` (``n`` up to ``m``'s GPUs)."""
    shares = sorted((float(bw[m]) / n for m, g in gpus_on.items() for n in range(1, g + 1)),
                    reverse=True)
    return shares[min(R, len(shares)) - 1]


def _matching_floor(ref: np.ndarray, speeds: Sequence[float]) -> np.ndarray:
    """Per iteration, training seconds that some trainer needs whatever GPUs the bundles get,
    one trainer per GPU: the ``j`` slowest GPUs in use hold ``j`` distinct bundles, the
    largest of which is at least the ``j``-th lightest, and no ``W`` GPUs have a ``j``-th
    slowest faster than the ``W`` fastest GPUs' ``j``-th slowest. So
    ``max_j L_(j) / s_(j)``, with ``L`` the bundles' batches on a speed-1 GPU sorted up and
    ``s`` the ``W`` fastest speeds sorted up. Where the GPUs are as many as the bundles the
    slowest GPU trains a whole bundle, which the per-bundle floor (each on its fastest GPU)
    misses. Zeros where there are fewer GPUs than bundles (no plan)."""
    W, K = ref.shape
    if len(speeds) < W or W == 0:
        return np.zeros(K)
    s = np.sort(np.asarray(speeds, float))[-W:]  # the W fastest, slowest first
    return (np.sort(ref, axis=0) / s[:, None]).max(axis=0)


def barrier_chain_bound(problem: Problem, split: Sequence[tuple[int, ...]], seed: int) -> float:
    """Epoch seconds no placement of `split` can beat in simulation: the synchronous chain.

    Every iteration ends with a barrier: ``B_k = max_w end of training of (w, k) + A``, and a
    trainer trains batch ``k`` only after ``B_{k-1}`` and once the batch was sampled and its
    features arrived — and, with prefetch depth ``d``, sampling of batch ``k`` starts only
    once batch ``k - d`` started training. With each drawn batch's chain floored by what no
    placement avoids (its sampling CPU time, then its features from every store but the
    trainer's own machine at the fastest rate any GPU machine could receive them; hops and
    blocks counted as zero; its remote hops' edges to the best sampler host) and its training
    at the fastest GPU that fits, the recursion
    ``start[w][k] >= max(B_{k-1}, start[w][k-d] + chain[w][k])`` gives ``B_{K-1}``. Unlike the
    per-resource bound it takes the *maximum over trainers in every iteration*. Valid because
    the simulator's depth never exceeds the job's prefetch and the batches depend only on
    (seed, a trainer's parts) (:meth:`Workload.draws`).
    """
    floors = _batch_floors(problem, split, seed)
    if floors is None:
        return 0.0
    return float(_barrier_starts(problem, floors)[1])


def _barrier_starts(problem: Problem, floors: Floors) -> tuple[np.ndarray, float]:
    """The recursion of :func:`barrier_chain_bound`: every batch's earliest training start
    and ``B_{K-1}``."""
    chain, train, _, A, _, match = floors[:6]
    W, K = chain.shape
    d = max(1, int(problem.job.prefetch))
    start = np.zeros((W, K))
    B = 0.0
    for k in range(K):
        prev = start[:, k - d] if k >= d else 0.0
        start[:, k] = np.maximum(B, prev + chain[:, k])
        # every trainer starts batch k at its floor or later; one of them trains match[k]
        B = max(float((start[:, k] + train[:, k]).max()),
                float(start[:, k].min()) + float(match[k])) + A
    return start, B


def fill_drain_offsets(problem: Problem, split: Sequence[tuple[int, ...]], seed: int, *,
                       fixed: bool = True, floors: Floors | None = None
                       ) -> tuple[float, dict[tuple[int, ...], tuple[float, float]]] | None:
    """Epoch seconds the pipeline's fill and drain add to a resource's work, whatever the
    placement of `split` (bundles' drawn batches, :func:`_batch_floors`).

    * NICs: no byte crosses one before some batch is sampled (``head``: the least earliest
      end of a batch's sampling), and after the last byte that is not the final all-reduce's,
      some batch still trains and the all-reduce follows (the final all-reduce's own bytes
      take at most ``A``): ``head + the fastest training``.
    * A bundle's device: its first batch's chain before it can train.
    * A bundle's samplers: after its last sampling, that batch trains and all-reduces.

    The bound model adds them (:func:`~.cpsat_model.solve` ``offsets``), so its proven bound
    times the iterations holds for the simulated epoch of every placement it expresses.
    `fixed` False: `split` is every bundle the model may choose from, not one split, so the
    head is the least sampling of a first window's batch (every later batch waits for one).
    `floors`: :func:`_batch_floors` of `split`, where the caller has them already.
    """
    if floors is None:
        floors = _batch_floors(problem, split, seed, None if fixed else problem.W)
    if floors is None:
        return None
    chain, train, samp, A, *_ = floors
    W, K = chain.shape
    d = max(1, int(problem.job.prefetch))
    if fixed:
        start, _ = _barrier_starts(problem, floors)
        head = min(float((start[w, k - d] if k >= d else 0.0) + samp[w, k])
                   for w in range(W) for k in range(K))
    else:
        head = float(samp[:, :d].min())
    per = {tuple(parts): (float(chain[w, 0]), float(train[w].min()) + A)
           for w, parts in enumerate(split)}
    return head + float(train.min()), per


def store_egress_floor(problem: Problem, split: Sequence[tuple[int, ...]], seed: int,
                       floors: Floors | None = None) -> float:
    """Epoch seconds of the busiest store's egress that no placement of `split` avoids, with
    the NICs' fill and drain (:func:`fill_drain_offsets`).

    A bundle's bytes stored on machine ``m`` (its features, and its sampled edges there or
    the block they make) leave ``m`` unless its trainer runs on ``m`` too. ``m`` hosts at
    most as many trainers as it has GPUs, and only a bundle its GPUs train within the
    epoch: its first batch's chain, all its batches at the fastest of ``m``'s GPUs that fits
    it, each followed by the iteration's all-reduce. So in an epoch of ``T`` at least all
    but ``m``'s largest such bundles leave it, and after its last byte that batch trains and
    the final all-reduce runs: ``f(T)``, which falls as ``T`` grows, and every simulated
    epoch ``E`` has ``E >= f(E)``. The bound is the least such ``T`` (bisection: it returns
    a ``T`` with ``T < f(T)``, below every epoch). Exact arithmetic where CP-SAT's proof runs
    out of time (256 hosts). `floors`: as :func:`fill_drain_offsets` takes them."""
    if floors is None:
        floors = _batch_floors(problem, split, seed)
    offs = fill_drain_offsets(problem, split, seed, floors=floors)
    if floors is None or offs is None:
        return 0.0
    sent = floors.sent
    eg = np.asarray(problem.wl.egress_bw, float)
    # per machine with GPUs: when each bundle would end trained there (inf: it fits no GPU)
    fastest: dict[int, list[tuple[float, float]]] = {}
    for sl in problem.slots:
        fastest.setdefault(sl.machine, []).extend([(sl.speed, sl.gpu_memory)] * sl.count)
    busy = [m for m in range(problem.M) if sent[:, m].sum() > 0]
    cols = {m: sent[:, m] for m in busy}
    ends: dict[int, np.ndarray] = {}
    tot = floors.ref.sum(axis=1)
    K = floors.ref.shape[1]
    for m in busy:
        g = fastest.get(m, [])
        sp = np.array([max((s for s, mem in g if mem >= b), default=0.0)
                       for b in floors.gpu_bytes])
        with np.errstate(divide="ignore"):
            ends[m] = np.where(sp > 0, floors.chain[:, 0] + tot / np.where(sp > 0, sp, 1.0)
                               + floors.A * K, np.inf)

    def f(T: float) -> float:
        worst = 0.0
        for m in busy:
            col = cols[m]
            n = len(fastest.get(m, []))
            kept = np.sort(col[ends[m] <= T])[::-1][:n].sum() if n else 0.0
            worst = max(worst, float(col.sum() - kept) / eg[m])
        return worst + offs[0] + floors.A  # the last byte's batch trains, then all-reduces

    lo = f(math.inf)  # every bundle may stay: the floor without the epoch's length
    if lo >= f(lo):
        return lo
    hi = f(0.0)  # nothing stays: f(hi) <= hi
    for _ in range(40):  # invariant: lo < f(lo), hi >= f(hi)
        mid = 0.5 * (lo + hi)
        if mid < f(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _offsets(dp: Problem, inst: AssignmentInstance, seed: int, fixed: bool,
             floors: Floors | None = None) -> tuple[float, list[tuple[float, float]]] | None:
    """:func:`fill_drain_offsets` of the model's bundles, per iteration, in its order."""
    fo = fill_drain_offsets(dp, [tuple(b) for b in inst.bundles], seed, fixed=fixed,
                            floors=floors)
    if fo is None:
        return None
    K = dp.wl.iterations
    return fo[0] / K, [(fo[1][tuple(b)][0] / K, fo[1][tuple(b)][1] / K) for b in inst.bundles]


def simulated_lower_bound(problem: Problem, outcome: CpSatOutcome, plans: list[Plan], *,
                          seed: int = 0, time_limit: float = 10.0) -> float:
    """Seconds per iteration that no simulated epoch (with `seed`) can beat, times K.

    The model is solved again on :meth:`Problem.drawn` — every trainer's cost the average of
    the mini-batches the simulator draws for it, which depend only on its parts and the seed
    — for the splits the outcome covers. Its proven bound is then a bound of the *simulated*
    epoch of every placement in the model's space (device per trainer, one sampler host among
    the candidates, gathering anywhere: a relay only adds bytes and latency), not merely of
    the mean-cost loads, which random draws can undercut. Every plan in `plans` is then
    checked: a plan whose own drawn load is below the bound gets its split solved, and a plan
    outside the model's space (samplers on several hosts, or on a host the model does not
    offer) lowers the bound to its own floor (:func:`plan_floor`, or its per-plan bound with
    fill and drain, :func:`gnnsched.bounds.per_plan_bound`), so the bound holds for every
    plan reported beside it. Every solve adds the pipeline's fill and drain to the loads
    (:func:`fill_drain_offsets`): with few iterations per epoch they are much of it.
    """
    t0 = time.perf_counter()
    dp = problem.drawn(seed)
    K = dp.wl.iterations
    cache = outcome.drawn.setdefault(seed, {})
    todo: list[Any] = ["exact"] if outcome.exact_parts else list(outcome.bounds)
    refs = list(outcome.pool) + list(outcome.warm_starts)

    def solve_split(key: Any, share: float) -> tuple[float, AssignmentInstance]:
        if key in cache:
            return cache[key]
        inst = build_instance(dp) if key == "exact" else \
            build_instance(dp, [tuple(b) for b in key])
        ref = [p for p in refs if key == "exact" or split_of(p) == key]
        upper = min((plan_floor(dp, p) for p in ref), default=None)
        hint = next((h for p in ref if (h := solution_from_plan(inst, p)) is not None), None)
        # one split fixed: its drawn batches' floors serve the offsets and both floors below
        floors = None if key == "exact" else _batch_floors(dp, [tuple(b) for b in key], seed)
        offs = _offsets(dp, inst, seed, key != "exact", floors)
        res = solve(inst, time_limit=share, workers=2, seed=seed, hint=hint, upper_s=upper,
                    offsets=offs)
        b = res.bound_s
        if outcome.result.cpu_model == "exact" and not inst.aggregated:
            res2 = solve(inst, time_limit=share, workers=2, seed=seed, hint=hint,
                         upper_s=upper, cpu_model="exact", offsets=offs)
            b = max(b, res2.bound_s)  # both are valid bounds
        if floors is not None:  # the split is fixed: the barrier chain bounds it too
            b = max(b, _barrier_starts(dp, floors)[1] / dp.wl.iterations,
                    store_egress_floor(dp, key, seed, floors) / dp.wl.iterations)
        cache[key] = (b, inst)
        return cache[key]

    bound = math.inf
    for i, key in enumerate(todo):
        left = time_limit - (time.perf_counter() - t0)
        bound = min(bound, solve_split(key, max(0.5, left / (len(todo) - i)))[0])
    for p in plans:
        own = max(plan_floor(dp, p), per_plan_bound(problem.wl, p, seed).epoch_s / K)
        if own >= bound:
            continue  # this plan's own drawn load is above the bound already
        if has_shares(p):  # outside the bundle model's space: only its own floor holds
            bound = min(bound, own)
            continue
        sp = split_of(p)
        key = "exact" if outcome.exact_parts and is_balanced(problem, sp) else sp
        b, inst = solve_split(key, max(1.0, min(5.0, time_limit)))
        bound = min(bound, b)
        if any(t.num_samplers > MAX_SAMPLERS for t in p.trainers) or \
                solution_from_plan(inst, p) is None:
            bound = min(bound, own)  # outside the model's space: only its own floor holds
    return bound


@register("cpsat")
class CpSatPlacer(Placer):
    """The bottleneck model alone (no simulator): CP-SAT's best plan."""

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        out = run_cpsat(problem, time_limit=budget or 10.0, seed=seed)
        self.outcome = out
        it = problem.wl.iterations
        return out.plan.with_prediction(Prediction(
            lower_bound_s=out.lower_bound_iter_s * it,
            lower_bound_iteration_s=out.lower_bound_iter_s, lower_bound_scope=out.scope(),
            cpsat=out.record(with_aggregated=False)))


__all__ = ["BALANCE", "AssignmentInstance", "CpSatOutcome", "CpSatPlacer", "CpSatResult", "Host",
           "Option", "Solution", "barrier_chain_bound", "build_instance", "lower_bound",
           "plan_floor", "quick_bound", "run_cpsat", "simulated_lower_bound",
           "solution_from_plan", "solve", "to_plan"]
