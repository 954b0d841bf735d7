"""Failure detection and recovery, measured: how fast each kind of failure is noticed and how
much training time it costs.

Run: ``python bench/bench_faults.py [--quick] [--epochs 3] [--repeats 2] [--out docs/bench/faults.json]``

Why: "a dying process does not lose training" is only useful if it also does not lose much
*time*. On the local launcher with Cora (examples/lab4: 2 store hosts, 2 GPU hosts, 2 trainers,
a relay), the same job runs undisturbed and then once per failure kind, the fault injected by
the coordinator's hook as a real signal to a real process in the middle of epoch 2
(``RuntimeOptions.faults``):

* ``sampler``, ``trainer``, ``store``, ``relay`` -- SIGKILL of that process (its host lives:
  restart in place, same plan);
* ``machine`` -- SIGKILL of every process on store0 and the host marked down: its partitions
  move (shared storage), the placer re-plans on the 3 hosts left, everything restarts;
* ``hang`` -- SIGSTOP of a sampler: it does not exit, only its silence tells (heartbeats
  every ``--heartbeat`` s, dead after ``--dead-after`` s);
* ``trainer-cold`` -- the trainer kill again with the fork server off (every role a fresh
  interpreter importing torch and DGL), to show what the fork server saves.

Per kind: detection time (fault -> declared dead), restart time (declared dead -> training
resumed: stop, re-plan, start, hand-shake), replay time (resumed -> back at the last step
completed before the fault), their sum (*time lost*, as the coordinator accounts it), the
end-to-end wall-time difference against the undisturbed run (the same quantity measured
from outside, noise included), the steps replayed, and the test accuracy (which must equal
the undisturbed run's: recovery replays exactly the lost steps from the same model state).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAB4 = ROOT / "examples" / "lab4"

KINDS: dict[str, tuple[str, str]] = {  # kind -> (target, signal)
    "sampler": ("sampler:1", "KILL"),
    "trainer": ("trainer:1", "KILL"),
    "store": ("store:store1", "KILL"),
    "relay": ("fetcher:store0", "KILL"),
    "machine": ("machine:store0", "KILL"),
    "hang": ("sampler:1", "STOP"),
    "trainer-cold": ("trainer:1", "KILL"),
}


def _setup(tmp: Path, epochs: int) -> tuple[Any, Any, Any, Path]:
    from gnnsched.datasets import load_dataset, partition_graph
    from gnnsched.plan import Plan, TrainerPlan
    from gnnsched.spec import load_cluster, load_job

    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    job = replace(job, epochs=epochs)
    parts = tmp / "parts"
    partition_graph(load_dataset(job.dataset, split=job.split), job.num_parts, parts,
                    method=job.part_method, seed=job.seed)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    return cluster, job, plan, parts


def _run(cluster: Any, job: Any, plan: Any, parts: Path, out: Path, opts: Any,
         cold: bool = False) -> tuple[Any, float]:
    from gnnsched.api import train
    from gnnsched.runtime.launcher import LocalLauncher

    t0 = time.perf_counter()
    res = train(cluster, job, plan, out_dir=out, partitions=parts, options=opts,
                launcher=LocalLauncher(cluster, fork_server=not cold))
    return res, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated failure kinds")
    p.add_argument("--heartbeat", type=float, default=0.5)
    p.add_argument("--dead-after", type=float, default=3.0)
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="2 epochs, 1 repeat, no cold run")
    p.add_argument("--out", default=str(ROOT / "docs" / "bench" / "faults.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.epochs, a.repeats = 2, 1
        a.kinds = ",".join(k for k in a.kinds.split(",") if k != "trainer-cold")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from gnnsched.runtime.coordinator import Fault, RuntimeOptions

    kinds = [k for k in a.kinds.split(",") if k]
    opts = RuntimeOptions(start_timeout=300, request_timeout=60, heartbeat_s=a.heartbeat,
                          dead_after_s=a.dead_after, checkpoint_every=a.checkpoint_every)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmpdir:
        tmp = Path(tmpdir)
        cluster, job, plan, parts = _setup(tmp, a.epochs)
        K = None
        calm: list[tuple[Any, float]] = []
        for i in range(a.repeats):
            calm.append(_run(cluster, job, plan, parts, tmp / f"calm-{i}", opts))
            K = calm[-1][0].iterations_per_epoch
        base_wall = statistics.median(w for _, w in calm)
        base_acc = calm[0][0].test_accuracy
        print(f"undisturbed: wall {base_wall:.2f} s, test accuracy {base_acc:.4f}, "
              f"{K} steps per epoch", flush=True)
        cold_wall = None
        if "trainer-cold" in kinds:
            cold_wall = _run(cluster, job, plan, parts, tmp / "calm-cold", opts, cold=True)[1]
        # mid-epoch 2: after the first epoch's steps (+ its validation step), a third in
        assert K is not None
        step = (K + 1) + K // 3
        for kind in kinds:
            target, sig = KINDS[kind]
            runs = []
            for i in range(a.repeats if kind != "trainer-cold" else 1):
                o = replace(opts, faults=(Fault(target, step, sig),))
                res, wall = _run(cluster, job, plan, parts, tmp / f"{kind}-{i}", o,
                                 cold=kind == "trainer-cold")
                if not res.recoveries:
                    raise SystemExit(f"{kind}: no recovery recorded")
                rc = res.recoveries[0]
                ref = cold_wall if kind == "trainer-cold" else base_wall
                runs.append({
                    "detect_s": rc["detect_s"], "restart_s": rc["restart_s"],
                    "replay_s": rc.get("replay_s"), "lost_s": rc.get("lost_s"),
                    "wall_s": wall, "wall_lost_s": wall - ref, "detected_as": rc["how"],
                    "role": rc["role"], "doing": rc["doing"], "replanned": rc["replanned"],
                    "plan_changes": rc["plan_changes"],
                    "moved_partitions": rc["moved_partitions"],
                    "checkpoint_step": rc["checkpoint_step"],
                    "replayed_steps": rc["replayed_steps"], "restarted": rc["restarted"],
                    "test_accuracy": res.test_accuracy,
                    "accuracy_delta": res.test_accuracy - base_acc,
                    "recoveries": len(res.recoveries)})
            med = {k: statistics.median(r[k] for r in runs if r[k] is not None)
                   for k in ("detect_s", "restart_s", "replay_s", "lost_s", "wall_lost_s")}
            rows[kind] = {"target": target, "signal": sig, "fault_step": step, **med,
                          "runs": runs}
            print(f"{kind:>13}: detected in {med['detect_s']:6.3f} s, restart "
                  f"{med['restart_s']:6.2f} s, replay {med['replay_s']:5.2f} s -> lost "
                  f"{med['lost_s']:6.2f} s (wall +{med['wall_lost_s']:6.2f} s); "
                  f"{len(runs[0]['replayed_steps'])} steps replayed; "
                  f"{'re-planned' if runs[0]['replanned'] else 'same plan'}; accuracy "
                  f"{runs[0]['test_accuracy']:.4f}", flush=True)
    out = {
        "bench": "faults",
        "command": "python bench/bench_faults.py" + (" --quick" if a.quick else ""),
        "job": {"cluster": "examples/lab4", "dataset": "cora", "epochs": a.epochs,
                "steps_per_epoch": K, "fault_step": step, "launcher": "local"},
        "options": {"heartbeat_s": a.heartbeat, "dead_after_s": a.dead_after,
                    "checkpoint_every": a.checkpoint_every, "repeats": a.repeats},
        "undisturbed": {"wall_s": base_wall, "test_accuracy": base_acc,
                        "cold_wall_s": cold_wall},
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "load_avg_1m": os.getloadavg()[0]},
        "failures": rows,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
