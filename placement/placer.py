"""The placer API in one import: the names placers use, from the modules that hold them.

``from gnnsched.placement.placer import Placer, Problem, bundle_parts, check_resources,
fill_samplers, register`` (docs/extending.md) keeps working; the names live in

* :mod:`.problem`: :class:`Problem`, :class:`Slot`, the resource rules and the cost model,
  store memory, the bytes a plan moves (:func:`transfers`, :func:`plan_transfers`);
* :mod:`.feasibility`: :func:`check_resources`, :func:`is_feasible`, :func:`usage`,
  :func:`fill_samplers`, cache and gatherer bytes;
* :mod:`.splits`: the part splits placers start from (:func:`bundle_parts`, ...);
* :mod:`.scoring`: :data:`Scorer`, the simulator's and the cost model's scorers;
* :mod:`.base`: :class:`Placer`, the registry (:func:`register`, :func:`placers`,
  :func:`get_placer`).
"""

from gnnsched.placement.base import PLACERS, Placer, get_placer, placers, register
from gnnsched.placement.feasibility import (
    Usage,
    cache_bytes,
    check_resources,
    fill_samplers,
    gatherers,
    is_feasible,
    usage,
)
from gnnsched.placement.problem import (
    MAX_SAMPLERS,
    PROCESS_BYTES,
    Problem,
    Slot,
    check_store_memory,
    fmt_bytes,
    plan_transfers,
    transfers,
)
from gnnsched.placement.scoring import (
    SEARCH_ITERATIONS,
    Scorer,
    bound_scorer,
    default_scorer,
    simulator_scorer,
)
from gnnsched.placement.splits import (
    bundle_parts,
    candidate_splits,
    contiguous_split,
    has_shares,
    lpt_split,
    main_store,
    seed_line,
    seeds_of,
    split_balanced,
    split_of,
    store_groups,
    store_slices,
)

__all__ = ["MAX_SAMPLERS", "PLACERS", "PROCESS_BYTES", "SEARCH_ITERATIONS", "Placer", "Problem",
           "Scorer", "Slot", "Usage", "bound_scorer", "bundle_parts", "cache_bytes",
           "candidate_splits", "check_resources", "check_store_memory", "contiguous_split",
           "default_scorer", "fill_samplers", "fmt_bytes", "gatherers", "get_placer",
           "has_shares", "is_feasible", "lpt_split", "main_store", "placers", "plan_transfers",
           "register", "seed_line", "seeds_of", "simulator_scorer", "split_balanced",
           "split_of", "store_groups", "store_slices", "transfers", "usage"]
