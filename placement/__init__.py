"""Task placement: where every trainer, sampler and feature-gathering task runs.

``get_placer(name).place(cluster, job, profile, seed=, budget=)`` returns a
:class:`~gnnsched.plan.Plan`. Placers: ``gnnsched`` (CP-SAT bottleneck model + exploratory
search scored by the simulator), ``cpsat`` (the model alone), and the baselines
``shares`` (CP-SAT over seed shares: how much of each partition every machine trains),
and the baselines ``colocation`` (DistDGL), ``random`` and ``greedy`` (HEFT-style).
"""

from gnnsched.placement.base import PLACERS, Placer, PlanningContext, get_placer, register
from gnnsched.placement.feasibility import check_resources
from gnnsched.placement.problem import Problem
from gnnsched.placement.scoring import Scorer, default_scorer

__all__ = ["PLACERS", "Placer", "PlanningContext", "Problem", "Scorer", "check_resources",
           "default_scorer", "get_placer", "register"]
