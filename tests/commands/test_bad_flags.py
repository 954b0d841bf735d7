"""Bad command-line flags are refused at parse time, each with the range that is valid;
every verb's --help works and says its ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_errors import ROOT

from gnnsched.cli import main as cli_main

pytestmark = pytest.mark.usefixtures("nothing_left_behind")


# ---------------------------------------------------------------------- command line


def _argv_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """A flag argparse refuses: exit status 2, usage plus one ``error:`` line, no traceback."""
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


_C, _J, _P = "c.yaml", "j.yaml", "p.json"  # never read: the flag is refused first
_SEC = "(valid: seconds > 0 and <= 1e6)"


@pytest.mark.parametrize("argv,needle", [
    (["train", "--epochs", "0"], "argument --epochs: '0' is out of range (valid: a number of "
                                 "epochs 1..100000)"),
    (["train", "--epochs", "2.5"], "argument --epochs: '2.5' is not a whole number"),
    (["train", "--threads", "0"], "argument --threads: '0' is out of range (valid: threads "
                                  "1..1024)"),
    (["train", "--heartbeat", "0"], f"argument --heartbeat: '0' is out of range {_SEC}"),
    (["train", "--dead-after", "inf"], "argument --dead-after: must be a finite number, got "
                                       f"'inf' {_SEC}"),
    (["train", "--request-timeout", "-5"], "argument --request-timeout: '-5' is out of range"),
    (["train", "--request-timeout", "1e9"], "argument --request-timeout: '1e9' is out of range"),
    (["train", "--port", "70000"], "argument --port: '70000' is out of range (valid: a TCP "
                                   "port 1..65535)"),
    (["train", "--checkpoint-every", "0"], "argument --checkpoint-every: '0' is out of range "
                                           "(valid: an integer 1.."),
    (["train", "--max-recoveries", "-1"], "argument --max-recoveries: '-1' is out of range "
                                          "(valid: an integer 0.."),
    (["plan", "--cluster", _C, "--job", _J, "--budget", "nan"],
     f"argument --budget: must be a finite number, got 'nan' {_SEC}"),
    (["plan", "--cluster", _C, "--job", _J, "--budget", "0"], "argument --budget: '0' is out "
                                                              "of range"),
    (["plan", "--cluster", _C, "--job", _J, "--keep-colocation", "-0.1"],
     "argument --keep-colocation: -0.1 is outside 0 <= X < 10"),
    (["plan", "--cluster", _C, "--job", _J, "--keep-colocation", "x"],
     "argument --keep-colocation: 'x' is not a number (valid: 0 <= X < 10)"),
    (["plan", "--cluster", _C, "--job", _J, "--seed", "-1"],
     "argument --seed: '-1' is out of range (valid: a seed 0..4294967295)"),
    (["plan", "--cluster", _C, "--job", _J, "--seed", str(2**32)],
     f"argument --seed: '{2**32}' is out of range (valid: a seed 0..4294967295)"),
    (["simulate", "--cluster", _C, "--job", _J, "--plan", _P, "--iterations", "0"],
     "argument --iterations: '0' is out of range"),
    (["simulate", "--cluster", _C, "--job", _J, "--plan", _P, "--nic-window", "-150"],
     "argument --nic-window: '-150' is out of range (valid: milliseconds > 0"),
    (["profile", "--job", _J, "--samples", "0"], "argument --samples: '0' is out of range"),
    (["partition", "cora", "--out", "x", "--parts", "0"],
     "argument --parts: '0' is out of range (valid: a number of partitions 1..65536)"),
    (["partition", "cora", "--out", "x", "--parts", "four"],
     "argument --parts: 'four' is not a whole number"),
    (["partition", "cora", "--out", "x", "--parts", "2", "--feature-dim", "0"],
     "argument --feature-dim: '0' is out of range"),
    (["bench", "--repeats", "0"], "argument --repeats: '0' is out of range (valid: an integer "
                                  "1.."),
    (["bench", "--sizes", "16", "0"], "argument --sizes: '0' is out of range (valid: machines "
                                      "2..100000)"),
    (["bench", "--epochs", "-3"], "argument --epochs: '-3' is out of range"),
    (["bench", "--budget=-inf"], "argument --budget: must be a finite number"),
    (["bench", "--samples", "0"], "argument --samples: '0' is out of range"),
    (["bench", "--nic-queue-ms", "0"], "argument --nic-queue-ms: '0' is out of range (valid: "
                                       "milliseconds > 0"),
    (["bench", "--accuracy-seeds", "-1"], "argument --accuracy-seeds: '-1' is out of range"),
    (["demo", "--samples", "0"], "argument --samples: '0' is out of range"),
    (["demo", "--example", "nope"], "argument --example: invalid choice: 'nope'"),
    (["cluster", "up", "--cluster", _C, "--mtu", "10"],
     "argument --mtu: '10' is out of range (valid: an MTU in bytes 68..65535)"),
    (["cluster", "up", "--cluster", _C, "--queue-ms", "nan"],
     "argument --queue-ms: must be a finite number"),
])
def test_bad_flags_are_refused_at_parse_time(capsys: pytest.CaptureFixture, argv: list[str],
                                             needle: str) -> None:
    line = _argv_error(capsys, argv)
    assert line.startswith(f"gnnsched {argv[0]}") and "error: " in line, line
    assert needle in line, line


def test_demo_examples_are_the_folders_that_exist(capsys: pytest.CaptureFixture) -> None:
    from gnnsched.commands.demo import examples

    assert "lab4" in examples()
    line = _argv_error(capsys, ["demo", "--example", "nope"])
    assert all(repr(name) in line for name in examples()), line


def test_bad_paths_are_refused_at_parse_time(capsys: pytest.CaptureFixture,
                                             tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    base = ["plan", "--cluster", _C, "--job", _J]
    assert f"argument --out: {tmp_path} is a directory (valid: a file to write)" in \
        _argv_error(capsys, [*base, "--out", str(tmp_path)])
    assert "does not exist (valid: a file in an existing directory)" in \
        _argv_error(capsys, [*base, "--out", str(tmp_path / "no" / "plan.json")])
    assert f"{afile} is a file, not a directory" in \
        _argv_error(capsys, [*base, "--plot", str(afile / "x.png")])
    assert f"argument --out: {afile} exists and is not a directory" in \
        _argv_error(capsys, ["train", "--out", str(afile)])
    assert f"{afile} is a file, not a directory" in \
        _argv_error(capsys, ["bench", "--work", str(afile / "sub")])
    assert f"argument --data-dir: {tmp_path / 'none'} does not exist (valid: an existing " \
        "directory)" in _argv_error(capsys, ["profile", "--job", _J, "--data-dir",
                                             str(tmp_path / "none")])
    assert "argument --out: empty path" in _argv_error(capsys, ["keys", "--cluster", _C,
                                                                "--out", ""])


def test_pictures_need_an_image_extension(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """matplotlib refuses other suffixes only after planning: the parser refuses them first."""
    base = ["plan", "--cluster", _C, "--job", _J]
    line = _argv_error(capsys, [*base, "--plot", str(tmp_path / "plan.txt")])
    assert "argument --plot" in line and "'.txt' is not an image format" in line
    assert ".png, .pdf, .svg" in line
    line = _argv_error(capsys, [*base, "--plot", str(tmp_path / "plan")])
    assert "has no extension (valid: a file ending in .png" in line
    line = _argv_error(capsys, ["simulate", "--cluster", _C, "--job", _J, "--plan", _P,
                                "--gantt", str(tmp_path / "g.jpgx")])
    assert "argument --gantt" in line and "'.jpgx' is not an image format" in line


def test_good_flags_still_parse(tmp_path: Path) -> None:
    from gnnsched.cli import build_parser

    a = build_parser().parse_args([
        "train", "--cluster", _C, "--job", _J, "--plan", _P, "--epochs", "3", "--heartbeat",
        "0.5", "--dead-after", "2", "--port", "5555", "--threads", "2",
        "--out", str(tmp_path / "new" / "run"), "--max-recoveries", "0"])
    assert (a.epochs, a.heartbeat, a.dead_after, a.port, a.threads, a.max_recoveries) == \
        (3, 0.5, 2.0, 5555, 2, 0)
    b = build_parser().parse_args(["bench", "--sizes", "16", "32", "--seed", "4294967295",
                                   "--accuracy-seeds", "0", "--budget", "1e-3"])
    assert b.sizes == [16, 32] and b.seed == 2**32 - 1 and b.accuracy_seeds == 0


@pytest.mark.parametrize("verb", ["demo", "partition", "profile", "plan", "simulate", "train",
                                  "trace", "bench", "keys", "cluster"])
def test_every_help_works_and_says_the_ranges(capsys: pytest.CaptureFixture,
                                              verb: str) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main([verb, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and f"usage: gnnsched {verb}" in out
    want = {"train": ["a TCP port 1..65535", "seconds > 0", "ROLE:ID:STEP[:SIGNAL]"],
            "plan": ["a seed 0..4294967295"], "bench": ["eval", "scale-model", "MODE --help"],
            "demo": ["--example {", "lab4"]}.get(verb, [])
    flat = " ".join(out.split())
    for needle in want:
        assert needle in flat, (needle, out)


def test_bench_eval_help_says_the_ranges(capsys: pytest.CaptureFixture) -> None:
    """The evaluation's flags live on its subcommand: its help gives their ranges."""
    with pytest.raises(SystemExit):
        cli_main(["bench", "eval", "--help"])
    assert "machines 2..100000" in " ".join(capsys.readouterr().out.split())


def test_cluster_up_help_says_the_mtu_range(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli_main(["cluster", "up", "--help"])
    assert "valid: an MTU in bytes 68..65535" in " ".join(capsys.readouterr().out.split())


def test_closed_pipe_is_quiet() -> None:
    """``gnnsched ... | head``: the reader leaves; no BrokenPipeError traceback."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte is written
    try:
        p = subprocess.run([sys.executable, "-m", "gnnsched", "train", "--help"], stdout=w,
                           stderr=subprocess.PIPE, env=env, timeout=120, cwd=ROOT)
    finally:
        os.close(w)
    err = p.stderr.decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert p.returncode in (0, 141), (p.returncode, err)
