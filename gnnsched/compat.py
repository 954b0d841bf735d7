"""DGL 2.1.0 on modern torch: the only place in the project that imports ``dgl``.

DGL 2.1.0, the newest release on the package index, ships its optional GraphBolt C++ library
only for torch <= 2.2.1, and ``dgl.distributed`` imports ``dgl.graphbolt`` eagerly, so a plain
``import dgl`` fails on torch 2.13. Everything gnnsched uses (DGLGraph ops, ``dgl.sampling``,
``NeighborSampler``, ``dgl.dataloading.DataLoader``, ``dgl.nn`` layers, METIS
``partition_graph`` and DistDGL's own servers and trainers) works without GraphBolt, which
``dgl.distributed`` touches only for ``isinstance(g, gb.FusedCSCSamplingGraph)`` checks.

So, only when the real GraphBolt library for the running torch is absent, a ``sys.meta_path``
finder answers ``import dgl.graphbolt`` with a stub module: it has a ``FusedCSCSamplingGraph``
class nothing is an instance of, and any other attribute raises an ImportError that says why.
Where the real library exists the finder does nothing and DGL loads its own GraphBolt.

Use ``from gnnsched.compat import dgl``; a ruff banned-import rule keeps ``import dgl`` out of
every other module so the stub is always registered first.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

STUB_NAME = "dgl.graphbolt"

# DGL reads this at import to pick its backend; set it before the first import.
os.environ.setdefault("DGLBACKEND", "pytorch")


class _MissingGraphBolt(types.ModuleType):
    """Stand-in for ``dgl.graphbolt``: only the isinstance target exists."""

    class FusedCSCSamplingGraph:  # noqa: D106 - nothing is ever an instance of it
        pass

    def __getattr__(self, name: str):  # only called for attributes that do not exist
        if name.startswith("__"):
            raise AttributeError(name)
        import torch

        raise ImportError(
            f"dgl.graphbolt.{name} is unavailable: DGL 2.1.0 ships GraphBolt only for "
            f"torch <= 2.2.1 and this is torch {torch.__version__}; gnnsched registered a "
            "stub (gnnsched.compat) so the rest of DGL imports. Use dgl.sampling / "
            "dgl.dataloading instead, or install torch 2.2.1 for real GraphBolt."
        )


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _MissingGraphBolt(STUB_NAME, "stub: GraphBolt has no build for this torch")
        module.__gnnsched_stub__ = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _GraphBoltFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[override]
        if fullname != STUB_NAME:
            return None
        return importlib.machinery.ModuleSpec(STUB_NAME, _StubLoader(), is_package=False)


def real_graphbolt_available() -> bool:
    """True when DGL ships the GraphBolt library built for the running torch."""
    import torch

    spec = importlib.util.find_spec("dgl")
    if spec is None or not spec.submodule_search_locations:
        return False
    version = torch.__version__.split("+", 1)[0]
    folder = Path(list(spec.submodule_search_locations)[0]) / "graphbolt"
    return (folder / f"libgraphbolt_pytorch_{version}.so").exists()


def install_stub() -> bool:
    """Register the finder if needed (idempotent). Returns whether the stub is active."""
    if any(isinstance(f, _GraphBoltFinder) for f in sys.meta_path):
        return True
    if "dgl" in sys.modules or real_graphbolt_available():
        return bool(getattr(sys.modules.get(STUB_NAME), "__gnnsched_stub__", False))
    sys.meta_path.insert(0, _GraphBoltFinder())
    return True


def _quiet_import():
    import logging
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import dgl as _dgl  # the one sanctioned import

    logging.getLogger("dgl").setLevel(logging.WARNING)
    return _dgl


install_stub()
dgl = _quiet_import()

__all__ = ["dgl", "install_stub", "real_graphbolt_available"]
