"""gnnsched: placement and online scheduling for distributed GNN training.

Pure logic (specs, profiles, plans, the simulator, policies, placement) never imports the
runtime; the runtime (``gnnsched.runtime``) imports the logic.
"""

__version__ = "0.1.0"
