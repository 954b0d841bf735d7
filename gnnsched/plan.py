"""A placement plan: where every trainer, sampler and feature-gathering task runs.

Plans are data: written to ``plan.json`` (sorted keys, one trainer per entry, so two plans
diff line by line), loaded back and validated against the cluster they were made for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gnnsched.prediction import Prediction
from gnnsched.spec import MAX_GPUS, ClusterSpec, JobSpec, SpecError, _kind, _Reader, load_json

PLAN_VERSION = 1
MAX_PARTS = 1_000_000  # a partition id beyond this is a typo
MAX_TRAINERS = 100_000  # entries in one plan: more is not a plan from `gnnsched plan`
MAX_SAMPLERS = 100_000  # sampler processes in one samplers entry (before any cluster check)
SAMPLERS_PER_CPU = 8  # per machine, over all trainers: more only thrash its cores


def _text(r: _Reader, key: str) -> str:
    """An optional string field: absent or null is empty."""
    value = r.raw(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError(r.source, r._p(key), f"must be a string, got {value!r}")
    return value


def _trainer(r: _Reader, i: int) -> TrainerPlan:
    """One ``trainers[i]`` entry; its ``id`` must be its position (the runtime relies on it)."""
    tid = r.integer("id", i, minimum=0)
    if tid != i:
        raise SpecError(r.source, r._p("id"), f"is {tid} but the entry is trainers[{i}]",
                        f"{i}: trainer ids are their positions 0, 1, ...")
    machine = r.string("machine")
    device = r.integer("device", 0, minimum=0, maximum=MAX_GPUS - 1)
    parts = r.seq("parts")
    for j, p in enumerate(parts):
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_PARTS:
            raise SpecError(r.source, f"{r._p('parts')}[{j}]",
                            f"must be a partition id, got {p!r}", f"an integer 0..{MAX_PARTS}")
    samplers = []
    for j in range(len(r.seq("samplers"))):
        s = r.item("samplers", j)
        samplers.append((s.string("machine"), s.integer("count", minimum=1,
                                                        maximum=MAX_SAMPLERS)))
        s.done()
    fetch_at = r.string("fetch_at", machine)
    shares: list[float] = []
    raw = r.raw("shares", None)
    if raw is not None:
        if not isinstance(raw, list) or len(raw) != len(parts):
            raise SpecError(r.source, r._p("shares"),
                            f"must be a list of {len(parts)} numbers (one per entry of parts), "
                            f"got {raw!r}", "fractions in (0, 1], or no shares (whole parts)")
        for j, v in enumerate(raw):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise SpecError(r.source, f"{r._p('shares')}[{j}]",
                                f"must be a fraction of partition {parts[j]}'s training "
                                f"seeds, got {v!r}", "a number in (0, 1]")
            shares.append(float(v))
    r.done()
    return TrainerPlan(tid, machine, device, tuple(parts), tuple(samplers), fetch_at,
                       tuple(shares) if any(v < 1 for v in shares) else ())


@dataclass(frozen=True)
class TrainerPlan:
    """One trainer and the tasks that feed it.

    ``parts``: partitions whose training seeds this trainer owns. ``shares``: the fraction
    of each of those partitions' seeds it owns (empty: all of them). Several trainers may
    share a partition, so trainers may outnumber partitions; the trainers sharing a partition
    take consecutive slices of its seeds in trainer-id order (:func:`seed_slices`).
    ``samplers``: sampler processes building its mini-batches, as (machine, count).
    ``fetch_at``: the machine where its feature gathering runs — the trainer's own machine
    means it pulls from every store; a store or any other machine means that machine gathers
    and pushes one message (a relay).
    """

    id: int
    machine: str
    device: int
    parts: tuple[int, ...]
    samplers: tuple[tuple[str, int], ...]
    fetch_at: str
    shares: tuple[float, ...] = ()

    @property
    def num_samplers(self) -> int:
        return sum(c for _, c in self.samplers)

    @property
    def seed_shares(self) -> tuple[float, ...]:
        """The share of every owned partition's seeds, one per entry of ``parts``."""
        return self.shares or (1.0,) * len(self.parts)

    @property
    def owned(self) -> tuple[tuple[int, float], ...]:
        """(partition, share) pairs, sorted: the trainer's seeds as a cache key."""
        return owned_key(self.parts, self.shares)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "machine": self.machine, "device": self.device,
                "parts": list(self.parts),
                **({"shares": list(self.shares)} if self.shares else {}),
                "samplers": [{"machine": m, "count": c} for m, c in self.samplers],
                "fetch_at": self.fetch_at}


SHARE_TOL = 1e-6  # a partition's shares must sum to 1 within this


def owned_key(parts: Any, shares: Any = ()) -> tuple[tuple[int, float], ...]:
    """(part, share) pairs, sorted (empty shares: whole parts): a trainer's seeds as a key."""
    sh = shares if len(shares) else (1.0,) * len(parts)
    return tuple(sorted((int(p), float(s)) for p, s in zip(parts, sh)))


def split_owned(split: Any) -> list[list[tuple[int, float]]]:
    """A stored seed split (part ids, or ``[part, share]`` pairs) as (part, share) pairs."""
    return [[(int(e[0]), float(e[1])) if isinstance(e, (list, tuple)) else (int(e), 1.0)
             for e in group] for group in split]


def split_slices(split: Any) -> tuple[list[list[int]], list[dict[int, tuple[float, float]]] | None]:
    """A stored seed split -> (each trainer's parts, each trainer's slices or None).

    ``split`` lists per trainer either part ids (whole parts) or ``[part, share]`` pairs, in
    trainer order (results.json's ``split``, :func:`gnnsched.evaluation.config.seed_split`)."""
    owned = split_owned(split)
    parts = [[p for p, _ in g] for g in owned]
    if all(s >= 1.0 for g in owned for _, s in g):
        return parts, None
    return parts, _slices(owned)


def seed_slices(trainers: Any) -> dict[int, dict[int, tuple[float, float]]]:
    """trainer id -> {partition: (from, to)}: the slice of the partition's seeds (as
    fractions of its seeds in a fixed seeded order) that the trainer owns. Trainers sharing a
    partition take consecutive slices in trainer-id order; a whole partition is (0, 1)."""
    ts = sorted(trainers, key=lambda t: t.id)
    sl = _slices([list(zip(t.parts, t.seed_shares)) for t in ts])
    return {t.id: s for t, s in zip(ts, sl)}


def _slices(groups: list[list[tuple[int, float]]]) -> list[dict[int, tuple[float, float]]]:
    """Per group (trainer, in order) of (part, share): {part: (from, to)}, consecutive."""
    start: dict[int, float] = {}
    out = []
    for g in groups:
        mine = {}
        for p, s in g:
            lo = start.get(p, 0.0)
            hi = min(1.0, lo + s)
            if hi > 1.0 - SHARE_TOL:
                hi = 1.0
            mine[p] = (lo, hi)
            start[p] = hi
        out.append(mine)
    return out


@dataclass(frozen=True)
class Plan:
    placer: str
    cluster: str
    cluster_fingerprint: str
    trainers: tuple[TrainerPlan, ...]
    job: str = ""
    prediction: Prediction | None = None  # what `gnnsched plan` predicted (None: nothing)
    notes: tuple[str, ...] = ()  # what a person should know (e.g. colocation infeasible)
    # JobSpec.plan_key() of the job it was made for (`gnnsched plan` records it); empty: not
    # known (older plan files, plans built in code), and then not checked
    job_key: dict[str, Any] = field(default_factory=dict)
    # machine -> rows of *other* machines' node features replicated there, hottest first
    # (the in-degree order of :func:`gnnsched.datasets.hot.hot_order`): every feature
    # gatherer on that machine (an in-process trainer gather or a relay) serves them from
    # its own memory instead of asking their stores. Empty: no caches (the default).
    caches: dict[str, int] = field(default_factory=dict)

    def with_prediction(self, prediction: Prediction | None = None, /, **keys: Any) -> Plan:
        """This plan with `prediction` (default: its own), and `keys` set as the plan file
        names them (:meth:`Prediction.with_legacy`: for callers that still write them)."""
        pred = self.prediction if prediction is None else prediction
        if keys:
            pred = (pred or Prediction()).with_legacy(**keys)
        return replace(self, prediction=None if pred is None or pred.empty else pred)

    def to_dict(self) -> dict[str, Any]:
        pred = self.prediction.to_dict() if self.prediction is not None else {}
        return {"version": PLAN_VERSION, "placer": self.placer, "cluster": self.cluster,
                "cluster_fingerprint": self.cluster_fingerprint, "job": self.job,
                "trainers": [t.to_dict() for t in self.trainers],
                "predicted": pred, "notes": list(self.notes),
                **({"job_key": self.job_key} if self.job_key else {}),
                **({"caches": dict(sorted(self.caches.items()))} if self.caches else {})}

    def with_caches(self, caches: dict[str, int]) -> Plan:
        """This plan with feature caches of ``caches[machine]`` rows (zero rows: none)."""
        return replace(self, caches={m: int(r) for m, r in caches.items() if int(r) > 0})

    def for_job(self, job: JobSpec) -> Plan:
        """This plan, recording the job it was made for (checked by :meth:`validate`)."""
        return replace(self, job=job.name, job_key=json.loads(json.dumps(job.plan_key())))

    def job_differences(self, job: JobSpec) -> list[str]:
        """``field: plan X, job Y`` for every recorded job field that ``job`` has otherwise
        (empty when the plan records no job, or the same one). A dataset file is compared by
        its name, so a moved project folder still matches."""
        want = json.loads(json.dumps(job.plan_key()))
        out = []
        for k in sorted(self.job_key):
            if k not in want:
                continue  # a field this version does not place by
            have, now = self.job_key[k], want[k]
            if k == "dataset" and isinstance(have, str) and isinstance(now, str):
                have_name, now_name = Path(have).name, Path(now).name
                if have_name == now_name:
                    continue
                have, now = have_name, now_name
            if have != now:
                out.append(f"{k}: plan {_show(have)}, job {_show(now)}")
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    def key(self) -> tuple:
        """Hashable identity of the placement itself: where every trainer, sampler and
        gather runs on which seeds (caches aside: "the same plan as colocation's")."""
        return tuple((t.machine, t.device, t.parts, t.shares, tuple(sorted(t.samplers)),
                      t.fetch_at) for t in self.trainers)

    def score_key(self) -> tuple:
        """Hashable identity of everything a plan's score depends on: its placement and its
        feature caches (a plan with caches is not scored as the same plan without)."""
        return self.key(), tuple(sorted(self.caches.items()))

    @classmethod
    def from_dict(cls, d: Any, source: str = "<plan>") -> Plan:
        """Parse a plan; every field is type-checked and errors name the file and field."""
        if not isinstance(d, dict):
            raise SpecError(source, "", f"a plan must be a JSON object, got {_kind(d)}",
                            "a file from `gnnsched plan`")
        for key in ("placer", "cluster", "trainers"):
            if key not in d:
                raise SpecError(source, key, "is missing (required)", "a file from `gnnsched plan`")
        r = _Reader(source, d)
        version = r.integer("version", PLAN_VERSION, minimum=None)
        if version != PLAN_VERSION:
            raise SpecError(source, "version", f"plan format {version} is not supported",
                            f"{PLAN_VERSION} (re-run `gnnsched plan` with this version)")
        placer, cluster = r.string("placer"), r.string("cluster")
        fp = _text(r, "cluster_fingerprint")
        job = _text(r, "job")
        if not isinstance(d["trainers"], list):
            raise SpecError(source, "trainers", "must be a list of trainer entries, got "
                            f"{_kind(d['trainers'])}", "a file from `gnnsched plan`")
        r.used.add("trainers")
        if len(d["trainers"]) > MAX_TRAINERS:
            raise SpecError(source, "trainers", f"{len(d['trainers'])} entries",
                            f"at most {MAX_TRAINERS}")
        predicted = r.raw("predicted", {})
        if not isinstance(predicted, dict):
            raise SpecError(source, "predicted", f"must be a mapping, got {_kind(predicted)}")
        job_key = r.raw("job_key", {})
        if job_key is None:
            job_key = {}
        if not isinstance(job_key, dict):
            raise SpecError(source, "job_key", f"must be a mapping of job fields, got "
                            f"{_kind(job_key)}", "a file from `gnnsched plan`, or no job_key")
        notes = r.seq("notes", [])
        for i, note in enumerate(notes or []):
            if not isinstance(note, str):
                raise SpecError(source, f"notes[{i}]", f"must be a string, got {note!r}")
        caches = r.raw("caches", {}) or {}
        if not isinstance(caches, dict):
            raise SpecError(source, "caches", f"must be a mapping machine -> rows, got "
                            f"{_kind(caches)}", "e.g. {\"h0\": 250000}, or no caches")
        for m, rows in caches.items():
            if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
                raise SpecError(source, f"caches.{m}", f"must be a row count, got {rows!r}",
                                "an integer >= 0")
        r.done()
        trainers = tuple(_trainer(r.item("trainers", i), i)
                         for i in range(len(d["trainers"])))
        pred = Prediction.from_dict(predicted, source) if predicted else None
        if pred is not None and pred.empty:
            pred = None
        return cls(placer, cluster, fp, trainers, job, pred, tuple(notes or ()), dict(job_key),
                   {str(m): int(v) for m, v in caches.items() if v})

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_dict(load_json(path, "a plan.json from `gnnsched plan`"), str(path))

    def check_job(self, job: JobSpec, source: str = "plan") -> None:
        """Refuse a plan recorded for a job whose placement-relevant fields differ from
        ``job``'s (a SpecError naming them); plans that record no job pass. ``gnnsched
        train`` and ``simulate`` call it unless ``--any-job``."""
        diff = self.job_differences(job)
        if diff:
            fix = f"re-run `gnnsched plan --job {job.source}`"
            if len(self.trainers) == job.trainers:  # else no plan entry for some trainer
                fix += ", or pass --any-job to use this plan anyway"
            raise SpecError(source, "job_key",
                            f"plan was made for a job with other settings than {job.source} "
                            f"({'; '.join(diff)})", fix)

    def validate(self, cluster: ClusterSpec, job: JobSpec | None = None,
                 source: str = "plan") -> None:
        """Check the plan against a cluster (and job); errors name the trainer and field.
        (Whether it was made for this job's settings: :meth:`check_job`.)"""
        if self.cluster_fingerprint and self.cluster_fingerprint != cluster.fingerprint():
            what = "another cluster" if self.cluster != cluster.name else "an edited version of it"
            raise SpecError(source, "cluster_fingerprint",
                            f"plan was made for {what} ({self.cluster!r}), not "
                            f"{cluster.source}", "re-run `gnnsched plan` for this cluster")
        names = {m.name for m in cluster.machines}
        used: dict[tuple[str, int], int] = {}
        owned: dict[int, list[int]] = {}
        share_sum: dict[int, float] = {}
        per_machine: dict[str, int] = {}
        for i, t in enumerate(self.trainers):
            where = f"trainers[{i}]"
            for fld, m in [("machine", t.machine), ("fetch_at", t.fetch_at)] + \
                    [(f"samplers[{j}].machine", s[0]) for j, s in enumerate(t.samplers)]:
                if m not in names:
                    raise SpecError(source, f"{where}.{fld}",
                                    f"machine {m!r} is not in cluster {cluster.name!r}",
                                    ", ".join(sorted(names)[:8]) + (" ..." if len(names) > 8
                                                                    else ""))
            mach = cluster.machine(t.machine)
            if not mach.can("train"):
                raise SpecError(source, f"{where}.machine",
                                f"{t.machine!r} may not run trainers (roles: "
                                f"{', '.join(mach.roles)})")
            if not 0 <= t.device < mach.num_gpus:
                raise SpecError(source, f"{where}.device",
                                f"{t.machine!r} has {mach.num_gpus} GPU(s), no device {t.device}",
                                f"0..{mach.num_gpus - 1}" if mach.num_gpus else
                                "a machine with a GPU")
            if (t.machine, t.device) in used:
                raise SpecError(source, f"{where}.device",
                                f"GPU {t.device} of {t.machine!r} is already used by trainer "
                                f"{used[(t.machine, t.device)]}", "one trainer per device")
            used[(t.machine, t.device)] = t.id
            if not t.samplers or t.num_samplers < 1:
                raise SpecError(source, f"{where}.samplers", "no sampler", "at least one")
            for j, (m, c) in enumerate(t.samplers):
                if c < 1:
                    raise SpecError(source, f"{where}.samplers[{j}].count", f"is {c}", ">= 1")
                if not cluster.machine(m).can("sample"):
                    raise SpecError(source, f"{where}.samplers[{j}].machine",
                                    f"{m!r} may not run samplers")
            for j, (m, c) in enumerate(t.samplers):
                per_machine[m] = per_machine.get(m, 0) + c
                cap = SAMPLERS_PER_CPU * cluster.machine(m).cpus
                if per_machine[m] > cap:
                    raise SpecError(source, f"{where}.samplers[{j}].count",
                                    f"{per_machine[m]} samplers on {m!r} (cpus: "
                                    f"{cluster.machine(m).cpus}) counting earlier trainers'",
                                    f"at most {SAMPLERS_PER_CPU} x cpus = {cap} per machine")
            if t.fetch_at != t.machine and not cluster.machine(t.fetch_at).can("fetch"):
                raise SpecError(source, f"{where}.fetch_at", f"{t.fetch_at!r} may not fetch")
            if len(set(t.parts)) != len(t.parts):
                raise SpecError(source, f"{where}.parts", "lists a partition twice",
                                "each partition once per trainer (with its share)")
            if t.shares and len(t.shares) != len(t.parts):
                raise SpecError(source, f"{where}.shares",
                                f"{len(t.shares)} shares for {len(t.parts)} parts",
                                "one share per entry of parts")
            for p, sh in zip(t.parts, t.seed_shares):
                if not 0 <= p < cluster.num_parts:
                    raise SpecError(source, f"{where}.parts",
                                    f"partition {p} does not exist",
                                    f"0..{cluster.num_parts - 1}")
                if sh >= 1.0 and p in owned:
                    raise SpecError(source, f"{where}.parts",
                                    f"partition {p} is also owned by trainer {owned[p][0]}",
                                    "each partition's seeds owned by one trainer, or shares "
                                    "that sum to 1 over the trainers that split it")
                owned.setdefault(p, []).append(t.id)
                share_sum[p] = share_sum.get(p, 0.0) + sh
        missing = sorted(set(range(cluster.num_parts)) - set(owned))
        if missing:
            raise SpecError(source, "trainers[*].parts",
                            f"no trainer owns the seeds of partition {missing[0]}",
                            "every partition assigned to one trainer")
        for p, total in sorted(share_sum.items()):
            if abs(total - 1.0) > SHARE_TOL:
                raise SpecError(source, "trainers[*].shares",
                                f"the shares of partition {p} sum to {total:.6g} over trainers "
                                f"{owned[p]}", "shares that sum to 1: every seed trained once")
        for m in self.caches:
            if m not in names:
                raise SpecError(source, f"caches.{m}",
                                f"machine {m!r} is not in cluster {cluster.name!r}",
                                ", ".join(sorted(names)[:8]))
        if job is not None and len(self.trainers) != job.trainers:
            raise SpecError(source, "trainers",
                            f"plan has {len(self.trainers)} trainers, job {job.source} asks "
                            f"for {job.trainers}", "re-run `gnnsched plan` for this job")


def _show(value: Any) -> str:
    """A job value in an error message: JSON-like, cut short when long."""
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def plan_dict_diff(a: Plan, b: Plan) -> list[str]:
    """Human-readable differences between two plans (for `plan --diff` and logs)."""
    out = []
    ta = {t.id: t.to_dict() for t in a.trainers}
    tb = {t.id: t.to_dict() for t in b.trainers}
    for i in sorted(set(ta) | set(tb)):
        x, y = ta.get(i), tb.get(i)
        if x != y:
            for k in sorted(set(x or {}) | set(y or {})):
                if (x or {}).get(k) != (y or {}).get(k):
                    out.append(f"trainer {i}.{k}: {(x or {}).get(k)} -> {(y or {}).get(k)}")
    for m in sorted(set(a.caches) | set(b.caches)):
        if a.caches.get(m, 0) != b.caches.get(m, 0):
            out.append(f"caches.{m}: {a.caches.get(m, 0)} -> {b.caches.get(m, 0)} rows")
    return out


__all__ = ["Plan", "Prediction", "TrainerPlan", "owned_key", "plan_dict_diff", "seed_slices",
           "split_owned", "split_slices"]
