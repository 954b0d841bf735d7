"""Where a run's processes go: an emulated cluster on this box, real hosts, a Ray cluster.

``gnnsched cluster up | down | status | check`` and ``gnnsched plan --from-ray`` do their work
here and only print: :func:`cluster_up` brings up the network namespaces and control groups
of a cluster file (:class:`gnnsched.runtime.netns.EmulatedCluster`), :func:`cluster_down`
(:func:`cluster_down_all`) removes them, :func:`cluster_status` says what is up with the rates the kernel enforces,
:func:`check_cluster` probes real hosts before a run, and :func:`ray_cluster` reads the hosts
of a running Ray cluster. The runtime is imported on first use, so importing the API stays
light. Re-exported by :mod:`gnnsched.api`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsched.spec import ClusterSpec, SpecError

if TYPE_CHECKING:
    from gnnsched.runtime.netns import EmulatedCluster


def cluster_up(spec: ClusterSpec, *, gateway: bool = True, mtu: int = 1500,
               payload_rates: bool = False, ignore_latency: bool = False,
               queue_ms: float | None = None, bands: bool = False, cgroups: bool = True,
               dilation: float | None = None, cores: float | None = None,
               memory_scale: float = 1.0) -> EmulatedCluster:
    """Bring the emulated cluster of ``spec`` up (root): one namespace per machine, NICs shaped
    by ``tc``, control groups for CPU and memory, slowed by one dilation factor (see
    ``gnnsched cluster up --help`` for each option). Raises ``NetnsError`` or ``CgroupError``
    with what to do when the box cannot."""
    from gnnsched.runtime.netns import EmulatedCluster

    return EmulatedCluster(spec, gateway=gateway, mtu=mtu, payload_rates=payload_rates,
                           ignore_latency=ignore_latency, queue_ms=queue_ms, bands=bands,
                           cgroups=cgroups, dilation=dilation, cores=cores,
                           memory_scale=memory_scale).up()


def cluster_down(cluster: ClusterSpec | str) -> list[str]:
    """Remove what :func:`cluster_up` created and return what was removed: for a cluster
    file's spec, its namespaces and groups; for a name, those of the cluster up under it."""
    from gnnsched.runtime import netns

    if isinstance(cluster, ClusterSpec):
        return netns.EmulatedCluster(cluster).down()
    return netns.down_cluster(cluster)


def cluster_down_all() -> list[str]:
    """Remove every ``gs-*`` namespace and link and every ``gnnsched`` control group (every
    emulated cluster); return what was removed."""
    from gnnsched.runtime import netns

    return netns.down_all()


def cluster_status(name: str | None = None) -> list[dict[str, Any]]:
    """Every emulated cluster that is up (only ``name`` when given): its gateway, latency,
    dilation and control groups, and per host the rates asked for and those ``tc`` enforces,
    its CPU quota, memory limit and usage."""
    from gnnsched.runtime import netns

    states = netns.list_states()
    if name:
        states = [s for s in states if s.get("cluster") == name or s.get("name") == name]
    return [{"cluster": s["cluster"], "complete": s.get("complete"),
             "gateway": s.get("gateway_address"), "latency_s": s.get("latency_s"),
             "dilation": float(s.get("dilation") or 1.0),
             "cgroups": isinstance(s.get("cgroups"), dict),
             "hosts": _host_rows(s)} for s in states]


def _host_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per host of an emulated cluster's saved state, read back from the kernel."""
    from gnnsched.runtime.cgroups import CgroupError, ClusterGroups
    from gnnsched.runtime.netns import HOST_IF, _share_row, _tbf_rate, list_namespaces

    present = set(list_namespaces())
    d = float(state.get("dilation") or 1.0)
    made = state.get("cgroups")
    groups = ClusterGroups.from_state(state["name"], made) if isinstance(made, dict) else None
    rows = []
    for h in state.get("hosts", []):
        up = h["ns"] in present
        row = {"host": h["name"], "namespace": h["ns"], "address": h["address"],
               "egress_Bps": h["egress"] * d, "ingress_Bps": h["ingress"] * d,
               "shaped_egress_Bps": h["egress"], "shaped_ingress_Bps": h["ingress"],
               "dilation": d, "up": up,
               "tc_egress_Bps": _tbf_rate(h["ns"], HOST_IF) if up else None,
               "tc_ingress_Bps": (_tbf_rate(state["switch_ns"], h["port"])
                                  if state["switch_ns"] in present else None)}
        if groups is not None and h["name"] in groups.shares:
            row.update(_share_row(groups.shares[h["name"]]))
            try:
                row["usage"] = groups.usage(h["name"])
            except CgroupError:
                row["usage"] = None
        rows.append(row)
    return rows


def emulated_cluster_up(name: str) -> bool:
    """Every namespace of the emulated cluster ``name`` is there (``--launcher netns`` can
    run it)."""
    from gnnsched.runtime import netns

    state = netns.read_state(name)
    return bool(state) and all(h["ns"] in netns.list_namespaces()
                               for h in state.get("hosts", []))


@dataclass
class HostCheck:
    """What :func:`check_cluster` found. ``report`` is the hosts' own
    (:class:`gnnsched.runtime.hostcheck.CheckReport`), None where no machine has ``ssh:`` (its
    hosts run on this machine, and only the partitions and :attr:`emulated_up` are checked)."""

    cluster: ClusterSpec
    partitions: str | None  # the folder the run will use (None: not asked)
    problems: list[str]  # every problem, this machine's first; empty: ready
    emulated_up: bool = False
    run_dir: Path | None = None
    remote_python: str | None = None
    remote_dir: str | None = None
    report: Any = None
    dists: tuple[str, ...] = field(default_factory=tuple)  # packages compared by version


def check_cluster(cluster_file: str, *, job: str | None = None, partitions: str | None = None,
                  verify: bool = False, remote_python: str = "python3",
                  remote_dir: str | None = None, coordinator_address: str | None = None,
                  port: int | None = None, out: str | None = None,
                  timeout: float = 10.0) -> HostCheck:
    """``gnnsched cluster check``: probe every host of ``cluster_file`` before a run (ssh,
    Python and package versions, partitions, run directory, ports, clock skew) and collect
    every problem at once. Raises ``LaunchError`` when the hosts cannot be probed at all."""
    from gnnsched.spec import load_cluster

    spec = load_cluster(cluster_file)
    parts, problems = _check_partitions(partitions, job)
    if not any(m.ssh for m in spec.machines):
        return HostCheck(spec, parts, problems, emulated_up=emulated_cluster_up(spec.name))

    from gnnsched.runtime.hostcheck import DISTS, check_hosts
    from gnnsched.runtime.launcher import SshLauncher

    launcher = SshLauncher(spec, coordinator_address=coordinator_address,
                           remote_python=remote_python, remote_dir=remote_dir,
                           connect_timeout=timeout)
    run_dir = Path(out or "runs").resolve()
    report = check_hosts(launcher, [m.name for m in spec.machines], partitions=parts,
                         run_dir=str(run_dir), verify=verify, timeout=timeout,
                         cluster_file=cluster_file, coordinator_port=port)
    return HostCheck(spec, parts, problems + [str(p) for p in report.problems],
                     run_dir=run_dir, remote_python=launcher.remote_python,
                     remote_dir=launcher.remote_dir, report=report, dists=tuple(DISTS))


def _check_partitions(partitions: str | None, job_file: str | None) -> tuple[str | None,
                                                                              list[str]]:
    """The partition folder the run will use (``--partitions``, else the job's) and this
    machine's problems with it."""
    from gnnsched.runtime.hostcheck import partition_files

    path = partitions
    if path is None and job_file:
        from gnnsched.datasets.cache import cache_path
        from gnnsched.spec import load_job

        job = load_job(job_file)
        path = job.partitions or str(cache_path(job))
    if path is None:
        return None, []
    path = str(Path(path).resolve())
    if not (Path(path) / "gnnsched.json").is_file():
        return path, [f"this machine: no partitions at {path} (no gnnsched.json); fix: make "
                      "them first (gnnsched partition, or one gnnsched train run with "
                      "--launcher local), then copy them to every host at the same path"]
    missing = [f for f in partition_files(path) if not (Path(path) / f).is_file()]
    if missing:
        return path, [f"this machine: {len(missing)} partition file(s) missing in {path} "
                      f"(e.g. {missing[0]}); fix: make the partitions again"]
    return path, []


def ray_cluster(address: str, job: str, cluster: str | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """The cluster file's mapping for the Ray cluster at ``address`` (each host's CPUs,
    memory and GPUs as Ray reports them, merged with the file ``cluster`` for what Ray does
    not say), checked as ``gnnsched train`` will check it; with notes on what was assumed.
    Ray's own errors become a SpecError naming ``--from-ray``."""
    from gnnsched.runtime.launcher import LaunchError
    from gnnsched.runtime.ray_launcher import cluster_from_ray
    from gnnsched.spec import cluster_from_dict, load_job, load_yaml

    base = load_yaml(cluster)[1] if cluster else None
    try:
        data, notes = cluster_from_ray(address, base, num_parts=load_job(job).num_parts)
    except LaunchError as exc:
        raise SpecError("--from-ray", "", str(exc)) from None
    cluster_from_dict(data, f"the Ray cluster at {address}")  # what train will check
    return data, notes


__all__ = ["HostCheck", "check_cluster", "cluster_down", "cluster_down_all", "cluster_status",
           "cluster_up", "emulated_cluster_up", "ray_cluster"]
