"""gnnsched.trace: the numbers of a traced run's timeline, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsched.trace import load, summarize, wire_order


def _run(tmp_path: Path, records: list[dict]) -> Path:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


def _batch(w: int, seq: int, epoch: int, time: float) -> dict:
    return {"type": "batch", "trainer": w, "seq": seq, "epoch": epoch, "phase": "train",
            "time": time, "train_s": 0.01, "allreduce_s": 0.02}


def test_summary_of_a_small_timeline(tmp_path: Path) -> None:
    recs = [
        _batch(0, 0, 0, 0.5),  # first epoch: warm-up, left out
        {"type": "dispatch", "trainer": 0, "seq": 1, "t": 1.0},
        {"type": "sampled", "trainer": 0, "seq": 1, "t": 1.05},
        # two feature transfers from one store, overlapping for 0.05 s
        {"type": "transfer", "trainer": 0, "seq": 1, "kind": "feat", "src": "s0",
         "dst": "g0", "bytes": 1000, "queued": 1.06, "done": 1.16},
        {"type": "transfer", "trainer": 0, "seq": 1, "kind": "feat", "src": "s0",
         "dst": "g0", "bytes": 3000, "queued": 1.11, "done": 1.21},
        {"type": "transfer", "trainer": 0, "seq": 0, "kind": "feat", "src": "s0",
         "dst": "g0", "bytes": 9, "queued": 0.1, "done": 0.2},  # warm-up batch: left out
        _batch(0, 1, 1, 1.33),
    ]
    s = summarize(load(_run(tmp_path, recs)))
    assert s["batches"] == 1
    feat = s["transfers"]["feat"]
    assert feat["seconds"]["n"] == 2 and feat["seconds"]["p50"] == pytest.approx(0.1)
    snd = s["senders"]["s0"]
    assert snd["transfers"] == 2 and snd["busy_fraction"] == pytest.approx(1.0)
    assert snd["mean_in_flight"] == pytest.approx(0.2 / 0.15)  # 0.2 s of transfers in 0.15 s
    pipe = s["pipeline"]
    assert pipe["dispatch_to_sampled"]["p50"] == pytest.approx(0.05)
    assert pipe["sampled_to_features"]["p50"] == pytest.approx(0.16)
    assert pipe["dispatch_to_train"]["p50"] == pytest.approx(0.3)  # 1.33 - 0.03 - 1.0


def test_wire_order_counts_transfers_that_finished_out_of_iteration_order() -> None:
    """At receiver g0: iteration 2 from s1 overtook iteration 1 from s0 while both were on
    the wire; iteration 3 overlapped iteration 1 and finished after it; 2 and 3 never met.
    Recorded priority keys, where there are, are the order instead of the iteration."""
    def move(seq: int, src: str, queued: float, done: float, dst: str = "g0") -> dict:
        return {"trainer": 0, "seq": seq, "kind": "feat", "src": src, "dst": dst,
                "bytes": 1, "queued": queued, "done": done}

    got = wire_order([move(1, "s0", 0.0, 1.0), move(2, "s1", 0.1, 0.5),
                      move(3, "s1", 0.6, 1.2), move(1, "s1", 0.0, 0.2, dst="g1"),
                      move(1, "s0", 0.0, 0.3, dst="g1")])
    assert got["g0"] == {"overlapping_pairs": 2, "out_of_order": pytest.approx(0.5)}
    assert got["g1"] == {"overlapping_pairs": 0, "out_of_order": 0.0}  # same iteration
    # with the policy's keys: iteration 2's sampling answer ranks with iteration 1's data
    # (key (1, 0) before (1, 1)), so finishing first is the policy's order
    keyed = [{**move(2, "s1", 0.1, 0.5), "kind": "struct", "key": [1, 0]},
             {**move(1, "s0", 0.0, 1.0), "key": [1, 1]}]
    assert wire_order(keyed)["g0"] == {"overlapping_pairs": 1, "out_of_order": 0.0}


def test_bad_runs_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metrics.jsonl: not found"):
        load(tmp_path / "nope")
    (tmp_path / "metrics.jsonl").write_text('{"type": "batch"}\n{oops\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not JSON"):
        load(tmp_path)
    with pytest.raises(ValueError, match="gnnsched train --trace"):
        summarize(load(_run(tmp_path, [_batch(0, 1, 1, 1.0)])))


def test_simulated_timeline_summary_matches_its_flows() -> None:
    """summarize_sim counts one flow per sender, kind and batch after warm-up, and its
    pipeline gaps are the simulator's own batch times."""
    import numpy as np
    from builders import make_problem

    from gnnsched.simulator import Instance, run, workload_for
    from gnnsched.trace import format_summary, summarize_sim

    cluster, job, prof, plan = make_problem(gbps=0.5)
    inst = Instance(workload_for(cluster, job, prof), plan, seed=1, iterations=10)
    res = run(inst, "fifo", record=True)
    s = summarize_sim(res)
    W, K = res.times["sample_start"].shape
    assert s["batches"] == W * (K - 1)
    feat = s["transfers"]["feat"]["seconds"]
    assert feat["n"] >= W * (K - 1) and 0 < feat["p10"] <= feat["p50"] <= feat["p90"]
    lead = (res.times["train_start"] - res.times["sample_start"])[:, 1:]
    assert s["pipeline"]["dispatch_to_train"]["p50"] == np.median(lead)
    assert all(0 < v["busy_fraction"] <= 1 and v["mean_in_flight"] >= 1
               for v in s["senders"].values())
    assert "steady-state training steps" in format_summary(s, "sim")
    with pytest.raises(ValueError, match="record=True"):
        summarize_sim(run(inst, "fifo"))


def test_sampler_and_relay_transfers_are_summarised_in_pipeline_order(tmp_path: Path) -> None:
    """block (sampler > trainer) and relay (relay > trainer) records sit beside the stores'
    in the simulator's order, and count toward their sender's NIC with the stores' own."""
    from gnnsched.simulator import KINDS
    from gnnsched.trace import KINDS as TRACE_KINDS
    from gnnsched.trace import format_summary

    def move(kind: str, src: str, queued: float, done: float, nbytes: int = 100) -> dict:
        return {"type": "transfer", "trainer": 0, "seq": 1, "kind": kind, "src": src,
                "dst": "g0", "bytes": nbytes, "queued": queued, "done": done}

    recs = [
        {"type": "dispatch", "trainer": 0, "seq": 1, "t": 1.0},
        {"type": "sampled", "trainer": 0, "seq": 1, "t": 1.05},
        move("relay", "s0", 1.20, 1.30, 4000),
        move("feat", "s1", 1.06, 1.16),
        move("block", "s1", 1.05, 1.07, 2000),
        move("struct", "s1", 1.01, 1.02),
        _batch(0, 1, 1, 1.5),
    ]
    s = summarize(load(_run(tmp_path, recs)))
    assert TRACE_KINDS == KINDS
    assert list(s["transfers"]) == ["struct", "block", "feat", "relay"]
    assert s["transfers"]["relay"]["seconds"]["p50"] == pytest.approx(0.1)
    assert s["transfers"]["block"]["bytes"]["p50"] == 2000
    assert s["senders"]["s1"]["transfers"] == 3
    assert s["senders"]["s1"]["kinds"] == {"struct": 1, "block": 1, "feat": 1}
    assert s["senders"]["s0"]["kinds"] == {"relay": 1}
    # features at the fetch site (the relay's gather), not at the trainer
    assert s["pipeline"]["sampled_to_features"]["p50"] == pytest.approx(0.11)
    text = format_summary(s, "run")
    assert "relay    relay > trainer" in text and "block    sampler > trainer" in text
    assert "s1" in text and "struct 1, block 1, feat 1" in text


def test_coordinator_pairs_a_push_with_its_receipt_in_either_order() -> None:
    """The sender's report (queued) and the trainer's receipt (done, bytes) come on different
    connections: one transfer record either way, never done < queued."""
    from types import SimpleNamespace

    from gnnsched.runtime.coordinator import PolicyDriver

    out: list[dict] = []
    state = SimpleNamespace(T=[1], cluster=SimpleNamespace(
        machines=[SimpleNamespace(name="store0"), SimpleNamespace(name="gpu0")]))
    c = SimpleNamespace(handoffs={}, event=out.append, state=state)
    PolicyDriver._handoff(c, 0, 3, "relay", src=0, queued=1.0)
    assert not out
    PolicyDriver._handoff(c, 0, 3, "relay", done=1.25, bytes=4096)
    PolicyDriver._handoff(c, 0, 4, "block", done=2.0, bytes=512)  # receipt first
    PolicyDriver._handoff(c, 0, 4, "block", src=0, queued=2.1)
    assert out == [
        {"type": "transfer", "trainer": 0, "seq": 3, "kind": "relay", "src": "store0",
         "dst": "gpu0", "bytes": 4096, "queued": 1.0, "done": 1.25},
        {"type": "transfer", "trainer": 0, "seq": 4, "kind": "block", "src": "store0",
         "dst": "gpu0", "bytes": 512, "queued": 2.1, "done": 2.1}]
    assert not c.handoffs
