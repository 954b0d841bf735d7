"""Cluster and job specifications: typed data classes loaded from YAML and validated on load.

Every error is a :class:`SpecError` that names the file, the field (as a dotted path such as
``machines[2].nic.egress_gbps``) and what would be valid, so a user can fix the file without
reading a traceback.

Units: bandwidth in Gbit/s in files and bytes/s in code, memory in GB in files and bytes in
code, times in seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

GB = 1e9
GBIT = 1e9 / 8  # bytes/s in one Gbit/s

ROLES = ("store", "sample", "fetch", "train")
MIN_GBPS, MAX_GBPS = 1e-6, 1e5  # 1 kbit/s .. 100 Tbit/s
MAX_GPUS = 256  # per machine: more is a typo (and would be built as a list of devices)
MODELS = ("sage", "gcn", "gat")
MAX_NUMBER = 1e12  # any number in a spec file: larger is a typo, and 10**400 overflows floats
MAX_EPOCHS = 100_000


class SpecError(ValueError):
    """A cluster, job, plan or profile file that cannot be used, with where and why."""

    def __init__(self, source: str, field_path: str, problem: str, valid: str = "",
                 nearest: str = "") -> None:
        self.source, self.field, self.problem, self.valid = source, field_path, problem, valid
        self.nearest = nearest
        msg = f"{source}: {field_path}: {problem}" if field_path else f"{source}: {problem}"
        if valid:
            msg += f" (valid: {valid})"
        if nearest:  # the likely one first-hand, not buried in a list of twenty
            msg += f"; did you mean {nearest!r}?"
        super().__init__(msg)


# --------------------------------------------------------------------------------------
# Small validation helpers; `_Reader` carries the file name and the field path.


class _Reader:
    """Reads typed fields out of a mapping and reports errors with the full field path."""

    def __init__(self, source: str, data: Any, path: str = "") -> None:
        self.source, self.path = source, path
        if not isinstance(data, dict):
            raise SpecError(source, path or "<top>", f"expected a mapping, got {_kind(data)}")
        self.data = data
        self.used: set[str] = set()

    def _p(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = ...) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise SpecError(self.source, self._p(key), "is missing (required)"
                                + self._typo_of(key))
            return default
        return self.data[key]

    def _typo_of(self, key: str) -> str:
        """`; 'memroy_gb' looks like a typo of it` when an unknown key here is close to
        ``key`` (a misspelt required field otherwise reads as merely missing)."""
        import difflib

        others = [k for k in self.data if isinstance(k, str) and k not in self.used]
        near = difflib.get_close_matches(key, others, n=1, cutoff=0.75)
        return f"; {near[0]!r} looks like a typo of it" if near else ""

    def number(self, key: str, default: Any = ..., *, minimum: float | None = 0.0,
               strict: bool = False, integer: bool = False,
               maximum: float = MAX_NUMBER) -> Any:
        value = self.raw(key, default)
        if default is not ... and (value is None or value is default):
            return default  # absent, or present but empty (`key:` in YAML): the default
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            kind = "an integer" if integer else "a number"
            raise SpecError(self.source, self._p(key), f"must be {kind}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(self.source, self._p(key), f"must be a finite number, got {value!r}")
        if minimum is not None and (value <= minimum if strict else value < minimum):
            cmp = ">" if strict else ">="
            raise SpecError(self.source, self._p(key), f"must be {cmp} {minimum}, got {value!r}")
        if value > maximum:  # also keeps 10**400 from overflowing a float later
            raise SpecError(self.source, self._p(key), f"must be <= {maximum:g}, "
                            f"got {_short(value)}")
        return value

    def integer(self, key: str, default: Any = ..., *, minimum: int | None = 0,
                maximum: float = MAX_NUMBER) -> Any:
        return self.number(key, default, minimum=minimum, integer=True, maximum=maximum)

    def flag(self, key: str, default: bool) -> bool:
        """A YAML boolean: ``curve: "false"`` (a string) must not read as true."""
        value = self.raw(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(self.source, self._p(key), f"must be true or false, got {value!r}")
        return value

    def string(self, key: str, default: Any = ..., *, choices: tuple[str, ...] = ()) -> Any:
        value = self.raw(key, default)
        if default is not ... and (value is None or value is default):
            return default
        if not isinstance(value, str) or not value:
            raise SpecError(self.source, self._p(key), f"must be a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise SpecError(self.source, self._p(key), f"unknown value {value!r}",
                            ", ".join(choices))
        return value

    def seq(self, key: str, default: Any = ...) -> list:
        value = self.raw(key, default)
        if default is not ... and (value is None or value is default):
            return default
        if not isinstance(value, list):
            raise SpecError(self.source, self._p(key), f"must be a list, got {_kind(value)}")
        return value

    def child(self, key: str, default: Any = ...) -> _Reader | None:
        value = self.raw(key, default)
        if value is None:
            return None
        return _Reader(self.source, value, self._p(key))

    def item(self, key: str, index: int) -> _Reader:
        return _Reader(self.source, self.data[key][index], f"{self._p(key)}[{index}]")

    def done(self) -> None:
        """Reject unknown keys: a typo must not silently become a default."""
        extra = sorted(set(self.data) - self.used, key=str)
        if extra:
            import difflib

            known = sorted(self.used)
            near = difflib.get_close_matches(str(extra[0]), known, n=1, cutoff=0.6)
            raise SpecError(self.source, self._p(extra[0]), "unknown field",
                            ", ".join(known), near[0] if near else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value),
                                                                   type(value).__name__)


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that rejects a key given twice in one mapping (else the last silently wins)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
            except TypeError:  # unhashable key: the base class reports it
                break
            if dup:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> tuple[str, Any]:
    """Read a YAML (or JSON) file; parse errors become SpecErrors naming the line."""
    p = Path(path)
    source = str(path)
    if not p.is_file():
        raise SpecError(source, "", "file not found")
    try:
        return source, yaml.load(p.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 - safe
    except UnicodeDecodeError:
        raise SpecError(source, "", "not a UTF-8 text file", "a YAML or JSON file") from None
    except RecursionError:
        raise SpecError(source, "", "nested too deeply", "a YAML or JSON file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "syntax"
        raise SpecError(source, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None


def load_json(path: str | Path, what: str) -> Any:
    """A JSON file's contents; a missing file or bad JSON is a SpecError naming the file (and
    the line), with ``what`` the file should be (``a plan.json from `gnnsched plan```)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(path), "", "file not found", what)
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise SpecError(str(path), f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None


def fingerprint(obj: Any) -> str:
    """Short stable hash of a JSON-able object: ties plans and profiles to their inputs."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------
# Cluster


@dataclass(frozen=True)
class GPU:
    """One accelerator. `speed` is throughput relative to the profiling reference device."""

    kind: str = "gpu"
    speed: float = 1.0
    memory: float = 16 * GB


@dataclass(frozen=True)
class Machine:
    name: str
    cpus: int
    memory: float  # bytes
    egress: float  # bytes/s
    ingress: float  # bytes/s
    gpus: tuple[GPU, ...] = ()
    partitions: tuple[int, ...] = ()  # partitions this machine stores
    roles: tuple[str, ...] = ROLES  # what may run here
    address: str | None = None  # IP for the netns / ssh launchers
    ssh: str | None = None  # user@host for the ssh launcher

    def can(self, role: str) -> bool:
        return role in self.roles

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    machines: tuple[Machine, ...]
    storage: str = "shared"  # shared | replicated | local: where a dead store's part reloads
    latency: float = 0.0  # seconds per message, one way
    curve: bool = False  # require ZeroMQ CURVE keys on every socket
    keys_dir: str | None = None
    source: str = "<memory>"
    # grey links on the emulated cluster (netem on every host's NIC): the share of packets
    # lost and the random variation of each packet's delay around ``latency`` (seconds)
    loss: float = 0.0  # fraction of packets, 0..0.5
    jitter: float = 0.0  # seconds

    def __post_init__(self) -> None:
        index = {m.name: i for i, m in enumerate(self.machines)}
        object.__setattr__(self, "_index", index)
        owner: dict[int, int] = {}
        for i, m in enumerate(self.machines):
            for p in m.partitions:
                owner[p] = i
        object.__setattr__(self, "_owner", owner)

    @property
    def num_parts(self) -> int:
        return len(self._owner)  # type: ignore[attr-defined]

    def machine_index(self, name: str) -> int:
        try:
            return self._index[name]  # type: ignore[attr-defined]
        except KeyError:
            raise KeyError(f"machine {name!r} is not in cluster {self.name!r} "
                           f"({self.source})") from None

    def machine(self, name: str) -> Machine:
        return self.machines[self.machine_index(name)]

    def dilated(self, factor: float) -> ClusterSpec:
        """The cluster as the scale model at dilation ``factor`` runs it (``docs/scale-model.md``):
        every NIC's rates / factor and latency x factor; CPUs, devices and memory as written
        (their slow-down is the control groups' quota). What sizes transfers on the model."""
        if factor == 1:
            return self
        machines = tuple(_replace(m, egress=m.egress / factor, ingress=m.ingress / factor)
                         for m in self.machines)
        return _replace(self, machines=machines, latency=self.latency * factor,
                        jitter=self.jitter * factor)

    def store_of(self, part: int) -> int:
        """Index of the machine that stores partition `part`."""
        return self._owner[part]  # type: ignore[attr-defined]

    @property
    def part_stores(self) -> list[int]:
        return [self.store_of(p) for p in range(self.num_parts)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "storage": self.storage}
        if self.latency:
            out["latency_ms"] = self.latency * 1e3
        if self.loss:
            out["loss_pct"] = self.loss * 100
        if self.jitter:
            out["jitter_ms"] = self.jitter * 1e3
        if self.curve:
            out["curve"] = True
        machines = []
        for m in self.machines:
            d: dict[str, Any] = {
                "name": m.name, "cpus": m.cpus, "memory_gb": m.memory / GB,
                "nic": {"egress_gbps": m.egress / GBIT, "ingress_gbps": m.ingress / GBIT},
            }
            if m.gpus:
                d["gpus"] = [{"kind": g.kind, "speed": g.speed, "memory_gb": g.memory / GB}
                             for g in m.gpus]
            if m.partitions:
                d["partitions"] = list(m.partitions)
            if tuple(m.roles) != ROLES:
                d["roles"] = list(m.roles)
            if m.address:
                d["address"] = m.address
            if m.ssh:
                d["ssh"] = m.ssh
            machines.append(d)
        out["machines"] = machines
        return out

    def fingerprint(self) -> str:
        return fingerprint(self.to_dict())

    def without(self, dead: str) -> ClusterSpec:
        """The cluster minus one machine; its partitions move to the least-loaded live host.

        Used by recovery: a dead machine's partitions reload from shared storage elsewhere.
        """
        if self.storage == "local":
            lost = self.machine(dead).partitions
            if lost:
                raise SpecError(self.source, f"machines[{dead}]",
                                f"partitions {list(lost)} were only on this machine",
                                "storage: shared or replicated")
        rest = [m for m in self.machines if m.name != dead]
        moved = list(self.machine(dead).partitions)
        if moved:
            hosts = [m for m in rest if m.can("store")] or rest
            for p in moved:
                tgt = min(hosts, key=lambda m: (len(m.partitions), -m.memory))
                i = rest.index(tgt)
                rest[i] = _replace(rest[i], partitions=tuple(sorted(rest[i].partitions + (p,))))
                hosts = [rest[rest.index(h)] if h.name != tgt.name else rest[i] for h in hosts]
        return _replace(self, machines=tuple(rest))


def _replace(m: Any, **kw: Any) -> Any:
    return replace(m, **kw)


def _parse_machine(r: _Reader, names: set[str]) -> Machine:
    name = r.string("name")
    if name in names:
        raise SpecError(r.source, f"{r.path}.name", f"duplicate machine name {name!r}",
                        "unique names")
    names.add(name)
    cpus = r.integer("cpus", minimum=1)
    memory = r.number("memory_gb", strict=True, minimum=0) * GB
    nic = r.child("nic", None)
    if nic is not None:
        both = nic.number("gbps", None, minimum=MIN_GBPS, maximum=MAX_GBPS)
        egress = nic.number("egress_gbps", both, minimum=MIN_GBPS, maximum=MAX_GBPS)
        ingress = nic.number("ingress_gbps", both, minimum=MIN_GBPS, maximum=MAX_GBPS)
        if egress is None or ingress is None:
            raise SpecError(r.source, f"{nic.path}",
                            "needs a bandwidth", "gbps, or egress_gbps and ingress_gbps")
        nic.done()
    else:
        egress = ingress = r.number("nic_gbps", minimum=MIN_GBPS, maximum=MAX_GBPS)
    gpus: list[GPU] = []
    raw_gpus = r.raw("gpus", [])
    too_many = f"at most {MAX_GPUS} GPUs per machine"
    if isinstance(raw_gpus, int) and not isinstance(raw_gpus, bool) and raw_gpus >= 0:
        if raw_gpus > MAX_GPUS:
            raise SpecError(r.source, f"{r.path}.gpus", f"is {raw_gpus}", too_many)
        gpus = [GPU() for _ in range(raw_gpus)]
    elif isinstance(raw_gpus, list):
        for j in range(len(raw_gpus)):
            g = r.item("gpus", j)
            count = g.integer("count", 1, minimum=1)
            if len(gpus) + count > MAX_GPUS:
                raise SpecError(r.source, f"{g.path}.count", f"is {count}", too_many)
            gpu = GPU(kind=g.string("kind", "gpu"),
                      speed=g.number("speed", 1.0, minimum=1e-3, maximum=1e3),
                      memory=g.number("memory_gb", 16, strict=True) * GB)
            g.done()
            gpus.extend([gpu] * count)
    else:
        raise SpecError(r.source, f"{r.path}.gpus", f"must be a count or a list, got {raw_gpus!r}",
                        "gpus: 2, or gpus: [{kind: a100, speed: 1.0, memory_gb: 40, count: 2}]")
    parts = r.seq("partitions", [])
    for j, p in enumerate(parts):
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise SpecError(r.source, f"{r.path}.partitions[{j}]",
                            f"must be a partition id (integer >= 0), got {p!r}")
    roles = tuple(r.seq("roles", list(ROLES)))
    for j, role in enumerate(roles):
        if role not in ROLES:
            raise SpecError(r.source, f"{r.path}.roles[{j}]", f"unknown role {role!r}",
                            ", ".join(ROLES))
        if role in roles[:j]:
            raise SpecError(r.source, f"{r.path}.roles[{j}]", f"role {role!r} listed twice",
                            "each role once")
    if parts and "store" not in roles:
        raise SpecError(r.source, f"{r.path}.roles", "stores partitions but may not run 'store'",
                        "add 'store' to roles or move the partitions")
    address = r.string("address", None)
    ssh = r.string("ssh", None)
    r.done()
    return Machine(name, cpus, memory, egress * GBIT, ingress * GBIT, tuple(gpus),
                   tuple(parts), roles, address, ssh)


def cluster_from_dict(data: Any, source: str = "<cluster>") -> ClusterSpec:
    r = _Reader(source, data)
    name = r.string("name", Path(source).parent.name or "cluster")
    storage = r.string("storage", "shared", choices=("shared", "replicated", "local"))
    latency = r.number("latency_ms", 0.0, maximum=1e5) / 1e3
    loss = r.number("loss_pct", 0.0, maximum=50.0) / 100
    jitter = r.number("jitter_ms", 0.0, maximum=1e5) / 1e3
    curve = r.flag("curve", False)
    keys_dir = r.string("keys_dir", None)
    entries = r.seq("machines")
    if not entries:
        raise SpecError(source, "machines", "is empty", "at least one machine")
    names: set[str] = set()
    machines = tuple(_parse_machine(r.item("machines", i), names) for i in range(len(entries)))
    r.done()
    seen: dict[int, str] = {}
    for m in machines:
        for p in m.partitions:
            if p in seen:
                raise SpecError(source, f"machines[{m.name}].partitions",
                                f"partition {p} is also stored on {seen[p]!r}",
                                "each partition on exactly one machine")
            seen[p] = m.name
    if seen:
        # ids must be 0..N-1: the first gap is within N+1 ids (no range up to a huge id)
        missing = next((p for p in range(len(seen) + 1) if p not in seen), None)
        if max(seen) >= len(seen):
            raise SpecError(source, "machines[*].partitions",
                            f"partition {missing} has no store machine",
                            f"partitions 0..{max(seen)} each listed on one machine, or ids "
                            f"0..{len(seen) - 1} for {len(seen)} partitions")
    else:
        raise SpecError(source, "machines[*].partitions", "no machine stores a partition",
                        "list the partitions each store machine holds")
    return ClusterSpec(name, machines, storage, latency, curve, keys_dir, source, loss, jitter)


def load_cluster(path: str | Path) -> ClusterSpec:
    source, data = load_yaml(path)
    spec = cluster_from_dict(data, source)
    if spec.keys_dir and not Path(spec.keys_dir).is_absolute():
        object.__setattr__(spec, "keys_dir", str(Path(path).parent / spec.keys_dir))
    return spec


# --------------------------------------------------------------------------------------
# Job


@dataclass(frozen=True)
class JobSpec:
    """What to train. `dataset` is a bundled name (``cora``), a path to an ``.npz`` of the
    shared schema, or ``synthetic``; `partitions` is a directory written by
    ``gnnsched partition`` (relative paths resolve against the job file)."""

    name: str = "job"
    dataset: str = "cora"
    partitions: str | None = None
    num_parts: int = 4
    part_method: str = "metis"
    model: str = "sage"
    hidden: int = 128
    fanouts: tuple[int, ...] = (10, 25)
    batch_size: int = 64
    epochs: int = 5
    lr: float = 0.01
    dropout: float = 0.5
    trainers: int = 2
    seed: int = 0
    split: int = 0
    feature_dim: int | None = None  # project raw features to this width (None: keep)
    prefetch: int = 2  # mini-batches buffered per trainer
    eval_every: int = 1
    synthetic: dict[str, Any] = field(default_factory=dict)  # generator args for `synthetic`
    source: str = "<memory>"
    # features: {normalize: ...}: how input features are scaled when the dataset is loaded
    # (row: each row sums to 1, for raw counts; standard: zero mean, unit variance per column)
    normalize: str = "none"
    # metric: what the task is scored by (auto: roc_auc for a binary task, else accuracy)
    metric: str = "auto"
    # evaluation: {fanouts, batch_size, max_nodes}: how validation and test batches are made
    # (fan-outs: None = the training ones; max_nodes: a seeded sample of that many nodes)
    eval_fanouts: tuple[int, ...] | None = None
    eval_batch_size: int = 256
    eval_max_nodes: int | None = None

    @property
    def layers(self) -> int:
        return len(self.fanouts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        d["fanouts"] = list(self.fanouts)
        normalize = d.pop("normalize")  # written as the job file says it
        if normalize != "none":
            d["features"] = {"normalize": normalize}
        ev = {"fanouts": d.pop("eval_fanouts"), "batch_size": d.pop("eval_batch_size"),
              "max_nodes": d.pop("eval_max_nodes")}
        if self.eval_fanouts is not None:
            ev["fanouts"] = list(self.eval_fanouts)
        ev = {k: v for k, v in ev.items() if v is not None and v != EVAL_DEFAULTS.get(k)}
        if ev:
            d["evaluation"] = ev
        return d

    @property
    def evaluation_fanouts(self) -> tuple[int, ...]:
        """The fan-outs validation and test batches are sampled with."""
        return self.fanouts if self.eval_fanouts is None else self.eval_fanouts

    def profile_key(self) -> dict[str, Any]:
        """Fields a cost profile depends on: a profile from another job is rejected."""
        return {k: v for k, v in self.to_dict().items()
                if k in ("dataset", "num_parts", "part_method", "model", "hidden", "fanouts",
                         "batch_size", "feature_dim", "split", "synthetic")}

    def plan_key(self) -> dict[str, Any]:
        """Fields a placement depends on (the cost profile's, the number of trainers and the
        prefetch depth): ``gnnsched plan`` records them, and a plan made for a job that
        differs in any of them is refused."""
        key = {**self.profile_key(), "trainers": self.trainers, "prefetch": self.prefetch}
        if self.dataset == "synthetic":  # the graph generated, not how its parameters were written
            key["synthetic"] = self.synthetic_params()
        return key

    def synthetic_params(self) -> dict[str, Any]:
        """Every parameter of the synthetic graph this job generates, defaults filled in as
        :func:`gnnsched.datasets.load_dataset` fills them (so writing out a default, or the
        job's seed, names the same graph)."""
        params = {**SYNTHETIC_DEFAULTS, "seed": self.seed}
        if self.feature_dim is not None:
            params["feature_dim"] = self.feature_dim
        params.update(self.synthetic or {})
        if not params.get("label_noise"):  # added later: plans of older jobs still match
            params.pop("label_noise", None)
        return dict(sorted(params.items()))


def job_from_dict(data: Any, source: str = "<job>", base: Path | None = None) -> JobSpec:
    r = _Reader(source, data)
    name = r.string("name", "job")
    dataset = r.string("dataset", "cora")
    partitions = r.string("partitions", None)
    if partitions and base is not None and not Path(partitions).is_absolute():
        partitions = str((base / partitions).resolve())
    if dataset.endswith(".npz") and base is not None and not Path(dataset).is_absolute():
        dataset = str((base / dataset).resolve())
    num_parts = r.integer("num_parts", 4, minimum=1)
    part_method = r.string("part_method", "metis", choices=("metis", "random"))
    model = r.string("model", "sage", choices=MODELS)
    hidden = r.integer("hidden", 128, minimum=1)
    fanouts = r.seq("fanouts", [10, 25])
    if not fanouts:
        raise SpecError(source, "fanouts", "is empty", "one fan-out per layer, e.g. [10, 25]")
    _check_fanouts(source, "fanouts", fanouts)
    layers = r.integer("layers", len(fanouts), minimum=1)
    if layers != len(fanouts):
        raise SpecError(source, "layers", f"is {layers} but fanouts has {len(fanouts)} entries",
                        "one fan-out per layer")
    batch_size = r.integer("batch_size", 64, minimum=1)
    epochs = r.integer("epochs", 5, minimum=1, maximum=MAX_EPOCHS)
    lr = r.number("lr", 0.01, strict=True)
    dropout = r.number("dropout", 0.5)
    if dropout >= 1:
        raise SpecError(source, "dropout", f"must be < 1, got {dropout}")
    trainers = r.integer("trainers", 2, minimum=1)
    seed = r.integer("seed", 0)
    split = r.integer("split", 0)
    feature_dim = r.integer("feature_dim", None, minimum=1)
    prefetch = r.integer("prefetch", 2, minimum=1)
    eval_every = r.integer("eval_every", 1, minimum=0)
    syn = r.child("synthetic", None)
    synthetic = _synthetic(syn) if syn is not None else {}
    feats = r.child("features", None)
    normalize = "none"
    if feats is not None:
        normalize = feats.string("normalize", "none", choices=NORMALIZE)
        feats.done()
    metric = r.string("metric", "auto", choices=METRICS)
    ev = r.child("evaluation", None)
    eval_fanouts, eval_batch, eval_max = None, EVAL_DEFAULTS["batch_size"], None
    if ev is not None:
        fo = ev.seq("fanouts", None)
        if fo is not None:
            _check_fanouts(source, "evaluation.fanouts", fo)
            if len(fo) != len(fanouts):
                raise SpecError(source, "evaluation.fanouts", f"has {len(fo)} entries but the "
                                f"model has {len(fanouts)} layers", "one fan-out per layer "
                                "(-1: all neighbours), or leave it out for the training ones")
            eval_fanouts = tuple(fo)
        eval_batch = ev.integer("batch_size", eval_batch, minimum=1)
        eval_max = ev.integer("max_nodes", None, minimum=1)
        ev.done()
    r.done()
    return JobSpec(name, dataset, partitions, num_parts, part_method, model, hidden,
                   tuple(fanouts), batch_size, epochs, lr, dropout, trainers, seed, split,
                   feature_dim, prefetch, eval_every, synthetic, source, normalize, metric,
                   eval_fanouts, eval_batch, eval_max)


def _check_fanouts(source: str, field: str, fanouts: list) -> None:
    for j, f in enumerate(fanouts):
        if isinstance(f, bool) or not isinstance(f, int) or (f < 1 and f != -1):
            raise SpecError(source, f"{field}[{j}]", f"must be a positive integer or -1 (all), "
                            f"got {f!r}")


NORMALIZE = ("none", "row", "standard")  # a job's features.normalize
METRICS = ("auto", "accuracy", "macro_f1", "roc_auc")  # a job's metric (gnnsched.metrics)
EVAL_DEFAULTS = {"batch_size": 256}  # a job's evaluation: fields that are not None by default

# The synthetic generator's defaults (``datasets.synthetic.generate``'s keyword defaults and
# ``datasets.SYNTHETIC_DEFAULT_NODES``; a test keeps them equal). They live here, with the
# job's fields, so the spec needs nothing from the datasets package (which imports the spec).
SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "num_nodes": 10_000, "avg_degree": 20, "num_classes": 8, "feature_dim": 128,
    "homophily": 0.8, "power": 2.5, "feature_noise": 1.0, "label_noise": 0.0,
    "train_frac": 0.1, "val_frac": 0.1, "seed": 0,
}

# ``synthetic:`` keys of a job: the graph generator's (datasets.synthetic.generate) and the
# synthetic cost profile's (profile.synthetic_profile): (kind, minimum, maximum)
SYNTHETIC_KEYS: dict[str, tuple[str, float, float]] = {
    "num_nodes": ("int", 2, 1e10), "avg_degree": ("num", 0, 1e6),
    "num_classes": ("int", 1, 1e6), "feature_dim": ("int", 1, 1e6),
    "homophily": ("num", 0, 1), "power": ("num", 1.000001, 1e3),
    "feature_noise": ("num", 0, 1e6), "label_noise": ("num", 0, 1),
    "train_frac": ("num", 0, 1), "val_frac": ("num", 0, 1),
    "seed": ("int", 0, 2**32 - 1), "name": ("str", 0, 0), "profile": ("bool", 0, 0),
    "seeds_per_part": ("int", 1, 1e9), "locality": ("num", 0, 1), "neighbours": ("int", 0, 1e6),
    "skew": ("num", 0, 100), "samples": ("int", 1, 10_000),
}


def _synthetic(r: _Reader) -> dict[str, Any]:
    """The typed ``synthetic:`` mapping: a typo or a negative size must not become a default."""
    out: dict[str, Any] = {}
    for key in r.data:
        if key not in SYNTHETIC_KEYS:
            raise SpecError(r.source, r._p(str(key)), "unknown generator parameter",
                            ", ".join(SYNTHETIC_KEYS))
        kind, lo, hi = SYNTHETIC_KEYS[key]
        if kind == "str":
            out[key] = r.string(key)
        elif kind == "bool":
            out[key] = r.flag(key, False)
        else:
            out[key] = r.number(key, minimum=lo, maximum=hi, integer=kind == "int")
    return out


def check_synthetic(params: Any, source: str = "synthetic") -> dict[str, Any]:
    """``params`` for the synthetic generator or profile, typed and range-checked."""
    return _synthetic(_Reader(source, params))


def load_job(path: str | Path) -> JobSpec:
    source, data = load_yaml(path)
    return job_from_dict(data, source, Path(path).resolve().parent)


def check_compatible(cluster: ClusterSpec, job: JobSpec) -> None:
    """Cross-file checks: the cluster stores exactly the job's partitions and has devices."""
    if cluster.num_parts != job.num_parts:
        raise SpecError(cluster.source, "machines[*].partitions",
                        f"the cluster stores {cluster.num_parts} partitions but job "
                        f"{job.source} has num_parts={job.num_parts}",
                        "the same number of partitions in both files")
    devices = sum(m.num_gpus for m in cluster.machines if m.can("train"))
    if devices < job.trainers:
        raise SpecError(job.source, "trainers",
                        f"{job.trainers} trainers but cluster {cluster.name!r} has only "
                        f"{devices} GPU(s) on machines that may train",
                        f"trainers <= {devices}, or add GPUs to {cluster.source}")
