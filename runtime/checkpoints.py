"""How a run folder's ``checkpoints/`` are named, and how an older run's names are updated.

Trainer 0 writes ``step-NNNNNN.pt`` after step NNNNNN, ``latest.pt`` and, at each epoch end,
``epoch-NNN.pt``: NNN is the epoch as the log and the progress bars number it (1-based, so
``epoch-004.pt`` follows "epoch 4"), while the records in ``metrics.jsonl`` and the checkpoint's
own ``epoch`` keep the 0-based index they always had. Runs written before version 2 named the
epoch files by that index (``epoch-003.pt`` after "epoch 4"); ``format.json`` says which a
folder holds, and ``--resume`` on an older folder renames its epoch files first
(:func:`renumber_epoch_files`), so one folder never mixes the two. ``--resume`` itself reads the
step files the records name, which never changed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

VERSION = 2  # 2: epoch-NNN.pt is named by the log's 1-based epoch
FORMAT_FILE = "format.json"
_EPOCH = re.compile(r"^epoch-(\d+)\.pt$")


def epoch_file(epoch: int) -> str:
    """The name of the checkpoint after 0-based epoch ``epoch``: the log's number."""
    return f"epoch-{epoch + 1:03d}.pt"


def mark(folder: Path) -> None:
    """Say (once, atomically) that ``folder``'s epoch files are named the version-2 way."""
    path = folder / FORMAT_FILE
    if path.is_file():
        return
    tmp = folder / f".{FORMAT_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps({"version": VERSION, "epoch_files": "1-based, as the log"}) + "\n")
    os.replace(tmp, path)


def version(folder: Path) -> int:
    """The naming version of ``folder``: 1 for a folder without ``format.json`` (older runs)."""
    try:
        return int(json.loads((folder / FORMAT_FILE).read_text()).get("version", 1))
    except (OSError, ValueError, AttributeError):
        return 1


def renumber_epoch_files(folder: Path) -> list[tuple[str, str]]:
    """Rename an older run's 0-based ``epoch-NNN.pt`` to the log's numbering (highest first,
    so no name is overwritten) and mark the folder; returns the (old, new) names. A folder
    already at version 2, or without checkpoints, is left as it is."""
    if not folder.is_dir() or version(folder) >= VERSION:
        return []
    found = sorted(((int(m.group(1)), f) for f in folder.iterdir()
                    if (m := _EPOCH.match(f.name))), reverse=True)
    done = []
    for n, f in found:
        new = folder / epoch_file(n)
        os.replace(f, new)
        done.append((f.name, new.name))
    mark(folder)
    return done


__all__ = ["FORMAT_FILE", "VERSION", "epoch_file", "mark", "renumber_epoch_files", "version"]
