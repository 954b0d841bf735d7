"""The demo's default cluster is one where placement's effect is real (issue 51, item 7):
planned as the demo plans, gnnsched moves off colocation's placement there and is predicted
clearly faster, while on lab4 (GPU-less stores) it keeps colocation's fallback."""

from __future__ import annotations

from typing import Any

import pytest

from gnnsched.commands import demo


@pytest.fixture(scope="module")
def cora_profile() -> Any:
    """A real profile of Cora in the examples' 4 METIS parts (4 mini-batches per part)."""
    from gnnsched import api
    from gnnsched.spec import load_job

    job = load_job(demo.EXAMPLES / demo.DEFAULT_EXAMPLE / "job.yaml")
    pset = api.open_job_partitions(job, quiet=True)
    return api.profile_partitions(pset, job, samples=4, seed=job.seed)


def _plans(example: str, prof: Any) -> tuple[Any, Any, float]:
    from gnnsched.spec import load_cluster, load_job

    ex = demo.EXAMPLES / example
    cluster, job = load_cluster(ex / "cluster.yaml"), load_job(ex / "job.yaml")
    g = demo._place("gnnsched", cluster, job, prof, 3.0)
    c = demo._place("colocation", cluster, job, prof, 3.0)
    speedup = (demo._steady(cluster, job, c, prof, "fifo", job.seed)
               / demo._steady(cluster, job, g, prof, "gnnsched", job.seed))
    return g, c, speedup


def test_the_default_example_is_one_where_placement_matters(cora_profile: Any) -> None:
    assert demo.DEFAULT_EXAMPLE in demo.examples()
    g, c, speedup = _plans(demo.DEFAULT_EXAMPLE, cora_profile)
    assert g.key() != c.key()
    assert speedup >= 1 + demo.KEEP_COLOCATION, speedup
    # the trainers leave the stores' slow NICs for the GPU hosts
    assert {t.machine for t in g.trainers} == {"gpu0", "gpu1"}
    assert {t.machine for t in c.trainers} == {"store0", "store1"}


def test_on_lab4_gnnsched_keeps_colocations_fallback(cora_profile: Any) -> None:
    g, c, speedup = _plans("lab4", cora_profile)
    assert g.key() == c.key()
    assert demo.system_name("gnnsched", g, kept=True).startswith("colocation's placement kept")
    assert speedup < 1 + demo.KEEP_COLOCATION
