"""Grey faults on checkpoints (issue 57): a corrupt checkpoint is told by its digest and
skipped in favour of the previous one, naming the file; a write that fails for want of space
(a real tmpfs, as root) leaves the previous checkpoint intact and nothing half-written; and
``--resume`` goes on from the newest intact checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from gnnsched.runtime import checkpoints
from gnnsched.runtime.coordinator.options import RunError
from gnnsched.runtime.coordinator.resume import earlier_run
from gnnsched.runtime.inference import find_checkpoint
from gnnsched.spec import SpecError


def _state(seq: int, n: int = 64) -> dict:
    g = torch.Generator().manual_seed(seq)
    return {"model": {"w": torch.randn(n, generator=g)}, "seq": seq, "epoch": 0,
            "job": {"name": "t"}}


def _save(folder: Path, seq: int, n: int = 64, aliases: tuple[str, ...] = ("latest.pt",)
          ) -> Path:
    return checkpoints.save(folder, _state(seq, n), seq, list(aliases), torch.save)


def _flip(path: Path, at: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))  # in place: the hard-linked step file changes with it


def test_a_flipped_byte_or_a_truncation_is_caught_naming_the_file(tmp_path: Path) -> None:
    p = _save(tmp_path, 1)
    assert checkpoints.verify(p) is None and checkpoints.verify(tmp_path / "latest.pt") is None
    assert checkpoints.digest_file(p).read_text().strip() == checkpoints.sha256_of(p)
    _flip(p)
    why = checkpoints.verify(p)
    assert why is not None and str(p) in why and "corrupt" in why
    q = _save(tmp_path, 2)
    with open(q, "r+b") as f:
        f.truncate(q.stat().st_size // 2)
    assert "corrupt" in (checkpoints.verify(q) or "")
    legacy = tmp_path / "old.pt"  # written before digests: taken as it is
    torch.save(_state(0), legacy)
    assert checkpoints.verify(legacy) is None


def test_the_previous_intact_checkpoint_is_used_and_said(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    for seq in (1, 2, 3, 4):
        _save(folder, seq)
    kept = sorted(f.name for f in folder.glob("step-*.pt"))
    assert kept == ["step-000002.pt", "step-000003.pt", "step-000004.pt"]  # KEEP_STEPS
    assert not (folder / "step-000001.pt.sha256").exists()  # pruned with its file
    _flip(folder / "latest.pt")  # latest.pt is step 4's hard link: both corrupt
    said: list[str] = []
    got = checkpoints.newest_intact(folder, say=said.append)
    assert got == folder / "step-000003.pt"
    assert any("latest.pt" in s for s in said) and any("step-000004.pt" in s for s in said)
    assert find_checkpoint(tmp_path / "run") == got  # predict / export do the same
    with pytest.raises(SpecError, match="corrupt"):
        find_checkpoint(tmp_path / "run", "step-000004.pt")  # named: refused, not replaced


def _records(run: Path, trainers: int, steps: int, ckpts: dict[int, Path]) -> None:
    recs = [{"type": "training", "time": 0.0}]
    for s in range(steps):
        recs += [{"type": "batch", "seq": s, "trainer": w, "time": 1.0 + s, "train_s": 0.1}
                 for w in range(trainers)]
        if s in ckpts:
            recs.append({"type": "checkpoint", "seq": s, "epoch": 0, "path": str(ckpts[s])})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_resume_skips_a_corrupt_newest_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = run / "checkpoints"
    folder.mkdir(parents=True)
    paths = {s: _save(folder, s) for s in (1, 3)}
    _records(run, 2, 5, paths)
    assert earlier_run(run, 2, {}).seq == 3
    _flip(paths[3])
    e = earlier_run(run, 2, {})
    assert e.seq == 1 and e.path == str(paths[1])
    assert len(e.skipped) == 1 and str(paths[3]) in e.skipped[0]
    _flip(paths[1])
    with pytest.raises(RunError, match="no checkpoint file is intact"):
        earlier_run(run, 2, {})


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs (root only): the kernel's own 'No space left on device'."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_disk_leaves_the_previous_checkpoint_intact(small_disk: Path) -> None:
    folder = small_disk / "checkpoints"
    folder.mkdir()
    first = _save(folder, 1, aliases=("latest.pt", "epoch-001.pt"))
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    with pytest.raises(checkpoints.CheckpointWriteError, match="step-000002.pt not written"):
        _save(folder, 2, n=200_000)  # 800 KB of weights on a 256 KiB disk
    after = {f.name: f.read_bytes() for f in folder.iterdir()}
    assert after == before, "the failed write left something behind or changed a file"
    assert checkpoints.newest_intact(folder) == folder / "latest.pt"
    assert checkpoints.verify(first) is None
    state = torch.load(folder / "latest.pt", weights_only=True)
    assert state["seq"] == 1  # --resume and predict read step 1's weights
