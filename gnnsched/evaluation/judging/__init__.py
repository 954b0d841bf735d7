"""Judging: what must hold in every run (the invariants, which fail a quick run) and the
targets (met or missed, by how much, and -- when missed -- why, from the run's own numbers),
for each tier: the evaluation (:mod:`.evaluation`), the scale model (:mod:`.scale_model`)
and the scale tier (:mod:`.scale`).

The invariants are the method's: they hold with or without goals. A target is judged only
where its goal was given (``--targets FILE``, :mod:`gnnsched.evaluation.targets`)."""

from __future__ import annotations

from gnnsched.evaluation.judging.evaluation import invariants, targets
from gnnsched.evaluation.judging.scale_model import (
    noise,
    pooled_twin_noise,
    same_system,
    scale_model_targets,
    twin_noise,
)

__all__ = ["invariants", "noise", "pooled_twin_noise", "same_system", "scale_model_targets",
           "targets", "twin_noise"]
