"""`gnnsched VERB ...`: one sub-command per verb, each in :mod:`gnnsched.commands`.

Every verb module has ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``;
the verb's flags live beside its implementation, and importing is lazy so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
from typing import Any

from gnnsched.commands import document_ranges
from gnnsched.spec import SpecError

VERBS = {
    "demo": "gnnsched.commands.demo",
    "chunk": "gnnsched.commands.chunk",
    "partition": "gnnsched.commands.partition",
    "profile": "gnnsched.commands.profile",
    "plan": "gnnsched.commands.plan",
    "simulate": "gnnsched.commands.simulate",
    "train": "gnnsched.commands.train",
    "predict": "gnnsched.commands.predict",
    "export": "gnnsched.commands.export",
    "reference": "gnnsched.commands.reference",
    "trace": "gnnsched.commands.trace",
    "cluster": "gnnsched.commands.cluster",
    "bench": "gnnsched.commands.bench",
    "keys": "gnnsched.commands.keys",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append ``(default: X)`` only where it tells something: not for a default of None,
    False (``store_true`` flags) or an empty list, and not where the help text already says
    its default in words (``default: runs/train-TIME``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or "default" in text.lower() or default is None or \
                default is False or default is argparse.SUPPRESS or \
                (isinstance(default, (list, tuple, dict, set)) and not default):
            return action.help
        return super()._get_help_string(action)


def plain(doc: str | None) -> str | None:
    """A module docstring as ``--help`` shows it: reST roles and literals as plain text."""
    if doc is None:
        return None
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], doc)
    return doc.replace("``", "")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with ``only`` a verb, that verb's flags alone are filled in (the others
    still list with their one-line help), so a command imports just what it needs."""
    parser = argparse.ArgumentParser(
        prog="gnnsched",
        description="Place and schedule distributed GNN training on limited or uneven clusters.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, modname in VERBS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue  # verb not built yet
        p = sub.add_parser(verb, help=mod.HELP, description=plain(mod.__doc__),
                           formatter_class=HelpFormatter)
        if only is not None and verb != only:
            continue
        mod.add_arguments(p)
        document_ranges(p)
        p.set_defaults(_run=mod.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every ``finally`` runs: a run stops its
    processes and an emulated cluster removes its namespaces, as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def stop_cleanly_on_signals() -> None:
    """Turn SIGTERM and SIGHUP (``kill``, a closed terminal) into :class:`Terminated`;
    by default they would end the process at once and leave processes and namespaces."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `gnnsched ... | head`: the reader left, which is not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not raise (and print) it again.
        _quiet_stdout()
        return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced (tests) or closed
        pass


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    verb = next((w for w in words if not w.startswith("-")), None)
    args = build_parser(verb if verb in VERBS else None).parse_args(argv)
    stop_cleanly_on_signals()
    try:
        return int(args._run(args) or 0)
    except SpecError as exc:
        print(f"gnnsched {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"gnnsched {args.verb}: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"gnnsched {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
