"""One module per CLI verb: ``HELP``, ``add_arguments(parser)``, ``run(args) -> int``.

The ``type=`` helpers below range-check flags at parse time, so a bad value ends with
argparse's own one-line ``argument --x: ...`` error naming what would be valid (no
traceback, nothing started): ``--epochs 0``, ``--budget nan``, ``--seed -1``, ``--out`` under
a folder that does not exist.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

MAX_SEED = 2**32 - 1  # a 32-bit seed: what every seeded library here accepts as is
MAX_SECONDS = 1e6  # ~11 days; timeouts go to ZeroMQ as int32 milliseconds (2.1e6 s)
MAX_EPOCHS = 100_000  # as in job files (gnnsched.spec.MAX_EPOCHS)


def _fmt(x: float) -> str:
    return f"{x:g}".replace("e+0", "e").replace("e+", "e") if isinstance(x, float) else str(x)


def _range_text(lo: float | None, hi: float | None, lo_open: bool) -> str:
    if lo is not None and hi is not None and not lo_open:
        return f"{_fmt(lo)}..{_fmt(hi)}"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {_fmt(lo)}")
    if hi is not None:
        parts.append(f"<= {_fmt(hi)}")
    return " and ".join(parts)


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           what: str = "a number") -> Callable[[str], float]:
    """A finite float in [lo, hi] (``lo_open``: > lo). NaN and inf are always rejected."""
    valid = _range_text(lo, hi, lo_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number (valid: {what} {valid})") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"must be a finite number, got {text!r} (valid: {what} {valid})")
        if (lo is not None and (value <= lo if lo_open else value < lo)) or \
                (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range (valid: {what} {valid})")
        return value

    parse.__name__ = "number"  # argparse names the type in "invalid number value"
    parse.valid = f"{what} {valid}"  # type: ignore[attr-defined]  # shown by --help
    return parse


def integer(lo: int | None = None, hi: int | None = None, *,
            what: str = "an integer") -> Callable[[str], int]:
    """A whole number in [lo, hi] (written as digits: ``2.5``, ``1e3`` and ``nan`` are not)."""
    valid = _range_text(lo, hi, False)

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number (valid: {what} {valid})") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range (valid: {what} {valid})")
        return value

    parse.__name__ = "integer"
    parse.valid = f"{what} {valid}"  # type: ignore[attr-defined]
    return parse


positive_int = integer(1, 10**9, what="an integer")
nonneg_int = integer(0, 10**9, what="an integer")
seed_int = integer(0, MAX_SEED, what="a seed")
epochs_int = integer(1, MAX_EPOCHS, what="a number of epochs")
port_int = integer(1, 65535, what="a TCP port")
seconds = number(0, MAX_SECONDS, lo_open=True, what="seconds")
milliseconds = number(0, MAX_SECONDS * 1e3, lo_open=True, what="milliseconds")
parts_int = integer(1, 65536, what="a number of partitions")
feature_dim_int = integer(1, 1_000_000, what="a feature width")
threads_int = integer(1, 1024, what="threads")
mtu_int = integer(68, 65535, what="an MTU in bytes")  # IPv4's minimum .. a veth's maximum
sizes_int = integer(2, 100_000, what="machines")


def output_file(text: str) -> str:
    """A file to write: its folder must exist, and it must not itself be a folder."""
    p = _output_path(text)
    parent = p.absolute().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: folder {parent} does not exist (valid: a file in an existing directory)")
    return text


def new_output_file(text: str) -> str:
    """A file to write whose missing folders are created: no file may stand in their way."""
    _parent_ok(_output_path(text), text)
    return text


def _output_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (valid: a file name)")
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory (valid: a file to write)")
    _parent_ok(p, text)
    return p


IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff",
                  ".webp")  # what matplotlib's default backend writes


def _image(text: str) -> str:
    suffix = Path(text).suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        why = f"'{suffix}' is not an image format" if suffix else "has no extension"
        raise argparse.ArgumentTypeError(
            f"{text}: {why} (valid: a file ending in {', '.join(IMAGE_SUFFIXES)})")
    return text


def image_file(text: str) -> str:
    """A picture to write: :func:`output_file` with an extension matplotlib can write."""
    return _image(output_file(text))


def new_image_file(text: str) -> str:
    """A picture to write whose missing folders are created (:func:`new_output_file`)."""
    return _image(new_output_file(text))


image_file.valid = new_image_file.valid = (  # type: ignore[attr-defined]  # shown by --help
    "a .png, .pdf, .svg, ... file")


def output_dir(text: str) -> str:
    """A folder to create or reuse: not an existing file, and no file on the way to it."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (valid: a directory)")
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} exists and is not a directory (valid: a directory, new or existing)")
    _parent_ok(p, text)
    return text


def input_dir(text: str) -> str:
    """An existing folder to read from."""
    p = Path(text)
    if not p.is_dir():
        what = "is a file" if p.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {what} (valid: an existing directory)")
    return text


def _parent_ok(p: Path, text: str) -> None:
    """Every existing ancestor of ``p`` must be a folder (``mkdir -p`` could make the rest)."""
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{text}: {parent} is a file, not a directory (valid: a path under a "
                    "directory)")
            return


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append each range-checked flag's valid values to its ``--help`` text (and recurse
    into sub-commands), so the help says what the parser will accept."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                document_ranges(sub)
            continue
        valid = getattr(action.type, "valid", None)
        if valid and action.help != argparse.SUPPRESS and "(valid:" not in (action.help or ""):
            action.help = f"{action.help} (valid: {valid})" if action.help else f"valid: {valid}"
