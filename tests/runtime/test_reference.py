"""The single-process reference: on more threads it trains the same mini-batches (sampling
stays on one thread, DGL's RNG streams depend on the count), only faster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gnnsched.datasets.cache import partitions_for
from gnnsched.evaluation.config import make_job
from gnnsched.runtime.reference import reference_train


def test_two_threads_train_the_same_batches_as_one() -> None:
    job = replace(make_job("cora", 1), batch_size=64, epochs=2)
    parts = str(partitions_for(job, quiet=True))
    split = [[0, 1], [2, 3]]
    one = reference_train(job, parts, split, threads=1)
    two = reference_train(job, parts, split, threads=2)
    # the same batches and steps: the losses agree to float reduction order, not exactly
    assert two.train_loss == pytest.approx(one.train_loss, rel=1e-3)
    assert two.test_accuracy == pytest.approx(one.test_accuracy, abs=0.01)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        reference_train(job, parts, split, threads=0)
