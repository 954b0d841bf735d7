"""Checkpoint names number epochs as the log does (``epoch-004.pt`` after "epoch 4"); an older
run folder's 0-based names are renamed when it is resumed (issue 51 item 5)."""

from __future__ import annotations

from pathlib import Path

from gnnsched.runtime import checkpoints


def _old_folder(tmp_path: Path, epochs: int) -> Path:
    """What a run before version 2 left: epoch-000.pt after the log's "epoch 1", ..."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for e in range(epochs):
        (folder / f"epoch-{e:03d}.pt").write_text(f"after epoch index {e}")
    (folder / "step-000035.pt").write_text("step")
    (folder / "latest.pt").write_text("latest")
    return folder


def test_epoch_files_are_named_by_the_logs_number() -> None:
    assert checkpoints.epoch_file(0) == "epoch-001.pt"
    assert checkpoints.epoch_file(3) == "epoch-004.pt"  # after the log's "epoch 4"


def test_an_older_folder_is_renamed_once(tmp_path: Path) -> None:
    folder = _old_folder(tmp_path, 4)
    assert checkpoints.version(folder) == 1
    renamed = checkpoints.renumber_epoch_files(folder)
    assert renamed == [(f"epoch-{e:03d}.pt", f"epoch-{e + 1:03d}.pt") for e in (3, 2, 1, 0)]
    names = sorted(f.name for f in folder.iterdir())
    assert names == ["epoch-001.pt", "epoch-002.pt", "epoch-003.pt", "epoch-004.pt",
                     "format.json", "latest.pt", "step-000035.pt"]
    for e in range(4):  # each file moved, none overwritten
        assert (folder / checkpoints.epoch_file(e)).read_text() == f"after epoch index {e}"
    assert checkpoints.version(folder) == checkpoints.VERSION
    assert checkpoints.renumber_epoch_files(folder) == []  # a second resume renames nothing
    assert (folder / "epoch-004.pt").is_file() and not (folder / "epoch-005.pt").exists()


def test_a_current_folder_is_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    checkpoints.mark(folder)
    (folder / "epoch-001.pt").write_text("after the log's epoch 1")
    assert checkpoints.renumber_epoch_files(folder) == []
    assert sorted(f.name for f in folder.iterdir()) == ["epoch-001.pt", "format.json"]
    assert checkpoints.renumber_epoch_files(tmp_path / "none") == []  # no checkpoints yet
