"""The library's front door: everything the CLI does, as functions a script can call.

Every ``gnnsched`` verb does its work through this module and only parses and prints (an
import-linter contract keeps ``gnnsched.commands`` off the runtime, placement and datasets):

- the forward path (:mod:`.core`): ``plan``, ``simulate``, ``train``, ``calibrate`` and the
  loading and checking they share (``prepare``, ``load_pair``, ``plan_problem``, ...), with
  the box calibration beside the cluster file (``planning_profile``,
  ``resolve_calibration``);
- the data (:mod:`.data`): ``partition``, ``open_job_partitions`` (for the profiler),
  ``reference``, ``create_keys``;
- where processes run (:mod:`.hosts`): ``cluster_up``, ``cluster_down``, ``cluster_status``,
  ``check_cluster``, ``ray_cluster``;
- what a run starts with (:mod:`.runs`): ``parse_faults``, ``launcher_kwargs``,
  ``check_placer``.

It also re-exports the documented entry points of the runtime (:data:`RUNTIME`: its options,
errors and launchers, single-process reference training, the DistDGL runner, the emulated
cluster, the profiler, the CPU ledger's breakdown and the box's compute limit), of placement
(:data:`PLACEMENT`) and of the datasets (:data:`DATASETS`), each loaded on first use so that
importing the API stays light (no torch, no DGL); the evaluation and the CLI reach them
through these names alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gnnsched.api.core import (
    Calibration,
    Inputs,
    calibrate,
    calibrated,
    check_faults,
    check_floors,
    check_partitions_fit,
    check_plan_job,
    file_digest,
    job_partitions,
    load_pair,
    load_plan,
    partition_bytes,
    plan,
    plan_floors,
    plan_problem,
    plan_profile,
    planning_profile,
    prepare,
    resolve_calibration,
    simulate,
    summary,
    train,
)
from gnnsched.api.data import (
    chunk,
    create_keys,
    open_job_partitions,
    partition,
    partition_dir,
    reference,
    reference_slices,
    reference_split,
)
from gnnsched.api.hosts import (
    HostCheck,
    check_cluster,
    cluster_down,
    cluster_down_all,
    cluster_status,
    cluster_up,
    emulated_cluster_up,
    ray_cluster,
)
from gnnsched.api.runs import (
    FAULT_FORM,
    FAULT_ROLES,
    FAULT_SIGNALS,
    check_placer,
    launcher_kwargs,
    parse_faults,
)

if TYPE_CHECKING:
    from gnnsched.datasets import load_dataset, open_partitions
    from gnnsched.datasets.cache import partitions_for
    from gnnsched.placement.base import get_placer, placers
    from gnnsched.placement.plot import draw as draw_plan
    from gnnsched.runtime.cgroups import CgroupError
    from gnnsched.runtime.coordinator import Fault, RunError, RuntimeOptions
    from gnnsched.runtime.distdgl import infeasible_reason as distdgl_infeasible_reason
    from gnnsched.runtime.distdgl import run_distdgl
    from gnnsched.runtime.export import export_run
    from gnnsched.runtime.inference import load_outputs as load_predictions
    from gnnsched.runtime.inference import predict_single
    from gnnsched.runtime.inference_run import predict_distributed as predict
    from gnnsched.runtime.launcher import LAUNCHERS, LaunchError, launchers
    from gnnsched.runtime.ledger import breakdown as ledger_breakdown
    from gnnsched.runtime.ledger import format_table as ledger_table
    from gnnsched.runtime.limit import pipeline_limit
    from gnnsched.runtime.netns import HOST_IF as NETNS_HOST_IF
    from gnnsched.runtime.netns import EmulatedCluster, NetnsError
    from gnnsched.runtime.netns import unavailable_reason as netns_unavailable_reason
    from gnnsched.runtime.profiler import profile_partitions
    from gnnsched.runtime.reference import reference_train
    from gnnsched.runtime.transport import MessageError, TransportError

# name here: (module, its name there). Each is that module's own object, imported on first
# use (PEP 562), so ``import gnnsched.api`` does not load torch or DGL.
RUNTIME: dict[str, tuple[str, str]] = {
    "RuntimeOptions": ("gnnsched.runtime.coordinator", "RuntimeOptions"),
    "Fault": ("gnnsched.runtime.coordinator", "Fault"),
    "RunError": ("gnnsched.runtime.coordinator", "RunError"),
    "LaunchError": ("gnnsched.runtime.launcher", "LaunchError"),
    "launchers": ("gnnsched.runtime.launcher", "launchers"),
    "LAUNCHERS": ("gnnsched.runtime.launcher", "LAUNCHERS"),
    "TransportError": ("gnnsched.runtime.transport", "TransportError"),
    "MessageError": ("gnnsched.runtime.transport", "MessageError"),
    "reference_train": ("gnnsched.runtime.reference", "reference_train"),
    "run_distdgl": ("gnnsched.runtime.distdgl", "run_distdgl"),
    "distdgl_infeasible_reason": ("gnnsched.runtime.distdgl", "infeasible_reason"),
    "EmulatedCluster": ("gnnsched.runtime.netns", "EmulatedCluster"),
    "NetnsError": ("gnnsched.runtime.netns", "NetnsError"),
    "netns_unavailable_reason": ("gnnsched.runtime.netns", "unavailable_reason"),
    "NETNS_HOST_IF": ("gnnsched.runtime.netns", "HOST_IF"),
    "CgroupError": ("gnnsched.runtime.cgroups", "CgroupError"),
    "profile_partitions": ("gnnsched.runtime.profiler", "profile_partitions"),
    "ledger_breakdown": ("gnnsched.runtime.ledger", "breakdown"),
    "ledger_table": ("gnnsched.runtime.ledger", "format_table"),
    "pipeline_limit": ("gnnsched.runtime.limit", "pipeline_limit"),
    "predict": ("gnnsched.runtime.inference_run", "predict_distributed"),
    "predict_single": ("gnnsched.runtime.inference", "predict_single"),
    "load_predictions": ("gnnsched.runtime.inference", "load_outputs"),
    "export_run": ("gnnsched.runtime.export", "export_run"),
}
PLACEMENT: dict[str, tuple[str, str]] = {
    "get_placer": ("gnnsched.placement.base", "get_placer"),
    "placers": ("gnnsched.placement.base", "placers"),
    "draw_plan": ("gnnsched.placement.plot", "draw"),
}
DATASETS: dict[str, tuple[str, str]] = {
    "load_dataset": ("gnnsched.datasets", "load_dataset"),
    "open_partitions": ("gnnsched.datasets", "open_partitions"),
    "partitions_for": ("gnnsched.datasets.cache", "partitions_for"),
}
_LAZY = {**RUNTIME, **PLACEMENT, **DATASETS}


def __getattr__(name: str) -> Any:
    """The entry points of :data:`RUNTIME`, :data:`PLACEMENT` and :data:`DATASETS`, imported
    when first asked for."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


__all__ = ["export_run", "load_predictions", "predict", "predict_single", "Calibration", "CgroupError", "DATASETS", "EmulatedCluster", "FAULT_FORM", "FAULT_ROLES",
           "FAULT_SIGNALS", "Fault", "HostCheck", "Inputs", "LAUNCHERS", "LaunchError",
           "MessageError", "NETNS_HOST_IF", "NetnsError", "PLACEMENT", "RUNTIME", "RunError",
           "RuntimeOptions", "TransportError", "calibrate", "check_cluster", "check_faults",
           "check_partitions_fit", "check_placer", "check_plan_job", "cluster_down",
           "chunk", "cluster_down_all", "cluster_status", "cluster_up", "create_keys",
           "distdgl_infeasible_reason", "draw_plan", "emulated_cluster_up", "file_digest",
           "get_placer", "job_partitions", "launcher_kwargs", "launchers", "ledger_breakdown",
           "ledger_table", "load_dataset", "load_pair", "load_plan", "netns_unavailable_reason",
           "open_job_partitions", "open_partitions", "parse_faults", "partition",
           "partition_bytes", "partition_dir", "partitions_for", "pipeline_limit", "placers",
           "plan", "plan_problem", "plan_profile", "planning_profile", "prepare",
           "profile_partitions", "ray_cluster", "resolve_calibration", "calibrated",
           "check_floors", "plan_floors",
           "reference", "reference_slices", "reference_split", "reference_train", "run_distdgl",
           "simulate", "summary", "train"]
