"""Train a GNN for real as a plan says: stores, samplers, fetchers and trainers as processes.

Shows a progress bar per epoch (mini-batches and seeds per second), then per epoch the time,
the validation accuracy and each trainer's mean seconds per iteration in every stage (sample /
fetch as measured where they ran, wait = trainer blocked on input, train, barrier = gradient
all-reduce including waiting for the slowest trainer). The run directory gets
``metrics.jsonl`` (one JSON object per trained mini-batch, per epoch, the test result and the
run summary), ``logs/`` (one file per process, ``coordinator.log`` for failures and
recoveries) and ``checkpoints/``. Ctrl-C stops every process. ``--json`` ends with one JSON
object: the system's ``epoch_time_s`` (median over epochs after the first), ``test_accuracy``,
``bytes_sent``, per-stage times and any recoveries. A run directory that already holds a run
(``metrics.jsonl``, checkpoints) is refused rather than wiped: choose another ``--out``,
``--force`` to replace it, or ``--resume`` to continue it: an interrupted run (Ctrl-C, a
crash, a lost machine) goes on from its newest complete checkpoint with the same cluster, job
and plan, and ``metrics.jsonl`` is appended to.

A process or machine that dies does not end the run: it is detected (exit status, or no
heartbeat for ``--dead-after`` seconds), the plan is kept or re-made around a lost machine,
the affected processes restart, and training resumes from the last checkpoint (every
``--checkpoint-every`` steps); the log says what died, what it was doing, what was re-planned
and which steps were replayed. A run that cannot go on -- bad input, a host that cannot be
reached, a port in use, recovery exhausted -- ends with one line ``gnnsched train: error:
...`` and exit code 2 (details in the run directory's ``logs/``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gnnsched import api
from gnnsched.api import check_faults, check_plan_job, summary, train
from gnnsched.commands import (
    epochs_int,
    input_dir,
    nonneg_int,
    output_dir,
    port_int,
    positive_int,
    seconds,
    threads_int,
)
from gnnsched.commands.progress import Progress
from gnnsched.registry import CliOption

__all__ = ["check_faults", "check_plan_job", "summary", "train"]  # the library's, re-exported
_Progress = Progress  # the name it had here (gnnsched.commands.progress.Progress now)

HELP = "train for real on local processes, an emulated cluster or SSH hosts, as a plan says"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, help="cluster file (YAML)")
    p.add_argument("--job", required=True, help="job file (YAML)")
    p.add_argument("--plan", required=True, help="plan.json from `gnnsched plan`")
    from gnnsched.policy import policies

    p.add_argument("--launcher", default="local", choices=sorted(api.launchers()),
                   help="where the processes run: local = every machine's processes on this "
                        "one, over loopback (no bandwidth limits); netns = each machine in its "
                        "own network namespace with shaped NICs (root; `gnnsched cluster up` "
                        "first); ssh = on the real hosts named by machines[*].ssh in the "
                        "cluster file (see --coordinator-address, --remote-python, "
                        "--remote-dir); ray = on a running Ray cluster (--ray-address; "
                        "docs/deployment.md); or a launcher installed as a plug-in (entry point "
                        "group gnnsched.launchers) (default: local)")
    p.add_argument("--policy", default="gnnsched", choices=sorted(policies()),
                   help="online scheduling policy (built-in or a gnnsched.policies plug-in)")
    p.add_argument("--out", type=output_dir, default=None,
                   help="run directory, new or empty (default: runs/train-TIME); one that "
                        "holds an earlier run is refused unless --force or --resume")
    p.add_argument("--force", action="store_true",
                   help="replace the run already in --out (its metrics.jsonl, checkpoints, "
                        "logs and plan copy are deleted; other files stay)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --out from its newest complete "
                        "checkpoint (same cluster, job and plan; metrics.jsonl is appended "
                        "to; the steps after the checkpoint run again)")
    p.add_argument("--any-job", action="store_true",
                   help="use a plan made for a job with other settings (batch size, "
                        "fan-outs, ...; a warning says what differs) instead of refusing it")
    p.add_argument("--json", action="store_true", help="end by printing one JSON object")
    p.add_argument("--epochs", type=epochs_int, default=None, help="override the job's epochs")
    p.add_argument("--cost", default=None,
                   help="cost profile (gnnsched profile) for the policy's expected times; "
                        "default: learnt during the run")
    p.add_argument("--partitions", default=None, help="partition directory (default: the "
                   "job's, or its dataset partitioned into the cache)")
    p.add_argument("--data-dir", type=input_dir, default=None, help="where dataset .npz files live")
    p.add_argument("--threads", type=threads_int, default=1, help="intra-op threads per process")
    p.add_argument("--emulate-speed", default=None, choices=("on", "off"),
                   help="stretch each step to the cluster's GPU speed (default: on without "
                        "CUDA)")
    p.add_argument("--no-grad-first", action="store_true",
                   help="let store traffic share a machine's NIC with its gradients (default: "
                        "stores send it nothing of later iterations while its gradients are "
                        "on the wire)")
    p.add_argument("--urgent-band", action="store_true",
                   help="with priority sharing on NICs with TOS bands (cluster up --bands): "
                        "each store sends the policy's first transfer on a second socket in "
                        "the middle band, past the bulk bytes queued at both NICs (default: "
                        "one band of graph data; docs/evaluation.md says why)")
    p.add_argument("--trace", action="store_true",
                   help="also write one record per NIC transfer (a store's struct and feat, a "
                        "sampler's block, a relay's relay: queued, received) and per "
                        "mini-batch dispatch and sampling to metrics.jsonl: the run's own "
                        "timeline, to set beside the simulator's")
    add_launcher_options(p)
    r = p.add_argument_group("failures and recovery")
    r.add_argument("--checkpoint-every", type=positive_int, default=10,
                   help="training steps between checkpoints (also at every epoch end)")
    r.add_argument("--heartbeat", type=seconds, default=1.0, help="seconds between heartbeats")
    r.add_argument("--dead-after", type=seconds, default=10.0,
                   help="declare a process dead after this many seconds without a heartbeat")
    r.add_argument("--no-recover", action="store_true",
                   help="a dead process fails the run instead of being recovered")
    r.add_argument("--max-recoveries", type=nonneg_int, default=3,
                   help="failures recovered from before the run fails")
    r.add_argument("--replan", default="auto", choices=("auto", "always", "never"),
                   help="auto: re-plan only when a machine is lost; always: also when a "
                        "process dies; never: only restart in place")
    r.add_argument("--replan-placer", default=None,
                   help="placer for re-planning (default: the plan's, else greedy)")
    r.add_argument("--request-timeout", type=seconds, default=120.0,
                   help="seconds any process waits for an answer before it gives up")
    r.add_argument("--port", type=port_int, default=None,
                   help="coordinator port (default: an ephemeral one)")
    r.add_argument("--kill-at", action="append", default=[], metavar="ROLE:ID:STEP[:SIGNAL]",
                   help="fault injection: send SIGNAL (KILL, STOP or TERM; default KILL) to "
                        "one process (trainer:0, sampler:1, store:store0, fetcher:store0) or "
                        "every process of a machine (machine:store0) when training reaches "
                        "step STEP (>= 0; steps count every batch a trainer runs, "
                        "validation and test batches included, as metrics.jsonl's seq does); "
                        "machine:NAME:STEP:CUT:SECONDS instead cuts the machine off the "
                        "network for SECONDS, its processes alive (--launcher netns), and "
                        "machine:NAME:STEP:SLOW:SECONDS leaves it an eighth of its CPU for "
                        "SECONDS (a straggler; the scale model's control groups); "
                        "repeatable, checked against the plan before anything starts")


def earlier_run(run_dir: str | Path, plan: str | Path | None = None) -> list[str]:
    """What a fresh run in ``run_dir`` would destroy: a non-empty ``metrics.jsonl``, saved
    checkpoints, a ``plan.json`` other than ``plan``'s (logs are appended to, not lost)."""
    d = Path(run_dir)
    if not d.is_dir():
        return []
    held = []
    metrics = d / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        with open(metrics, "rb") as f:
            lines = sum(1 for _ in f)
        held.append(f"metrics.jsonl with {lines} line{'s' * (lines != 1)}")
    ckpt = d / "checkpoints"
    if ckpt.is_dir():
        n = sum(1 for c in ckpt.iterdir() if c.is_file())
        if n:
            held.append(f"checkpoints/ with {n} file{'s' * (n != 1)}")
    saved = d / "plan.json"
    if saved.is_file() and not _same_plan(saved, plan):
        held.append("a different plan.json")
    return held


def _same_plan(saved: Path, plan: str | Path | None) -> bool:
    """``saved`` holds the plan ``plan`` names (the same file, or the same JSON)."""
    if plan is None:
        return False
    try:
        if saved.resolve() == Path(plan).resolve():
            return True
        return bool(json.loads(saved.read_text()) == json.loads(Path(plan).read_text()))
    except (OSError, ValueError):
        return False


def clear_run_dir(run_dir: str | Path) -> None:
    """``--force``: remove the earlier run's own files (metrics, checkpoints with their
    half-written temporaries, logs, plan copy), so nothing of it is mistaken for the new
    run's; anything else in the folder stays."""
    import shutil

    d = Path(run_dir)
    for name in ("metrics.jsonl", "plan.json"):
        (d / name).unlink(missing_ok=True)
    for name in ("checkpoints", "logs"):
        shutil.rmtree(d / name, ignore_errors=True)
    print(f"gnnsched train: replacing the run in {d} (--force)", file=sys.stderr)


def check_run_dir(run_dir: str | Path, plan: str | Path | None = None) -> None:
    """A fresh ``gnnsched train`` must not wipe an earlier run: a SpecError naming the folder,
    what it holds and the way out (``--force`` or another ``--out``). An empty or new folder
    is fine, and so is one where a run failed before it trained anything (no metrics, no
    checkpoints, and this same plan)."""
    from gnnsched.spec import SpecError

    held = earlier_run(run_dir, plan)
    if held:
        raise SpecError("--out", "", f"{run_dir} already holds a run ({', '.join(held)}); "
                        "training there would replace it",
                        "another --out (a new or empty folder), or --force to replace "
                        "that run")


def check_resumable(run_dir: str | Path, plan: str | Path, force: bool) -> None:
    """``--resume`` continues the run in ``run_dir`` with the plan it was started with; a
    missing folder, another plan or ``--force`` beside it is refused by name (which
    checkpoint to go on from is the coordinator's to find: :mod:`..coordinator.resume`)."""
    from gnnsched.spec import SpecError

    d = Path(run_dir)
    if force:
        raise SpecError("--resume", "", "cannot be combined with --force (which deletes the "
                        "run --resume would continue)", "one of them")
    if not (d / "metrics.jsonl").is_file():
        raise SpecError("--resume", "", f"{d} holds no earlier run to continue (no "
                        "metrics.jsonl)", "the --out of the interrupted run, or drop --resume")
    saved = d / "plan.json"
    if saved.is_file() and not _same_plan(saved, plan):
        raise SpecError("--resume", "", f"{d} was trained with another plan ({saved} differs "
                        f"from {plan})", f"--plan {saved}")


def metric_line(result: Any) -> str:
    """"test accuracy A (majority-class rate M)[; test METRIC V]": accuracy beside what a
    constant predictor scores, and the job's metric when it is not accuracy."""
    line = f"test accuracy {result.test_accuracy:.4f}"
    if getattr(result, "majority_rate", None) is not None:
        line += f" (majority-class rate {result.majority_rate:.4f})"
    metric = getattr(result, "metric", "accuracy")
    if metric != "accuracy":
        line += f"; test {metric} {result.test_metric:.4f}"
    return line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def add_launcher_options(p: argparse.ArgumentParser) -> None:
    """Every installed launcher's own flags (``Launcher.cli_options``), in one group; a flag
    that several launchers declare is added once and says which use it."""
    users: dict[str, tuple[CliOption, list[str]]] = {}
    for name, cls in api.launchers().items():
        for opt in cls.cli_options:
            users.setdefault(opt.flag, (opt, []))[1].append(name)
    if not users:
        return
    g = p.add_argument_group("launcher options (each used only by the launchers it names)")
    for flag, (opt, names) in users.items():
        who = f"{' and '.join(names)} launcher{'s' if len(names) > 1 else ''}"
        g.add_argument(flag, dest=opt.dest, default=opt.default, metavar=opt.metavar,
                       help=f"{who}: {opt.help}")


def run(args: argparse.Namespace) -> int:
    from gnnsched.spec import SpecError

    if args.dead_after <= args.heartbeat:
        raise SpecError("--dead-after", "", f"{args.dead_after:g} s is not more than "
                        f"--heartbeat {args.heartbeat:g} s: every process would be declared "
                        "dead between two heartbeats", f"more than --heartbeat, e.g. "
                        f"{10 * args.heartbeat:g}")
    if args.replan_placer is not None:  # else an unknown name surfaces only at a recovery
        api.check_placer(args.replan_placer, "--replan-placer")
    opts = api.RuntimeOptions(threads=args.threads, resume=args.resume, grad_first=not args.no_grad_first,
                          urgent_band=args.urgent_band,
                          emulate_speed=None if args.emulate_speed is None
                          else args.emulate_speed == "on",
                          checkpoint_every=args.checkpoint_every, heartbeat_s=args.heartbeat,
                          dead_after_s=args.dead_after, recover=not args.no_recover,
                          max_recoveries=args.max_recoveries, replan=args.replan,
                          replan_placer=args.replan_placer,
                          request_timeout=args.request_timeout, coordinator_port=args.port,
                          faults=api.parse_faults(args.kill_at), trace=args.trace)
    lopts = api.launcher_kwargs(args.launcher, args)

    if args.out is None:  # known before the run, so an error can point at its logs
        args.out = f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.resume:
        check_resumable(args.out, args.plan, args.force)
    elif not args.force:  # before anything is written there; recovery stays inside one run
        check_run_dir(args.out, args.plan)
    elif earlier_run(args.out, args.plan):
        clear_run_dir(args.out)
    progress = Progress(args.json)
    try:
        result = train(args.cluster, args.job, args.plan, policy=args.policy,
                       launcher=args.launcher, out_dir=args.out, partitions=args.partitions,
                       epochs=args.epochs, options=opts, profile=args.cost,
                       progress=progress, data_dir=args.data_dir, launcher_options=lopts,
                       force_plan=args.any_job)
    except (api.RunError, api.LaunchError, api.TransportError, api.MessageError,
            api.NetnsError) as exc:
        # one clear line; the whole story (log tails, tracebacks) is in the run's logs/
        progress.close()
        where = f" (details: {args.out}/logs/)" if args.out else ""
        print(f"gnnsched train: error: {_first_line(exc)}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        progress.close()
        signum = getattr(exc, "signum", signal.SIGINT)  # cli.Terminated: SIGTERM or SIGHUP
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {exc}"
        print(f"gnnsched train: {how}; all processes stopped", file=sys.stderr)
        return 128 + signum
    progress.close()
    from gnnsched.learning_curve import draw_curve

    curve = draw_curve(Path(result.run_dir) / "metrics.jsonl")
    out = sys.stderr if args.json else sys.stdout
    real = f" = {result.real_epoch_time_s:.3f} s on the real cluster (scale model, D " \
        f"{result.dilation:g})" if getattr(result, "dilation", 1.0) != 1.0 else ""
    print(f"{metric_line(result)}; epoch time {result.epoch_time_s:.3f} s "
          f"(median after the first){real}; {result.bytes_sent / 1e6:.1f} MB sent "
          f"({result.network_bytes / 1e6:.1f} MB across machines); run dir {result.run_dir}"
          + (f"; learning curve {curve}" if curve else ""), file=out)
    for rc in result.recoveries:
        print(f"recovered from: {rc['role']} on {rc['machine']} {rc['how']}; "
              f"{'re-planned' if rc['replanned'] else 'restarted in place'}; replayed "
              f"{len(rc['replayed_steps'])} steps; lost {rc.get('lost_s', 0.0):.2f} s", file=out)
    if args.json:
        print(json.dumps(summary(result)))
    return 0
