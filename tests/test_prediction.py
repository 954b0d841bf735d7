"""One typed prediction: a plan file written by the previous version loads into a Prediction
whose mapping is the file's own; the file keeps that mapping plus a version; what does not
parse is kept, not lost; and the comparison hands every placer, a plug-in too, one context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsched.placement import PLACERS, Placer, Problem, get_placer
from gnnsched.placement.base import PlanningContext
from gnnsched.placement.compare import plan_and_compare
from gnnsched.placement.scoring import bound_scorer
from gnnsched.plan import Plan
from gnnsched.prediction import PREDICTION_VERSION, CpSatRecord, MadeFor, Prediction
from gnnsched.profile import synthetic_profile
from gnnsched.spec import SpecError, load_cluster, load_job

ROOT = Path(__file__).resolve().parents[1]
# `gnnsched plan` on examples/lab4 (a synthetic profile of Cora's shape, lab4-cost.json) with
# the code at commit 0d94329, before plans held a typed prediction
OLD_PLAN = ROOT / "tests" / "data" / "plan_lab4_0d94329.json"


def _lab4() -> Problem:
    c = load_cluster(ROOT / "examples" / "lab4" / "cluster.yaml")
    j = load_job(ROOT / "examples" / "lab4" / "job.yaml")
    return Problem(c, j, synthetic_profile(4, seeds_per_part=64, batch_size=j.batch_size,
                                           fanouts=j.fanouts, feature_dim=1433,
                                           hidden=j.hidden))


def test_a_plan_written_by_the_previous_version_loads() -> None:
    raw = json.loads(OLD_PLAN.read_text())
    old = raw["predicted"]
    assert "version" not in old  # the old format: a bare mapping
    plan = Plan.load(OLD_PLAN)
    pr = plan.prediction
    assert pr is not None and pr.version == PREDICTION_VERSION
    assert pr.as_legacy_dict() == old  # nothing lost, nothing added
    assert set(pr.extras) == {"cluster_file", "job_file", "cost"}  # api's older duplicates
    # every field the comparison records is typed
    assert pr.placer == "gnnsched" and pr.epoch_time_s == old["epoch_time_s"]
    assert pr.iterations == old["iterations"] == 16
    assert pr.floors.bottleneck == old["bottleneck"]
    assert pr.floors.chain_iteration_s == old["chain_iteration_s"]
    assert [r.name for r in pr.baselines] == list(old["baselines"])
    colo = pr.baseline("colocation")
    assert colo.colocation_feasible is False and colo.notes and colo.error is None
    assert colo.epoch_time_s == old["baselines"]["colocation"]["epoch_time_s"]
    assert pr.bounds.seed == 0 and pr.bounds.per_plan["name"] == "per-plan bound"
    assert pr.lower_bound_s == pr.any_placement_bound_s == old["lower_bound_s"]
    assert pr.cpsat.status == old["cpsat"]["status"] and pr.cpsat.aggregated is False
    assert pr.search.draws.seeds == tuple(old["search"]["draws"]["seeds"])
    assert pr.search.kept == old["search"]["kept"]
    assert pr.made_for == MadeFor(**old["made_for"])
    assert pr.planning_phases_s == old["planning_phases_s"]
    assert pr.speedup_vs_colocation == old["speedup_vs_colocation"]
    assert plan.to_dict()["predicted"] == {"version": PREDICTION_VERSION, **old}
    assert not hasattr(plan, "predicted")  # the untyped view is gone: read the record


def test_the_plan_file_keeps_its_mapping_and_a_version(tmp_path: Path) -> None:
    plan = Plan.load(OLD_PLAN)
    plan.save(tmp_path / "again.json")
    raw = json.loads((tmp_path / "again.json").read_text())
    old = json.loads(OLD_PLAN.read_text())["predicted"]
    assert raw["predicted"] == {"version": PREDICTION_VERSION, **old}
    again = Plan.load(tmp_path / "again.json")
    assert again.prediction == plan.prediction and again.key() == plan.key()


def test_a_new_plan_round_trips_through_its_file() -> None:
    pb = _lab4()
    plan = plan_and_compare(pb, "greedy", scorer=bound_scorer(pb), how="cost-model bound")
    pr = plan.prediction
    assert pr.placer == "greedy" and pr.scored_by == "cost-model bound"
    assert pr.cpsat == CpSatRecord(pr.cpsat.status)  # the comparison ran CP-SAT: status only
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["predicted"]["version"] == PREDICTION_VERSION
    assert Plan.from_dict(d).prediction == pr
    assert not pr.extras


def test_what_does_not_parse_is_kept_verbatim() -> None:
    odd = {"epoch_time_s": "fast", "bounds": {"seed": 0}, "baselines": {"x": {"mine": 1}},
           "search": None, "my_placer_says": [1, 2], "iterations": 3}
    pr = Prediction.from_dict(odd)
    assert pr.epoch_time_s is None and pr.bounds is None and pr.baselines is None
    assert pr.iterations == 3
    assert pr.as_legacy_dict() == odd
    assert set(pr.extras) == set(odd) - {"iterations"}


def test_a_newer_prediction_format_is_refused() -> None:
    with pytest.raises(SpecError, match="prediction format 2 is not supported"):
        Prediction.from_dict({"version": 2, "epoch_time_s": 1.0}, "p.json")


def test_with_prediction_takes_the_file_names_of_the_fields() -> None:
    plan = Plan.load(OLD_PLAN)
    made = {"cost": None, "cluster": "c.yaml", "job": None}
    got = plan.with_prediction(made_for=made, policy="fifo").prediction
    assert got.made_for == MadeFor(None, "c.yaml", None) and got.extras["policy"] == "fifo"
    assert got.epoch_time_s == plan.prediction.epoch_time_s
    bare = Plan(plan.placer, plan.cluster, plan.cluster_fingerprint, plan.trainers)
    assert bare.prediction is None and bare.to_dict()["predicted"] == {}
    assert Prediction.of(bare.prediction).as_legacy_dict() == {}
    assert bare.with_prediction(epoch_time_s=2.0).prediction.epoch_time_s == 2.0


class _Probe(Placer):
    """A plug-in placer: colocation's plan, recording the context it was handed."""

    seen: list[PlanningContext] = []

    def use(self, context: PlanningContext) -> None:
        super().use(context)
        self.seen.append(context)

    def place_problem(self, problem: Problem, *, seed: int = 0,
                      budget: float | None = None) -> Plan:
        assert self.scorer is self.context.scorer  # what the baselines are scored with
        return get_placer("colocation").place_problem(problem, seed=seed)


def test_a_plugin_placer_gets_the_same_context_and_bound() -> None:
    pb = _lab4()
    PLACERS.register("context-probe")(_Probe)
    try:
        plan = plan_and_compare(pb, "context-probe", scorer=bound_scorer(pb),
                                how="cost-model bound", keep_colocation=0.22)
    finally:
        PLACERS.pop("context-probe")
    (ctx,) = _Probe.seen
    assert ctx.keep_colocation == 0.22 and ctx.scored_by == "cost-model bound"
    assert ctx.seed_scorer is None  # not the simulator: no other draws to give
    pr = plan.prediction
    assert pr.placer == "context-probe" and pr.colocation_feasible is False
    assert pr.same_as_colocation is True
    assert pr.cpsat is not None and 0 < pr.lower_bound_s <= pr.epoch_time_s


def test_the_gnnsched_placer_reads_the_context() -> None:
    placer = get_placer("gnnsched")
    draws = object()
    placer.use(PlanningContext(keep_colocation=0.1, seed_scorer=draws))  # type: ignore[arg-type]
    assert placer.keep_colocation == 0.1 and placer.seed_scorer is draws
    with pytest.raises(SpecError, match="keep-colocation"):
        PlanningContext(keep_colocation=20.0)
