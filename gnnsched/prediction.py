"""What a plan is predicted to do: one frozen, versioned record (:class:`Prediction`).

``gnnsched plan`` (:func:`gnnsched.placement.compare.plan_and_compare`) produces it: the plan's
simulated epoch beside every baseline's, the floors that explain it, the two bounds, how it
was scored and planned, and the files it was made for. A placer contributes its own parts (the
search's draws, CP-SAT's status, colocation's feasibility, the share model's numbers); a
plug-in's or a caller's other keys stay in :attr:`Prediction.extras`.

The plan file keeps the mapping it has always written under ``predicted`` (flat keys:
``epoch_time_s``, ``baselines`` by name, ...) and adds ``version``: :meth:`Prediction.to_dict`
and :meth:`Prediction.from_dict`. A mapping without a version (every plan written before
this record existed) loads the same way; what does not parse as its typed field (an older
shape, a hand edit) is kept verbatim in ``extras``, so nothing a file held is lost.
:meth:`Prediction.as_legacy_dict` is that mapping without the version (what ``gnnsched plan
--json`` prints a part of); :meth:`Prediction.of` reads a bare mapping a caller hands a report.

Pure data: no imports beyond the standard library.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

PREDICTION_VERSION = 1

FLAT = {"flat": True}  # a record whose fields sit beside its parent's in the mapping
BY_NAME = {"by_name": True}  # rows kept as a mapping from each row's name


@dataclass(frozen=True)
class Floors:
    """Why the plan takes the time it does, per iteration: its most loaded resource and that
    resource's work, and the longest dependency chain (both at most the predicted iteration;
    :func:`gnnsched.placement.compare.iteration_floor`)."""

    bottleneck: str
    bottleneck_iteration_s: float
    chain_iteration_s: float | None = None


@dataclass(frozen=True)
class BaselineRow:
    """One baseline placed and scored as the plan is, or why it could not be (``error``)."""

    name: str
    epoch_time_s: float | None = None
    planning_s: float | None = None
    per_plan_bound_s: float | None = None
    caches: Mapping[str, int] | None = None  # colocation+cache: rows per gathering machine
    floors: Floors | None = field(default=None, metadata=FLAT)
    colocation_feasible: bool | None = None
    notes: tuple[str, ...] | None = None  # its first notes
    error: str | None = None


@dataclass(frozen=True)
class BoundsRecord:
    """The two named bounds on the draws of ``seed`` (``gnnsched.bounds.bound_fields``): the
    per-plan bound's and the any-placement bound's own mappings (``to_dict`` of
    :class:`gnnsched.bounds.PerPlanBound` and :class:`~gnnsched.bounds.AnyPlacementBound`)."""

    seed: int
    iterations: int
    per_plan: Mapping[str, Any]
    any_placement: Mapping[str, Any] | None


@dataclass(frozen=True)
class CpSatRecord:
    """What CP-SAT's bottleneck model did (only ``status`` where the comparison ran it)."""

    status: str
    objective_iteration_s: float | None = None
    bound_iteration_s: float | None = None
    wall_s: float | None = None
    variables: int | None = None
    exact_parts: bool | None = None
    aggregated: bool | None = None
    cpu_model: str | None = None


@dataclass(frozen=True)
class SearchDraws:
    """The plan and the best start on every draw (:mod:`gnnsched.placement.draws`)."""

    seeds: tuple[int, ...]
    epoch_s: tuple[float, ...]
    best_start_s: tuple[float, ...]
    gain: tuple[float, ...]
    noise: float
    won_on_every_draw: bool
    kept: str
    regret: float
    starts: tuple[str, ...]
    raced_out_s: Mapping[str, float]
    start_epochs_s: Mapping[str, tuple[float, ...]]


@dataclass(frozen=True)
class SearchRecord:
    """What the exploratory search did (:func:`gnnsched.placement.annealing.search_many`)."""

    start_score: float  # mean over the draws of the best start (by that mean)
    best_score: float  # mean over the draws of the plan returned
    evaluations: float = 0  # plans scored on every draw (a raced-out candidate: a fraction)
    simulations: int = 0
    proposals: int = 0
    skipped_by_bound: int = 0
    raced_out: int = 0  # rejected after the first draw
    infeasible: int = 0
    accepted: int = 0
    improved: int = 0  # new best mean
    winners: int = 0  # plans that beat the best start on every draw
    restarts: int = 0
    wall_s: float = 0.0
    scoring_s: float = 0.0  # of wall_s: scoring the starts on every draw, before any move
    stopped: str = ""
    improving_moves: Mapping[str, int] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    kept: str = ""  # "search" (won on every draw) or the start it fell back to
    draws: SearchDraws | None = None

    def to_dict(self) -> dict[str, Any]:
        """The mapping the plan file holds (``draws`` only where recorded)."""
        return _mapping(self)


@dataclass(frozen=True)
class MadeFor:
    """The files the plan was made from (None: given as objects), with their digests."""

    cost: str | None
    cluster: str | None
    job: str | None
    part_bytes_from: str | None = None
    cost_sha256: str | None = None
    cluster_sha256: str | None = None
    # the box calibration the plan was predicted with (``CLUSTER.calibration.json``), if any
    calibration: str | None = None
    calibration_sha256: str | None = None


@dataclass(frozen=True)
class ShareModel:
    """The seed-share model's numbers (:mod:`gnnsched.placement.shares`)."""

    share_model_s: float
    share_bound_s: float
    share_status: str


@dataclass(frozen=True)
class Prediction:
    """A plan's prediction: every field optional (None: not recorded), see the module."""

    version: int = field(default=PREDICTION_VERSION, metadata={"skip": True})
    # (in the order `gnnsched plan` has always written them: the placer's, then the comparison's)
    epoch_time_s: float | None = None
    scored_by: str | None = None
    noise: float | None = None  # (max - min) / min of the plan's epoch over the draws
    epoch_time_by_seed_s: Mapping[str, float] | None = None
    lower_bound_s: float | None = None  # the any-placement bound (what older readers read)
    lower_bound_iteration_s: float | None = None
    lower_bound_scope: str | None = None
    cpsat: CpSatRecord | None = None
    search: SearchRecord | None = None
    planning_s: float | None = None
    budget_s: float | None = None
    planning_phases_s: Mapping[str, float] | None = None
    same_as_colocation: bool | None = None  # True: trainers placed as colocation places them
    per_plan_bound_s: float | None = None
    any_placement_bound_s: float | None = None
    bounds: BoundsRecord | None = None
    placer: str | None = None
    iterations: int | None = None
    iteration_s: float | None = None
    floors: Floors | None = field(default=None, metadata=FLAT)
    baselines: tuple[BaselineRow, ...] | None = field(default=None, metadata=BY_NAME)
    speedup_vs_colocation: float | None = None
    colocation_feasible: bool | None = None  # colocation: every trainer on a store of its data
    share_model: ShareModel | None = field(default=None, metadata=FLAT)
    made_for: MadeFor | None = None
    extras: Mapping[str, Any] = field(default_factory=dict, metadata={"skip": True})

    def baseline(self, name: str) -> BaselineRow | None:
        """The row of baseline `name`, if it was compared."""
        return next((r for r in self.baselines or () if r.name == name), None)

    def made_with(self, key: str) -> str | None:
        """The ``key`` file (``cost``, ``cluster`` or ``job``) the plan was made from: its
        ``made_for``'s, else the flat ``{key}_file`` older plans wrote (kept in ``extras``)."""
        made = getattr(self.made_for, key, None) if self.made_for is not None else None
        return made or self.extras.get(f"{key}_file") or None

    def with_legacy(self, **keys: Any) -> Prediction:
        """This prediction with `keys` set as the plan file names them (unknown ones go to
        ``extras``): how callers that still write the mapping's keys add theirs."""
        return Prediction.from_legacy({**self.as_legacy_dict(), **keys}, self.version)

    def as_legacy_dict(self) -> dict[str, Any]:
        """The mapping plans have always held under ``predicted``, without the version (a
        typed field wins over an extra of the same name)."""
        typed = _mapping(self)
        return {**typed, **{k: _plain(v) for k, v in self.extras.items() if k not in typed}}

    def to_dict(self) -> dict[str, Any]:
        """What the plan file holds under ``predicted``: the mapping and its version."""
        return {"version": self.version, **self.as_legacy_dict()}

    @classmethod
    def from_legacy(cls, mapping: Mapping[str, Any], version: int = PREDICTION_VERSION
                    ) -> Prediction:
        """The typed record of a ``predicted`` mapping: every key that parses as its field,
        the rest in ``extras``."""
        rest = dict(mapping)
        values, _ = _parse_fields(cls, rest, strict=False)
        return cls(version=version, **values, extras=rest)

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any], source: str = "<plan>") -> Prediction:
        """A plan file's ``predicted``: versioned, or (older plans) a bare mapping."""
        from gnnsched.spec import SpecError

        rest = dict(mapping)
        version = rest.pop("version", PREDICTION_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or \
                not 1 <= version <= PREDICTION_VERSION:
            raise SpecError(source, "predicted.version", f"prediction format {version!r} is "
                            "not supported", f"{PREDICTION_VERSION} (re-run `gnnsched plan` "
                            "with this version)")
        return cls.from_legacy(rest, version)

    @classmethod
    def of(cls, value: Prediction | Mapping[str, Any] | None, source: str = "<plan>"
           ) -> Prediction:
        """What a reader was handed as a prediction: itself, a ``predicted`` mapping
        (:meth:`from_dict`), or nothing (an empty prediction)."""
        if isinstance(value, Prediction):
            return value
        return cls() if value is None else cls.from_dict(value, source)

    @property
    def empty(self) -> bool:
        """Nothing recorded."""
        return not self.as_legacy_dict()


# ---------------------------------------------------------------------- the mapping


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _plain(value: Any) -> Any:
    """JSON-shaped: tuples as lists, mappings as dicts (recursively)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _mapping(record: Any) -> dict[str, Any]:
    """A record as its mapping: required fields always, optional ones where set; a flat
    record's fields beside its parent's, rows by name as a mapping from their names."""
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if f.metadata.get("skip") or (value is None and not _required(f)) or \
                (type(record) is BaselineRow and f.name == "name"):
            continue
        if f.metadata.get("flat"):
            out.update(_mapping(value))
        elif f.metadata.get("by_name"):
            out[f.name] = {row.name: _mapping(row) for row in value}
        elif is_dataclass(value):
            out[f.name] = _mapping(value)
        else:
            out[f.name] = _plain(value)
    return out


def _parse_fields(cls: type, rest: dict[str, Any], strict: bool
                  ) -> tuple[dict[str, Any], bool]:
    """The fields of `cls` that parse from `rest`, taken out of it; and whether every
    required one did. Optional fields: an explicit null is not a value (it stays in
    `rest`), as absent is how the mapping says "not recorded"."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    ok = True
    for f in fields(cls):
        if f.metadata.get("skip"):
            continue
        hint = hints[f.name]
        if f.metadata.get("flat"):
            inner = _record_class(hint)
            sub = {k: rest[k] for k in (g.name for g in fields(inner)) if k in rest}
            parsed = _record(inner, sub) if sub else None
            if parsed is not None:
                values[f.name] = parsed
                for k in sub:
                    del rest[k]
            elif sub:
                ok = False
            continue
        if f.name not in rest:
            ok = ok and not _required(f)
            continue
        raw = rest[f.name]
        good, value = (False, None) if raw is None and not _required(f) else \
            _parse(raw, hint, by_name=bool(f.metadata.get("by_name")))
        if good:
            values[f.name] = value
            del rest[f.name]
        else:
            ok = False
    return values, ok and (not strict or not rest)


def _record(cls: type, mapping: Mapping[str, Any], **given: Any) -> Any:
    """`cls` from `mapping` when every key of it parses (None otherwise: kept verbatim);
    `given`: fields the mapping does not hold (a row's name, its key)."""
    if any(k in mapping for k in given):
        return None
    rest = {**mapping, **given}
    values, ok = _parse_fields(cls, rest, strict=True)
    return cls(**values) if ok else None


def _record_class(hint: Any) -> type:
    """The record class of ``R | None``."""
    return next(a for a in get_args(hint) if a is not type(None))


def _parse(value: Any, hint: Any, by_name: bool = False) -> tuple[bool, Any]:
    """(whether `value` is a `hint`, the typed value)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None:
            return type(None) in args, None
        for a in args:
            if a is not type(None):
                good, v = _parse(value, a, by_name)
                if good:
                    return True, v
        return False, None
    if by_name and origin is tuple:  # rows by name: {name: row}
        if not isinstance(value, Mapping):
            return False, None
        rows = [_record(args[0], row, name=name) if isinstance(row, Mapping) else None
                for name, row in value.items()]
        return all(r is not None for r in rows), tuple(rows)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False, None
        items = [_parse(v, args[0]) for v in value]
        return all(g for g, _ in items), tuple(v for _, v in items)
    if origin is Mapping:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            return False, None
        items = {k: _parse(v, args[1]) for k, v in value.items()}
        return all(g for g, _ in items.values()), {k: v for k, (_, v) in items.items()}
    if is_dataclass(hint):
        rec = _record(hint, value) if isinstance(value, Mapping) else None
        return rec is not None, rec
    return _scalar(value, hint), value


def _scalar(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


__all__ = ["PREDICTION_VERSION", "BaselineRow", "BoundsRecord", "CpSatRecord", "Floors",
           "MadeFor", "Prediction", "SearchDraws", "SearchRecord", "ShareModel"]
