"""The event-driven simulator: conservation, capacities, barrier, determinism, bad input.

The small cluster/plan builders it shares with the policy, bound and trace tests are in
tests/builders.py; random small instances come from ``small_instance`` in
tests/exact_schedules.py.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from builders import make_problem
from exact_schedules import small_instance

from gnnsched.bounds import instance_bound
from gnnsched.plan import Plan, TrainerPlan
from gnnsched.policy import GnnSched
from gnnsched.profile import synthetic_profile
from gnnsched.simulator import (
    Instance,
    _FairNet,
    _Flow,
    _PriorityNet,
    _WindowNet,
    run,
    simulate,
    workload_for,
)
from gnnsched.spec import GB, GBIT, GPU, ClusterSpec, JobSpec, Machine, SpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def timeline_checks(res, inst: Instance) -> None:
    """Capacity at every instant, bytes conserved, every batch trained once, barrier kept."""
    spans = res.timeline
    assert spans is not None
    events = defaultdict(list)
    for s in spans:
        assert s.end >= s.start - 1e-12, s
        events[s.resource].append((s.start, s.rate))
        events[s.resource].append((s.end, -s.rate))
    for resource, ev in events.items():
        ev.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
        cap, cur = res.capacity[resource], 0.0
        for _, d in ev:
            cur += d
            assert cur <= cap * (1 + 1e-9) + 1e-9, (resource, cur, cap)
    # bytes: every transfer of every batch fully sent, through both of its NICs
    names = inst.names
    want: dict[tuple, float] = defaultdict(float)
    for w in range(inst.W):
        T, F = inst.T[w], inst.F[w]
        for k in range(inst.K):
            S = None
            for s in spans:  # where it was sampled
                if s.stage == "sample" and s.trainer == w and s.iteration == k:
                    S = names.index(s.resource.split(":", 1)[1])
            assert S is not None
            for m, b in inst.struct[w][k]:
                if m != S:
                    want[(names[m], names[S], "struct", w, k)] += b
            if S != T:
                want[(names[S], names[T], "block", w, k)] += inst.block[w][k]
            for m, b in inst.feat[w][k]:
                if m != F:
                    want[(names[m], names[F], "feat", w, k)] += b
            if F != T:
                want[(names[F], names[T], "relay", w, k)] += inst.feat_total[w][k]
    sent: dict[tuple, float] = defaultdict(float)
    got: dict[tuple, float] = defaultdict(float)
    for s in spans:
        kind, _, host = s.resource.partition(":")
        if kind in ("egress", "ingress") and s.stage != "allreduce":
            (sent if kind == "egress" else got)[(host, s.stage, s.trainer, s.iteration)] += \
                s.rate * (s.end - s.start)
    want_out: dict[tuple, float] = defaultdict(float)
    want_in: dict[tuple, float] = defaultdict(float)
    for (src, dst, stage, w, k), b in want.items():
        want_out[(src, stage, w, k)] += b
        want_in[(dst, stage, w, k)] += b
    for key, b in want_out.items():
        assert sent[key] == pytest.approx(b, rel=1e-6), key
    for key, b in want_in.items():
        assert got[key] == pytest.approx(b, rel=1e-6), key
    assert sum(sent.values()) == pytest.approx(sum(want.values()), rel=1e-6)
    trains = [(s.trainer, s.iteration) for s in spans if s.stage == "train"]
    assert sorted(trains) == [(w, k) for w in range(inst.W) for k in range(inst.K)]
    ts, te, B = res.times["train_start"], res.times["train_end"], res.barriers
    A = inst.allreduce_s
    for k in range(inst.K):
        assert B[k] == pytest.approx(te[:, k].max() + A, rel=1e-9, abs=1e-12)
        if k:
            assert (ts[:, k] >= B[k - 1] - 1e-12).all()


# ------------------------------------------------------------------------------ networks


def _flows(net, specs, M=2):
    out = []
    for i, (src, dst, nbytes, key) in enumerate(specs):
        f = _Flow(i, src, dst, M, nbytes, 2, 0, 0)
        if key is not None:  # fair sharing: no key (one class)
            f.skey = key + (i,)
        net.add(f, 0.0)
        out.append(f)
    net.commit(0.0)
    return out


def test_fair_sharing_is_max_min_fair():
    # egress s0=10, s1=10; ingress g0=2, g1=10 (M=2: machines 0,1; resources eg0 eg1 in0 in1)
    cap = [10.0, 10.0, 2.0, 10.0]
    net = _FairNet(cap, lambda t, o: None, None)
    a, b, c = _flows(net, [(0, 0, 1.0, None), (0, 1, 1.0, None), (1, 1, 1.0, None)])
    groups = {(g.s, g.d): g.rate for g in net.groups.values()}
    assert groups[(0, 2)] == pytest.approx(2.0)  # a: limited by g0's ingress
    assert groups[(0, 3)] == pytest.approx(5.0)  # b and c share g1's ingress
    assert groups[(1, 3)] == pytest.approx(5.0)


def test_fair_repair_equals_progressive_filling(monkeypatch):
    """The incremental level repair gives exactly what filling everything from scratch gives."""
    insts = [small_instance(seed, 6, max_trainers=3, uniform_nics=seed % 2 == 0)
             for seed in range(12)]
    fast = [run(i, "fifo").makespan_s for i in insts]
    monkeypatch.setattr(_FairNet, "_repair", lambda self, changed: False)
    slow = [run(i, "fifo").makespan_s for i in insts]
    assert fast == pytest.approx(slow, rel=1e-12)


def test_priority_sharing_is_work_conserving_in_order():
    cap = [10.0, 10.0, 2.0, 10.0]
    net = _PriorityNet(cap, lambda t, o: None, None)
    a, b, c = _flows(net, [(0, 0, 1.0, (0,)), (0, 1, 1.0, (1,)), (1, 1, 1.0, (2,))])
    assert (a.rate, b.rate, c.rate) == pytest.approx((2.0, 8.0, 2.0))
    # the same flows in the other order: c first takes all of g1's ingress
    net = _PriorityNet(cap, lambda t, o: None, None)
    a, b, c = _flows(net, [(0, 0, 1.0, (2,)), (0, 1, 1.0, (1,)), (1, 1, 1.0, (0,))])
    assert (a.rate, b.rate, c.rate) == pytest.approx((2.0, 0.0, 10.0))


# ------------------------------------------------------------------------------ simulator


class _IterationClasses(GnnSched):
    """Strict priority between iterations, fair sharing within one ("classes" NICs)."""

    sharing = "classes"

    def priority(self, transfer):
        return (transfer.batch.iteration, transfer.seq)


@pytest.mark.parametrize("policy", ["fifo", "gnnsched", _IterationClasses])
@pytest.mark.parametrize("variant", [
    {},
    {"samplers": 2, "cpus": 1},  # cores shared by more samplers than cores
    {"fetch_at_store": True, "latency": 5e-4},  # relays and message latency
    {"sampler_on_gpu": True, "gpu_gbps": 0.5, "speeds": [1.0, 2.0]},  # uneven NICs, devices
    {"gpus_per_host": 2, "gpu_hosts": 1, "skew": 1.0},  # trainers sharing a NIC; skew
    {"gbps": 0.3, "nic_window_s": 0.002},  # the runtime's NICs: FCFS behind a short window
    {"barrier_skew_s": ((0.0, 0.002), (0.01, 0.0))},  # trainers leave the all-reduce apart
])
def test_timeline_is_consistent(policy, variant):
    variant = dict(variant)
    skew = variant.pop("skew", 0.0)
    window = variant.pop("nic_window_s", None)
    barrier_skew = variant.pop("barrier_skew_s", ())
    cluster, job, prof, plan = make_problem(skew=skew, **variant)
    prof = replace(prof, barrier_skew_s=barrier_skew)
    inst = Instance(workload_for(cluster, job, prof), plan, seed=3, iterations=6,
                    nic_window_s=window)
    res = run(inst, policy if isinstance(policy, str) else policy(), record=True)
    timeline_checks(res, inst)
    assert res.makespan_s >= instance_bound(inst).epoch_s * (1 - 1e-9)
    # every trainer's epoch is train + stall + barrier time
    for st in res.stages:
        assert st["train"] + st["stall"] + st["barrier"] == pytest.approx(res.makespan_s)
    # the critical path tiles the epoch
    assert sum(res.critical_share.values()) == pytest.approx(res.makespan_s, rel=1e-6)
    path = res.critical_path
    assert path[0].start == pytest.approx(0.0, abs=1e-12)
    for a, b in zip(path, path[1:]):
        assert b.start == pytest.approx(a.end, abs=1e-9)
    # prefetch window: batch k starts sampling only once batch k - prefetch started training
    pf = res.meta["prefetch"]
    ss, ts = res.times["sample_start"], res.times["train_start"]
    assert (ss[:, pf:] >= ts[:, :-pf] - 1e-12).all()


def test_window_net_is_the_runtimes_connections_behind_a_window():
    """The runtime's NICs (_WindowNet): a receiver's transfers go first come first served in
    its one connection, connections share a NIC fairly, and what waits behind a full window
    (a connection's, or the sender's in all) enters in policy order."""
    cap = [10.0] * 6  # M=3: egress 0..2, ingress 3..5

    def admitted(net):
        return {f.fid for g in net.inner.groups.values() for _, _, f in g.heap}

    done = []
    net = _WindowNet(cap, lambda t, g: done.append(t), None, 10.0, 3, False)
    _flows(net, [(0, 1, 1.0, None), (0, 2, 1.0, None)], M=3)
    assert sorted(g.rate for g in net.inner.groups.values()) == pytest.approx([5.0, 5.0])
    done.clear()
    net = _WindowNet(cap, lambda t, g: done.append(t), None, 10.0, 3, False)
    a, b = _flows(net, [(0, 1, 1.0, None), (0, 1, 1.0, None)], M=3)
    (g,) = net.inner.groups.values()
    assert g.rate == pytest.approx(10.0) and done == pytest.approx([0.1])  # a alone, first
    assert net.done(g, g.ver, 0.1) is a
    net.commit(0.1)
    assert done[-1] == pytest.approx(0.2)  # then b, at the full rate
    # windows of 0.2 s of egress in all (2 bytes) and 0.1 s (1 byte) per connection, on a
    # priority policy: the first transfer to receiver 1 goes in at once; the urgent and the
    # later one to receiver 1 wait behind its full connection, so the one to receiver 2 goes
    # in; when the first completes, the urgent one enters
    net = _WindowNet(cap, lambda t, g: None, None, 0.2, 3, True, 0.1)
    first, other, later, urgent = _flows(net, [(0, 1, 1.0, (2,)), (0, 2, 1.0, (3,)),
                                               (0, 1, 1.0, (1,)), (0, 1, 1.0, (0,))], M=3)
    assert admitted(net) == {first.fid, other.fid}
    g = next(g for g in net.inner.groups.values() if g.d == 3 + 1)
    net.done(g, g.ver, 0.1)
    assert admitted(net) == {other.fid, urgent.fid}
    # one window of 1 byte in all: everything else waits, and enters by its key
    net = _WindowNet(cap, lambda t, g: None, None, 0.1, 3, True)
    first, later, urgent = _flows(net, [(0, 1, 1.0, (2,)), (0, 2, 1.0, (1,)),
                                        (0, 1, 1.0, (0,))], M=3)
    assert admitted(net) == {first.fid}
    (g,) = net.inner.groups.values()
    net.done(g, g.ver, 0.1)
    assert admitted(net) == {urgent.fid}
    # a huge transfer to a congested receiver holds only its connection's window of the total
    net = _WindowNet(cap, lambda t, g: None, None, 0.2, 3, True, 0.1)
    huge, small = _flows(net, [(0, 1, 50.0, (0,)), (0, 2, 0.5, (1,))], M=3)
    assert admitted(net) == {huge.fid, small.fid}
    # work conservation: receivers 1 and 2 take 1 of the sender's 10 each, so the transfers
    # filling its window wait at them; the one to idle receiver 3 goes past the window ...
    cap4 = [10.0] * 4 + [10.0, 1.0, 1.0, 10.0]  # M=4: egress 0..3, ingress 4..7
    specs = [(0, 1, 1.0, (0,)), (0, 2, 1.0, (1,)), (0, 3, 1.0, (2,)), (0, 3, 1.0, (3,))]
    net = _WindowNet(cap4, lambda t, g: None, None, 0.2, 4, True, 0.1)
    a, b, c, d = _flows(net, specs, M=4)
    assert admitted(net) == {a.fid, b.fid, c.fid} and net.passed == 1
    assert sorted(g.rate for g in net.inner.groups.values()) == pytest.approx([1, 1, 8])
    # ... and the next (its stream full, the NIC busy) waits for the window
    net.commit(1.0)
    assert d.fid not in admitted(net)
    off = _WindowNet(cap4, lambda t, g: None, None, 0.2, 4, True, 0.1, conserve=False)
    a, b, c, d = _flows(off, specs, M=4)
    assert admitted(off) == {a.fid, b.fid}  # c waits while the NIC runs at 2 of its 10
    # a NIC that is itself the bottleneck lets nothing past: the policy's order holds
    busy = _WindowNet([10.0] * 8, lambda t, g: None, None, 0.2, 4, True, 0.1)
    a, b, c, d = _flows(busy, specs, M=4)
    assert admitted(busy) == {a.fid, b.fid} and busy.passed == 0
    cluster, job, prof, plan = make_problem()
    with pytest.raises(ValueError, match="nic_window_s must be > 0"):
        simulate(cluster, job, plan, prof, "fifo", iterations=2, nic_window_s=0.0)
    with pytest.raises(ValueError, match="nic_chunk_s must be > 0"):
        simulate(cluster, job, plan, prof, "fifo", iterations=2, nic_window_s=0.1,
                 nic_chunk_s=-1.0)


def test_window_model_pieces_default_to_the_runtime_chunk():
    """`nic_chunk_s` (what-if studies of smaller windows) defaults to the runtime's chunk,
    and a smaller piece changes how bytes interleave, so the epoch moves."""
    from gnnsched.workload import NIC_CHUNK_S

    cluster, job, prof, plan = make_problem(gbps=0.3)
    kw = {"seed": 1, "iterations": 4, "nic_window_s": 0.02}
    base = simulate(cluster, job, plan, prof, "gnnsched", **kw).epoch_time_s
    same = simulate(cluster, job, plan, prof, "gnnsched", nic_chunk_s=NIC_CHUNK_S,
                    **kw).epoch_time_s
    assert same == base
    fine = simulate(cluster, job, plan, prof, "gnnsched", nic_chunk_s=NIC_CHUNK_S / 40,
                    **kw).epoch_time_s
    assert fine > 0 and fine != base


def test_barrier_skew_delays_each_trainers_next_step():
    """With a calibrated barrier skew no trainer starts a step before it left the last
    all-reduce, which is never before the barrier; a constant skew makes nothing faster."""
    cluster, job, prof, plan = make_problem(gbps=5.0)
    base = simulate(cluster, job, plan, prof, "fifo", seed=2, iterations=8)
    late = simulate(cluster, job, plan, replace(prof, barrier_skew_s=((0.03, 0.03),)), "fifo",
                    seed=2, iterations=8)
    ts, B = late.times["train_start"], late.barriers
    assert (ts[:, 1:] >= B[None, :-1] + 0.03 - 1e-9).all()
    assert late.makespan_s > base.makespan_s
    for st in late.stages:  # the wait after the barrier counts as barrier, as the runtime's
        assert st["barrier"] >= 0.03 * 7 - 1e-9


def test_recording_does_not_change_the_schedule():
    cluster, job, prof, plan = make_problem(gbps=0.5)
    inst = Instance(workload_for(cluster, job, prof), plan, seed=1, iterations=8)
    for policy in ("fifo", "gnnsched"):
        a, b = run(inst, policy), run(inst, policy, record=True)
        assert a.makespan_s == b.makespan_s and a.timeline is None and b.timeline


def test_deterministic_by_seed():
    cluster, job, prof, plan = make_problem()
    a = simulate(cluster, job, plan, prof, "gnnsched", seed=4, iterations=6)
    b = simulate(cluster, job, plan, prof, "gnnsched", seed=4, iterations=6)
    c = simulate(cluster, job, plan, prof, "gnnsched", seed=5, iterations=6)
    assert a.makespan_s == b.makespan_s
    np.testing.assert_array_equal(a.barriers, b.barriers)
    assert a.makespan_s != c.makespan_s


def test_extrapolates_when_fewer_iterations_run():
    cluster, job, prof, plan = make_problem()
    full = simulate(cluster, job, plan, prof, "gnnsched")
    part = simulate(cluster, job, plan, prof, "gnnsched", iterations=full.iterations // 2)
    assert not full.extrapolated and part.extrapolated
    assert part.epoch_time_s == pytest.approx(full.epoch_time_s, rel=0.15)


def test_single_machine_needs_no_network():
    m = Machine("solo", 4, 64 * GB, GBIT, GBIT, (GPU(), GPU()), (0, 1))
    cl = ClusterSpec("solo", (m,))
    job = JobSpec(num_parts=2, trainers=2, batch_size=128, dataset="synthetic")
    prof = synthetic_profile(2, batch_size=128)
    plan = Plan("t", "solo", cl.fingerprint(), tuple(
        TrainerPlan(w, "solo", w, (w,), (("solo", 1),), "solo") for w in range(2)))
    res = simulate(cl, job, plan, prof, "fifo", record=True, iterations=5)
    assert not [s for s in res.timeline if s.resource.startswith(("egress", "ingress"))]
    assert res.epoch_time_s >= res.lower_bound_s


def test_examples_simulate():
    from gnnsched.profile import profile_for
    from gnnsched.spec import load_cluster, load_job

    cl = load_cluster(EXAMPLES / "hetero16" / "cluster.yaml")
    job = load_job(EXAMPLES / "hetero16" / "job.yaml")
    prof = profile_for(job)
    gpus = [(m.name, d) for m in cl.machines if m.name.startswith("gpu")
            for d in range(m.num_gpus)]
    plan = Plan("t", cl.name, cl.fingerprint(), tuple(
        TrainerPlan(w, gpus[w][0], gpus[w][1], (w,),
                    ((cl.machines[cl.store_of(w)].name, 2),), gpus[w][0])
        for w in range(job.trainers)))
    res = {p: simulate(cl, job, plan, prof, p) for p in ("fifo", "gnnsched")}
    assert res["gnnsched"].epoch_time_s < res["fifo"].epoch_time_s
    assert min(r.epoch_time_s for r in res.values()) >= res["fifo"].lower_bound_s
    # lab4: no GPU on the stores; a synthetic profile with its 4 partitions
    cl4 = load_cluster(EXAMPLES / "lab4" / "cluster.yaml")
    job4 = load_job(EXAMPLES / "lab4" / "job.yaml")
    prof4 = synthetic_profile(4, batch_size=job4.batch_size, fanouts=job4.fanouts)
    plan4 = Plan("t", cl4.name, cl4.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 2),), "gpu0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 2),), "gpu1")))
    r4 = simulate(cl4, job4, plan4, prof4, "gnnsched", iterations=20)
    assert r4.epoch_time_s > 0 and r4.lower_bound_s > 0


# ------------------------------------------------------------------------------ bad input


def _replace_trainer(plan: Plan, i: int, **kw) -> Plan:
    from dataclasses import replace

    ts = list(plan.trainers)
    ts[i] = replace(ts[i], **kw)
    return replace(plan, trainers=tuple(ts), cluster_fingerprint="")


def test_plan_with_unknown_machine_is_rejected():
    cluster, job, prof, plan = make_problem()
    bad = _replace_trainer(plan, 1, samplers=(("nowhere", 1),))
    with pytest.raises(SpecError) as err:
        simulate(cluster, job, bad, prof)
    assert err.value.field == "trainers[1].samplers[0].machine" and "nowhere" in str(err.value)


def test_trainer_without_device_is_rejected():
    cluster, job, prof, plan = make_problem()
    bad = _replace_trainer(plan, 0, machine="s0", device=0)
    with pytest.raises(SpecError) as err:
        simulate(cluster, job, bad, prof)
    assert err.value.field == "trainers[0].device" and "'s0'" in str(err.value)


def test_profile_of_another_job_is_rejected():
    cluster, job, prof, plan = make_problem()
    other = synthetic_profile(8)  # other partitioning
    with pytest.raises(SpecError) as err:
        simulate(cluster, job, plan, other)
    assert "num_parts" in err.value.field
    measured = synthetic_profile(4, batch_size=512)  # "measured" for batch 512, not 256
    measured.synthetic = False
    measured.job_key = {**job.profile_key(), "batch_size": 512}
    with pytest.raises(SpecError) as err:
        simulate(cluster, job, plan, measured)
    assert err.value.field == "job.batch_size"


def test_cli_simulate(tmp_path, capsys):
    import yaml

    from gnnsched.cli import main

    cluster, job, prof, plan = make_problem()
    cdir = tmp_path / "c.yaml"
    cdir.write_text(yaml.safe_dump(cluster.to_dict()))
    from gnnsched.spec import load_cluster

    loaded = load_cluster(cdir)
    plan = Plan(plan.placer, loaded.name, loaded.fingerprint(), plan.trainers)
    plan.save(tmp_path / "plan.json")
    jd = job.to_dict()
    jd["synthetic"] = {"seeds_per_part": 800}
    (tmp_path / "j.yaml").write_text(yaml.safe_dump(jd))
    png = tmp_path / "g.png"
    rc = main(["simulate", "--cluster", str(cdir), "--job", str(tmp_path / "j.yaml"),
               "--plan", str(tmp_path / "plan.json"), "--policy", "fifo", "--json",
               "--gantt", str(png), "--timeline"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("epoch_time_s", "iteration_time_s", "per_plan_bound_s", "policy"):
        assert key in out
    assert out["timeline"]["transfers"]["feat"]["seconds"]["n"] > 0
    assert out["policy"] == "fifo" and out["epoch_time_s"] >= out["per_plan_bound_s"]
    assert out["any_placement_bound_s"] is None  # a plan not made by `gnnsched plan`
    assert png.stat().st_size > 10_000
    # a plan naming a machine the cluster lacks: exit 2 with the field in the message
    bad = json.loads((tmp_path / "plan.json").read_text())
    bad["trainers"][0]["machine"] = "ghost"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc = main(["simulate", "--cluster", str(cdir), "--job", str(tmp_path / "j.yaml"),
               "--plan", str(tmp_path / "bad.json")])
    assert rc == 2
    assert "trainers[0].machine" in capsys.readouterr().err
    # the runtime's NIC model, and a bad window named by its flag
    args = ["simulate", "--cluster", str(cdir), "--job", str(tmp_path / "j.yaml"),
            "--plan", str(tmp_path / "plan.json"), "--iterations", "4"]
    assert main(args + ["--nic-window", "150"]) == 0
    assert "runtime NICs: connections behind a 150 ms window" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # refused by the parser, before any file is read
        main(args + ["--nic-window", "0"])
    assert exc.value.code == 2
    assert "argument --nic-window: '0' is out of range (valid: milliseconds > 0" in \
        capsys.readouterr().err


def test_a_trainers_batches_mix_its_partitions_by_their_seeds():
    """The runtime shuffles a trainer's seeds together, so every drawn batch holds one
    profiled sample of each partition it owns, weighted by its seeds there; a one-partition
    trainer's draws are what they were before batches were mixed; the load scales the mix."""
    from gnnsched.plan import owned_key
    from gnnsched.workload import Workload

    cluster, job, prof, plan = make_problem()
    wl = Workload(cluster, job, prof)
    parts = tuple(range(prof.num_parts))[:2]
    mix = wl.draws(parts, seed=3, K=5)
    seeds = wl.seeds[list(parts)]
    assert len(mix) == 5
    for batch in mix:
        assert [q for q, _, _ in batch] == list(parts)
        assert [f for _, _, f in batch] == pytest.approx(list(seeds / seeds.sum()))
        assert all(0 <= i < prof.part(q).n for q, i, _ in batch)
    one = wl.draws(parts[:1], seed=3, K=5)
    rng = np.random.default_rng([3, *[p for p, _ in owned_key(parts[:1], ())]])
    rng.choice(1, size=5, p=[1.0])
    n = prof.part(parts[0]).n
    assert [b[0][1] for b in one] == [min(int(u * n), n - 1) for u in rng.random(5)]
    c = wl.drawn_cost(parts, seed=3, K=5)
    want = sum(f * float(prof.part(q).sample_s[i]) for b in mix for q, i, f in b) / 5
    assert c.sample_s == pytest.approx(want * wl.load(parts))


def _drive(net, arrivals, until=100.0):
    """Run `net` alone: `arrivals` [(time, flow)], completions in time order; returns
    {fid: finish time} of the transfers and the most bytes its streams held at once."""
    heap, out, most = [], {}, 0.0
    net.inner.schedule = lambda t, g: heapq.heappush(heap, (t, id(g), g, g.ver))
    pending = sorted(arrivals, key=lambda x: x[0])
    now = 0.0
    while pending or heap:
        if pending and (not heap or pending[0][0] <= heap[0][0]):
            now, f = pending.pop(0)
            net.add(f, now)
        else:
            now, _, g, ver = heapq.heappop(heap)
            f = net.done(g, ver, now)
            if f is not None:
                out[f.fid] = now
        if net.dirty and (not heap or heap[0][0] > now) and \
                (not pending or pending[0][0] > now):
            net.commit(now)
        most = max(most, sum(net.queued.values()))
        assert now < until
    return out, most


def test_window_net_levels_keep_the_current_iteration_ahead_on_the_wire():
    """As the runtime's NicQueue with ``levels``: a sender hands no connection a later
    iteration's piece while an earlier one's are in its streams, though both receivers'
    windows have room, so the current iteration gets the whole NIC where the streams alone
    share it fairly; and when the earlier iteration's receiver is congested and the NIC
    idles, the later transfer goes past (work conservation)."""

    def run(levels, slow_receiver=False):
        cap = [10.0] * 6  # M=3: egress 0..2, ingress 3..5, 10 bytes/s
        if slow_receiver:
            cap[4] = 2.0  # ingress of machine 1
        now = _Flow(0, 0, 1, 3, 5.0, 2, 0, 0)
        now.skey = (0, 1, 10.0, 0)
        later = _Flow(1, 0, 2, 3, 5.0, 2, 1, 1)
        later.skey = (1, 1, 10.0, 1)
        net = _WindowNet(cap, None, None, 2.0, 3, True, 1.5, piece_s=0.01, levels=levels)
        return _drive(net, [(0.0, now), (0.0, later)])[0]

    fair, kept = run(False), run(True)
    assert fair[0] == pytest.approx(1.0) and fair[1] == pytest.approx(1.0)  # half each
    assert kept[0] == pytest.approx(0.5) and kept[1] == pytest.approx(1.0)  # in order
    stuck = run(True, slow_receiver=True)
    assert stuck[0] == pytest.approx(2.5)  # its receiver's 2 bytes/s
    # the NIC at 20% of its rate: the later iteration goes past after a conservation check
    # (a quarter of the window's drain time), at the 8 bytes/s the stuck one leaves
    assert stuck[1] < 0.5 + 0.1 + 5.0 / 8.0


def test_window_net_levels_hold_a_transfer_above_its_receivers_floor():
    """A receiver's floor is the lowest level of every sender's unfinished transfers to it:
    a sender holds a higher level for that receiver, though nothing of its own is in flight,
    and sends its other receivers' meanwhile; the held one starts when the floor rises."""
    cap = [10.0] * 6  # M=3, 10 bytes/s everywhere

    def run(levels, piece_s=0.01):
        current = _Flow(0, 0, 2, 3, 5.0, 2, 0, 0)  # machine 0 -> 2, iteration 0
        current.skey = (0, 1, 10.0, 0)
        early = _Flow(1, 1, 2, 3, 5.0, 2, 1, 1)  # machine 1 -> 2, iteration 1
        early.skey = (1, 1, 10.0, 1)
        other = _Flow(2, 1, 0, 3, 5.0, 2, 2, 1)  # machine 1 -> 0, iteration 1
        other.skey = (1, 1, 10.0, 2)
        net = _WindowNet(cap, None, None, 2.0, 3, True, 1.5, piece_s=piece_s, levels=levels)
        return _drive(net, [(0.0, current), (0.0, early), (0.0, other)])[0]

    for piece_s in (0.01, None):  # in chunks, as the runtime's, and whole transfers
        done = run(True, piece_s)
        assert done[0] == pytest.approx(0.5)  # machine 2's ingress to itself
        assert done[2] == pytest.approx(0.5)  # machine 1's NIC to machine 0 meanwhile
        assert done[1] == pytest.approx(1.0)  # after the floor rose at 0.5
    assert run(False)[0] > 0.9  # without levels both senders share machine 2's ingress


def test_window_net_pieces_let_an_urgent_transfer_overtake_after_one_window():
    """As the runtime's NicQueue (chunks, the next from the most urgent transfer with room):
    an urgent transfer queued behind a large one to the same receiver waits for at most one
    per-receiver window of it; whole transfers made it wait for all of the large one. The
    streams never hold more than the total window (and a piece)."""
    cap = [10.0] * 6  # M=3: egress 0..2 and ingress 3..5 at 10 bytes/s

    def run(piece_s):
        big = _Flow(0, 0, 1, 3, 8.0, 2, 0, 0)
        big.skey = (1, 0)
        urgent = _Flow(1, 0, 1, 3, 0.8, 2, 0, 1)
        urgent.skey = (0, 1)
        side = _Flow(2, 0, 2, 3, 3.0, 2, 1, 0)
        side.skey = (2, 2)
        net = _WindowNet(cap, None, None, 0.2, 3, True, 0.15, conserve=False,
                         piece_s=piece_s)
        return _drive(net, [(0.0, big), (0.0, side), (0.5, urgent)])

    done, most = run(0.01)
    # its own 0.8 bytes, behind at most the 1.5-byte window of the large one, at 10 bytes/s
    # shared with the other receiver's stream: at most (1.5 + 0.8) / 5 after it arrives
    assert done[1] <= 0.5 + (1.5 + 0.8 + 0.1) / 5.0
    assert max(done.values()) == pytest.approx(11.8 / 10.0)  # the NIC never idled
    assert most <= 2.0 + 0.1 + 1e-9  # the total window, plus a piece
    whole, _ = run(None)
    assert whole[1] > whole[0]  # the urgent one waited for all of the large one
