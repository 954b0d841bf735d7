"""The chaos suite (issue 57): every grey fault on an emulated cluster, judged by fixed rules.

Run: ``python bench/bench_chaos.py [--quick] [--epochs 4] [--only CASE ...] [--out
docs/bench/chaos.json]`` (root: network namespaces, control groups, tmpfs mounts; ~8 minutes
on 2 cores)

On examples/lab4 (Cora in 4 METIS parts, 2 store hosts, 2 GPU hosts, 100 Mbit/s NICs), on the
netns launcher (real processes in network namespaces behind shaped veths; for the straggler
and its own undisturbed baseline, every host in its control groups' CPU quotas), the same job
and plan run undisturbed and then once per fault, each injected with the kernel's own
mechanism:

* ``loss``: every NIC drops 2% of its packets (netem where the kernel has it, else an eBPF
  filter on each NIC: ``qos.drop_program``);
* ``jitter``: every NIC delays packets 2 ms +- 2 ms (netem; where the kernel lacks sch_netem
  the case says so and is not run);
* ``cut``: trainer 1's host cut off its switch port for 3 s mid-epoch (processes alive),
  shorter than the heartbeat timeout: it must rejoin, nothing declared dead;
* ``cut-long``: the same host cut off for longer than the heartbeat timeout: it must be
  declared dead once and re-planned around (its roles stopped before any copy starts), or
  stop with a message naming it;
* ``straggler``: that host's CPU quotas divided by 8 for 10 s (its control groups);
* ``full-disk``: the run's checkpoints on a 64 MB tmpfs filled after the first checkpoint:
  later writes fail cleanly, training goes on, the last good checkpoint stays intact;
* ``corrupt``: a run stopped (Ctrl-C) after two checkpoints, its newest checkpoint's bytes
  flipped, then ``--resume``: the corrupt file is named and skipped, the earlier one used.

The rules, fixed before any run (``RULES``): each run ends with a test accuracy within 1
point of the undisturbed run's, or stops with a message where the fault is fatal by design;
no namespace, control group or role process is left behind; and no stall (the longest gap
between two training steps) lasts longer than the heartbeat timeout plus one re-plan
(``REPLAN_S``: a cold restart of every role, 12 s in docs/bench/faults.json, and margin).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAB4 = ROOT / "examples" / "lab4"
DEAD_AFTER_S = 6.0  # heartbeat timeout of every run here (heartbeats every 0.5 s)
REPLAN_S = 15.0  # one re-plan and restart of every role, at most (cold: 12 s measured)
RULES = {
    "metric": "test accuracy within 1 point of the undisturbed run's, or a clear stop where "
              "the fault is fatal by design",
    "leftovers": "no namespace, control group or role process left behind",
    "stall": f"no gap between two training steps longer than the heartbeat timeout "
             f"({DEAD_AFTER_S:g} s) plus one re-plan ({REPLAN_S:g} s)",
}
POINT = 0.01


def _setup(tmp: Path, epochs: int) -> tuple[Any, Any, Any, Path]:
    """lab4 under a cluster name of its own (its own namespaces), its job and a hand plan:
    trainer 0 gathers through a relay on store0, trainer 1 in its own process."""
    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import cluster_from_dict, load_cluster, load_job

    base, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    d = base.to_dict()
    d["name"] = f"chaos{os.getpid() % 10000}"
    for m in d["machines"]:
        m.pop("address", None)
    cluster = cluster_from_dict(d, str(tmp / "chaos.yaml"))
    (tmp / "chaos.yaml").write_text(json.dumps(d))
    job = replace(job, epochs=epochs)
    parts = tmp / "parts"
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    plan.save(tmp / "plan.json")
    return cluster, job, plan, parts


def _records(run: Path) -> list[dict[str, Any]]:
    out = []
    path = run / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _stall_s(recs: list[dict[str, Any]]) -> float:
    """The longest gap between two consecutive training steps' records."""
    t = sorted(float(r["time"]) for r in recs if r.get("type") == "batch" and "time" in r)
    return max((b - a for a, b in zip(t, t[1:])), default=0.0)


def _leftovers(cluster: Any) -> list[str]:
    """What the run left of the cluster: namespaces, control groups, processes."""
    from gnnsched.runtime import netns

    left = [f"netns {n}" for n in netns.list_namespaces() if cluster.name in n]
    for root in Path("/sys/fs/cgroup").glob("*/gnnsched"):
        left += [f"cgroup {p}" for p in root.rglob(cluster.name)]
    try:
        import psutil

        me = psutil.Process()
        left += [f"process {p.pid} {' '.join(p.cmdline()[:3])}" for p in
                 me.children(recursive=True) if p.is_running()
                 and p.status() != psutil.STATUS_ZOMBIE]
    except Exception:  # noqa: BLE001 - psutil is optional here
        pass
    return left


def _train(cluster: Any, job: Any, plan: Any, parts: Path, out: Path, faults: list[str],
           cgroups: bool = False) -> dict[str, Any]:
    """One run on the netns launcher, its cluster brought up for it and taken down after."""
    from gnnsched import api
    from gnnsched.runtime import netns
    from gnnsched.runtime.coordinator import RuntimeOptions

    if plan.cluster_fingerprint != cluster.fingerprint():  # the same hosts, other NIC faults
        plan = replace(plan, cluster_fingerprint=cluster.fingerprint())
    opts = RuntimeOptions(start_timeout=240, request_timeout=60, stop_grace_s=10,
                          heartbeat_s=0.5, dead_after_s=DEAD_AFTER_S,
                          faults=api.parse_faults(faults) if faults else ())
    net = netns.EmulatedCluster(cluster, cgroups=cgroups).up()
    t0, err, res = time.perf_counter(), None, None
    try:
        res = api.train(cluster, job, plan, policy="gnnsched", launcher="netns", out_dir=out,
                        partitions=parts, options=opts)
    except Exception as e:  # noqa: BLE001 - a stop is an outcome: its message is recorded
        err = f"{type(e).__name__}: {e}"
    finally:
        dropped = net.drops if hasattr(net, "drops") else None
        net.down()
    recs = _records(out)
    return {"wall_s": time.perf_counter() - t0, "error": err,
            "test_accuracy": None if res is None else float(res.test_accuracy),
            "epoch_time_s": None if res is None else float(res.epoch_time_s),
            "recoveries": sum(r.get("type") == "recovery" for r in recs),
            "recovery_why": [r.get("why") for r in recs if r.get("type") == "recovery"],
            "faults": [r for r in recs if r.get("type") == "fault"],
            "stragglers": [r.get("trainer") for r in recs if r.get("type") == "straggler"],
            "checkpoint_failed": sum(r.get("type") == "checkpoint_failed" for r in recs),
            "stall_s": _stall_s(recs), "drops": dropped, "leftovers": _leftovers(cluster)}


def _lossy(cluster: Any, jitter: bool) -> Any:
    from gnnsched.spec import cluster_from_dict

    d = cluster.to_dict()
    if jitter:
        d.update(jitter_ms=2, latency_ms=2)
    else:
        d["loss_pct"] = 2
    return cluster_from_dict(d, cluster.source)


def _fill(mount: Path) -> Path:
    """Fill a tmpfs to its last byte: the kernel's own ENOSPC for every write after."""
    filler = mount / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
    return filler


def full_disk(cluster: Any, job: Any, plan: Any, parts: Path, out: Path) -> dict[str, Any]:
    """The run's checkpoints on a 64 MB tmpfs, filled once the first checkpoint is there."""
    import threading

    from gnnsched.runtime import checkpoints

    folder = out / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode:
        return {"skipped": f"cannot mount a tmpfs: {mounted.stderr.strip()}"}
    stop = threading.Event()

    def watch() -> None:  # fills the disk right after the first checkpoint
        while not stop.is_set():
            if any(r.get("type") == "checkpoint" for r in _records(out)):
                _fill(folder)
                return
            time.sleep(0.05)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    try:
        got = _train(cluster, job, plan, parts, out, [])
        stop.set()
        th.join()
        got["latest_intact"] = checkpoints.verify(folder / "latest.pt") is None
        got["temporaries_left"] = len(list(folder.glob(".*.tmp-*")))
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
    got["ok_by_design"] = got["checkpoint_failed"] > 0 and got["latest_intact"] \
        and not got["temporaries_left"]
    return got


def _cli(*argv: str, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnsched", *argv], capture_output=True,
                          text=True, timeout=600, **kw)


def corrupt(tmp: Path, cluster: Any, parts: Path, epochs: int) -> dict[str, Any]:
    """A run stopped by Ctrl-C after two checkpoints, its newest checkpoint's bytes flipped,
    then ``--resume``: the corrupt file must be named and skipped for the earlier one."""
    out = tmp / "run-corrupt"
    common = ["--cluster", cluster.source, "--job", str(LAB4 / "job.yaml"), "--plan",
              str(tmp / "plan.json"), "--partitions", str(parts), "--out", str(out),
              "--epochs", str(epochs), "--launcher", "netns", "--checkpoint-every", "3"]
    up = _cli("cluster", "up", "--cluster", cluster.source)
    if up.returncode:
        return {"error": f"cluster up: {up.stderr.strip()[-500:]}"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gnnsched", "train", *common],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300

        def complete() -> list[dict[str, Any]]:  # checkpoints both trainers have passed
            recs = _records(out)
            done = [r["seq"] for r in recs if r.get("type") == "batch"]
            seen: dict[int, dict[str, Any]] = {}
            for r in recs:
                if r.get("type") == "checkpoint" and done.count(r["seq"]) >= 2:
                    seen[r["seq"]] = r
            return [seen[k] for k in sorted(seen)]

        while time.monotonic() < deadline and proc.poll() is None and len(complete()) < 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        ckpts = complete()
        if len(ckpts) < 2:
            return {"error": "the run ended before its second complete checkpoint"}
        newest = Path(ckpts[-1]["path"])
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one bit pattern flipped mid-file
        newest.write_bytes(bytes(data))
        res = _cli("train", *common, "--resume", "--json")
        resumed = [r for r in _records(out) if r.get("type") == "resume"]
        log = out / "logs" / "coordinator.log"
        said = res.stdout + res.stderr + (log.read_text() if log.is_file() else "") + \
            " ".join(resumed[0].get("skipped", []) if resumed else [])
        got = {"wall_s": time.perf_counter() - t0, "error": None if res.returncode == 0
               else said.strip()[-500:], "corrupt_file": str(newest),
               "named": newest.name in said,
               "said": (resumed[0].get("skipped") or [None])[0] if resumed else None,
               "resumed_from_step": resumed[0].get("checkpoint_step") if resumed else None,
               "earlier_step": ckpts[-2]["seq"], "stall_s": 0.0,
               "test_accuracy": json.loads(res.stdout.strip().splitlines()[-1])["test_accuracy"]
               if res.returncode == 0 else None}
        got["ok_by_design"] = got["named"] and got["resumed_from_step"] == got["earlier_step"]
        return got
    finally:
        _cli("cluster", "down", "--cluster", cluster.source)


def run_cases(tmp: Path, epochs: int, only: list[str] | None) -> dict[str, dict[str, Any]]:
    """Every case of the suite, undisturbed first."""
    from gnnsched.runtime import cgroups, netns

    cluster, job, plan, parts = _setup(tmp, epochs)
    cases: dict[str, dict[str, Any]] = {}

    def want(name: str) -> bool:
        return only is None or name in only or name == "undisturbed"

    def run(name: str, what: str, fn: Any) -> None:
        if not want(name):
            return
        print(f"[chaos] {name}: {what}", flush=True)
        got = fn()
        got["fault"] = what
        cases[name] = got
        print(f"[chaos] {name}: {_line(got)}", flush=True)

    def out(name: str) -> Path:
        return tmp / name

    run("undisturbed", "no fault", lambda: _train(cluster, job, plan, parts, out("run-0"), []))
    run("loss", "every NIC drops 2% of its packets",
        lambda: _train(_lossy(cluster, False), job, plan, parts, out("run-loss"), []))
    if netns.qdisc_available("netem"):
        run("jitter", "every NIC delays packets 2 ms +- 2 ms (netem)",
            lambda: _train(_lossy(cluster, True), job, plan, parts, out("run-jitter"), []))
    elif want("jitter"):
        cases["jitter"] = {"fault": "every NIC delays packets 2 ms +- 2 ms",
                           "skipped": "this kernel has no sch_netem (tc qdisc netem): "
                                      "jitter cannot be emulated here"}
    run("cut", "gpu1's switch port down for 3 s at step 8 (under the heartbeat timeout)",
        lambda: _train(cluster, job, plan, parts, out("run-cut"), ["machine:gpu1:8:CUT:3"]))
    long_s = DEAD_AFTER_S + 6
    run("cut-long", f"gpu1's switch port down for {long_s:g} s at step 8 (past the "
        f"{DEAD_AFTER_S:g} s heartbeat timeout)",
        lambda: _train(cluster, job, plan, parts, out("run-cut-long"),
                       [f"machine:gpu1:8:CUT:{long_s:g}"]))
    why = cgroups.unavailable_reason()
    if why is None:  # the straggler's own baseline: every host in its CPU quotas, no fault
        run("undisturbed-cgroups", "no fault, every host in its control groups' CPU quotas",
            lambda: _train(cluster, job, plan, parts, out("run-0-cgroups"), [], cgroups=True))
        run("straggler", "gpu1's CPU quotas / 8 for 10 s from step 10",
            lambda: _train(cluster, job, plan, parts, out("run-straggler"),
                           ["machine:gpu1:10:SLOW:10"], cgroups=True))
    elif want("straggler"):
        cases["straggler"] = {"fault": "CPU quotas / 8", "skipped": f"no cgroups: {why}"}
    run("full-disk", "checkpoints on a 64 MB tmpfs, full after the first checkpoint",
        lambda: full_disk(cluster, job, plan, parts, out("run-full-disk")))
    run("corrupt", "Ctrl-C after two checkpoints, the newest bit-flipped, then --resume",
        lambda: corrupt(tmp, cluster, parts, epochs))
    return cases


def _line(got: dict[str, Any]) -> str:
    if got.get("skipped"):
        return f"skipped: {got['skipped']}"
    acc = got.get("test_accuracy")
    return (f"accuracy {acc if acc is None else round(acc, 4)}, wall {got.get('wall_s', 0):.1f}"
            f" s, longest stall {got.get('stall_s', 0):.1f} s, recoveries "
            f"{got.get('recoveries', 0)}, error {got.get('error')}")


def _target(target: str, config: str, value: Any, goal: Any, met: bool, why: str = ""
            ) -> dict[str, Any]:
    return {"target": target, "config": config, "value": value, "goal": goal, "met": bool(met),
            "why": why}


def targets(cases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules (``RULES``) applied to every case that ran, and each fault's own outcome."""
    base = (cases.get("undisturbed") or {}).get("test_accuracy")
    out = []
    for name, got in cases.items():
        if got.get("skipped"):
            out.append(_target(f"{name}: runs", name, None, "ran", False, got["skipped"]))
            continue
        acc, err = got.get("test_accuracy"), got.get("error")
        if err is None and acc is not None and base is not None:
            out.append(_target(f"{name}: {RULES['metric']}", name, round(acc - base, 4),
                               f"|delta| <= {POINT}", abs(acc - base) <= POINT + 1e-9))
        else:  # a stop: met only where the fault may be fatal by design and the message names it
            clear = name == "cut-long" and err is not None and "gpu1" in err
            out.append(_target(f"{name}: {RULES['metric']}", name, err, "a clear stop", clear))
        if "leftovers" in got:
            out.append(_target(f"{name}: {RULES['leftovers']}", name, got["leftovers"], [],
                               not got["leftovers"]))
        limit = DEAD_AFTER_S + REPLAN_S
        out.append(_target(f"{name}: {RULES['stall']}", name, round(got.get("stall_s", 0), 2),
                           f"<= {limit:g} s", got.get("stall_s", 0) <= limit))
    if "cut" in cases and not cases["cut"].get("skipped"):
        out.append(_target("cut: the host rejoins, nothing declared dead", "cut",
                           cases["cut"].get("recoveries"), 0, cases["cut"].get("recoveries") == 0))
    if "cut-long" in cases and not cases["cut-long"].get("skipped"):
        g = cases["cut-long"]
        out.append(_target("cut-long: declared dead once, its old processes stopped before "
                           "any restart (in place once its port is back, or re-planned "
                           "around), or a clear stop", "cut-long",
                           {"recoveries": g.get("recoveries"), "why": g.get("recovery_why")}, 1,
                           g.get("recoveries") == 1 or g.get("error") is not None))
    if "straggler" in cases and not cases["straggler"].get("skipped"):
        g = cases["straggler"]
        out.append(_target("straggler: the watch marks the slowed trainer (1), and only it",
                           "straggler", sorted(set(g.get("stragglers") or [])), [1],
                           set(g.get("stragglers") or []) == {1},
                           "" if g.get("stragglers") else "no step slowed 2x its own baseline"))
    for name, what in (("full-disk", "a failed write is said, the last checkpoint intact, no "
                        "temporary left"),
                       ("corrupt", "the corrupt file named and skipped for the earlier one")):
        if name in cases and not cases[name].get("skipped"):
            out.append(_target(f"{name}: {what}", name, {k: cases[name].get(k) for k in (
                "checkpoint_failed", "latest_intact", "temporaries_left", "named",
                "resumed_from_step", "earlier_step") if k in cases[name]}, True,
                cases[name].get("ok_by_design")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=4, help="epochs of every run (default 4)")
    ap.add_argument("--quick", action="store_true", help="2 epochs per run (default 4)")
    ap.add_argument("--only", nargs="*", help="these cases only (the undisturbed run always)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "chaos.json"),
                    help="the JSON to write (default docs/bench/chaos.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.epochs = 2
    from gnnsched.runtime import netns

    why = netns.unavailable_reason()
    if why is not None:
        print(f"bench_chaos: the emulated cluster is unavailable here: {why}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gnnsched-chaos-") as tmp:
        cases = run_cases(Path(tmp), args.epochs, args.only)
    tg = targets(cases)
    doc = {"bench": "chaos", "issue": 57, "rules": RULES, "dead_after_s": DEAD_AFTER_S,
           "replan_s": REPLAN_S, "cluster": "examples/lab4 (netns launcher)",
           "job": f"examples/lab4/job.yaml, {args.epochs} epochs",
           "host": {"node": platform.node(), "cpus": os.cpu_count()},
           "wall_s": time.perf_counter() - t0, "cases": cases, "targets": tg,
           "command": "python bench/bench_chaos.py" + (f" --epochs {args.epochs}"
                                                       if args.epochs != 4 else "")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    width = max(len(t["target"]) for t in tg)
    for t in tg:
        print(f"{'PASS' if t['met'] else 'MISS'}  {t['target']:<{width}}  {t['value']}")
    print(f"wrote {args.out}: {sum(t['met'] for t in tg)} of {len(tg)} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
