"""The distributed runtime: real processes that train a GNN as a plan says.

Roles (one module each): :mod:`.store` (graph-store server), :mod:`.sampler`,
:mod:`.fetcher`, :mod:`.trainer`, :mod:`.coordinator` (runs the online policy live);
:mod:`.transport` (ZeroMQ, typed messages), :mod:`.model` (GNN layers on plain tensors),
:mod:`.launcher` (local / netns / ssh process launchers), :mod:`.reference` (single-process
baseline). Importing this package imports nothing heavy.
"""
