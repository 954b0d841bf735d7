"""``gnnsched train --resume``: a run interrupted by Ctrl-C goes on from its last checkpoint
and ends where an uninterrupted run ends (the runtime is deterministic: the same model as
single-process training with the same seeds)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsched.plan import Plan, TrainerPlan
from gnnsched.spec import load_cluster, load_job

ROOT = Path(__file__).resolve().parents[2]
LAB4 = ROOT / "examples" / "lab4"
EPOCHS = 4


def _cmd(tmp: Path, parts: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gnnsched", "train", "--cluster", str(LAB4 / "cluster.yaml"),
            "--job", str(LAB4 / "job.yaml"), "--plan", str(tmp / "plan.json"),
            "--partitions", str(parts), "--out", str(tmp / "run"), "--epochs", str(EPOCHS),
            *extra]


def _events(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _epoch_files(folder: Path) -> dict[int, int]:
    """The number in each ``epoch-NNN.pt`` -> the (0-based) epoch recorded inside it."""
    import torch

    return {int(f.stem.split("-")[1]): int(torch.load(f, weights_only=True)["epoch"])
            for f in sorted(folder.glob("epoch-*.pt"))}


def _lab4_setup(tmp_path: Path) -> tuple:
    """lab4's job, its partitions (random, seed 0) and a hand plan in ``tmp_path``."""
    from gnnsched.datasets import load_dataset, partition_graph

    cluster, job = load_cluster(LAB4 / "cluster.yaml"), load_job(LAB4 / "job.yaml")
    parts = tmp_path / "parts"
    partition_graph(load_dataset(job.dataset), job.num_parts, parts, method="random", seed=0)
    plan = Plan("hand", cluster.name, cluster.fingerprint(), (
        TrainerPlan(0, "gpu0", 0, (0, 1), (("store0", 1),), "store0"),
        TrainerPlan(1, "gpu1", 0, (2, 3), (("store1", 1),), "gpu1")))
    plan.save(tmp_path / "plan.json")
    return job, parts


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    from gnnsched.runtime.reference import reference_train

    job, parts = _lab4_setup(tmp_path)
    run = tmp_path / "run"

    proc = subprocess.Popen(_cmd(tmp_path, parts), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            ev = _events(run) if (run / "metrics.jsonl").exists() else []
            ckpt = {e["seq"] for e in ev if e.get("type") == "checkpoint"}
            done = [e["seq"] for e in ev if e.get("type") == "batch"]
            if any(done.count(s) == 2 for s in ckpt):  # both trainers passed that step
                break
            time.sleep(0.1)
        else:
            pytest.fail("no checkpoint written")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, out[-2000:]
    before = _events(run)
    assert not any(e.get("type") == "run" for e in before), "finished before the interrupt"
    # epoch checkpoints are named by the log's epoch: epoch-001.pt holds epoch index 0
    folder = run / "checkpoints"
    ended = sorted(int(e["epoch"]) for e in before if e.get("type") == "checkpoint"
                   and e.get("epoch_file"))
    assert ended and [e.get("epoch_file") for e in before if e.get("type") == "checkpoint"
                      and e.get("epoch_file")] == [f"epoch-{e + 1:03d}.pt" for e in ended]
    assert _epoch_files(folder) == {e + 1: e for e in ended}
    # make it a folder as runs before version 2 left it (0-based names, no format.json):
    # --resume goes on from it and renames its files to the log's numbers
    for n in sorted(_epoch_files(folder)):
        (folder / f"epoch-{n:03d}.pt").rename(folder / f"epoch-{n - 1:03d}.pt")
    (folder / "format.json").unlink()

    # the same folder again without --resume is refused; with --force beside it too
    again = subprocess.run(_cmd(tmp_path, parts), capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "already holds a run" in again.stderr
    both = subprocess.run(_cmd(tmp_path, parts, "--resume", "--force"), capture_output=True,
                          text=True, timeout=120)
    assert both.returncode != 0 and "cannot be combined with --force" in both.stderr

    res = subprocess.run(_cmd(tmp_path, parts, "--resume", "--json"), capture_output=True,
                         text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    events = _events(run)
    resumed = [e for e in events if e.get("type") == "resume"]
    assert len(resumed) == 1 and resumed[0]["checkpoint_step"] >= 0
    assert {e["epoch"] for e in events if e.get("type") == "epoch"} == set(range(EPOCHS))
    assert len(got["epoch_times_s"]) == EPOCHS  # every epoch in the result, earlier ones too

    ref = reference_train(replace(job, epochs=EPOCHS), str(parts), [[0, 1], [2, 3]])
    assert got["test_accuracy"] == pytest.approx(ref.test_accuracy, abs=1e-9)

    assert _epoch_files(folder) == {e + 1: e for e in range(EPOCHS)}  # epoch-001 .. -004
    done = subprocess.run(_cmd(tmp_path, parts, "--resume"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "finished; nothing to resume" in done.stderr


def _fill(mount: Path) -> Path:
    """Fill a tmpfs to its last byte: the kernel's own ENOSPC for every write after."""
    filler = mount / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.slow
def test_a_full_disk_mid_run_keeps_the_last_checkpoint_and_resume_goes_on(
        tmp_path: Path) -> None:
    """The run's ``checkpoints/`` on a 64 MB tmpfs that fills once the first checkpoint is
    written: later checkpoints fail cleanly (said, recorded), training goes on, the last good
    checkpoint stays intact; interrupted, the run resumes from it once the disk has room
    and ends with the uninterrupted run's model (issue 57)."""
    import os

    from gnnsched.runtime import checkpoints
    from gnnsched.runtime.reference import reference_train

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    job, parts = _lab4_setup(tmp_path)
    run = tmp_path / "run"
    folder = run / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    proc = None
    try:
        # --force: the folder exists (the mount point); --checkpoint-every 3: several writes
        proc = subprocess.Popen(_cmd(tmp_path, parts, "--force", "--checkpoint-every", "3"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 240
        filler = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            ev = _events(run) if (run / "metrics.jsonl").exists() else []
            if filler is None and any(e.get("type") == "checkpoint" for e in ev):
                filler = _fill(folder)
            if any(e.get("type") == "checkpoint_failed" for e in ev):
                break
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint write failed on the full disk")
        time.sleep(1.0)  # training goes on past the failure
        assert proc.poll() is None, "the run stopped at the failed checkpoint"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        ev = _events(run)
        failed = [e for e in ev if e.get("type") == "checkpoint_failed"]
        assert failed and "No space left on device" in failed[0]["error"], failed
        assert "not written" in out and "training goes on" in out, out[-3000:]
        good = [e for e in ev if e.get("type") == "checkpoint"]
        assert good and max(e["seq"] for e in good) < failed[0]["seq"]
        assert checkpoints.verify(folder / "latest.pt") is None
        assert not list(folder.glob(".*.tmp-*")), "a failed write left a temporary file"
        filler.unlink()  # room again: --resume goes on from the last good checkpoint
        res = subprocess.run(_cmd(tmp_path, parts, "--resume", "--json"), capture_output=True,
                             text=True, timeout=400)
        assert res.returncode == 0, res.stderr[-3000:]
        got = json.loads(res.stdout.strip().splitlines()[-1])
        resumed = [e for e in _events(run) if e.get("type") == "resume"]
        assert resumed and resumed[0]["checkpoint_step"] == max(e["seq"] for e in good)
        ref = reference_train(replace(job, epochs=EPOCHS), str(parts), [[0, 1], [2, 3]])
        assert got["test_accuracy"] == pytest.approx(ref.test_accuracy, abs=1e-9)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["umount", "-l", str(folder)], check=False)
