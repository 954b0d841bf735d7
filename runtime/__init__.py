"""The distributed runtime: real processes that train a GNN as a plan says.

Roles (one module each): :mod:`.store` (graph-store server), :mod:`.sampler`,
:mod:`.fetcher`, :mod:`.trainer`, :mod:`.coordinator` (runs the online policy live, detects
dead processes and recovers from them); :mod:`.transport` (ZeroMQ, typed messages, CURVE),
:mod:`.model` (GNN layers on plain tensors), :mod:`.launcher` (local / netns / ssh process
launchers), :mod:`.zygote` (the fork server the local and netns launchers start roles from),
:mod:`.reference` (single-process baseline). Importing this package imports nothing heavy.
"""
