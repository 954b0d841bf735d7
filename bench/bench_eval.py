"""The project's own evaluation (``docs/results``): ``python bench/bench_eval.py [FLAGS]`` is
``gnnsched bench [FLAGS]``. The code is the installed package's :mod:`gnnsched.evaluation`
and its flags are :mod:`gnnsched.commands.bench`'s, so this script only hands them over."""

from __future__ import annotations

import sys

from gnnsched.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
