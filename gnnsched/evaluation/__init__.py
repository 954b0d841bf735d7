"""The evaluation: gnnsched against colocation and real DistDGL on an emulated cluster, the
simulator's fidelity, simulated runs at 16-256 machines, and the scale tier. Run:
``gnnsched bench MODE`` with the flags of :mod:`gnnsched.commands.bench` (:func:`evaluate`
and :func:`run_scale` take them as parsed). It reaches the runtime through
:mod:`gnnsched.api` alone. Modules: :mod:`.config` (shapes, systems, settings), :mod:`.data`
(datasets), :mod:`.targets` (the goals, read from ``--targets FILE`` only), :mod:`.context`
(partitions, profiles, reference trainings), :mod:`.runs` (real runs of both tiers),
:mod:`.measure` (NIC counters, process CPU and memory), :mod:`.predict` (the simulator's
predictions), :mod:`.box` (the box's calibration, for predictions before a scale-model run),
:mod:`.scaling` (the simulated sweep), :mod:`.judging` (invariants, targets), :mod:`.report`
and :mod:`.plots` (outputs), :mod:`.merge` (scale-model folders into one file),
:mod:`.driver` (end to end, ``resimulate``, ``accuracy-study``, ``calibrate-box``); the scale
tier's :mod:`.scale` (end to end), :mod:`.scale_config`, :mod:`.scale_steps` (steps in child
processes) and :mod:`.limit` (the box's limit); :mod:`.planning` (the planning benchmark's
logic). The rest of this docstring is the report's Method section.

**Real runs.** Four cluster shapes (``gnnsched/evaluation/shapes/*.yaml``, 4 hosts, 4 METIS
partitions, 2 trainers, 50-200 Mbit/s NICs so the network and not this box's 2 cores
decides): plentiful, GPU-less stores, heterogeneous NICs and devices, mixed GPU generations
(old GPUs on the stores; DistDGL's trainers there are slowed like gnnsched's, see
:mod:`gnnsched.runtime.distdgl`). Two datasets: Cora (its 1,433 raw features,
public Planetoid split: 140 training nodes, so 8 seeds per trainer and mini-batch give 9
synchronous iterations per epoch) and Coauthor Physics (8,415 keyword features randomly
projected to 128). Cora keeps its width: 1,433 is within the range of the usual GNN
benchmarks (Reddit 602, Flickr 500, ogbn-arxiv 128), and with 128 hidden units it makes
1.5 MB of gradients per step, so Cora is the evaluation's all-reduce-heavy workload beside
Physics' feature-heavy one; Physics' 8,415 is not a realistic width (its features are
keyword indicators). Physics' shared splits train 20 nodes per class (100): with 8-seed
batches a mini-batch moves ~0.3 MB and the runtime's fixed per-iteration costs, not the
NICs, decide; its 34k test nodes also cost minutes of evaluation traffic per run on these
NICs. So Physics uses a seeded random split of 1,000 / 500 / 5,000 train / val / test nodes
(``numpy.random.default_rng(0)`` permutation; a copy of the file in the gnnsched cache) and 32
seeds per trainer and mini-batch (16 iterations, ~1 MB of features per mini-batch). Per
shape x dataset: DistDGL (where it can run), and the
gnnsched runtime with colocation + fifo, gnnsched placement + fifo and gnnsched placement +
the gnnsched policy. Each run trains ``--epochs`` epochs with validation only after the last
(``eval_every = epochs``, so epoch times are training only); the epoch time is the median
over the epochs after the first. Test accuracy is on the full test set, evaluated with the
job's fan-outs in every system (DistDGL included). Bytes: tx bytes of every host's NIC over
the steady training epochs (netns), read from each namespace's ``/proc/net/dev``.

**Same mini-batches.** The runtime draws each trainer's batches from the seeds of its parts,
with seeds derived from (job seed, epoch, trainer index). Plans are renumbered so trainers are
ordered by their lowest part: two plans that split the seeds the same way train exactly the
same mini-batches, samples and dropout masks (and the same accuracy). Every seed split is
also trained in one process (:func:`gnnsched.runtime.reference.reference_train`): each run
must match its split's reference within 1 point. Different splits (a placement that gives a
trainer other parts) and DistDGL (its own shuffling) train other mini-batches; their
accuracy differences are reported next to the reference's for the same splits. Repeat ``r``
trains with job seed ``seed + r`` in every system, and a system's accuracy is the mean over
its runs: on Cora's 140 training nodes one seed's test accuracy moves by points. DistDGL
trains colocation's seed split wherever its trainers can (:func:`distdgl_split`). Three seeds
leave a mean about a point from the truth, so a full run ends with an accuracy study
(:meth:`Context.accuracy_study`: 10 job seeds per side) whose means the accuracy target
compares.

**Fidelity.** Each gnnsched-runtime run is simulated (:func:`gnnsched.simulator.simulate`,
same cluster, plan, policy and measured profile; mean of 3 simulator seeds) and the simulated
steady-state epoch is compared with the measured epoch time. Steady state: the middle of
three epochs simulated back to back, because a measured epoch after the first starts with
mini-batches the epoch before prefetched and prefetches for the next one (the last epoch
simulated would only receive). Simulated epochs at scale are steady-state too. The
prediction uses the task costs the run measured
(:func:`gnnsched.calibrate.insitu_profile`: a CPU slowdown from
the training steps, the sampling seconds per mini-batch, and the all-reduce's own time —
from the last trainer's arrival to the first one's departure, :func:`barrier_release` —
beyond bytes / bandwidth as a fixed overhead in which the NICs are idle; per-batch costs
with the spread the run's steps had, :func:`step_costs`; how far apart the trainers left
each all-reduce), since on this 2-core box a dozen processes of four emulated hosts share
the cores; the prediction from the quiet profile alone is reported beside it. Every
simulation here models the runtime's NICs (:func:`simulate_system`: the stores' 150 ms
window, one TCP connection per receiver).

**At scale.** Each shape is replicated ``M / 4`` times (partitions renumbered, 2 trainers per
copy). The measured profile is scaled to ``M`` partitions (:func:`scale_profile`): partition
``p`` reuses the measured mini-batches of partition ``p mod 4`` unchanged (sampling and
training seconds, edges, input nodes per owner), with each owner relabelled by its ring
offset from the seed partition (measured part ``s + d`` becomes ``p + d``, ``d`` in
``{-1, +1, +2}``): METIS-like band locality, as :func:`gnnsched.profile.synthetic_profile`
assumes, with measured shares instead of a fixed ``locality``.
"""

from __future__ import annotations

import argparse


def evaluate(args: argparse.Namespace) -> int:
    """Run the evaluation ``args`` describe (the flags of ``gnnsched bench``, parsed); 0 when
    every invariant holds (the full mode: when every configuration produced a number)."""
    from gnnsched.evaluation.driver import evaluate as run

    return run(args)


def run_scale(args: argparse.Namespace) -> int:
    """Run the scale tier ``args`` describe (``gnnsched bench scale``'s flags, parsed); 0
    unless a system produced no number (``--quick``: unless an invariant fails)."""
    from gnnsched.evaluation.scale import run_scale as run

    return run(args)


__all__ = ["evaluate", "run_scale"]
