"""The placer interface and its registry: ``--placer NAME`` finds a class here.

A placer turns a :class:`~gnnsched.placement.problem.Problem` into a feasible
:class:`~gnnsched.plan.Plan` (or raises a SpecError saying why there is none). Built-ins
register on import; plug-ins through the entry-point group ``gnnsched.placers``
(:mod:`gnnsched.registry`). The comparison every placer goes through (:mod:`.compare`) hands
each one the same :class:`PlanningContext` before it places, so a plug-in gets the services a
built-in gets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from gnnsched.placement.budget import Budget, Progress
from gnnsched.placement.problem import Problem
from gnnsched.placement.scoring import Scorer
from gnnsched.plan import Plan
from gnnsched.plugins import PLACERS_GROUP
from gnnsched.profile import CostProfile
from gnnsched.registry import Registry
from gnnsched.spec import ClusterSpec, JobSpec, SpecError

SeedScorer = Callable[[int, "int | None"], Scorer]  # (seed, iterations or None) -> scorer


def check_margin(keep_colocation: float) -> float:
    """``keep_colocation`` as a fraction in [0, 10), else a SpecError naming the option."""
    if not 0 <= keep_colocation < 10:
        raise SpecError("--keep-colocation", "", f"{keep_colocation!r} is not a "
                        "fraction in [0, 10)", "e.g. 0.22 for predictions within 10%")
    return float(keep_colocation)


@dataclass(frozen=True)
class PlanningContext:
    """What the comparison hands every placer before it places (:meth:`Placer.use`): the same
    services for a built-in and a plug-in, each read by the placers that care.

    ``scorer``: the comparison's scorer, which also scores the baselines, so a placer that
    compares candidates picks by the numbers it is judged by; ``scored_by`` says what it is.
    ``seed_scorer(seed, iterations)``: that scorer on the draws of another seed (None when it
    is not the simulator, whose draws a seed names). ``keep_colocation``: how unsure the
    predictions are, a fraction (:func:`~gnnsched.placement.search.margin_for`): a placer that
    knows colocation's plan keeps it unless its own is predicted faster by more.
    ``budget``: the whole planning's deadline (:class:`~.budget.Budget`; the comparison's
    scorers cut their simulations at it), which a placer keeps within as well as within its
    own ``budget`` seconds; None: only its own. ``progress``: where a placer's phases go, one
    line each (:meth:`~.budget.Budget.say`), when it makes its own budget.
    """

    scorer: Scorer | None = None
    scored_by: str = ""
    seed_scorer: SeedScorer | None = None
    keep_colocation: float = 0.0
    budget: Budget | None = None
    progress: Progress | None = None

    def __post_init__(self) -> None:
        check_margin(self.keep_colocation)


class Placer(ABC):
    """Base class: ``place`` returns a feasible plan or raises a SpecError saying why not."""

    name: ClassVar[str] = "base"

    def __init__(self, scorer: Scorer | None = None, search_scorer: Scorer | None = None
                 ) -> None:
        # used by placers that evaluate candidates (gnnsched): `scorer` picks the final plan,
        # `search_scorer` (default: `scorer`, or a shorter simulation) scores search moves
        self.scorer = scorer
        self.search_scorer = search_scorer
        # CP-SAT's outcome, for placers that solve the model: the comparison's bound reuses it
        self.outcome: Any = None
        self.context = PlanningContext()

    def use(self, context: PlanningContext) -> None:
        """Take the comparison's services before :meth:`place_problem`: keeps ``context`` and
        scores with its scorer. Override to read more of it (call this first)."""
        self.context = context
        if context.scorer is not None:
            self.scorer = context.scorer

    def place(self, cluster: ClusterSpec, job: JobSpec, profile: CostProfile, *,
              seed: int = 0, budget: float | None = None) -> Plan:
        """Plan for (cluster, job, profile); `budget` caps planning seconds."""
        return self.place_problem(Problem(cluster, job, profile), seed=seed, budget=budget)

    @abstractmethod
    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        """Plan for a prepared problem (lets callers share one Problem across placers)."""


PLACERS: Registry[Placer] = Registry(
    "placer", Placer, group=PLACERS_GROUP, flag="--placer",
    modules=tuple(f"gnnsched.placement.{m}" for m in ("baselines", "cpsat", "shares", "search")))
register = PLACERS.register  # class decorator: make a placer available as ``--placer name``


def placers() -> dict[str, type[Placer]]:
    """Every placer by name: the built-ins (registered on import) and those installed as
    plug-ins (:mod:`gnnsched.registry`, entry point group ``gnnsched.placers``)."""
    return dict(PLACERS.load())


def get_placer(name: str, **kwargs: Any) -> Placer:
    """An instance of the placer registered as `name`; an unknown name raises
    :class:`~gnnsched.registry.UnknownName` listing the installed ones."""
    return PLACERS.create(name, **kwargs)


__all__ = ["PLACERS", "Placer", "PlanningContext", "SeedScorer", "check_margin", "get_placer",
           "placers", "register"]
