"""The evaluation, reproducible with one command: real runs of gnnsched against colocation and
real DistDGL on an emulated cluster (four shapes, Cora and Coauthor Physics, or your own
graph: ``--datasets my.npz``), the simulator's prediction for every real run (fidelity), and
simulated runs at 16-256 machines from the measured profiles. Writes ``results.json``,
``report.md`` and PNG plots to ``--out``.

``--quick`` is the CI mode: Cora, one shape, 2 epochs, small scaling sweep, a few minutes; it
checks its invariants (every configuration produced a number, systems that train the same
mini-batches agree on accuracy within 1 point, each run matches single-process training) and
exits 1 when one fails. The full mode exits 1 only when a configuration produced no number;
missed performance targets are reported, by how much and why.

``--scale`` runs the scale tier instead (:mod:`gnnsched.evaluation.scale`): a products-like
synthetic graph of 1M nodes and 40M directed edges (``--nodes``) partitioned, profiled,
planned and trained on 4 emulated hosts with 1 Gbit/s NICs by the single-process reference,
DistDGL, colocation + fifo and gnnsched, reported against the box's compute and network
limits (``docs/results/scale``); ``--scale --quick`` is its CI version (20k nodes).

The work is in :mod:`gnnsched.evaluation` (installed with the package); the datasets come
from ``--data-dir``, ``$GNNSCHED_DATA_DIR`` or a checkout's ``../shared/datasets`` (without
Physics' file there, the default evaluation runs on the bundled Cora and says so).
"""

from __future__ import annotations

import argparse

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

HELP = "run the evaluation (real runs vs colocation and DistDGL, fidelity, scaling)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="CI mode: Cora, one shape, 2 epochs, small sweep; checks invariants "
                        "(with --scale: a 20k-node graph, 1 epoch)")
    p.add_argument("--scale", action="store_true",
                   help="the scale tier instead: a products-like synthetic graph (1M nodes, "
                        "40M directed edges) partitioned, profiled, planned and trained on 4 "
                        "emulated hosts with 1 Gbit/s NICs by the single-process reference, "
                        "DistDGL, colocation + fifo and gnnsched; seeds/s against the box's "
                        "limit, CPU per seed, memory, bytes and test metric (default out: "
                        "docs/results/scale; --quick: runs/bench-scale-quick)")
    p.add_argument("--nodes", type=positive_int, default=None,
                   help="with --scale: nodes of the synthetic graph (default 1000000; "
                        "--quick 20000)")
    p.add_argument("--out", type=output_dir, default=None,
                   help="results folder (default: docs/results under the current directory; "
                        "--scale-model: docs/results-scale-model, or "
                        "docs/results-scale-model-NAME... for --datasets other than cora; "
                        "--quick: runs/bench-quick)")
    p.add_argument("--work", type=output_dir, default=None,
                   help="run directories, logs, plans (default: runs/bench[-quick] under the "
                        "current directory)")
    p.add_argument("--data-dir", type=input_dir, default=None,
                   help="folder of the .npz graphs (default: $GNNSCHED_DATA_DIR, else a "
                        "checkout's ../shared/datasets; Cora also ships with the package)")
    p.add_argument("--launcher", default="auto", choices=("auto", "netns", "local"),
                   help="auto: network namespaces when root, else local processes")
    p.add_argument("--datasets", nargs="+", default=None, metavar="NAME|FILE.npz",
                   help="cora, physics, products (the scale tier's million-node graph, "
                        "generated once into the cache; for --scale-model) and/or paths to "
                        "your own graphs (.npz, the schema of docs/fields.md; named by the "
                        "file's stem) (default: cora and physics, or cora alone where "
                        "physics' file is not at hand; --quick: cora)")
    p.add_argument("--normalize", default=None, choices=NORMALIZE,
                   help="the jobs' features: {normalize} (default: row for a .npz of yours, "
                        "so raw counts train; none for cora and physics, as published)")
    p.add_argument("--split", type=nonneg_int, default=0,
                   help="the jobs' split for a .npz of yours: which row of its [S, N] masks "
                        "(default 0)")
    p.add_argument("--shapes", nargs="+", default=None,
                   help="plentiful, gpuless, hetero, mixedgen, corestore (default: the first "
                        "four, all five with --scale-model; --quick: gpuless); "
                        "with --scale: plentiful, limited (default: plentiful)")
    p.add_argument("--systems", nargs="+", default=None,
                   help="subset of distdgl, colocation+fifo, gnnsched+fifo, gnnsched+gnnsched; "
                        "with --scale also colocation+fifo+cache, gnnsched+fifo+cache, "
                        "gnnsched+gnnsched+cache (default: distdgl, colocation+fifo, "
                        "gnnsched+gnnsched, gnnsched+gnnsched+cache; a fifo and a gnnsched "
                        "system on one plan are also A/B'd against the simulator's gain)")
    p.add_argument("--epochs", type=epochs_int, default=None,
                   help="training epochs per run (default 8; --quick 2; --scale 2, the "
                        "second the steady state; --scale --quick 1)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="real runs per system, run r with job seed SEED + r in every "
                        "system; the median epoch time and the mean accuracy are reported")
    p.add_argument("--budget", type=seconds, default=None,
                   help="gnnsched planning seconds per plan (default 10; --quick 3; "
                        "--scale --quick 2)")
    p.add_argument("--samples", type=positive_int, default=None,
                   help="profiled mini-batches per partition (default 32; --quick 8; "
                        "--scale 8, --scale --quick 2)")
    p.add_argument("--sizes", type=sizes_int, nargs="+", default=None,
                   help="machines per simulated cluster (default 16 32 64 128 256; "
                        "--quick 16 32)")
    p.add_argument("--no-real", action="store_true",
                   help="skip the real runs (profiles, plans, simulation and scaling only)")
    p.add_argument("--no-scale", action="store_true", help="skip the simulated sweep")
    p.add_argument("--nic-queue-ms", type=milliseconds, default=None,
                   help="bound every emulated NIC's queue to this many milliseconds of its "
                        "rate (netns; default: the emulation's own, see `gnnsched cluster "
                        "up --help`)")
    p.add_argument("--nic-bands", action="store_true",
                   help="emulated NICs with three priority bands by IP TOS, like a switch with "
                        "QoS: gradients ahead of the bulk data gnnsched marks (netns; default: "
                        "one FIFO per NIC; see `gnnsched cluster up --help`)")
    p.add_argument("--scale-model", action="store_true",
                   help="run on the scale model (netns, root): every emulated host in its own "
                        "control groups (CPU quota, memory limit) and every CPU, NIC and "
                        "latency slowed by one dilation factor D so the cluster fits this box "
                        "(docs/scale-model.md); times are reported as measured and as the real "
                        "cluster's (measured / D), and predicted from the profile and the "
                        "box's calibration (--box) before each run; results go to "
                        "docs/results-scale-model[-DATASETS] and merge into --into")
    p.add_argument("--dilation", type=float, default=None, metavar="D",
                   help="with --scale-model: the dilation factor (default: the smallest at "
                        "which every host's quota fits this box's cores)")
    p.add_argument("--cores", type=float, default=None, metavar="N",
                   help="with --scale-model: the cores of this box the hosts' quotas may fill "
                        "(default: all; fewer leaves the kernel's networking and the "
                        "coordinator, which no group holds, room, at a larger D)")
    p.add_argument("--box", default=None, metavar="FILE.json",
                   help="with --scale-model: this box's calibration (`gnnsched bench "
                        "--calibrate-box`; default: OUT/box.json, made first when missing)")
    p.add_argument("--into", default=None, metavar="FILE.json",
                   help="with --scale-model (and its --resimulate): merge OUT's results into "
                        "this evaluation file's scale_model section, beside those merged "
                        "before, and judge the scale model's targets over all of them "
                        "(default: docs/results/results.json; --quick: none)")
    p.add_argument("--merge", action="store_true",
                   help="train nothing: merge OUT (a --scale-model evaluation's folder) into "
                        "--into and judge the scale model's targets again over every folder "
                        "merged there")
    p.add_argument("--no-into", action="store_true",
                   help="with --scale-model: merge into no other file (OUT only)")
    p.add_argument("--calibrate-box", action="store_true",
                   help="measure this box's per-box constants once (the runtime's sampling, "
                        "training and all-reduce overheads on the scale model, from one run "
                        "on a calibration cluster that no evaluation shape uses) and write "
                        "them to --box (default OUT/box.json); nothing else runs")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the single-process reference training per seed split "
                        "(and, with --scale, its accuracy targets)")
    p.add_argument("--seed", type=seed_int, default=0, help="job, planning and simulation seed")
    p.add_argument("--accuracy-seeds", type=nonneg_int, default=None, metavar="N",
                   help="job seeds 0..N-1 per side in the accuracy study that ends a full "
                        "run: DistDGL on local processes beside single-process training of "
                        "each gnnsched seed split; the accuracy target compares these means "
                        "(default 10; 0 in --quick; 0 skips it)")
    p.add_argument("--accuracy-study", action="store_true",
                   help="train only the accuracy study for the results in OUT/results.json "
                        "(their seed splits, N from --accuracy-seeds), then re-judge the "
                        "targets and rewrite the report")
    p.add_argument("--resimulate", action="store_true",
                   help="train nothing: re-derive every run's simulated prediction from the "
                        "measurements stored in OUT/results.json (plans and profiles from "
                        "WORK) and the simulated scaling sweep (unless --no-scale), then "
                        "rewrite the report and plots -- after a change to the simulator or "
                        "its in-situ calibration")


def run(args: argparse.Namespace) -> int:
    if args.scale:
        from gnnsched.evaluation.scale import run_scale

        return int(run_scale(args))
    if args.nodes is not None:
        raise SystemExit("gnnsched bench: --nodes goes with --scale")
    from gnnsched.evaluation import evaluate

    return int(evaluate(args))
