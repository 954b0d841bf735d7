"""The GraphBolt stub: DGL imports on modern torch and the stub explains itself."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_dgl_works_through_compat() -> None:
    import torch

    from gnnsched.compat import dgl, real_graphbolt_available

    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    blocks = dgl.dataloading.NeighborSampler([2]).sample_blocks(g, torch.tensor([0]))[2]
    assert blocks[0].num_dst_nodes() == 1
    import dgl.distributed  # noqa: F401,TID251 - must import with the stub in place

    if not real_graphbolt_available():
        assert getattr(sys.modules["dgl.graphbolt"], "__gnnsched_stub__", False)
        with pytest.raises(ImportError, match="GraphBolt only for torch <= 2.2.1"):
            _ = dgl.graphbolt.ItemSampler  # noqa: B018


def test_only_gnnsched_installed_at_top_level() -> None:
    """The package-dir mapping installs placement/runtime/datasets under gnnsched only."""
    code = ("import importlib.util as u, gnnsched.placement, gnnsched.runtime, "
            "gnnsched.datasets; print([n for n in ('placement','runtime','datasets') "
            "if u.find_spec(n) is not None])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd="/", check=True)
    assert out.stdout.strip() == "[]"


def test_cli_help_lists_verbs() -> None:
    out = subprocess.run([sys.executable, "-m", "gnnsched", "--help"], capture_output=True,
                         text=True, check=True)
    for verb in ("demo", "partition", "profile"):
        assert verb in out.stdout
