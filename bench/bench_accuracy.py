"""Accuracy over seeds: DistDGL beside single-process training of gnnsched's split, per dataset.

Why: the evaluation compares the mean over its repeats (one job seed each), but on Cora's
140 training nodes test accuracy moves by points with the initialisation and mini-batch order
alone. Here both sides train the evaluation's job (GraphSAGE, fan-outs 10/25, 8 epochs, 2
trainers over 4 METIS parts) with job seeds 0..N-1: DistDGL on local processes (the
plentiful shape's hosts on 127.0.0.1: accuracy does not depend on the network) and
gnnsched's reference — single-process training of the colocation plan's seed split, which
every gnnsched run matches within 1 point (the evaluation's invariant); DistDGL trains the
same seed split. Prints a table, writes ``docs/bench/accuracy.json``.

Run: ``python bench/bench_accuracy.py [--datasets cora physics] [--seeds 5]`` (about 1 min
per DistDGL run on this 2-core box).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_eval as be  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_dataset(ds: str, seeds: list[int], epochs: int, work: Path) -> dict[str, Any]:
    from gnnsched.commands.bench import add_arguments
    from gnnsched.placement import get_placer
    from gnnsched.runtime.distdgl import run_distdgl
    from gnnsched.runtime.reference import reference_train

    cli = argparse.ArgumentParser()
    add_arguments(cli)
    st = be.resolve(cli.parse_args(["--work", str(work), "--launcher", "local", "--datasets",
                                    ds, "--shapes", "plentiful", "--epochs", str(epochs),
                                    "--no-scale"]))
    ctx = be.Context(st)
    ctx.prepare(ds)
    cluster = be.load_shape("plentiful")
    job = be.make_job(ds, epochs, 0)
    plan = be.canonical(get_placer("colocation").place(cluster, job, ctx.profiles[ds]))
    split = be.split_of(plan)
    ref: list[float] = []
    t0 = time.perf_counter()
    for seed in seeds:
        r = reference_train(be.make_job(ds, epochs, seed), str(ctx.parts[ds]), split,
                            eval_batch_size=be.EVAL_BATCH)
        ref.append(float(r.test_accuracy))
        print(f"[{ds}] gnnsched reference seed {seed}: test accuracy {ref[-1]:.4f}", flush=True)
    ref_s = time.perf_counter() - t0
    dd: list[float] = []
    t0 = time.perf_counter()
    for seed in seeds:
        job = be.make_job(ds, epochs, seed)
        with tempfile.TemporaryDirectory(prefix="gnnsched-acc-") as tmp:
            r = run_distdgl(cluster, job, ctx.parts[ds], out_dir=tmp, timeout_s=900,
                            eval_fanouts=list(job.fanouts), eval_batch_size=be.EVAL_BATCH,
                            split=be.distdgl_split(plan))
        dd.append(float(r.test_accuracy))
        print(f"[{ds}] DistDGL seed {seed}: test accuracy {dd[-1]:.4f}", flush=True)
    out = {"dataset": ds, "label": be.DATASETS[ds].label, "seeds": seeds, "epochs": epochs,
           "split": split, "distdgl": be.accuracy_stats(dd),
           "gnnsched_reference": be.accuracy_stats(ref),
           "distdgl_s": time.perf_counter() - t0,
           "reference_s": ref_s}
    out["mean_difference_pt"] = 100 * (out["gnnsched_reference"]["mean"]
                                       - out["distdgl"]["mean"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cora", "physics"],
                    choices=sorted(be.DATASETS), help="datasets of the evaluation")
    ap.add_argument("--seeds", type=int, default=5, help="job seeds 0..N-1 per system")
    ap.add_argument("--epochs", type=int, default=8, help="as in the evaluation")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench"),
                    help="where the evaluation's profiles are cached (shared with it)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "accuracy.json"))
    args = ap.parse_args(argv)
    if args.seeds < 2:
        ap.error("--seeds must be at least 2 (a spread needs two runs)")
    t0 = time.perf_counter()
    rows = [run_dataset(ds, list(range(args.seeds)), args.epochs, Path(args.work))
            for ds in args.datasets]
    print()
    print(f"{'dataset':18} {'DistDGL mean (range)':>26} {'gnnsched ref mean (range)':>28} "
          f"{'diff pt':>8}")
    for r in rows:
        d, g = r["distdgl"], r["gnnsched_reference"]
        print(f"{r['label']:18} {d['mean']:8.4f} ({d['min']:.3f}..{d['max']:.3f})    "
              f"{g['mean']:8.4f} ({g['min']:.3f}..{g['max']:.3f})       "
              f"{r['mean_difference_pt']:+6.2f}")
    doc = {"bench": "accuracy", "command": "python bench/bench_accuracy.py "
           + " ".join(argv if argv is not None else sys.argv[1:]),
           "wall_s": time.perf_counter() - t0, "datasets": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} in {doc['wall_s'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
