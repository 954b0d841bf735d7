"""The emulated cluster: namespaces reach each other, shaping is honest, ``down`` is complete.

Needs root and ``ip netns``; skipped with the reason otherwise. Traffic only goes to addresses
inside namespaces these tests create (10.77.x.x) or to loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest

from gnnsched.runtime import netns
from gnnsched.spec import GBIT, cluster_from_dict

REASON = netns.unavailable_reason()
needs_netns = pytest.mark.skipif(REASON is not None,
                                 reason=f"emulated cluster unavailable: {REASON}")
pytestmark = pytest.mark.netns


def _spec(tag: str, hosts: dict[str, tuple[float, float]], **extra: Any):
    """A cluster named per test process (so parallel runs never share namespaces)."""
    machines = [{"name": h, "cpus": 1, "memory_gb": 1,
                 "nic": {"egress_gbps": eg / 1e3, "ingress_gbps": ing / 1e3}}
                for h, (eg, ing) in hosts.items()]
    machines[0]["partitions"] = [0]
    return cluster_from_dict({"name": f"t{os.getpid() % 100000}{tag}", "machines": machines,
                              **extra}, "<test>")


def _leftovers(ec: netns.EmulatedCluster) -> list[str]:
    left = [n for n in netns.list_namespaces() if n in ec.namespaces]
    if ec.gateway_if:
        left += [x for x in netns.list_root_links() if x == ec.gateway_if]
    if ec.state_file.exists():
        left.append(str(ec.state_file))
    return left


# --------------------------------------------------------------------------------------
# Pure planning (no root needed)


def test_addresses_and_names_from_file_and_auto() -> None:
    spec = cluster_from_dict({"name": "a-cluster-with-a-long-name", "machines": [
        {"name": "store0", "cpus": 1, "memory_gb": 1, "nic_gbps": 0.1, "partitions": [0],
         "address": "10.77.0.1"},
        {"name": "a-very-long-host-name-indeed", "cpus": 1, "memory_gb": 1, "nic_gbps": 0.1},
    ]}, "<test>")
    ec = netns.EmulatedCluster(spec)
    assert ec.address("store0") == "10.77.0.1"
    assert ec.address("a-very-long-host-name-indeed") == "10.77.0.2"
    assert ec.gateway_address == "10.77.0.254"
    assert ec.exec_prefix("store0") == ["ip", "netns", "exec", "gs-a-cluster-with-a-long-name-store0"]
    assert all(len(h.port) <= netns.IFNAMSIZ for h in ec.hosts.values())
    assert ec.gateway_if is not None and len(ec.gateway_if) <= netns.IFNAMSIZ
    assert ec.gateway_if.startswith("gs-")
    auto = netns.EmulatedCluster(_spec("x", {"a": (10, 10), "b": (10, 10)}), gateway=False)
    addrs = [auto.address("a"), auto.address("b")]
    assert all(a.startswith("10.77.") for a in addrs) and len(set(addrs)) == 2
    with pytest.raises(netns.NetnsError, match="host 'zz' is not in cluster"):
        auto.exec_prefix("zz")


def test_public_address_rejected() -> None:
    spec = cluster_from_dict({"name": "pub", "machines": [
        {"name": "a", "cpus": 1, "memory_gb": 1, "nic_gbps": 1, "partitions": [0],
         "address": "8.8.8.8"}]}, "c.yaml")
    with pytest.raises(netns.NetnsError, match=r"c.yaml: machines\[a\].address: .*private"):
        netns.EmulatedCluster(spec)


def test_require_root_says_how_to_run_without(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "_has_caps", lambda *bits: False)
    with pytest.raises(netns.NetnsError, match="needs root") as info:
        netns.require_root()
    assert "--launcher local" in str(info.value)
    assert netns.unavailable_reason() is not None


# --------------------------------------------------------------------------------------
# Real namespaces


@needs_netns
def test_up_namespaces_ping_each_other_and_down_removes_all() -> None:
    spec = _spec("p", {"a": (100, 100), "b": (100, 100), "c": (50, 50)})
    ec = netns.EmulatedCluster(spec, gateway=False)
    try:
        ec.up()
        assert ec.is_up() and ec.up() is ec  # idempotent
        present = netns.list_namespaces()
        assert all(ns in present for ns in ec.namespaces)
        for src in ec.hosts:
            for dst in ec.hosts:
                assert ec.ping(src, dst) is not None, f"{src} cannot reach {dst}"
            assert netns.ping(ec.host(src).ns, "127.0.0.1") is not None  # loopback is up
        out = subprocess.run(ec.exec_prefix("a") + ["ip", "-br", "addr"], capture_output=True,
                             text=True, check=True).stdout
        assert ec.address("a") in out
        rows = {r["host"]: r for r in ec.status()}
        assert rows["c"]["tc_egress_Bps"] == pytest.approx(50e6 / 8)
        assert rows["c"]["tc_ingress_Bps"] == pytest.approx(50e6 / 8)
    finally:
        ec.down()
    assert _leftovers(ec) == []
    assert ec.down() == []  # idempotent


def test_a_stop_signal_during_down_waits_until_everything_is_removed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C or ``kill`` while a cluster comes down is held until the teardown is
    done (then delivered): it cannot leave half a cluster behind."""
    import signal

    spec = _spec("g", {"a": (100, 100), "b": (100, 100)})
    ec = netns.EmulatedCluster(spec, gateway=False).up()
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    inner = ec._down_locked

    def down_with_a_kill() -> list[str]:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the teardown
        out = inner()
        assert got == []  # held
        return out

    monkeypatch.setattr(ec, "_down_locked", down_with_a_kill)
    try:
        ec.down()
        for _ in range(100):  # delivered once the teardown is over
            if got:
                break
            threading.Event().wait(0.01)
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)
        monkeypatch.undo()
        ec.down()
    assert _leftovers(ec) == []


def test_queue_ms_bounds_every_nic_queue() -> None:
    """By default a slow NIC queues two sockets' TSQ budget (88 ms at 50 Mbit/s); with
    ``queue_ms`` every queue holds that many ms and the sockets' budget shrinks to fit it."""
    for mbit in (50, 100, 200):
        rate = mbit * 1e6 / 8
        burst, limit = netns.shape_params(rate, 1500, 20)
        assert limit == pytest.approx(rate * 0.02, rel=0.01)
        assert 2 * netns.tsq_bytes(rate, 1500, 20) + burst <= limit
        assert netns.tsq_bytes(rate) == netns.TSQ_BYTES
    assert netns.shape_params(50e6 / 8)[1] / (50e6 / 8) > 0.08
    with pytest.raises(netns.NetnsError, match="queue_ms"):
        netns.EmulatedCluster(_spec("q", {"a": (40, 40)}), queue_ms=0.1)


@needs_netns
def test_small_queues_keep_the_shaped_rate() -> None:
    spec = _spec("q", {"a": (40, 40), "b": (40, 40)})
    with netns.emulated(spec, gateway=False, queue_ms=20) as ec:
        ab = ec.measure_rate("a", "b", nbytes=int(40e6 / 8 * 1.2))
    # one bulk flow still fills the link (0.91-0.94 measured; margin for a loaded box)
    assert 0.85 <= ab["ratio"] <= 1.02, ab
    assert _leftovers(ec) == []


@needs_netns
def test_shaped_rate_and_asymmetric_egress_ingress() -> None:
    # a sends at most 40 Mbit/s, b receives at most 60: a->b is egress-bound at 40;
    # b sends 100, a receives 80: b->a is ingress-bound at 80.
    spec = _spec("r", {"a": (40, 80), "b": (100, 60)})
    with netns.emulated(spec, gateway=False) as ec:
        ab = ec.measure_rate("a", "b", nbytes=int(40e6 / 8 * 1.2))
        ba = ec.measure_rate("b", "a", nbytes=int(80e6 / 8 * 1.2))
    assert ab["shaped_Bps"] == pytest.approx(40 * GBIT / 1e3)
    assert ba["shaped_Bps"] == pytest.approx(80 * GBIT / 1e3)
    # goodput ~0.95 of the shaped rate when the box is quiet (0.89 seen under load); a
    # missing egress or ingress shaper would put these at 1.5 / 1.25, and no shaping at ~100
    assert 0.85 <= ab["ratio"] <= 1.02, ab
    assert 0.85 <= ba["ratio"] <= 1.02, ba
    assert _leftovers(ec) == []


@needs_netns
def test_failure_mid_up_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec("f", {"a": (10, 10), "b": (10, 10), "c": (10, 10)})
    ec = netns.EmulatedCluster(spec)
    real_run = netns._run

    def failing(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if "addr" in argv and ec.host("b").ns in argv:
            raise netns.NetnsError("injected failure")
        return real_run(argv, check)

    monkeypatch.setattr(netns, "_run", failing)
    with pytest.raises(netns.NetnsError, match="injected"):
        ec.up()
    monkeypatch.undo()
    assert _leftovers(ec) == []


@needs_netns
def test_down_from_another_process_kills_and_removes_everything() -> None:
    spec = _spec("d", {"a": (10, 10), "b": (10, 10)})
    ec = netns.EmulatedCluster(spec)  # with the root-namespace gateway link
    proc = None
    try:
        ec.up()
        assert ec.gateway_if in netns.list_root_links()
        proc = subprocess.Popen(ec.exec_prefix("b") + ["sleep", "60"])
        r = subprocess.run([sys.executable, "-m", "gnnsched", "cluster", "down", "--cluster",
                            spec.name], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert proc.wait(timeout=10) != 0  # the process left in the namespace was stopped
        assert _leftovers(ec) == []
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        ec.down()


@needs_netns
def test_down_without_state_file_and_gateway_reaches_hosts() -> None:
    spec = _spec("g", {"a": (50, 50), "b": (50, 50)})
    ec = netns.EmulatedCluster(spec)
    try:
        ec.up()
        # The root namespace reaches a host through the unshaped gateway port.
        with netns.entered(ec.host("a").ns):
            srv = socket.create_server((ec.address("a"), 0))
        got: list[bytes] = []

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                got.append(conn.recv(16))

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        with socket.create_connection((ec.address("a"), srv.getsockname()[1]), timeout=5) as c:
            c.sendall(b"hello")
        t.join(5)
        srv.close()
        assert got == [b"hello"]
        ec.state_file.unlink()  # a crashed `up` before its state write: names are derived
    finally:
        ec.down()
    assert _leftovers(ec) == []


@needs_netns
def test_latency_is_emulated_or_refused_clearly() -> None:
    spec = _spec("l", {"a": (100, 100), "b": (100, 100)}, latency_ms=10)
    ec = netns.EmulatedCluster(spec, gateway=False)
    try:
        if not netns.qdisc_available("netem"):
            with pytest.raises(netns.NetnsError, match="no netem qdisc.*--ignore-latency"):
                ec.up()
            assert _leftovers(ec) == []
            ec = netns.EmulatedCluster(spec, gateway=False, ignore_latency=True)
            ec.up()
            assert ec.ping("a", "b") is not None
            return
        ec.up()
        ec.ping("a", "b")  # ARP
        rtt = min(ec.ping("a", "b") or 1.0 for _ in range(3))
        assert 0.018 <= rtt <= 0.035, rtt  # 10 ms on each host's egress
    finally:
        ec.down()
    assert _leftovers(ec) == []


@needs_netns
def test_bulk_marked_traffic_waits_behind_best_effort() -> None:
    """Priority bands: bulk TCP (``BULK_TOS``) from a fast host fills b's ingress queue; a
    best-effort round trip a -> b (what gradients and acknowledgements are) skips that queue,
    and the bulk flow still gets the link. Unmarked bulk delays the round trip by the queue
    (~6 ms vs ~0.3 ms measured)."""
    from gnnsched.runtime.qos import BULK_TOS

    spec = _spec("p", {"a": (100, 100), "b": (100, 100), "c": (400, 400)})
    with netns.emulated(spec, gateway=False, bands=True) as ec:
        if ec.queues != "tos bands":
            pytest.skip(f"this kernel cannot band NIC queues: {ec.queues}")
        shared = ec.measure_priority("a", "b", "c", tos=0, seconds=1.5)
        banded = ec.measure_priority("a", "b", "c", tos=BULK_TOS, seconds=1.5)
        filters = subprocess.run(["tc", "-n", ec.switch_ns, "filter", "show", "dev",
                                  ec.host("b").port, "ingress"], capture_output=True,
                                 text=True).stdout
    assert "bpf" in filters and "direct-action" in filters, filters
    assert banded["rtt_ms"] * 3 < shared["rtt_ms"], (banded, shared)
    assert banded["bulk_ratio"] > 0.85, banded
    assert _leftovers(ec) == []


def test_tos_classifier_is_a_valid_program() -> None:
    """Thirteen eBPF instructions that end in exit; where the kernel allows, it loads, and run
    by the kernel on built packets it gives each TOS its band's priority: bulk last, urgent
    features in the middle, everything unmarked (gradients, requests, acks) first."""
    from gnnsched.runtime import qos

    prog = qos.tos_priority_program()
    assert len(prog) == 13 * 8 and prog[-8] == 0x95
    if os.geteuid() != 0:
        return
    try:
        fd = qos.load_program()
    except qos.QosError as exc:
        pytest.skip(f"no eBPF here: {exc}")
    os.close(fd)
    try:
        got = {tos: qos.classify(tos) for tos in (0, qos.BULK_TOS, qos.URGENT_TOS,
                                                  qos.BULK_TOS | 0x02, qos.URGENT_TOS | 0x01)}
    except qos.QosError as exc:
        pytest.skip(f"this kernel cannot test-run a classifier: {exc}")
    assert got == {0: 6, qos.BULK_TOS: 2, qos.URGENT_TOS: 0, qos.BULK_TOS | 0x02: 2,
                   qos.URGENT_TOS | 0x01: 0}, got


def test_the_drop_program_drops_its_share() -> None:
    """Loss without netem: six eBPF instructions; run by the kernel on built packets, they
    drop about their share (binomial: 2,000 packets at 10% drop 200 +- 13), nothing at 0."""
    from gnnsched.runtime import qos

    assert len(qos.drop_program(0.1)) == 6 * 8
    with pytest.raises(ValueError, match="drop share"):
        qos.drop_program(0.5)
    if os.geteuid() != 0:
        return
    try:
        got = qos.dropped(0.1, 2000), qos.dropped(0.0, 200)
    except qos.QosError as exc:
        pytest.skip(f"this kernel cannot load or test-run a tc program: {exc}")
    assert 140 <= got[0] <= 260 and got[1] == 0, got


@needs_netns
def test_attach_finds_the_cluster_as_it_was_brought_up() -> None:
    """A launcher attaches to the cluster `gnnsched cluster up` made, whatever its options
    (here: priority bands, a 30 ms queue, no gateway); with none up, the defaults (not up)."""
    spec = _spec("o", {"a": (100, 100), "b": (100, 100)})
    assert not netns.EmulatedCluster.attach(spec).is_up()
    with netns.emulated(spec, gateway=False, queue_ms=30, bands=True) as ec:
        got = netns.EmulatedCluster.attach(spec)
        assert got.is_up() and got.bands and got.queue_ms == 30 and got.gateway_if is None
        assert got.queues == ec.queues
    assert not netns.EmulatedCluster.attach(spec).is_up()
    assert _leftovers(ec) == []
