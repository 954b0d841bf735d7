"""Every field of the cluster and job files, and the ``.npz`` schema: one table each, from
which ``docs/fields.md`` is generated (``python -m gnnsched.fields > docs/fields.md``). A test
checks the tables name exactly the keys the spec's readers accept, and that the page is this
module's output, so the documentation cannot drift from the code."""

from __future__ import annotations

from gnnsched.spec import METRICS, MODELS, NORMALIZE, ROLES, SYNTHETIC_DEFAULTS, SYNTHETIC_KEYS

# (field, default, meaning); "required" where there is no default
CLUSTER = [
    ("name", "the folder's name", "a label for logs and plots"),
    ("storage", "shared", "where a dead store's partitions reload: shared or replicated "
     "storage lets another host load them; local means they are lost with the host"),
    ("latency_ms", "0", "one-way latency added to every message between hosts"),
    ("jitter_ms", "0", "on the emulated cluster: each packet's delay varies by up to this "
     "much around `latency_ms` (netem; reorders packets as a real path can; needs the "
     "kernel's netem)"),
    ("loss_pct", "0", "on the emulated cluster: the share of packets every host's NIC drops, "
     "0 to 50 (netem where the kernel has it, else an eBPF filter on the NIC); the planner "
     "and simulator do not model it"),
    ("curve", "false", "require ZeroMQ CURVE keys on every socket (`gnnsched keys`)"),
    ("keys_dir", "none", "folder of the CURVE keys (default: beside the cluster file)"),
    ("machines", "required", "the hosts, a list of the machine fields below"),
]
MACHINE = [
    ("name", "required", "unique host name; plans and logs use it"),
    ("cpus", "required", "CPU cores the host gives to gnnsched's roles"),
    ("memory_gb", "required", "memory for partitions, buffers and processes; plans are "
     "refused where it does not fit"),
    ("nic_gbps", "required unless nic", "NIC bandwidth, both directions, in Gbit/s"),
    ("nic", "none", "{gbps} or {egress_gbps, ingress_gbps}: asymmetric NICs"),
    ("gpus", "[]", "devices: a list of {kind, speed (relative, 1.0 = reference), memory_gb, "
     "count}"),
    ("partitions", "[]", "the partitions this host stores (each partition on one host)"),
    ("roles", "all", f"roles the host may run: {', '.join(ROLES)}"),
    ("address", "none", "IP address (emulated cluster: inside its namespace; ssh: how others "
     "reach it)"),
    ("ssh", "none", "user@host for the ssh launcher"),
]
JOB = [
    ("name", "job", "a label for logs and plots"),
    ("dataset", "cora", "a bundled name, a NAME of an .npz in --data-dir, a path to an .npz of "
     "the schema below, or synthetic"),
    ("partitions", "none", "a directory from `gnnsched partition` (relative to the job file); "
     "without, the dataset is partitioned into a cache"),
    ("num_parts", "4", "number of partitions"),
    ("part_method", "metis", "metis or random"),
    ("model", "sage", " or ".join(MODELS)),
    ("hidden", "128", "hidden width of every layer"),
    ("layers", "len(fanouts)", "number of layers; must equal the number of fan-outs"),
    ("fanouts", "[10, 25]", "neighbours sampled per layer (-1: all)"),
    ("batch_size", "64", "training seeds per mini-batch"),
    ("epochs", "5", "training epochs"),
    ("lr", "0.01", "Adam learning rate"),
    ("dropout", "0.5", "dropout between layers"),
    ("trainers", "2", "synchronous data-parallel trainers (at most num_parts)"),
    ("seed", "0", "seed of everything random in the job (mini-batches, model, dropout)"),
    ("split", "0", "which train/validation/test split of a multi-split dataset; a partition "
     "directory fixes it when it is written"),
    ("feature_dim", "none", "project features to this width (seeded random projection)"),
    ("features", "none", "{normalize: " + " | ".join(NORMALIZE) + "}: row makes raw counts "
     "frequencies (before a projection), standard gives every column zero mean and unit "
     "variance"),
    ("metric", "auto", " | ".join(METRICS) + ": what validation and test are scored by; "
     "auto is roc_auc for a binary task, accuracy otherwise (accuracy is always reported "
     "too, beside the majority-class rate)"),
    ("prefetch", "2", "mini-batches buffered ahead of training, per trainer"),
    ("eval_every", "1", "validate every this many epochs (and after the last); 0: only after "
     "the last"),
    ("evaluation", "none", "{fanouts, batch_size, max_nodes}: validation and test batches -- "
     "fan-outs per layer (-1: all neighbours; default: the training ones), nodes per batch "
     "(default 256), and a cap on the nodes evaluated per phase (a seeded sample, the same in "
     "every run of the job; default: all)"),
    ("synthetic", "{}", "the generator's and the synthetic profile's parameters (below)"),
]
SYNTHETIC_MEANING = {
    "num_nodes": "nodes", "avg_degree": "mean degree (undirected)", "num_classes": "classes",
    "feature_dim": "feature width", "homophily": "share of edges inside a class",
    "power": "tail exponent of the degree law", "feature_noise": "noise around the class mean",
    "label_noise": "share of labels redrawn at random (caps accuracy near 1 - share)",
    "train_frac": "share of nodes that train", "val_frac": "share that validate",
    "seed": "generator seed (default: the job's)", "name": "graph name",
    "profile": "plan with a synthetic cost profile instead of a measured one",
    "seeds_per_part": "profile: training seeds per partition",
    "locality": "profile: share of a mini-batch's input nodes in its own partition",
    "neighbours": "profile: input nodes per seed", "skew": "profile: seed skew across parts",
    "samples": "profile: mini-batches drawn per partition",
}
NPZ = [
    ("num_nodes", "int64 scalar", "N"),
    ("edge_index", "int64 [2, E]", "directed edges (undirected graphs carry both directions), "
     "sorted by (src, dst), no self loops or duplicates"),
    ("x_indptr, x_indices, x_data, x_shape", "CSR: int64 [N+1], int32, float32, int64 [2]",
     "node features, raw (see features.normalize)"),
    ("y", "int64 [N]", "class labels 0..C-1"),
    ("train_mask, val_mask, test_mask", "bool [N] or [S, N]", "one split, or S splits (the "
     "job's split picks the row)"),
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe inside a cell would split it


def _table(rows: list[tuple[str, str, str]], head: tuple[str, str, str]) -> list[str]:
    out = [f"| {head[0]} | {head[1]} | {head[2]} |", "|---|---|---|"]
    out += [f"| `{a}` | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
    return out


def render() -> str:
    """docs/fields.md."""
    syn = [(k, str(SYNTHETIC_DEFAULTS.get(k, "none")), SYNTHETIC_MEANING[k])
           for k in SYNTHETIC_KEYS]
    lines = ["# Input files: every field", "",
             "Generated from `gnnsched/fields.py` (`python -m gnnsched.fields > "
             "docs/fields.md`); a test keeps it equal to the keys the readers in "
             "`gnnsched/spec.py` accept. An unknown key is an error naming the file, the "
             "field and the valid ones.", "",
             "## Cluster file (YAML)", "", *_table(CLUSTER, ("field", "default", "meaning")),
             "", "### A machine (`machines[*]`)", "",
             *_table(MACHINE, ("field", "default", "meaning")),
             "", "## Job file (YAML)", "", *_table(JOB, ("field", "default", "meaning")),
             "", "### `synthetic:`", "", *_table(syn, ("key", "default", "meaning")),
             "", "## Graph files (`.npz`, loaded with `allow_pickle=False`)", "",
             *_table(NPZ, ("key", "type", "meaning")), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
