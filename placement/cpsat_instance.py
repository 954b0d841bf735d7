"""CP-SAT placement, step 1 — the instance: every way each bundle of parts could run.

A *bundle* is the set of partitions whose training seeds one trainer owns. While the
seed-balanced subsets are few (``ENUM_SUBSETS``) every one of them is a bundle and the model
chooses the split (set partitioning); one boolean per subset and device grows as ``2^P``, so
beyond that the split is fixed by :func:`bundle_parts` (measured: 48 parts -> 32 trainers
already has ~10^13 subsets) and the search reassigns parts later. An :class:`Option` is one
way to run a bundle: a GPU kind on a :class:`Host` and the machine of its samplers (every
machine in small models; the trainer's own, its main store and the roomiest CPU hosts in large
ones), with the NIC seconds it adds beyond the bundle's fixed store traffic.

Scale: beyond ``AGGREGATE_OPTIONS`` options, machines with identical hardware are merged into
classes (:class:`Host`); a bundle goes to a class unless data it needs is stored on a member,
and the class's *average* NIC load is constrained, which never exceeds its busiest member's —
still a valid bound. Measured on examples/scale256: 28,672 per-machine options did not leave
CP-SAT's presolve in 15 s on 2 cores; the class model (4,690 options) solves to optimality in
1-6 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

from gnnsched.placement.problem import MAX_SAMPLERS, Problem, transfers
from gnnsched.placement.splits import bundle_parts, main_store

ENUM_SUBSETS = 256  # enumerate part bundles exactly while there are at most this many
BALANCE = 0.5  # a multi-part bundle's seeds stay within 50% of the per-trainer average
EXACT_OPTIONS = 4000  # every machine is a sampler-host candidate while options stay this few
AGGREGATE_OPTIONS = 3000  # beyond this many options, merge identical machines into classes
ONE_WORKER_OPTIONS = 256  # models this small are solved by one worker: the same pool every run
SAMPLER_HOSTS = 2  # aggregated model: sampler hosts besides the trainer's and the main store
KB = 1024.0


@dataclass(frozen=True)
class Host:
    """Where the model puts trainers: one machine, or a class of interchangeable machines.

    Machines with the same cores, memory, NICs, GPUs and roles are interchangeable for every
    bundle that stores nothing on them; at scale the model assigns such bundles to the class
    and constrains the class's *average* load (which never exceeds its most loaded member's,
    so the bound stays valid), then :func:`to_plan` spreads them over the members.
    """

    id: int
    machines: tuple[int, ...]
    kinds: tuple[tuple[float, float], ...]  # (speed, GPU memory) of the slots on each member

    @property
    def size(self) -> int:
        return len(self.machines)


@dataclass(frozen=True)
class Option:
    """One way to run a bundle: a GPU kind on a host, and where its samplers run."""

    bundle: int
    host: int
    kind: int  # index into the host's kinds
    machine: int  # the trainer's machine, or -1 for "some member of the class"
    sampler: int  # the sampler machine, or -1 for "the trainer's machine" (class options)
    device_s: float  # training seconds per mini-batch on this GPU kind
    sample_lb_s: float  # sampling seconds with every core of the sampler host
    window_s: float  # prefetch-window time per iteration (Problem.window_s)
    terms: dict[tuple[str, int], float]  # seconds beyond the bundle's base, see `_key`
    host_bytes: float  # on the trainer machine
    sampler_bytes: float  # per sampler process

    @property
    def is_class(self) -> bool:
        return self.machine < 0


@dataclass
class AssignmentInstance:
    """The assignment problem the model solves: bundles, hosts and every option to run each
    bundle, in seconds and bytes (floats). Not the simulator's drawn
    :class:`gnnsched.instance.Instance`: this one has no mini-batches, only mean costs."""

    problem: Problem
    bundles: list[tuple[int, ...]]
    exact_parts: bool  # bundles enumerated: the model also chooses the part split
    aggregated: bool  # identical machines merged into classes
    hosts: list[Host]
    host_of: list[int]  # machine -> host id (-1: no GPU a trainer may use)
    options: list[Option]
    by_bundle: list[list[int]]
    base: list[dict[tuple[str, int], float]]  # per bundle: store NIC seconds whatever happens
    sample_s: list[float]
    vol: float  # all-reduce bytes through each trainer's NIC per iteration
    latency_s: float
    single_hosts: list[int]  # machines whose GPUs alone could host every trainer

    @property
    def W(self) -> int:
        return self.problem.W

    def slot_of(self, machine: int, host: Host, kind: int) -> int:
        """The problem slot of GPU kind `kind` on member `machine` of `host`."""
        want = host.kinds[kind]
        for i, s in enumerate(self.problem.slots):
            if s.machine == machine and (s.speed, s.gpu_memory) == want:
                return i
        raise KeyError((machine, want))


def _subsets(problem: Problem) -> list[tuple[int, ...]] | None:
    """Part subsets a trainer could own (seed-balanced), or None if too many to enumerate.

    A trainer's seeds stay within ``BALANCE`` of the average (or it owns one part): every
    trainer runs the same number of iterations, so an unbalanced split would skip seeds.
    """
    P, W = problem.P, problem.W
    if W in (1, P) or W > P:
        return None
    hi = P - W + 1
    if sum(math.comb(P, k) for k in range(1, hi + 1)) > ENUM_SUBSETS:
        return None
    seeds = [max(pp.train_seeds, 1) for pp in problem.profile.parts]
    avg = sum(seeds) / W
    out = [c for k in range(1, hi + 1) for c in combinations(range(P), k)
           if k == 1 or abs(sum(seeds[p] for p in c) - avg) <= BALANCE * avg]
    for b in bundle_parts(problem):
        if b not in out:
            out.append(b)
    return out


def _classes(problem: Problem) -> list[tuple[int, ...]]:
    """Machines with GPUs grouped by everything the model can see of them."""
    free = problem.free_memory()
    groups: dict[tuple, list[int]] = {}
    for m in sorted({s.machine for s in problem.slots}):
        mach = problem.cluster.machines[m]
        kinds = tuple((s.speed, s.gpu_memory, s.count) for s in problem.slots if s.machine == m)
        sig = (mach.cpus, round(free[m] / KB), mach.egress, mach.ingress, kinds,
               problem.can_sample[m], problem.can_fetch[m])
        groups.setdefault(sig, []).append(m)
    return [tuple(g) for g in groups.values()]


def build_instance(problem: Problem, bundles: list[tuple[int, ...]] | None = None,
                   aggregate: bool | None = None) -> AssignmentInstance:
    """Options and constant loads of every bundle (the subsets, or the heuristic groups)."""
    cl = problem.cluster
    eg = [m.egress for m in cl.machines]
    ig = [m.ingress for m in cl.machines]
    exact = False
    if bundles is None:
        subs = _subsets(problem)
        exact = subs is not None
        bundles = subs if subs is not None else bundle_parts(problem)
    gpus_on: dict[int, int] = {}
    for s in problem.slots:
        gpus_on[s.machine] = gpus_on.get(s.machine, 0) + s.count
    W = problem.W
    single = [T for T, g in gpus_on.items() if g >= W] if W > 1 else list(gpus_on)
    samplers_all = [m for m in range(problem.M) if problem.can_sample[m]]
    all_helpers = len(bundles) * len(problem.slots) * len(samplers_all) <= EXACT_OPTIONS
    if aggregate is None:
        aggregate = not exact and not single and \
            len(bundles) * len(problem.slots) * (SAMPLER_HOSTS + 2) > AGGREGATE_OPTIONS
    groups = _classes(problem) if aggregate else [(m,) for m in sorted(gpus_on)]
    hosts: list[Host] = []
    host_of = [-1] * problem.M
    for g in groups:
        kinds = tuple((s.speed, s.gpu_memory) for s in problem.slots if s.machine == g[0])
        for m in g:
            host_of[m] = len(hosts)
        hosts.append(Host(len(hosts), g, kinds))
    options: list[Option] = []
    by_bundle: list[list[int]] = []
    base: list[dict[tuple[str, int], float]] = []
    sample_s: list[float] = []

    def key(kind: str, m: int, h: Host) -> tuple[str, int]:
        return (kind.upper(), h.id) if m < 0 else (kind, m)

    for b, parts in enumerate(bundles):
        c = problem.cost(parts)
        cs = problem.size_cost(parts)  # memory rules use the plan's sizes, never drawn costs
        sample_s.append(c.sample_s)
        bb: dict[tuple[str, int], float] = {}
        for m, v in list(c.feat_from.items()) + list(c.struct_from.items()):
            bb[("e", m)] = bb.get(("e", m), 0.0) + v / eg[m]
        base.append(bb)
        home = main_store(problem, parts)
        local = set(c.feat_from) | set(c.struct_from)
        need = problem.trainer_gpu_bytes(cs)
        # samplers away from the trainer only help when its cores are short, so beyond its
        # own machine the candidates are every host (small models) or the bundle's main
        # store and the roomiest CPU hosts (large ones)
        helpers = samplers_all
        if aggregate or not all_helpers:
            roomy = sorted(helpers, key=lambda m: (-problem.cpus[m], m))[:SAMPLER_HOSTS]
            helpers = [m for m in dict.fromkeys([home] + roomy) if problem.can_sample[m]]
        mine: list[int] = []
        places: list[tuple[Host, int, int]] = []  # (host, kind, machine or -1)
        for h in hosts:
            for j, (_, gmem) in enumerate(h.kinds):
                if gmem < need:
                    continue
                if h.size == 1:
                    places.append((h, j, h.machines[0]))
                else:
                    places.extend((h, j, m) for m in h.machines if m in local)
                    places.append((h, j, -1))
        for h, j, T in places:
            rep = h.machines[0]  # any member: they share NICs, cores and GPUs
            hosts_s: list[int] = [T] if problem.can_sample[rep] else []
            hosts_s += [S for S in helpers if S != T and S not in hosts_s]
            for S in hosts_s:
                actual: dict[tuple[str, int], float] = {}
                for src, dst, v, _ in transfers(c, T, [(S, 1.0)], T):
                    se = eg[src] if src >= 0 else eg[rep] * h.size
                    si = ig[dst] if dst >= 0 else ig[rep] * h.size
                    ke, ki = key("e", src, h), key("i", dst, h)
                    actual[ke] = actual.get(ke, 0.0) + v / se
                    actual[ki] = actual.get(ki, 0.0) + v / si
                terms = {k: actual.get(k, 0.0) - bb.get(k, 0.0)
                         for k in sorted(set(actual) | set(bb))}  # no hash order
                terms = {k: v for k, v in terms.items() if abs(v) > 1e-15}
                cores = int(problem.cpus[rep if S < 0 else S]) - (1 if S == T else 0)
                n = max(1, min(MAX_SAMPLERS, cores))
                mine.append(len(options))
                win = problem.window_s(c, rep if T < 0 else T, [rep if S < 0 else S],
                                       rep if T < 0 else T)
                options.append(Option(b, h.id, j, T, S, c.train_s / h.kinds[j][0],
                                      c.sample_s / n, win, terms, problem.trainer_host_bytes(cs),
                                      problem.sampler_bytes(cs)))
        by_bundle.append(mine)
    vol = 2.0 * (W - 1) / W * problem.profile.grad_bytes if W > 1 else 0.0
    return AssignmentInstance(problem, list(bundles), exact, aggregate, hosts, host_of, options,
                    by_bundle, base, sample_s, vol,
                    (2 * (W - 1) * problem.cluster.latency + problem.profile.allreduce_overhead_s)
                    if W > 1 else 0.0, single)


def is_balanced(problem: Problem, split: tuple[tuple[int, ...], ...]) -> bool:
    """Whether every bundle of `split` is one the model enumerates (seed-balanced subsets)."""
    subs = _subsets(problem)
    return subs is not None and all(b in subs for b in split)


def quick_bound(inst: AssignmentInstance,
                offsets: tuple[float, list[tuple[float, float]]] | None = None) -> float:
    """A weaker bound that needs no solver: every bundle (or part) on its own best option.

    Per bundle, the fastest of its options (device, window, sampling); per machine NIC, each
    bundle's smallest contribution summed — capacities and all-reduce ignored, so it is a
    relaxation of the model. A floor for the solver's bound when time is too short.
    `offsets`: the model's fill and drain (:func:`~.cpsat_model.solve`), added the same way.
    """
    opts = inst.options
    nic_off = offsets[0] if offsets else 0.0
    per: list[float] = []
    for b, os_ in enumerate(inst.by_bundle):
        dev, samp = offsets[1][b] if offsets else (0.0, 0.0)
        per.append(min((max(opts[o].device_s + dev, opts[o].window_s,
                            opts[o].sample_lb_s + samp) for o in os_), default=0.0))
    if inst.exact_parts:
        best = 0.0
        for p in range(inst.problem.P):
            cands = [per[b] for b, parts in enumerate(inst.bundles) if p in parts]
            best = max(best, min(cands, default=0.0))
        return max(best, nic_off)
    best = max(per, default=0.0)
    nic: dict[tuple[str, int], float] = {}
    for b, os_ in enumerate(inst.by_bundle):
        keys = {k for o in os_ for k in opts[o].terms if k[0] in ("e", "i")} | \
            set(inst.base[b])
        for k in keys:
            v = inst.base[b].get(k, 0.0) + min(opts[o].terms.get(k, 0.0) for o in os_)
            nic[k] = nic.get(k, 0.0) + max(v, 0.0)
    return max([best, nic_off] + [v + nic_off for v in nic.values()])


__all__ = ["AGGREGATE_OPTIONS", "BALANCE", "ENUM_SUBSETS", "EXACT_OPTIONS", "KB",
           "SAMPLER_HOSTS", "AssignmentInstance", "Host", "Option", "build_instance",
           "is_balanced", "quick_bound"]
