"""Acceptance targets as data: the goals a run's numbers are judged against, read from a file
only when asked (``gnnsched bench ... --targets FILE``).

The package itself sets no performance goal: without ``--targets`` a run checks its
invariants (what must hold in any run) and judges no target. The project's own goals are
``bench/targets.yaml`` in a checkout, which every command that regenerates a committed result
passes. The file has one section per benchmark, each a mapping of goal name to number; a
section or a goal it leaves out is not judged. The names (:data:`GOALS`):

- ``evaluation``: ``speedup_vs_distdgl``, ``speedup_vs_colocation_limited``, ``sim_error``,
  ``accuracy_vs_distdgl`` (``gnnsched bench eval``; results.json's ``targets_goal``);
- ``scale_model``: ``apriori_error``, ``apriori_error_all``, ``apriori_share``,
  ``wrong_order``, ``vs_colocation`` (the scale model's a-priori predictions and ranking:
  ``gnnsched bench scale-model`` and ``merge``);
- ``scale``: ``limit_fraction``, ``vs_distdgl``, ``vs_colocation``,
  ``vs_colocation_cached`` (against colocation with the same caches), ``metric_points``,
  ``partition_memory_x`` (``gnnsched bench scale``; results.json's ``goals``);
- ``planning``: ``within_bound``, ``over_baseline``, ``plan_time_s``
  (``bench/bench_planning.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GOALS: dict[str, tuple[str, ...]] = {
    "evaluation": ("speedup_vs_distdgl", "speedup_vs_colocation_limited", "sim_error",
                   "accuracy_vs_distdgl"),
    "scale_model": ("apriori_error", "apriori_error_all", "apriori_share", "wrong_order",
                    "vs_colocation"),
    "scale": ("limit_fraction", "vs_distdgl", "vs_colocation", "vs_colocation_cached",
              "metric_points", "partition_memory_x"),
    "planning": ("within_bound", "over_baseline", "plan_time_s"),
}


@dataclass(frozen=True)
class Targets:
    """The goals of every benchmark, by section (empty: nothing judged), and their file."""

    evaluation: dict[str, float] = field(default_factory=dict)
    scale_model: dict[str, float] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    planning: dict[str, float] = field(default_factory=dict)
    source: str | None = None  # the file as given (a command that reruns passes it again)

    def flag(self) -> str:
        """`` --targets FILE`` for a command that judges the same goals (the file relative to
        the current directory when it is under it); empty without."""
        if not self.source:
            return ""
        path = Path(self.source)
        if path.is_absolute() and path.is_relative_to(Path.cwd()):
            path = path.relative_to(Path.cwd())
        return f" --targets {path}"


NONE = Targets()  # no file given: invariants only


def load_targets(path: str | Path | None) -> Targets:
    """The goals in ``path`` (YAML, the sections of :data:`GOALS`); :data:`NONE` for None. A
    bad file is a one-line ``SystemExit`` naming the file and what is wrong."""
    if path is None:
        return NONE
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise SystemExit(f"--targets {p}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise SystemExit(f"--targets {p}: not YAML ({str(exc).splitlines()[0]})") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SystemExit(f"--targets {p}: expected a mapping of sections "
                         f"({', '.join(GOALS)}), got {type(doc).__name__}")
    sections: dict[str, dict[str, float]] = {}
    for name, goals in doc.items():
        if name not in GOALS:
            raise SystemExit(f"--targets {p}: unknown section {name!r} (valid: "
                             f"{', '.join(GOALS)})")
        sections[name] = _goals(p, name, goals or {})
    return Targets(**sections, source=str(path))


def _goals(p: Path, section: str, goals: Any) -> dict[str, float]:
    """One section's goals, each a finite number under a known name."""
    if not isinstance(goals, dict):
        raise SystemExit(f"--targets {p}: {section}: expected a mapping of goal to number")
    out: dict[str, float] = {}
    for key, value in goals.items():
        if key not in GOALS[section]:
            raise SystemExit(f"--targets {p}: {section}.{key}: unknown goal (valid: "
                             f"{', '.join(GOALS[section])})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise SystemExit(f"--targets {p}: {section}.{key}: {value!r} is not a finite "
                             "number")
        out[key] = float(value)
    return out


def target_row(target: str, config: str, value: Any, goal: Any, met: bool | None,
               why: str = "", by: float | None = None) -> dict[str, Any]:
    """One entry of a ``targets`` list, in the form every results.json uses."""
    return {"target": target, "config": config, "value": value, "goal": goal, "met": met,
            "by": by, "why": why}


def judged(name: str, config: str, value: float | None, goal: float, lower_is_better: bool,
           why: str = "", note: str = "") -> dict[str, Any]:
    """A target judged from one measured ``value`` against ``goal``: met, by how much, and
    ``why`` when missed (or not measured: ``value`` None)."""
    if value is None:
        return {"target": name, "config": config, "value": None, "goal": goal, "met": None,
                "by": None, "why": why or "not measured"}
    met = value <= goal if lower_is_better else value >= goal
    return {"target": name, "config": config, "value": value, "goal": goal, "met": met,
            "by": value - goal, "why": "" if met else why, **({"note": note} if note else {})}


__all__ = ["GOALS", "NONE", "Targets", "judged", "load_targets", "target_row"]
