"""Cluster and job files: the examples load, and every malformed file gets a precise error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gnnsched.spec import (
    GBIT,
    SpecError,
    check_compatible,
    cluster_from_dict,
    job_from_dict,
    load_cluster,
    load_job,
)

GOOD = {
    "name": "t",
    "machines": [
        {"name": "s0", "cpus": 4, "memory_gb": 8, "nic_gbps": 1, "partitions": [0, 1]},
        {"name": "g0", "cpus": 2, "memory_gb": 8, "nic": {"egress_gbps": 2, "ingress_gbps": 1},
         "gpus": [{"kind": "a100", "speed": 2.0, "memory_gb": 40, "count": 2}]},
    ],
}


def test_examples_load_and_match(examples: Path) -> None:
    for name, machines, parts in [("lab4", 4, 4), ("hetero16", 16, 8), ("scale256", 256, 1024)]:
        c = load_cluster(examples / name / "cluster.yaml")
        j = load_job(examples / name / "job.yaml")
        check_compatible(c, j)
        assert len(c.machines) == machines and c.num_parts == parts == j.num_parts


def test_units_and_defaults() -> None:
    c = cluster_from_dict(GOOD)
    g0 = c.machine("g0")
    assert g0.egress == 2 * GBIT and g0.ingress == 1 * GBIT
    assert g0.num_gpus == 2 and g0.gpus[0].speed == 2.0
    assert c.store_of(1) == 0 and c.part_stores == [0, 0]
    assert c.fingerprint() == cluster_from_dict(c.to_dict()).fingerprint()


def _mutate(path: str, value):
    import copy

    d = copy.deepcopy(GOOD)
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return d


CLUSTER_CASES = [
    ("machines", [], "machines: is empty"),
    ("machines.0.cpus", 0, "machines[0].cpus: must be >= 1"),
    ("machines.0.cpus", "four", "machines[0].cpus: must be an integer"),
    ("machines.0.memory_gb", KeyError, "machines[0].memory_gb: is missing"),
    ("machines.0.nic_gbps", -1, "machines[0].nic_gbps: must be >= 1e-06"),
    ("machines.1.nic", {"egress_gbps": 1}, "machines[1].nic: needs a bandwidth"),
    ("machines.1.name", "s0", "machines[1].name: duplicate machine name 's0'"),
    ("machines.0.partitions", [0, 2], "partition 1 has no store machine"),
    ("machines.0.partitions", [0, -1], "machines[0].partitions[1]: must be a partition id"),
    ("machines.1.gpus", "many", "machines[1].gpus: must be a count or a list"),
    ("machines.1.gpus.0.speed", 0, "machines[1].gpus[0].speed: must be >= 0.001"),
    ("machines.0.roles", ["sample"], "stores partitions but may not run 'store'"),
    ("machines.1.roles", ["train", "fly"], "machines[1].roles[1]: unknown role 'fly'"),
    ("machines.0.nic_gbs", 1, "machines[0].nic_gbs: unknown field"),
    ("storage", "cloud", "storage: unknown value 'cloud'"),
    # found by fuzzing: huge ids must not build huge sets, huge numbers must not overflow
    ("machines.0.partitions", [0, 10**9], "partition 1 has no store machine"),
    ("machines.0.memory_gb", 10**400, "machines[0].memory_gb: must be <= 1e+12"),
    ("machines.0.cpus", 10**20, "machines[0].cpus: must be <= 1e+12"),
    ("machines.0.nic_gbps", 1e-300, "machines[0].nic_gbps: must be >= 1e-06"),
    ("latency_ms", 1e300, "latency_ms: must be <= 100000"),
    ("curve", "false", "curve: must be true or false"),
    ("machines.1.roles", ["train", "train"], "machines[1].roles[1]: role 'train' listed twice"),
]


@pytest.mark.parametrize("path,value,expected", CLUSTER_CASES)
def test_cluster_errors(path: str, value, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        cluster_from_dict(_mutate(path, value), "c.yaml")
    assert expected in str(err.value) and str(err.value).startswith("c.yaml: ")


def test_partition_on_two_machines() -> None:
    d = _mutate("machines.1.partitions", [1])
    with pytest.raises(SpecError, match="partition 1 is also stored on 's0'"):
        cluster_from_dict(d, "c.yaml")


JOB_CASES = [
    ({"model": "mlp"}, "model: unknown value 'mlp' (valid: sage, gcn, gat)"),
    ({"fanouts": []}, "fanouts: is empty"),
    ({"fanouts": [10, 0]}, "fanouts[1]: must be a positive integer or -1"),
    ({"fanouts": [10, 5], "layers": 3}, "layers: is 3 but fanouts has 2 entries"),
    ({"batch_size": 0}, "batch_size: must be >= 1"),
    ({"lr": 0}, "lr: must be > 0"),
    ({"dropout": 1.0}, "dropout: must be < 1"),
    ({"trainers": 0, "num_parts": 4}, "trainers: must be >= 1"),
    ({"epoch": 3}, "epoch: unknown field"),
    ({"part_method": "kahip"}, "part_method: unknown value 'kahip'"),
    ({"synthetic": [1]}, "synthetic: expected a mapping"),
    ({"epochs": 10**18}, "epochs: must be <= 100000"),
    ({"synthetic": {"num_node": 2000}}, "synthetic.num_node: unknown generator parameter"),
    ({"synthetic": {"num_nodes": -5}}, "synthetic.num_nodes: must be >= 2"),
    ({"synthetic": {"num_nodes": "x"}}, "synthetic.num_nodes: must be an integer"),
    ({"synthetic": {"locality": 2}}, "synthetic.locality: must be <= 1"),
    ({"synthetic": {"skew": float("nan")}}, "synthetic.skew: must be a finite number"),
    ({"synthetic": {"samples": 2.5}}, "synthetic.samples: must be an integer"),
    ({"synthetic": {"profile": "yes"}}, "synthetic.profile: must be true or false"),
    ({"synthetic": {"junk": [[1] * 10] * 10}}, "synthetic.junk: unknown generator parameter"),
]


@pytest.mark.parametrize("patch,expected", JOB_CASES)
def test_job_errors(patch: dict, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict({"dataset": "cora", **patch}, "j.yaml")
    assert expected in str(err.value)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="nope.yaml: file not found"):
        load_cluster(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("machines: [\n  {name: a,\n")
    with pytest.raises(SpecError, match=r"bad.yaml: line \d+, column \d+: not valid YAML"):
        load_cluster(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(SpecError, match="bad.yaml: <top>: expected a mapping, got a list"):
        load_job(bad)


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(SpecError, match="bin.yaml: not a UTF-8 text file"):
        load_cluster(binary)
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: lab4\nname: other\nmachines: []\n")
    with pytest.raises(SpecError, match=r"twice.yaml: line 2, column 1: not valid YAML: "
                                        "found duplicate key 'name'"):
        load_cluster(twice)
    deep = tmp_path / "deep.yaml"
    deep.write_text("machines: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match="deep.yaml: nested too deeply"):
        load_cluster(deep)


def test_cross_file_checks(tmp_path: Path) -> None:
    c = cluster_from_dict(GOOD, "c.yaml")
    with pytest.raises(SpecError, match="stores 2 partitions but job"):
        check_compatible(c, job_from_dict({"num_parts": 4, "trainers": 1}, "j.yaml"))
    one_gpu = cluster_from_dict(_mutate("machines.1.gpus", 1), "c.yaml")
    with pytest.raises(SpecError, match="2 trainers but cluster 't' has only 1 GPU"):
        check_compatible(one_gpu, job_from_dict({"num_parts": 2, "trainers": 2}, "j.yaml"))


def test_a_misspelt_required_field_is_named_as_a_typo() -> None:
    d = yaml.safe_load(yaml.safe_dump(GOOD))
    d["machines"][0]["memroy_gb"] = d["machines"][0].pop("memory_gb")
    with pytest.raises(SpecError, match=r"machines\[0\]\.memory_gb: is missing \(required\); "
                       "'memroy_gb' looks like a typo of it"):
        cluster_from_dict(d, "c.yaml")
    del d["machines"][0]["memroy_gb"]  # nothing close: just missing
    with pytest.raises(SpecError, match=r"memory_gb: is missing \(required\)$"):
        cluster_from_dict(d, "c.yaml")


@pytest.mark.parametrize("typo, nearest", [("batch_sise", "batch_size"), ("epoch", "epochs"),
                                            ("fanout", "fanouts")])
def test_an_unknown_field_suggests_the_nearest_valid_one(examples: Path, typo: str,
                                                         nearest: str) -> None:
    data = yaml.safe_load((examples / "lab4" / "job.yaml").read_text())
    data[typo] = data.pop(nearest, 1)
    with pytest.raises(SpecError) as exc:
        job_from_dict(data, "job.yaml", examples / "lab4")
    assert exc.value.nearest == nearest
    assert str(exc.value).endswith(f"; did you mean {nearest!r}?"), str(exc.value)
    data[nearest] = data.pop(typo)
    data["zzzzzz"] = 1  # nothing near: no guess
    with pytest.raises(SpecError) as far:
        job_from_dict(data, "job.yaml", examples / "lab4")
    assert far.value.nearest == "" and "did you mean" not in str(far.value)


def test_without_moves_partitions() -> None:
    c = cluster_from_dict(GOOD)
    c2 = c.without("s0")
    assert [m.name for m in c2.machines] == ["g0"] and c2.num_parts == 2
    local = cluster_from_dict({**GOOD, "storage": "local"})
    with pytest.raises(SpecError, match="only on this machine"):
        local.without("s0")


def test_yaml_roundtrip(tmp_path: Path) -> None:
    c = cluster_from_dict(GOOD)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(c.to_dict()))
    assert load_cluster(p).fingerprint() == c.fingerprint()


def test_synthetic_keys_cover_the_generator() -> None:
    """A job's ``synthetic:`` accepts every generator parameter (and the profile's keys)."""
    import inspect

    from gnnsched.datasets.synthetic import generate
    from gnnsched.spec import SYNTHETIC_KEYS

    assert set(inspect.signature(generate).parameters) <= set(SYNTHETIC_KEYS)


def test_synthetic_defaults_are_the_generators() -> None:
    """The spec's copy of the generator's defaults (kept there so the spec needs nothing from
    the datasets package) equals the generator's own keyword defaults."""
    import inspect

    from gnnsched.datasets import SYNTHETIC_DEFAULT_NODES
    from gnnsched.datasets.synthetic import generate
    from gnnsched.spec import SYNTHETIC_DEFAULTS

    own = {k: p.default for k, p in inspect.signature(generate).parameters.items()
           if p.default is not inspect.Parameter.empty and k != "name"}
    assert SYNTHETIC_DEFAULTS == {**own, "num_nodes": SYNTHETIC_DEFAULT_NODES}


def _accepted(read, data: dict) -> set[str]:  # noqa: ANN001
    """The keys a reader accepts: those its unknown-field error lists as valid."""
    from gnnsched.spec import SpecError

    with pytest.raises(SpecError) as exc:
        read({**data, "zz_unknown": 1})
    assert "unknown field" in str(exc.value)
    return set(exc.value.valid.split(", "))


def test_field_docs_match_the_readers() -> None:
    """docs/fields.md names exactly the keys the readers accept, and is gnnsched.fields'
    output (regenerate: python -m gnnsched.fields > docs/fields.md)."""
    from gnnsched import fields
    from gnnsched.spec import SYNTHETIC_KEYS, cluster_from_dict, job_from_dict

    assert _accepted(lambda d: job_from_dict(d, "job"), {}) == {f for f, _, _ in fields.JOB}
    machine = {"name": "a", "cpus": 1, "memory_gb": 1, "nic_gbps": 1, "partitions": [0]}
    assert _accepted(lambda d: cluster_from_dict(d, "c"), {"machines": [machine]}) == \
        {f for f, _, _ in fields.CLUSTER}
    assert _accepted(lambda d: cluster_from_dict({"machines": [d]}, "c"), machine) == \
        {f for f, _, _ in fields.MACHINE}
    assert set(fields.SYNTHETIC_MEANING) == set(SYNTHETIC_KEYS)
    root = Path(__file__).resolve().parents[1]
    assert (root / "docs" / "fields.md").read_text() == fields.render()


def test_job_round_trips_through_to_dict() -> None:
    from gnnsched.spec import job_from_dict

    for extra in ({}, {"features": {"normalize": "row"}}):
        job = job_from_dict({"dataset": "cora", **extra}, "job")
        assert job_from_dict(job.to_dict(), "job") == replace(job, source="job")
