"""The evaluation, reproducible with one command, in seven modes: one subcommand each, with
only its own flags (``gnnsched bench MODE --help``).

``eval``: real runs of gnnsched against colocation and real DistDGL on an emulated cluster
(four shapes, Cora and Coauthor Physics, or your own graph: ``--datasets my.npz``), the
simulator's prediction for every real run (fidelity), and simulated runs at 16-256 machines
from the measured profiles; it writes ``results.json``, ``report.md`` and PNG plots to
``--out``. ``eval --quick`` is the CI mode: Cora, one shape, 2 epochs, small scaling sweep, a
few minutes; it checks its invariants (every configuration produced a number, systems that
train the same mini-batches agree on accuracy within 1 point, each run matches
single-process training) and exits 1 when one fails. The full mode exits 1 only when a
configuration produced no number.

``scale``: the scale tier, a products-like synthetic graph
of 1M nodes and 40M directed edges (``--nodes``) partitioned, profiled, planned and trained
on 4 emulated hosts with 1 Gbit/s NICs by the single-process reference, DistDGL, colocation
+ fifo and gnnsched, reported against the box's compute and network limits
(``docs/results/scale``); ``scale --quick`` is its CI version (20k nodes).

``scale-model``: the evaluation on the scale model (hosts in control groups, everything
slowed by one dilation factor, each run predicted before it starts); ``calibrate-box``
measures the box's constants it predicts with; ``merge`` merges a scale-model folder into
the evaluation's results file. ``resimulate`` and ``accuracy-study`` re-derive a stored
evaluation's predictions, or add its accuracy study, training nothing else.

No performance target is judged unless asked: ``--targets FILE`` gives the goals (the
project's own are ``bench/targets.yaml`` in a checkout); without it only the invariants are
checked. The old spellings (``gnnsched bench --quick``, ``gnnsched bench --scale --quick``,
``--scale-model``, ``--merge``, ``--resimulate``, ``--calibrate-box``, ``--accuracy-study``,
plain ``gnnsched bench --repeats 3``) still work, with a note naming the new one.

The work is in :mod:`gnnsched.evaluation` (installed with the package); the datasets come
from ``--data-dir``, ``$GNNSCHED_DATA_DIR`` or a checkout's ``../shared/datasets`` (without
Physics' file there, the default evaluation runs on the bundled Cora and says so).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gnnsched.commands import (
    epochs_int,
    input_dir,
    milliseconds,
    nonneg_int,
    output_dir,
    positive_int,
    seconds,
    seed_int,
    sizes_int,
)
from gnnsched.spec import NORMALIZE

HELP = "run the evaluation (real runs vs colocation and DistDGL, fidelity, scaling); " \
       "subcommands: eval, scale, scale-model, calibrate-box, merge, resimulate, accuracy-study"

# every flag once: its argparse settings (help by mode in HELPS)
FLAGS: dict[str, dict[str, Any]] = {
    "--quick": {"action": "store_true"},
    "--nodes": {"type": positive_int, "default": None},
    "--out": {"type": output_dir, "default": None},
    "--work": {"type": output_dir, "default": None},
    "--data-dir": {"type": input_dir, "default": None},
    "--launcher": {"default": "auto", "choices": ("auto", "netns", "local")},
    "--datasets": {"nargs": "+", "default": None, "metavar": "NAME|FILE.npz"},
    "--normalize": {"default": None, "choices": NORMALIZE},
    "--split": {"type": nonneg_int, "default": 0},
    "--shapes": {"nargs": "+", "default": None},
    "--systems": {"nargs": "+", "default": None},
    "--epochs": {"type": epochs_int, "default": None},
    "--repeats": {"type": positive_int, "default": 1},
    "--budget": {"type": seconds, "default": None},
    "--samples": {"type": positive_int, "default": None},
    "--sizes": {"type": sizes_int, "nargs": "+", "default": None},
    "--no-real": {"action": "store_true"},
    "--no-scale": {"action": "store_true"},
    "--nic-queue-ms": {"type": milliseconds, "default": None},
    "--nic-bands": {"action": "store_true"},
    "--dilation": {"type": float, "default": None, "metavar": "D"},
    "--cores": {"type": float, "default": None, "metavar": "N"},
    "--box": {"default": None, "metavar": "FILE.json"},
    "--into": {"default": None, "metavar": "FILE.json"},
    "--no-into": {"action": "store_true"},
    "--no-reference": {"action": "store_true"},
    "--seed": {"type": seed_int, "default": 0},
    "--accuracy-seeds": {"type": nonneg_int, "default": None, "metavar": "N"},
    "--targets": {"default": None, "metavar": "FILE"},
}

_REAL = ("--quick", "--out", "--work", "--data-dir", "--launcher", "--datasets", "--normalize",
         "--split", "--shapes", "--systems", "--epochs", "--repeats", "--budget", "--samples",
         "--sizes", "--no-real", "--no-scale", "--nic-queue-ms", "--nic-bands",
         "--no-reference", "--seed", "--accuracy-seeds", "--targets")
_MODEL = ("--dilation", "--cores", "--box")

# mode: (one-line help, the flag that chose it before subcommands, its flags)
MODES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "eval": ("the evaluation: real runs vs colocation and DistDGL, fidelity, scaling", None,
             _REAL),
    "scale": ("the scale tier: a million-node graph, seeds/s against the box's limit",
              "--scale", ("--quick", "--nodes", "--out", "--work", "--launcher", "--shapes",
                          "--systems", "--epochs", "--repeats", "--budget", "--samples",
                          "--no-reference", "--normalize", "--seed", "--targets")),
    "scale-model": ("the evaluation on the scale model, each run predicted before it runs",
                    "--scale-model", (*_REAL, *_MODEL, "--into", "--no-into")),
    "calibrate-box": ("measure this box's constants for the scale model (nothing else runs)",
                      "--calibrate-box", ("--quick", "--out", "--work", "--data-dir",
                                          "--launcher", "--datasets", "--normalize", "--split",
                                          "--epochs", "--repeats", "--samples", "--seed",
                                          "--nic-queue-ms", "--nic-bands", *_MODEL)),
    "merge": ("merge a scale-model folder into the evaluation's results (trains nothing)",
              "--merge", ("--out", "--into", "--targets")),
    "resimulate": ("re-derive a stored evaluation's predictions (trains nothing)",
                   "--resimulate", ("--quick", "--out", "--work", "--data-dir", "--no-scale",
                                    "--into", "--no-into", "--targets")),
    "accuracy-study": ("add the accuracy study to a stored evaluation, then judge it again",
                       "--accuracy-study", ("--quick", "--out", "--work", "--data-dir",
                                            "--accuracy-seeds", "--targets")),
}

_SCALE_MODEL_OUT = ("results folder (default: docs/results-scale-model, or "
                    "docs/results-scale-model-NAME... for --datasets other than cora; "
                    "--quick: runs/bench-quick)")
_STORED_OUT = ("the stored evaluation's folder, with its results.json (default: docs/results; "
               "--quick: runs/bench-quick)")
_TARGETS = ("judge the targets of this file's {section} goals (the project's: "
            "bench/targets.yaml; default: none, only the invariants are checked)")
# flag: {mode: help}; "*" for every mode that does not say otherwise
HELPS: dict[str, dict[str, str]] = {
    "--quick": {"eval": "CI mode: Cora, one shape, 2 epochs, small sweep; checks invariants",
                "scale": "CI mode: a 20k-node graph, 1 epoch; checks invariants",
                "scale-model": "small mode: Cora, one shape, 2 epochs, small sweep; merges "
                               "into nothing",
                "calibrate-box": "the quick mode's defaults (2 epochs, 8 samples, "
                                 "runs/bench-quick)",
                "*": "the quick evaluation's folders (runs/bench-quick)"},
    "--nodes": {"*": "nodes of the synthetic graph (default 1000000; --quick 20000)"},
    "--out": {"eval": "results folder (default: docs/results under the current directory; "
                      "--quick: runs/bench-quick)",
              "scale": "results folder (default: docs/results/scale; --quick: "
                       "runs/bench-scale-quick)",
              "scale-model": _SCALE_MODEL_OUT,
              "calibrate-box": "folder of the box file when --box is not given (default: "
                               "docs/results-scale-model; --quick: runs/bench-quick)",
              "merge": "the scale-model evaluation's folder to merge (its results.json)",
              "*": _STORED_OUT},
    "--work": {"scale": "run directories, logs, plans (default: runs/bench-scale[-quick])",
               "*": "run directories, logs, plans (default: runs/bench[-quick] under the "
                    "current directory)"},
    "--data-dir": {"*": "folder of the .npz graphs (default: $GNNSCHED_DATA_DIR, else a "
                        "checkout's ../shared/datasets; Cora also ships with the package)"},
    "--launcher": {"scale-model": "netns (the default, auto, when root): the scale model "
                                  "needs network namespaces",
                   "calibrate-box": "netns (the default, auto, when root): the scale model "
                                    "needs network namespaces",
                   "*": "auto: network namespaces when root, else local processes"},
    "--datasets": {"*": "cora, physics, products (the scale tier's million-node graph, "
                        "generated once into the cache; for scale-model) and/or paths to "
                        "your own graphs (.npz, the schema of docs/fields.md; named by the "
                        "file's stem) (default: cora and physics, or cora alone where "
                        "physics' file is not at hand; --quick: cora)"},
    "--normalize": {"scale": "the job's features: how each column is scaled (default: "
                             "standard)",
                    "*": "the jobs' features: how each column is scaled (default: row for a "
                         ".npz of yours, so raw counts train; none for cora and physics, as "
                         "published)"},
    "--split": {"*": "the jobs' split for a .npz of yours: which row of its [S, N] masks "
                     "(default 0)"},
    "--shapes": {"scale": "plentiful, limited (default: plentiful)",
                 "scale-model": "plentiful, gpuless, hetero, mixedgen, corestore (default: all "
                                "five; --quick: gpuless)",
                 "*": "plentiful, gpuless, hetero, mixedgen, corestore (default: the first "
                      "four; --quick: gpuless)"},
    "--systems": {"scale": "subset of distdgl, colocation+fifo, colocation+fifo+cache, "
                           "gnnsched+fifo, gnnsched+gnnsched, gnnsched+fifo+cache, "
                           "gnnsched+gnnsched+cache (default: distdgl, colocation+fifo, "
                           "gnnsched+gnnsched, gnnsched+gnnsched+cache; a fifo and a gnnsched "
                           "system on one plan are also A/B'd against the simulator's gain)",
                  "scale-model": "subset of colocation+fifo, gnnsched+fifo, gnnsched+gnnsched "
                                 "(default: all three; DistDGL's processes are not in the "
                                 "hosts' groups)",
                  "*": "subset of distdgl, colocation+fifo, gnnsched+fifo, gnnsched+gnnsched "
                       "(default: all four)"},
    "--epochs": {"scale": "training epochs per run (default 2, the second the steady state; "
                          "--quick 1)",
                 "*": "training epochs per run (default 8; --quick 2)"},
    "--repeats": {"*": "real runs per system, run r with job seed SEED + r in every "
                       "system; the median epoch time and the mean accuracy are reported"},
    "--budget": {"scale": "gnnsched planning seconds per plan (default 10; --quick 2)",
                 "*": "gnnsched planning seconds per plan (default 10; --quick 3)"},
    "--samples": {"scale": "profiled mini-batches per partition (default 8; --quick 2)",
                  "*": "profiled mini-batches per partition (default 32; --quick 8)"},
    "--sizes": {"*": "machines per simulated cluster (default 16 32 64 128 256; --quick 16 "
                     "32)"},
    "--no-real": {"*": "skip the real runs (profiles, plans, simulation and scaling only)"},
    "--no-scale": {"resimulate": "do not re-derive the simulated sweep",
                   "*": "skip the simulated sweep"},
    "--nic-queue-ms": {"*": "bound every emulated NIC's queue to this many milliseconds of its "
                            "rate (netns; default: the emulation's own, see `gnnsched cluster "
                            "up --help`)"},
    "--nic-bands": {"*": "emulated NICs with three priority bands by IP TOS, like a switch "
                         "with QoS: gradients ahead of the bulk data gnnsched marks (netns; "
                         "default: one FIFO per NIC; see `gnnsched cluster up --help`)"},
    "--dilation": {"*": "the dilation factor D (default: the smallest at which every host's "
                        "quota fits this box's cores)"},
    "--cores": {"*": "the cores of this box the hosts' quotas may fill (default: all; fewer "
                     "leaves the kernel's networking and the coordinator, which no group "
                     "holds, room, at a larger D)"},
    "--box": {"calibrate-box": "where to write this box's calibration (default: OUT/box.json)",
              "*": "this box's calibration (`gnnsched bench calibrate-box`; default: "
                   "OUT/box.json, made first when missing)"},
    "--into": {"merge": "the evaluation file to merge into: its scale_model section, beside "
                        "those merged before; the scale model's targets are judged over all "
                        "of them (default: docs/results/results.json)",
               "*": "merge OUT's scale-model results into this evaluation file's "
                    "scale_model section, beside those merged before, and judge the scale "
                    "model's targets over all of them (default: docs/results/results.json; "
                    "--quick: none)"},
    "--no-into": {"*": "merge into no other file (OUT only)"},
    "--no-reference": {"scale": "skip the single-process reference training (and its "
                                "accuracy targets)",
                       "*": "skip the single-process reference training per seed split"},
    "--seed": {"*": "job, planning and simulation seed"},
    "--accuracy-seeds": {"accuracy-study": "job seeds 0..N-1 per side: DistDGL on local "
                                           "processes beside single-process training of each "
                                           "gnnsched seed split (at least 2)",
                         "*": "job seeds 0..N-1 per side in the accuracy study that ends a "
                              "full run: DistDGL on local processes beside single-process "
                              "training of each gnnsched seed split; the accuracy target "
                              "compares these means (default 10; 0 in --quick; 0 skips it)"},
    "--targets": {"scale": _TARGETS.format(section="`scale`"),
                  "merge": _TARGETS.format(section="`scale_model` (and `evaluation`)"),
                  "*": _TARGETS.format(section="`evaluation` (and `scale_model`)")},
}

DESCRIPTIONS = {
    "eval": "The evaluation: real runs of gnnsched against colocation and real DistDGL on an "
            "emulated cluster, the simulator's prediction of every run, and simulated runs at "
            "16-256 machines. --quick is the CI mode (checks its invariants).",
    "scale": "The scale tier: a products-like synthetic graph (1M nodes, 40M directed edges) "
             "partitioned, profiled, planned and trained on 4 emulated hosts with 1 Gbit/s "
             "NICs by the single-process reference, DistDGL, colocation + fifo and gnnsched; "
             "seeds/s against the box's limit, CPU per seed, memory, bytes and test metric.",
    "scale-model": "The evaluation on the scale model (netns, root): every emulated host in "
                   "its own control groups (CPU quota, memory limit) and every CPU, NIC and "
                   "latency slowed by one dilation factor D so the cluster fits this box "
                   "(docs/scale-model.md); times are reported as measured and as the real "
                   "cluster's (measured / D), and predicted from the profile and the box's "
                   "calibration (--box) before each run; results merge into --into.",
    "calibrate-box": "Measure this box's per-box constants once (the runtime's sampling, "
                     "training and all-reduce overheads on the scale model, from one run on "
                     "a calibration cluster that no evaluation shape uses) and write them to "
                     "--box (default OUT/box.json); nothing else runs.",
    "merge": "Train nothing: merge OUT (a scale-model evaluation's folder) into --into and "
             "judge the scale model's targets again over every folder merged there.",
    "resimulate": "Train nothing: re-derive every run's simulated prediction from the "
                  "measurements stored in OUT/results.json (plans and profiles from WORK) "
                  "and the simulated scaling sweep (unless --no-scale), then rewrite the "
                  "report and plots -- after a change to the simulator or its in-situ "
                  "calibration. A scale-model folder merges into --into again.",
    "accuracy-study": "Train only the accuracy study for the results in OUT/results.json "
                      "(their seed splits, N from --accuracy-seeds), then re-judge the "
                      "targets and rewrite the report.",
}


def _help(flag: str, mode: str) -> str:
    helps = HELPS[flag]
    return helps.get(mode, helps.get("*", ""))


def add_mode(sub: Any, mode: str, formatter: Any) -> argparse.ArgumentParser:
    """The subcommand of ``mode`` with its own flags alone."""
    what, _, flags = MODES[mode]
    p = sub.add_parser(mode, help=what, description=DESCRIPTIONS[mode],
                       formatter_class=formatter)
    for flag in flags:
        p.add_argument(flag, help=_help(flag, mode), **FLAGS[flag])
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One subcommand per mode; the old flag spellings stay on ``bench`` itself, hidden
    (every flag, and the flag of each mode), and are run with a note naming the new one."""
    for flag, kw in FLAGS.items():
        p.add_argument(flag, help=argparse.SUPPRESS, **kw)
    for _, legacy, _ in MODES.values():
        if legacy:
            p.add_argument(legacy, action="store_true", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="bench_mode", metavar="MODE")
    for mode in MODES:
        add_mode(sub, mode, p.formatter_class)


def _deprecation(mode: str) -> str:
    """The note for an old spelling: the command as typed and its subcommand form."""
    from gnnsched.evaluation.config import modern_spelling

    argv = sys.argv[1:]
    if "bench" in argv:
        words = argv[argv.index("bench"):]
        old, new = " ".join(["gnnsched", *words]), " ".join(["gnnsched",
                                                             *modern_spelling(words)])
    else:
        old, new = "gnnsched bench [--MODE] ...", f"gnnsched bench {mode} ..."
    return (f"gnnsched bench: note: `{old}` is deprecated and will go; the same with a "
            f"subcommand: `{new}` (`gnnsched bench {mode} --help`)")


def run(args: argparse.Namespace) -> int:
    mode = getattr(args, "bench_mode", None)
    if mode is None:  # an old spelling: the mode from its flags
        from gnnsched.evaluation.config import legacy_mode

        mode = legacy_mode([f for _, f, _ in MODES.values()
                            if f and getattr(args, f[2:].replace("-", "_"), False)])
        print(_deprecation(mode), file=sys.stderr, flush=True)
        if mode != "scale" and args.nodes is not None:
            raise SystemExit("gnnsched bench: --nodes goes with --scale")
    else:  # the evaluation reads its mode from the flag that chose it
        legacy = MODES[mode][1]
        if legacy and mode != "scale":
            setattr(args, legacy[2:].replace("-", "_"), True)
    if mode == "scale":
        from gnnsched.evaluation.scale import run_scale

        return int(run_scale(args))
    from gnnsched.evaluation import evaluate

    return int(evaluate(args))
