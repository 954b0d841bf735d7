"""The cost profile: what one mini-batch costs, as distributions measured from real sampling.

A profile holds, for every partition ``p``, a sample of mini-batches whose seed nodes come from
``p``: the sampler's CPU seconds, the sampled edges (and which store owns the frontier of each,
since remote hops are requests to that store), the input nodes owned by every partition (so the
feature bytes each (store, trainer) pair moves follow), and the train seconds on the reference
device. The simulator draws mini-batches from these samples with a seed; the placer uses their
means. ``gnnsched profile`` measures one from real DGL sampling on real partitions
(:mod:`gnnsched.profiler`); :func:`synthetic_profile` makes one for clusters with no graph,
from constants, and :func:`profile_from_stats` one for a graph known by its statistics (node
and edge counts, degree law, locality, partition sizes: :mod:`gnnsched.graphstats`), with the
fan-out law for its mini-batches and a measured reference for its costs.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnsched.graphstats import CostReference, GraphStats
from gnnsched.spec import JobSpec, SpecError, fingerprint, load_json

EDGE_BYTES = 16  # one sampled edge in a block message: src + dst as int64
PROFILE_VERSION = 1


# A profile's meta key: its sampling seconds were calibrated from a run that did not record
# the samplers' wait for remote hops, so they hold that wait, and the simulator must not charge
# it again (:class:`gnnsched.instance.Instance`; :mod:`gnnsched.calibrate` sets it).
HOLDS_HOP_WAIT = "sample_holds_hop_wait"

@dataclass
class PartProfile:
    """Mini-batches whose seeds come from one partition; arrays have one row per sample."""

    part: int
    train_seeds: int  # training seed nodes this partition owns
    sample_s: np.ndarray  # [n] sampler CPU seconds
    train_s: np.ndarray  # [n] forward+backward seconds on the reference device
    edges: np.ndarray  # [n] sampled edges (block size)
    # Sparse [n, P] matrices as (column ids, values) per row would be slow to draw from; the
    # profile stores, per sample, the owning partitions and counts as parallel lists.
    input_parts: list[np.ndarray]  # per sample: partition ids that own input nodes
    input_nodes: list[np.ndarray]  # per sample: input nodes owned by each of those partitions
    edge_parts: list[np.ndarray]  # per sample: partitions whose nodes were expanded
    edge_counts: list[np.ndarray]  # per sample: edges sampled around those partitions' nodes

    @property
    def n(self) -> int:
        return len(self.sample_s)

    def mean_input_nodes(self, num_parts: int) -> np.ndarray:
        """Expected input nodes owned by each partition, per mini-batch: shape [P]."""
        out = np.zeros(num_parts)
        for ps, cs in zip(self.input_parts, self.input_nodes):
            np.add.at(out, ps, cs)
        return out / max(self.n, 1)

    def mean_edge_counts(self, num_parts: int) -> np.ndarray:
        out = np.zeros(num_parts)
        for ps, cs in zip(self.edge_parts, self.edge_counts):
            np.add.at(out, ps, cs)
        return out / max(self.n, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "train_seeds": int(self.train_seeds),
            "samples": [
                {
                    "sample_s": float(self.sample_s[i]),
                    "train_s": float(self.train_s[i]),
                    "edges": int(self.edges[i]),
                    "input_nodes": {str(int(p)): int(c) for p, c in
                                    zip(self.input_parts[i], self.input_nodes[i])},
                    "edges_by_part": {str(int(p)): int(c) for p, c in
                                      zip(self.edge_parts[i], self.edge_counts[i])},
                }
                for i in range(self.n)
            ],
        }


@dataclass
class CostProfile:
    job_key: dict[str, Any]  # JobSpec.profile_key() of the job it was measured for
    num_parts: int
    feature_bytes: int  # bytes of one node's feature row
    grad_bytes: int  # bytes of the model's gradients (all-reduce payload)
    model_bytes: int  # bytes of parameters + optimizer state (memory per trainer)
    parts: list[PartProfile]
    reference: str = "cpu"  # the device train_s was measured on (GPU speed 1.0 == this)
    synthetic: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    # Seconds an all-reduce takes beyond bytes / bandwidth (the collective library's own
    # overhead, during which the NICs are not busy). The profiler leaves it 0; a profile
    # calibrated from a real run's measured all-reduce sets it (gnnsched.calibrate.insitu_profile).
    allreduce_overhead_s: float = 0.0
    # How long after the first trainer each trainer left an all-reduce, one row per measured
    # iteration in trainer order: the simulator draws a row per iteration (a loaded box wakes
    # processes late, which spreads the trainers' next arrivals at the barrier). Empty from
    # the profiler; a profile calibrated from a real run's steps sets it
    # (gnnsched.calibrate.insitu_profile).
    barrier_skew_s: tuple[tuple[float, ...], ...] = ()
    # Bytes on the wire per byte of payload, minus 1: Ethernet, IP and TCP headers (66 bytes
    # per 1448 at MTU 1500), the ACKs of the other direction, the transports' own framing.
    # NIC rates count wire bytes, so the simulator sends payload at rate / (1 + this). The
    # profiler leaves it 0; the box calibration measures it (gnnsched.evaluation.box).
    wire_overhead: float = 0.0

    def part(self, p: int) -> PartProfile:
        return self.parts[p]

    @property
    def total_train_seeds(self) -> int:
        return int(sum(pp.train_seeds for pp in self.parts))

    def iterations_per_epoch(self, trainers: int, batch_size: int) -> int:
        """Synchronous training: every trainer runs the same number of iterations."""
        return max(1, math.ceil(self.total_train_seeds / (trainers * batch_size)))

    def check_job(self, job: JobSpec, source: str = "cost profile") -> None:
        """Reject a profile measured for another job (other fan-outs, batch size, data...)."""
        want = job.profile_key()
        if self.synthetic:
            keys = ("num_parts",)
        else:
            keys = tuple(want)
        for k in keys:
            have = self.job_key.get(k, self.num_parts if k == "num_parts" else None)
            if k == "fanouts" and have is not None:
                have = list(have)
            if have != want[k]:
                raise SpecError(source, f"job.{k}",
                                f"profile was measured for {k}={have!r} but job {job.source} "
                                f"has {k}={want[k]!r}",
                                "re-run `gnnsched profile` for this job")

    # ---------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PROFILE_VERSION,
            "job_key": self.job_key,
            "job_fingerprint": fingerprint(self.job_key),
            "num_parts": self.num_parts,
            "feature_bytes": self.feature_bytes,
            "grad_bytes": self.grad_bytes,
            "model_bytes": self.model_bytes,
            "reference": self.reference,
            "synthetic": self.synthetic,
            "meta": self.meta,
            **({"allreduce_overhead_s": self.allreduce_overhead_s}
               if self.allreduce_overhead_s else {}),
            **({"barrier_skew_s": [list(r) for r in self.barrier_skew_s]}
               if self.barrier_skew_s else {}),
            **({"wire_overhead": self.wire_overhead} if self.wire_overhead else {}),
            "parts": [p.to_dict() for p in self.parts],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, d: Any, source: str = "<profile>") -> CostProfile:
        """Parse a profile; anything malformed is a SpecError naming the file."""
        try:
            return cls._from_dict(d, source)
        except SpecError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise SpecError(source, "", f"malformed cost profile ({type(exc).__name__}: "
                            f"{str(exc)[:200]})", "a file written by `gnnsched profile`") \
                from None

    @classmethod
    def _from_dict(cls, d: Any, source: str) -> CostProfile:
        if not isinstance(d, dict):
            raise SpecError(source, "", "a cost profile must be a JSON object")
        for key in ("job_key", "num_parts", "feature_bytes", "grad_bytes", "parts"):
            if key not in d:
                raise SpecError(source, key, "is missing (required)",
                                "a file written by `gnnsched profile`")
        if not isinstance(d["job_key"], dict):
            raise SpecError(source, "job_key", "must be a mapping")
        if d.get("version", PROFILE_VERSION) != PROFILE_VERSION:
            raise SpecError(source, "version", f"unsupported version {d.get('version')!r}",
                            str(PROFILE_VERSION))
        P = _num(d["num_parts"], source, "num_parts", 1, integer=True)
        if not isinstance(d["parts"], list):
            raise SpecError(source, "parts", "must be a list, one entry per partition")
        if len(d["parts"]) != P:
            raise SpecError(source, "parts", f"has {len(d['parts'])} entries, num_parts is {P}")
        parts: dict[int, PartProfile] = {}
        for i, pd in enumerate(d["parts"]):
            at = f"parts[{i}]"
            if not isinstance(pd, dict):
                raise SpecError(source, at, "must be a mapping")
            part = _num(pd.get("part"), source, f"{at}.part", integer=True)
            if part >= P or part in parts:
                raise SpecError(source, f"{at}.part", f"partition {part} is "
                                + ("out of range" if part >= P else "listed twice"),
                                f"each of 0..{P - 1} exactly once")
            samples = pd.get("samples") or []
            if not isinstance(samples, list) or not samples:
                raise SpecError(source, f"{at}.samples", "is empty or not a list",
                                "at least one profiled mini-batch per partition")
            seeds = _num(pd.get("train_seeds"), source, f"{at}.train_seeds", integer=True)
            parts[part] = _part_from_samples(part, seeds, samples, P, source, at)
        if not any(pp.train_seeds for pp in parts.values()):
            raise SpecError(source, "parts[*].train_seeds", "is 0 on every partition",
                            "at least one partition with training seeds")
        syn = d.get("synthetic", False)
        if not isinstance(syn, bool):
            raise SpecError(source, "synthetic", f"must be true or false, got {syn!r}")
        grad = _num(d["grad_bytes"], source, "grad_bytes", integer=True, above=True)
        return cls(d["job_key"], P,
                   _num(d["feature_bytes"], source, "feature_bytes", integer=True, above=True),
                   grad, _num(d.get("model_bytes", 3 * grad), source, "model_bytes", integer=True),
                   [parts[p] for p in range(P)], d.get("reference", "cpu"), syn,
                   d.get("meta", {}),
                   _num(d.get("allreduce_overhead_s", 0.0), source, "allreduce_overhead_s"),
                   _skew_rows(d.get("barrier_skew_s", []), source),
                   _num(d.get("wire_overhead", 0.0), source, "wire_overhead"))

    @classmethod
    def load(cls, path: str | Path) -> CostProfile:
        return cls.from_dict(load_json(path, "a file written by `gnnsched profile`"),
                             str(path))


def _skew_rows(raw: Any, source: str) -> tuple[tuple[float, ...], ...]:
    """``barrier_skew_s``: one list of finite seconds >= 0 per trainer, else a SpecError."""
    bad = SpecError(source, "barrier_skew_s", "must be a list of rows (lists) of finite "
                    "seconds >= 0, one row per trainer", "leave it out (the profiler does) "
                    "or rows measured in a run")
    if not isinstance(raw, list) or any(not isinstance(r, list) or not r for r in raw):
        raise bad
    try:
        rows = tuple(tuple(float(x) for x in r) for r in raw)
    except (TypeError, ValueError):
        raise bad from None
    if any(not math.isfinite(x) or x < 0 for r in rows for x in r):
        raise bad
    return rows


def _num(value: Any, source: str, path: str, minimum: int = 0, *, integer: bool = False,
         above: bool = False) -> Any:
    """``value`` as a finite number (an int if ``integer``) >= ``minimum`` (> if ``above``).

    Anything else -- NaN, infinity, a bool, a string, 2.5 where an integer belongs (3.0 is
    fine) -- is a SpecError naming the file and the field.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and (
        isinstance(value, numbers.Integral)
        or (math.isfinite(value) and (not integer or float(value).is_integer())))
    if not (ok and (value > minimum if above else value >= minimum)):
        raise SpecError(source, path, f"must be {'an integer' if integer else 'a finite number'}"
                        f" {'>' if above else '>='} {minimum}, got {value!r}")
    return int(value) if integer else float(value)


def _part_from_samples(part: int, seeds: int, samples: list[Any], P: int,
                       source: str = "<profile>", at: str = "parts[?]") -> PartProfile:
    """One partition's samples, every number checked (a SpecError names the field)."""
    sample_s, train_s, edges = [], [], []
    sparse: dict[str, tuple[list, list]] = {"input_nodes": ([], []), "edges_by_part": ([], [])}
    for j, s in enumerate(samples):
        sp = f"{at}.samples[{j}]"
        if not isinstance(s, dict):
            raise SpecError(source, sp, "must be a mapping")
        sample_s.append(_num(s.get("sample_s"), source, f"{sp}.sample_s"))
        train_s.append(_num(s.get("train_s"), source, f"{sp}.train_s"))
        edges.append(_num(s.get("edges"), source, f"{sp}.edges", integer=True))
        for key, (ids, vals) in sparse.items():  # {partition id: count} per sample
            m = s.get(key, {})
            if not isinstance(m, dict):
                raise SpecError(source, f"{sp}.{key}", "must be a mapping of partition id to count")
            bad = [k for k in m if not (str(k).isdecimal() and int(k) < P)]
            if bad:
                raise SpecError(source, f"{sp}.{key}", f"names partition {bad[0]!r}, outside "
                                f"0..{P - 1}")
            ids.append(np.array([int(k) for k in m], dtype=np.int32))
            vals.append(np.array([_num(v, source, f"{sp}.{key}[{k!r}]") for k, v in m.items()],
                                 dtype=np.float64))
    (ip, ic), (ep, ec) = sparse.values()
    return PartProfile(part, seeds, np.array(sample_s), np.array(train_s),
                       np.array(edges, dtype=np.int64), ip, ic, ep, ec)


def synthetic_profile(num_parts: int, *, seeds_per_part: int = 2000, batch_size: int = 1024,
                      fanouts: tuple[int, ...] = (10, 25), feature_dim: int = 128,
                      locality: float = 0.6, neighbours: int = 4, skew: float = 0.0,
                      hidden: int = 128, num_classes: int = 16, samples: int = 16,
                      sample_s_per_edge: float = 2e-7, train_s_per_edge: float = 1e-7,
                      seed: int = 0) -> CostProfile:
    """A profile for a cluster with no graph at hand, shaped like measured ones.

    A mini-batch of ``batch_size`` seeds with fan-outs ``fanouts`` touches about
    ``batch_size * prod(fanouts)`` edges; ``locality`` of its input nodes are owned by the seed
    partition and the rest by ``neighbours`` adjacent partitions (ring neighbours, as METIS
    leaves a band structure). ``skew`` > 0 makes partition sizes uneven (Zipf-like).
    """
    rng = np.random.default_rng(seed)
    P = num_parts
    sizes = np.ones(P) if skew <= 0 else 1.0 / np.arange(1, P + 1) ** skew
    sizes = rng.permutation(sizes / sizes.mean())
    parts: list[PartProfile] = []
    fan = 1
    edges_mean = 0
    for f in fanouts:
        fan *= f
        edges_mean += batch_size * fan
    inputs_mean = batch_size * (1 + sum(math.prod(fanouts[: i + 1]) for i in range(len(fanouts))))
    inputs_mean *= 0.45  # dedup of neighbourhoods, as measured on real graphs
    for p in range(P):
        k = min(neighbours, P - 1)
        nbrs = np.array([(p + d) % P for d in range(1, k // 2 + 1)] +
                        [(p - d) % P for d in range(1, k - k // 2 + 1)], dtype=np.int32)
        nbrs = np.unique(nbrs[nbrs != p])
        ip, ic, ep, ec = [], [], [], []
        scale = rng.lognormal(0.0, 0.15, samples)
        e = edges_mean * scale
        for i in range(samples):
            n_in = inputs_mean * scale[i]
            loc = locality if len(nbrs) else 1.0
            w = rng.dirichlet(np.ones(len(nbrs))) if len(nbrs) else np.zeros(0)
            ids = np.concatenate([[p], nbrs]).astype(np.int32)
            cnt = np.concatenate([[n_in * loc], n_in * (1 - loc) * w])
            ip.append(ids)
            ic.append(np.round(cnt))
            ep.append(ids)
            ec.append(np.round(cnt / max(n_in, 1) * e[i]))
        parts.append(PartProfile(
            p, int(seeds_per_part * sizes[p]), e * sample_s_per_edge, e * train_s_per_edge,
            e.astype(np.int64), ip, ic, ep, ec))
    params = feature_dim * hidden * 2 + hidden * hidden * 2 * max(len(fanouts) - 2, 0) \
        + hidden * num_classes * 2
    key = {"num_parts": P, "batch_size": batch_size, "fanouts": list(fanouts),
           "feature_dim": feature_dim, "hidden": hidden}
    return CostProfile(key, P, feature_dim * 4, params * 4, params * 4 * 3, parts,
                       reference="synthetic", synthetic=True,
                       meta={"generator": "synthetic_profile", "seed": seed,
                             "locality": locality, "skew": skew})


def profile_from_stats(stats: GraphStats, *, batch_size: int = 1024,
                       fanouts: Sequence[int] = (10, 25), model: str = "sage",
                       hidden: int = 128, reference: CostReference | None = None,
                       samples: int = 16, neighbours: int | None = None,
                       seed: int = 0) -> CostProfile:
    """A profile for a graph known by its statistics (:class:`~gnnsched.graphstats.GraphStats`).

    Every partition's mini-batch comes from the fan-out law
    (:func:`gnnsched.graphstats.fanout_law`: unique input nodes and sampled edges per hop of
    ``batch_size`` seeds from that partition, with degree capping and saturation against the
    partition and the graph), its costs from ``reference``
    (:class:`~gnnsched.graphstats.CostReference`: sampler seconds per sampled edge and per
    unique node, training seconds per aggregated float and per dense multiply-add of the
    job's model, fitted on measured profiles of a generated graph with the same statistics;
    the built-in :data:`~gnnsched.graphstats.BUILTIN_REFERENCE` by default). Input nodes outside the seeds' partition are spread over the ``neighbours``
    nearest partitions on a ring (default: all others, at most 32) in proportion to their
    sizes. ``samples`` mini-batches per partition vary by the reference's measured spread,
    their mean exactly the law's. The meta carries the partition sizes (``part_nodes``,
    ``part_bytes``), so placement's memory check covers the partitions too.
    """
    from gnnsched.graphstats import BUILTIN_REFERENCE, fanout_law, summary

    fan = tuple(int(f) for f in fanouts)
    P = stats.num_parts
    ref = reference or BUILTIN_REFERENCE
    dims = [stats.feature_dim] + [hidden] * (len(fan) - 1) + [stats.num_classes]
    rng = np.random.default_rng(seed)
    seeds = stats.part_train_seeds()
    sizes = np.array(stats.part_nodes, dtype=float)
    k = min(P - 1, 32 if neighbours is None else max(int(neighbours), 0))
    laws: dict[tuple[int, int], Any] = {}
    parts: list[PartProfile] = []
    for p in range(P):
        key = (stats.part_nodes[p], seeds[p])
        if key not in laws:
            laws[key] = fanout_law(stats, batch_size, fan, part=p)
        mb = laws[key]
        nbrs = np.array(sorted({(p + d) % P for d in range(1, k // 2 + 1)} |
                               {(p - d) % P for d in range(1, k - k // 2 + 1)} - {p}),
                        dtype=np.int32)
        w = sizes[nbrs] / sizes[nbrs].sum() if len(nbrs) else np.zeros(0)
        ids = np.concatenate([[p], nbrs]).astype(np.int32)
        own_in, all_in = mb.own_nodes[-1], mb.input_nodes
        own_e, all_e = sum(mb.own_edges), mb.total_edges
        if not len(nbrs):
            own_in, own_e = all_in, all_e
        cnt = np.concatenate([[own_in], (all_in - own_in) * w])
        ecnt = np.concatenate([[own_e], (all_e - own_e) * w])
        z = rng.standard_normal(samples)
        f = np.exp(ref.spread * z)
        f = f / f.mean()
        e = all_e * f
        parts.append(PartProfile(
            p, int(seeds[p]), ref.sample_s(mb) * f, ref.train_s(mb, model, dims) * f,
            np.round(e).astype(np.int64), [ids] * samples,
            [np.round(cnt * fi) for fi in f], [ids] * samples, [np.round(ecnt * fi) for fi in f]))
    params = _param_count(model, dims)
    feature_bytes = 4 * stats.feature_dim
    key = {"num_parts": P, "batch_size": batch_size, "fanouts": list(fan),
           "feature_dim": stats.feature_dim, "hidden": hidden, "model": model}
    law0 = laws[(stats.part_nodes[0], seeds[0])]
    notes = ["mini-batches from the fan-out law on the graph's statistics "
             "(gnnsched.graphstats.fanout_law); costs per edge and input node from "
             + (ref.source or "a measured reference") + ", per unit of the model's work "
             "(gnnsched.graphstats.model_work)"]
    if ref.job and (ref.job.get("model"), ref.job.get("hidden")) != (model, hidden):
        notes.append(f"the reference was measured with {ref.job.get('model')} "
                     f"({ref.job.get('hidden')} hidden): its costs per unit of work are "
                     f"applied to {model} ({hidden} hidden) unvalidated")
    return CostProfile(key, P, feature_bytes, params * 4, params * 4 * 3, parts,
                       reference=ref.reference, synthetic=True,
                       meta={"generator": "profile_from_stats", "seed": seed,
                             "stats": stats.to_dict(), "law": summary(law0),
                             "cost_reference": ref.to_dict(),
                             "num_nodes": stats.num_nodes, "num_edges": stats.num_edges,
                             "locality": stats.locality,
                             "part_nodes": list(stats.part_nodes),
                             "part_bytes": [float(b) for b in stats.part_bytes(feature_bytes)],
                             "notes": notes})


def _param_count(model: str, dims: Sequence[int], heads: int = 4) -> int:
    """Parameters of ``gnnsched.runtime.model.GNN`` with these layer widths."""
    n = 0
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        if model == "gcn":
            n += a * b + b
        elif model == "gat":
            h = 1 if i == len(dims) - 2 else heads
            n += (a if i == 0 else a * heads) * h * b + 3 * h * b
        else:  # sage: fc_self (with bias) + fc_neigh
            n += 2 * a * b + b
    return n


# keys of a job's ``synthetic:`` block that only the constant profile (synthetic_profile) reads
CONSTANT_PROFILE_KEYS = ("seeds_per_part",)


def stats_for_job(job: JobSpec) -> GraphStats:
    """The statistics of a ``dataset: synthetic`` job's graph: its ``synthetic:`` block
    (``num_nodes``, ``avg_degree``, ``power``, ``feature_dim``, ``num_classes``,
    ``train_frac``, ``locality``; the generator's defaults fill the rest) cut into the job's
    partitions, uneven by ``skew`` (Zipf-like, as :func:`synthetic_profile` makes them)."""
    syn = {k: v for k, v in job.synthetic.items() if k != "profile"}
    if job.feature_dim is not None:
        syn.setdefault("feature_dim", job.feature_dim)
    P = job.num_parts
    n = int(syn.get("num_nodes", 0) or 0)
    parts: tuple[int, ...] = ()
    skew = float(syn.get("skew", 0.0) or 0.0)
    if skew > 0 and n >= P:
        rng = np.random.default_rng(job.seed)
        share = rng.permutation(1.0 / np.arange(1, P + 1) ** skew)
        raw = np.maximum(1, np.floor(share / share.sum() * n)).astype(int)
        raw[np.argmax(raw)] += n - raw.sum()
        parts = tuple(int(x) for x in raw)
    return GraphStats.from_synthetic(syn, P, part_nodes=parts or None)


def profile_for(job: JobSpec, cost: str | None = None, *,
                reference: CostReference | str | Path | None = None) -> CostProfile:
    """The profile a command should use: ``--cost`` if given, else a synthetic one when the
    job says ``synthetic: {profile: true, ...}`` or uses a synthetic graph with no profile.

    A synthetic job whose ``synthetic:`` block gives the graph's size (``num_nodes``) gets
    :func:`profile_from_stats` (the fan-out law on its statistics, costs from ``reference``:
    a :class:`~gnnsched.graphstats.CostReference` or a JSON file of one, else the built-in
    one); one that gives ``seeds_per_part`` instead keeps the constant
    :func:`synthetic_profile`."""
    if cost:
        prof = CostProfile.load(cost)
        prof.check_job(job, cost)
        return prof
    syn = dict(job.synthetic)
    if job.dataset == "synthetic":
        syn.pop("profile", None)
        if "num_nodes" in syn and not any(k in syn for k in CONSTANT_PROFILE_KEYS):
            if reference is not None and not isinstance(reference, CostReference):
                reference = CostReference.from_dict(json.loads(Path(reference).read_text()))
            return profile_from_stats(stats_for_job(job), batch_size=job.batch_size,
                                      fanouts=job.fanouts, model=job.model, hidden=job.hidden,
                                      reference=reference, seed=job.seed,
                                      samples=int(syn.get("samples", 16)),
                                      neighbours=syn.get("neighbours"))
        keep = ("seeds_per_part", "feature_dim", "locality", "neighbours", "skew", "samples",
                "num_classes")
        args = {k: syn[k] for k in keep if k in syn}
        if "seeds_per_part" not in args and "num_nodes" in syn:
            args["seeds_per_part"] = int(syn["num_nodes"] * syn.get("train_frac", 0.1)
                                         / job.num_parts)
        return synthetic_profile(job.num_parts, batch_size=job.batch_size, fanouts=job.fanouts,
                                 hidden=job.hidden, seed=job.seed, **args)
    raise SpecError(job.source, "dataset",
                    f"no cost profile for dataset {job.dataset!r}",
                    "pass --cost cost.json (from `gnnsched profile`)")
