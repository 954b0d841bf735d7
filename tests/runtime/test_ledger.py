"""The CPU ledger (gnnsched.runtime.ledger): its books add up, nesting is exclusive, threads
without a ledger are attributed, and on a short real run every role explains >= 90% of its
CPU by category."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsched.runtime import ledger
from gnnsched.runtime.ledger import (
    CLASSES,
    NULL,
    Ledger,
    breakdown,
    class_of,
    format_table,
    section,
    section_cost,
)

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _in_thread(fn) -> None:
    """Run ``fn`` in a fresh thread (its ledger never leaks into the test process's)."""
    err: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised below
            err.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if err:
        raise err[0]


def test_categories_add_up_and_nesting_is_exclusive() -> None:
    def body() -> None:
        led = Ledger("t")
        t0 = time.thread_time()
        with led.section("work:outer"):
            _burn(0.03)
            with led.section("copy:inner"):
                _burn(0.05)
                with led.section("work:outer"):  # re-entering a category counts it again
                    _burn(0.01)
            _burn(0.02)
        _burn(0.01)  # outside any section: unaccounted
        cats, total = led.totals()
        spent = time.thread_time() - t0
        assert total == pytest.approx(spent, abs=2e-3)
        assert sum(v["cpu_s"] for v in cats.values()) == pytest.approx(total, abs=1e-9)
        # exclusive: the inner copy's 0.05 s are not also the outer's
        assert cats["copy:inner"]["cpu_s"] == pytest.approx(0.05, abs=0.01)
        assert cats["work:outer"]["cpu_s"] == pytest.approx(0.06, abs=0.01)
        assert cats["unaccounted"]["cpu_s"] == pytest.approx(0.01, abs=0.01)
        assert cats["work:outer"]["n"] == 2 and cats["copy:inner"]["n"] == 1
        assert cats["work:outer"]["wall_s"] >= cats["work:outer"]["cpu_s"] * 0.5
        # an exception leaves the section and restores the outer category
        with pytest.raises(KeyError), led.section("rpc:x"):
            raise KeyError
        assert led.cur == "unaccounted" and not led.stack

    _in_thread(body)


def test_module_sections_follow_the_thread() -> None:
    assert ledger.current() is None or threading.current_thread() is not threading.main_thread()
    seen: dict[str, float] = {}

    def body() -> None:
        assert section("work:x") is NULL  # no ledger on this thread yet: a no-op
        led = ledger.start_thread("worker")
        with section("wait:x"):
            time.sleep(0.05)
        with section("work:x"):
            _burn(0.02)
        ledger.finish_thread()
        assert ledger.current() is None
        cats, _ = led.totals()
        seen.update({c: v["wall_s"] for c, v in cats.items()})
        seen["work_cpu"] = cats["work:x"]["cpu_s"]
        seen["wait_cpu"] = cats["wait:x"]["cpu_s"]

    _in_thread(body)
    assert seen["wait:x"] >= 0.045 and seen["wait_cpu"] < 0.02  # waiting: wall, no CPU
    assert seen["work_cpu"] == pytest.approx(0.02, abs=0.01)


def test_class_of() -> None:
    assert class_of("rpc:send") == "rpc" and class_of("work") == "work"
    assert class_of("bogus:thing") == "other" and class_of("unaccounted:thread:x") == \
        "unaccounted"
    assert section_cost() < 1e-4  # a section costs microseconds, not tens of them


def test_report_attributes_every_thread() -> None:
    """In a fresh process: the main thread's sections, a second ledgered thread, a named
    thread and an anonymous one; the report's parts add up to the process's CPU."""
    code = textwrap.dedent("""
        import json, threading, time
        from gnnsched.runtime import ledger
        def burn(s):
            end = time.thread_time() + s
            while time.thread_time() < end:
                pass
        ledger.start_thread("main")
        burn(0.05)                      # setup: not in the run's books
        ledger.begin_run()
        def worker():
            ledger.start_thread("worker")
            with ledger.section("copy:w"):
                burn(0.05)
            ledger.finish_thread()
        def hb():
            ledger.name_thread("other:heartbeat")
            burn(0.03)
            time.sleep(2.0)
        def anon():
            burn(0.02)
            time.sleep(2.0)
        t = threading.Thread(target=worker); t.start(); t.join()
        for f, name in ((hb, "hb"), (anon, "mystery")):
            threading.Thread(target=f, name=name, daemon=True).start()
        with ledger.section("work:main"):
            burn(0.1)
            with ledger.section("rpc:main"):
                burn(0.03)
        time.sleep(0.2)
        print(json.dumps(ledger.report()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    cats = rep["categories"]
    assert rep["setup_cpu_s"] >= 0.05
    assert cats["work:main"]["cpu_s"] == pytest.approx(0.1, abs=0.02)
    assert cats["rpc:main"]["cpu_s"] == pytest.approx(0.03, abs=0.01)
    assert cats["copy:w"]["cpu_s"] == pytest.approx(0.05, abs=0.01)
    assert rep["threads"]["worker"]["categories"]["copy:w"]["n"] == 1
    assert cats["other:heartbeat"]["cpu_s"] == pytest.approx(0.03, abs=0.01)
    # a thread nobody named is unaccounted, under its name
    anon = [c for c in cats if c.startswith("unaccounted:thread:")]
    assert anon and "mystery" in anon[0] and cats[anon[0]]["cpu_s"] == pytest.approx(
        0.02, abs=0.01)
    assert sum(v["cpu_s"] for v in cats.values()) == pytest.approx(rep["cpu_s"], abs=1e-4)
    unacc = sum(v["cpu_s"] for c, v in cats.items() if class_of(c) == "unaccounted")
    assert rep["explained"] == pytest.approx(1 - unacc / rep["cpu_s"], abs=1e-3)
    assert 0.5 < rep["explained"] < 1.0


def _fake_run() -> dict:
    def led(**cpu: float) -> dict:
        cats = {k.replace("__", ":"): {"cpu_s": v, "wall_s": v, "n": 3} for k, v in cpu.items()}
        total = sum(cpu.values())
        un = sum(v for k, v in cpu.items() if k.startswith("unaccounted"))
        return {"cpu_s": total, "explained": 1 - un / total, "categories": cats,
                "setup_cpu_s": 1.0, "overhead_s": 0.01}

    return {"iterations_per_epoch": 5, "epochs": [{}, {}],
            "processes": {
                "trainer:0": {"ledger": led(work__forward_backward=4.0, rpc__allreduce=1.0)},
                "sampler:0": {"sampled": 20, "ledger": led(work__sample=2.0, copy__concat=1.0,
                                                           unaccounted=1.0)},
                "store:s0": {"ledger": led(work__gather=1.0, serialise__encode=0.5,
                                           wait__poll=0.5)},
                "coordinator": {"bytes_sent": 3}}}


def test_breakdown_per_iteration(tmp_path: Path) -> None:
    b = breakdown(_fake_run())
    assert b["iterations"] == 10
    assert list(b["processes"]) == ["store:s0", "sampler:0", "trainer:0"]
    s = b["processes"]["sampler:0"]
    assert s["per_iter"]["work"] == pytest.approx(0.2) and s["per_iter"]["copy"] == \
        pytest.approx(0.1)
    assert s["explained"] == pytest.approx(0.75) and s["cpu_s_per_batch"] == pytest.approx(0.2)
    assert set(s["per_iter"]) == set(CLASSES)
    assert b["cpu_s_per_iter"] == pytest.approx(1.1)
    text = format_table(b)
    assert "sampler:0" in text and "75.0%" in text and "trainer (x1)" in text
    # the same from a JSON file of the RunResult
    f = tmp_path / "result.json"
    f.write_text(json.dumps(_fake_run()))
    assert breakdown(f)["cpu_s_per_iter"] == pytest.approx(1.1)
    # a run folder: metrics.jsonl counts the iterations; its run record must carry ledgers
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        *({"type": "batch", "phase": "train", "trainer": w, "seq": s}
          for w in (0, 1) for s in range(4)), {"type": "run"}]) + "\n")
    with pytest.raises(ValueError, match="ledger"):
        breakdown(tmp_path)


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.spec import load_job

    job = load_job(LAB4 / "job.yaml")
    parts = tmp_path_factory.mktemp("cora4-ledger")
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    return parts


@pytest.mark.slow
def test_every_role_explains_its_cpu(cora_parts: Path, tmp_path: Path) -> None:
    from gnnsched.api import train
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.runtime.coordinator import RuntimeOptions
    from gnnsched.spec import load_cluster, load_job

    cluster = load_cluster(LAB4 / "cluster.yaml")
    job = replace(load_job(LAB4 / "job.yaml"), epochs=2, eval_every=0, eval_max_nodes=64)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (  # a relay and an in-process
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),  # gather
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    res = train(cluster, job, plan, out_dir=tmp_path / "run", partitions=cora_parts,
                options=RuntimeOptions(start_timeout=240, request_timeout=60,
                                       stop_grace_s=10))
    roles = {n for n in res.processes if n != "coordinator"}
    assert {n.split(":")[0] for n in roles} == {"store", "sampler", "fetcher", "trainer"}
    for name in roles:
        led = res.processes[name].get("ledger")
        assert led, f"{name} reported no ledger"
        assert led["explained"] >= 0.9, (name, led["explained"], sorted(
            ((v["cpu_s"], k) for k, v in led["categories"].items()), reverse=True)[:6])
        assert sum(v["cpu_s"] for v in led["categories"].values()) == pytest.approx(
            led["cpu_s"], abs=1e-3)
        assert led["overhead_s"] < 0.2 * led["cpu_s"]
    cats = {n: set(res.processes[n]["ledger"]["categories"]) for n in roles}
    assert {"work:forward_backward", "work:optimizer", "rpc:allreduce", "wait:batch"} <= \
        cats["trainer:0"]
    assert {"work:sample", "work:compact", "rpc:send"} <= cats["sampler:0"]
    assert {"work:gather", "work:sample", "serialise:encode", "rpc:zmq_io"} <= \
        cats["store:store0"]
    assert {"copy:scatter", "rpc:recv"} <= cats["fetcher:store0"]
    assert "copy:scatter" in cats["trainer:1"]  # it gathers its own features
    b = breakdown(res)
    assert b["iterations"] == res.iterations_per_epoch * job.epochs
    assert set(b["processes"]) == roles
    assert all(r["cpu_s_per_iter"] > 0 for r in b["processes"].values())
    assert "trainer:1" in format_table(b)
