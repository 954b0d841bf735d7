"""The coordinator's components on their own: the run state, the role table and the policy
driver work with a stand-in messenger (no coordinator, no processes), every control op goes
to exactly one part, and no component imports the coordinator."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.policy import get_policy
from gnnsched.runtime.coordinator import (
    Coordinator,
    Item,
    Messenger,
    PolicyDriver,
    RecoveryHost,
    RoleTable,
    RunState,
    RuntimeOptions,
)
from gnnsched.runtime.role import seeds_hash
from gnnsched.runtime.transport import Kind, Message, ctrl_body
from gnnsched.spec import load_cluster, load_job

LAB4 = Path(__file__).resolve().parents[3] / "examples" / "lab4"
PACKAGE = Path(inspect.getfile(Coordinator)).parent


def _plan(cluster: Any, relay: str = "store0") -> Plan:
    return Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), relay),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))


class Recorder:
    """A messenger that keeps what the components say."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Message]] = []
        self.logs: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.t = 0.0

    def send(self, name: str, msg: Message) -> None:
        self.sent.append((name, msg))

    def log(self, msg: str) -> None:
        self.logs.append(msg)

    def event(self, record: dict[str, Any]) -> None:
        self.events.append(record)

    def now(self) -> float:
        return self.t


def test_run_state_follows_a_new_plan_with_the_same_trainers() -> None:
    """``bind`` recomputes the machine indices (a relay moved: F changes, T does not) and
    keeps the trainer count and the run's progress."""
    cluster = load_cluster(LAB4 / "cluster.yaml")
    items = [Item(s, 0, 0, s) for s in range(4)]
    st = RunState(cluster, _plan(cluster), items)
    idx = cluster.machine_index
    assert st.T == [idx("gpu0"), idx("gpu1")] and st.F == [idx("store0"), idx("gpu1")]
    assert st.names == [m.name for m in cluster.machines] and st.W == 2
    st.last_barrier, st.training = 2, True
    st.bind(cluster, _plan(cluster, relay="gpu0"), 3.0)
    assert st.F == [idx("gpu0"), idx("gpu1")] and st.T == [idx("gpu0"), idx("gpu1")]
    assert st.dilation == 3.0 and st.net.machines[0].egress == cluster.machines[0].egress / 3
    assert (st.W, st.last_barrier, st.training, st.items) == (2, 2, True, items)


def test_driver_dispatches_prefetch_windows_through_a_messenger(tmp_path: Path) -> None:
    """A role table and a policy driver over a stand-in messenger: each trainer's sampler
    builds its batches in order, one at a time, at most ``prefetch`` ahead of the step in
    training; a started step opens the window by one; the seeds sent are remembered once."""
    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    items = [Item(s, 0, 0, s) for s in range(6)]
    st = RunState(cluster, _plan(cluster), items)
    msgr = Recorder()
    table = RoleTable(st, msgr, opts=RuntimeOptions(), launcher=None,  # type: ignore[arg-type]
                      run_dir=tmp_path, keys=None,
                      recovery=SimpleNamespace(attempt=0))  # type: ignore[arg-type]
    table.endpoint = "tcp://127.0.0.1:1"
    for spec in table.role_specs():
        table.add_role(*spec)
    schedule = SimpleNamespace(batch=lambda w, it: (np.arange(3) + 10 * w + 100 * it.seq,
                                                    np.zeros(3, np.int64)))
    driver = PolicyDriver(st, msgr, table, policy=get_policy("fifo"), opts=RuntimeOptions(),
                          job=job, schedule=schedule,  # type: ignore[arg-type]
                          advisor=None, profile=None)
    driver.reset(0, 0.0, {})
    for m in range(len(cluster.machines)):
        driver.dispatch_batches(m)

    def batches() -> list[tuple[str, int, int]]:
        return [(n, m["trainer"], m["seq"]) for n, m in msgr.sent if m.kind == Kind.BATCH]

    def sampled(seq: int) -> None:
        driver._on_sampled("sampler:0", table.roles["sampler:0"], {
            "trainer": 0, "seq": seq, "edges": 5, "feat_bytes": 8.0, "block_bytes": 4.0,
            "feat_from": []})

    assert job.prefetch == 2
    assert sorted(batches()) == [("sampler:0", 0, 0), ("sampler:1", 1, 0)]  # one core each
    assert all(n in table.roles for n, _ in msgr.sent)
    assert driver.assigned((1, 0)) == seeds_hash(np.arange(3) + 10)
    assert driver.assigned((1, 0)) is None  # asked once
    msgr.sent.clear()
    sampled(0)  # the sampler is free and the window (2 ahead of step 0) open
    assert batches() == [("sampler:0", 0, 1)]
    sampled(1)  # the window is full until step 0 starts training
    assert batches() == [("sampler:0", 0, 1)]
    driver._on_started("trainer:0", table.roles["trainer:0"], {"trainer": 0, "seq": 0})
    assert batches() == [("sampler:0", 0, 1), ("sampler:0", 0, 2)]
    assert table.roles["sampler:0"].doing.startswith("sampling trainer 0 step 2")


def test_every_control_op_goes_to_exactly_one_part() -> None:
    """The coordinator's and the driver's handler tables are disjoint and hold every
    ``_on_<op>`` method each defines (nothing left to a name lookup)."""
    core = Coordinator.__new__(Coordinator)._handlers()
    driver = PolicyDriver.__new__(PolicyDriver).handlers()
    assert not set(core) & set(driver)
    for cls, table in ((Coordinator, core), (PolicyDriver, driver)):
        ops = {n[len("_on_"):] for n, v in vars(cls).items()
               if n.startswith("_on_") and callable(v)}
        assert set(table) == ops, cls
        assert all(h.__name__ == f"_on_{op}" for op, h in table.items())


def test_the_coordinator_is_its_components_messenger_and_no_component_imports_it() -> None:
    """The coordinator provides every method of the messenger and recovery-host protocols;
    the components (and the state and messenger modules) never import the core."""
    for proto in (Messenger, RecoveryHost):
        wanted = {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
        wanted |= {n for base in proto.__mro__[1:] if base not in (object,)
                   for n, v in vars(base).items() if callable(v) and not n.startswith("_")
                   and base.__module__.startswith("gnnsched")}
        assert wanted and all(callable(getattr(Coordinator, n, None)) for n in wanted), proto
    for module in ("driver", "roles", "recovery", "state", "messenger", "startup"):
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "gnnsched.runtime.coordinator.core" not in imported, module
        assert "gnnsched.runtime.coordinator" not in imported, module


def test_the_start_message_names_every_endpoint() -> None:
    """``start``: stores by machine index, the relay of a trainer that gathers elsewhere,
    gloo unless every trainer has a GPU of its own."""
    from gnnsched.runtime.coordinator.startup import start_message

    cluster = load_cluster(LAB4 / "cluster.yaml")
    st = RunState(cluster, _plan(cluster), [])

    def role(kind: str, machine: str, **info: Any) -> Any:
        return SimpleNamespace(launch=SimpleNamespace(role=kind, machine=machine), info=info)

    roles = {"store:store0": role("store", "store0", endpoint="s0"),
             "store:store1": role("store", "store1", endpoint="s1", urgent_endpoint="u1"),
             "fetcher:store0": role("fetcher", "store0", endpoint="f0"),
             "trainer:0": role("trainer", "gpu0", data="d0", cuda="a", master_port=7),
             "trainer:1": role("trainer", "gpu1", data="d1", cuda=None)}
    launcher = SimpleNamespace(host_of=lambda m: f"host-{m}")
    msg, backend = start_message(st, roles, launcher)  # type: ignore[arg-type]
    body = ctrl_body(msg)
    idx = cluster.machine_index
    assert backend == body["backend"] == "gloo"
    assert body["stores"] == {str(idx("store0")): "s0", str(idx("store1")): "s1"}
    assert body["urgent_stores"] == {str(idx("store1")): "u1"}
    assert body["trainers"] == [
        {"id": 0, "data": "d0", "relay": "f0", "relay_machine": "store0"},
        {"id": 1, "data": "d1", "relay": None, "relay_machine": None}]
    assert (body["master_addr"], body["master_port"]) == ("host-gpu0", 7)
