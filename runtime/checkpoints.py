"""How a run folder's ``checkpoints/`` are named, and how an older run's names are updated.

Trainer 0 writes ``step-NNNNNN.pt`` after step NNNNNN, ``latest.pt`` and, at each epoch end,
``epoch-NNN.pt``: NNN is the epoch as the log and the progress bars number it (1-based, so
``epoch-004.pt`` follows "epoch 4"), while the records in ``metrics.jsonl`` and the checkpoint's
own ``epoch`` keep the 0-based index they always had. Runs written before version 2 named the
epoch files by that index (``epoch-003.pt`` after "epoch 4"); ``format.json`` says which a
folder holds, and ``--resume`` on an older folder renames its epoch files first
(:func:`renumber_epoch_files`), so one folder never mixes the two. ``--resume`` itself reads the
step files the records name, which never changed.

Integrity (:func:`save`, :func:`verify`). Every checkpoint file has a digest beside it
(``NAME.sha256``: the SHA-256 of its bytes, written and fsynced before the file is renamed
into place), so a file truncated or bit-flipped after it was written is told from a good one
before it is loaded: ``--resume``, recovery's rollback and ``predict``/``export`` skip it in
favour of the previous intact one and say which file. A write that fails (a full disk) removes
its temporary files and raises :class:`CheckpointWriteError`; the previous checkpoint and its
aliases are as they were. Files written before digests (no ``.sha256``) are taken as intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        if digest_file(f).is_file():
            os.replace(digest_file(f), digest_file(new))
        done.append((f.name, new.name))
    mark(folder)
    return done


DIGEST = ".sha256"  # the digest file beside a checkpoint: NAME.pt.sha256
KEEP_STEPS = 3  # step files kept (the aliases keep their data alive through their links)


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (e.g. no space left); nothing of it was left."""


def digest_file(path: Path) -> Path:
    return path.with_name(path.name + DIGEST)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_synced(path: Path, write: Callable[[Any], None]) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def save(folder: Path, state: dict[str, Any], seq: int, aliases: list[str],
         dump: Callable[[dict[str, Any], Any], None]) -> Path:
    """Write ``state`` as ``step-{seq}.pt`` with its digest, then swap each alias (hard links,
    else copies) to it, then drop all but the newest :data:`KEEP_STEPS` step files.

    Atomic: each file is written to a temporary name, fsynced and renamed, the digest before
    its file, so a crash leaves the previous checkpoint whole. ``dump(state, file)`` writes
    the bytes (``torch.save``). A failure raises :class:`CheckpointWriteError` naming the
    file, with every temporary file removed."""
    name = folder / f"step-{seq:06d}.pt"
    made: list[Path] = []

    def temp(target: Path) -> Path:
        t = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        t.unlink(missing_ok=True)
        made.append(t)
        return t

    try:
        tmp = temp(name)
        _write_synced(tmp, lambda f: dump(state, f))
        digest = sha256_of(tmp)
        dtmp = temp(digest_file(name))
        _write_synced(dtmp, lambda f: f.write((digest + "\n").encode()))
        os.replace(dtmp, digest_file(name))
        os.replace(tmp, name)
        for alias in aliases:
            target = folder / alias
            for src, dst in ((digest_file(name), digest_file(target)), (name, target)):
                t = temp(dst)
                try:
                    os.link(src, t)
                except OSError:  # no hard links here: a second copy
                    _write_synced(t, lambda f, s=src: f.write(s.read_bytes()))
                os.replace(t, dst)
    except (OSError, RuntimeError) as exc:  # torch.save reports ENOSPC as a RuntimeError
        for t in made:
            t.unlink(missing_ok=True)
        cause = _os_error(exc)
        err = CheckpointWriteError(f"checkpoint {name} not written: "
                                   f"{(cause.strerror if cause else None) or exc}")
        err.errno = cause.errno if cause else None
        raise err from exc
    steps = sorted(f for f in folder.glob("step-*.pt") if f.name <= name.name)
    for old in steps[:-KEEP_STEPS]:
        old.unlink(missing_ok=True)
        digest_file(old).unlink(missing_ok=True)
    return name


def _os_error(exc: BaseException | None) -> OSError | None:
    """The OSError behind ``exc`` (itself, or in its cause/context chain), if any."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def verify(path: Path) -> str | None:
    """Why ``path`` is not an intact checkpoint (None: it is). Its bytes must match its digest
    (or, for an alias caught between its two renames, a step file's); a file without a digest
    predates them and is taken as intact."""
    path = Path(path)
    if not path.is_file():
        return f"{path} is missing"
    want = digest_file(path)
    if not want.is_file():
        return None
    got = sha256_of(path)
    try:
        if want.read_text().strip() == got:
            return None
    except OSError as exc:
        return f"{want} cannot be read ({exc.strerror or exc})"
    for other in path.parent.glob("step-*.pt" + DIGEST):  # an alias swapped mid-way
        try:
            if other.read_text().strip() == got:
                return None
        except OSError:
            continue
    return (f"{path} is corrupt: its SHA-256 {got[:12]}... does not match {want.name} "
            f"({path.stat().st_size} bytes; truncated or changed after it was written)")


def newest_intact(folder: Path, say: Callable[[str], None] | None = None) -> Path | None:
    """The newest intact checkpoint of ``folder``: ``latest.pt``, else the step files newest
    first, each corrupt one skipped and said."""
    cands = [folder / "latest.pt"] + sorted(folder.glob("step-*.pt"), reverse=True)
    for c in cands:
        if not c.is_file():
            continue
        why = verify(c)
        if why is None:
            return c
        if say is not None:
            say(f"skipped: {why}")
    return None


__all__ = ["DIGEST", "FORMAT_FILE", "KEEP_STEPS", "VERSION", "CheckpointWriteError",
           "digest_file", "epoch_file", "mark", "newest_intact", "renumber_epoch_files", "save",
           "sha256_of", "verify", "version"]
