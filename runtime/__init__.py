"""The distributed runtime: real processes that train a GNN as a plan says.

Roles (one module each): :mod:`.store` (graph-store server), :mod:`.sampler`,
:mod:`.fetcher`, :mod:`.trainer`, and the :mod:`.coordinator` package (runs the online policy
live, detects dead processes and recovers from them; the planning side it needs comes in
through its ``Advisor`` interface, so the runtime imports neither simulator nor placers);
:mod:`.transport` (ZeroMQ, typed messages, CURVE), :mod:`.model` (GNN layers on plain
tensors), :mod:`.step` (the training step the trainer and the reference share),
:mod:`.launcher` (local / netns / ssh process launchers), :mod:`.procs` (starting and stopping
process groups), :mod:`.zygote` (the fork server the local and netns launchers start roles
from), :mod:`.netns` and :mod:`.netns_ops` (the emulated cluster), :mod:`.reference`
(single-process baseline). Importing this package imports nothing heavy.
"""
