"""Task placement: where every trainer, sampler and feature-gathering task runs.

``get_placer(name).place(cluster, job, profile, seed=, budget=)`` returns a
:class:`~gnnsched.plan.Plan`. Placers: ``gnnsched`` (CP-SAT bottleneck model + exploratory
search scored by the simulator), ``cpsat`` (the model alone), and the baselines
``shares`` (CP-SAT over seed shares: how much of each partition every machine trains),
and the baselines ``colocation`` (DistDGL), ``random`` and ``greedy`` (HEFT-style).
"""

from gnnsched.placement.placer import (
    PLACERS,
    Placer,
    Problem,
    Scorer,
    check_resources,
    default_scorer,
    get_placer,
    register,
)

__all__ = ["PLACERS", "Placer", "Problem", "Scorer", "check_resources", "default_scorer",
           "get_placer", "register"]
