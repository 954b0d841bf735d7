"""Remote hops wait in FIFO NIC queues (``nic_fifo_bytes``, :meth:`_Epoch.hop_wait`): a
sampler far from a busy store pays a round trip per layer behind the bytes queued at both
NICs; the ideal network and profiles whose sampling holds the wait already are not charged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gnnsched.calibrate import HOLDS_HOP_WAIT
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.profile import synthetic_profile
from gnnsched.simulator import _WindowNet, simulate
from gnnsched.simulator.network import _Flow
from gnnsched.spec import load_cluster, load_job
from gnnsched.workload import NIC_FIFO_BYTES, NIC_WINDOW_S

LAB4 = Path(__file__).resolve().parents[2] / "examples" / "lab4"


def _setup(near: bool):
    """lab4 with a synthetic profile; samplers beside their trainers' partitions (``near``)
    or each on the other store (every hop of a batch remote, behind that store's features)."""
    cl, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    prof = synthetic_profile(4, batch_size=job.batch_size, fanouts=job.fanouts)
    s0, s1 = ("store0", "store1") if near else ("store1", "store0")
    plan = Plan("t", cl.name, cl.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), ((s0, 1),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), ((s1, 1),), "gpu1")))
    return cl, job, prof, plan


def _slot_s(res) -> float:
    """Mean seconds a batch held its sampler: CPU, then the wait for its remote hops."""
    t = res.times
    return float(np.mean(t["sampled"] - t["sample_start"]))


def _sim(cl, job, prof, plan, **kw):
    return simulate(cl, job, plan, prof, "gnnsched", seed=0, iterations=12, **kw)


def test_a_far_sampler_waits_behind_the_stores_queues() -> None:
    waits = {}
    for near in (True, False):
        cl, job, prof, plan = _setup(near)
        with_fifo = _sim(cl, job, prof, plan, nic_window_s=NIC_WINDOW_S)
        without = _sim(cl, job, prof, plan, nic_window_s=NIC_WINDOW_S, nic_fifo_bytes=None)
        waits[near] = _slot_s(with_fifo) - _slot_s(without)
        assert waits[near] >= 0  # the wait only ever adds
        assert with_fifo.epoch_time_s >= without.epoch_time_s * (1 - 1e-9)
    # every hop remote and behind the other store's feature bytes: it pays more per batch
    assert waits[False] > 2 * waits[True] > 0, waits


def test_the_ideal_network_and_a_profile_holding_the_wait_are_not_charged() -> None:
    cl, job, prof, plan = _setup(False)
    ideal = _sim(cl, job, prof, plan)
    assert ideal.barriers.tolist() == _sim(cl, job, prof, plan,
                                           nic_fifo_bytes=NIC_FIFO_BYTES).barriers.tolist()
    held = replace(prof, meta={**prof.meta, HOLDS_HOP_WAIT: True})
    off = _sim(cl, job, prof, plan, nic_window_s=NIC_WINDOW_S, nic_fifo_bytes=None)
    assert _sim(cl, job, held, plan, nic_window_s=NIC_WINDOW_S).barriers.tolist() == \
        off.barriers.tolist()
    assert _sim(cl, job, prof, plan, nic_window_s=NIC_WINDOW_S).epoch_time_s > \
        off.epoch_time_s


def test_backlog_counts_each_stream_up_to_its_fifo_share() -> None:
    """Bytes ahead of a new message: each stream's unfinished bytes, at most ``fifo_bytes``
    of each (what one connection parks in the queue), summed over the sender's streams."""
    cap = [1e6, 1e6, 1e6, 1e6]  # egress 0, 1; ingress 0, 1
    net = _WindowNet(cap, lambda t, f: None, None, window_s=10.0, M=2, ordered=False,
                     fifo_bytes=1000.0)
    assert net.backlog(0) == 0.0
    for fid, (kind, nbytes) in enumerate(((2, 600.0), (0, 5000.0))):  # feat, struct streams
        net.add(_Flow(fid, 0, 1, 2, nbytes, kind, 0, 0), 0.0)
    assert net.backlog(0) == pytest.approx(600.0 + 1000.0)
    assert net.backlog(1) == 0.0
    off = _WindowNet(cap, lambda t, f: None, None, window_s=10.0, M=2, ordered=False)
    off.add(_Flow(9, 0, 1, 2, 5000.0, 2, 0, 0), 0.0)
    assert off.backlog(0) == 0.0  # no FIFO queue modelled
