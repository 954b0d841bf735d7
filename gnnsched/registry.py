"""One registry shape for everything a researcher plugs in: placers, policies and launchers.

A :class:`Registry` maps the names users type (``--placer``, ``--policy``, ``--launcher``) to
classes. It fills itself from three places, in this order, the first time a name or the list
of names is asked for:

1. classes registered with :meth:`Registry.register` (a class decorator) or ``reg[name] =
   cls`` by modules already imported;
2. the built-in modules it was told about (``modules``): registering is importing, so they are
   imported lazily, which keeps ``gnnsched --help`` fast and breaks no import cycle;
3. the entry points of its group (``gnnsched.placers`` and so on), from other installed
   packages. A built-in name wins over a plug-in of the same name; a plug-in that fails to
   load, or is not a subclass of the base, is reported once on stderr and left out, so one
   broken package does not take the CLI down.

An unknown name raises :class:`UnknownName`, one error for all three registries, which names
the flag and lists what is installed. It is a :class:`~gnnsched.spec.SpecError` (so the CLI
prints it as one line) and a :class:`KeyError` (so mapping-style callers keep working).

Pure logic: no torch, no DGL, no runtime.
"""

from __future__ import annotations

import importlib
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from gnnsched.spec import SpecError

T = TypeVar("T")

_ALL: weakref.WeakSet[Registry[Any]] = weakref.WeakSet()


class UnknownName(SpecError, KeyError):
    """A name no registry entry answers to: says which flag and what is installed."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class CliOption:
    """A command-line flag an entry declares for itself (a launcher's ``--ray-address``).

    The verb that uses the registry adds every installed entry's flags (one flag shared by
    several entries is added once), then passes the chosen entry's values to its constructor
    as ``kwarg=value``: so a plug-in gets its own flags with no change to gnnsched."""

    flag: str  # "--ray-address"
    kwarg: str  # the constructor's keyword: "ray_address"
    help: str
    default: Any = None
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The argparse attribute the flag's value lands in."""
        return self.flag.lstrip("-").replace("-", "_")


class Registry(Generic[T]):
    """Name → class for one kind of plug-in (module docstring)."""

    def __init__(self, kind: str, base: type[T], *, group: str, flag: str,
                 modules: Sequence[str] = ()) -> None:
        """``kind``: what users call it ("placer"); ``base``: the class every entry
        subclasses; ``group``: its entry-point group; ``flag``: the CLI flag that names one
        (for errors); ``modules``: built-in modules that register entries when imported."""
        self.kind, self.base, self.group, self.flag = kind, base, group, flag
        self.modules = tuple(modules)
        self._entries: dict[str, type[T]] = {}
        self._loaded = False
        _ALL.add(self)

    # ------------------------------------------------------------------ registering
    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: make ``cls`` available under ``name``."""

        def deco(cls: type[T]) -> type[T]:
            cls.name = name  # type: ignore[attr-defined]
            self._entries[name] = cls
            return cls

        return deco

    def __setitem__(self, name: str, cls: type[T]) -> None:
        """In-process registration without a decorator (``LAUNCHERS["mine"] = Mine``)."""
        self._entries[name] = cls

    def pop(self, name: str, default: Any = None) -> Any:
        """Unregister ``name`` (a test's temporary entry); its class, or ``default``."""
        return self._entries.pop(name, default)

    # ------------------------------------------------------------------ looking up
    def load(self) -> dict[str, type[T]]:
        """Every entry by name, built-ins and plug-ins (loaded once)."""
        if not self._loaded:
            self._loaded = True
            for mod in self.modules:
                importlib.import_module(mod)
            self._merge_entry_points()
        return self._entries

    def get(self, name: str) -> type[T]:
        """The class registered as ``name``, or :class:`UnknownName`."""
        entries = self.load()
        if name not in entries:
            raise UnknownName(self.flag, "", f"unknown {self.kind} {name!r}",
                              ", ".join(sorted(entries)))
        return entries[name]

    def create(self, name: str | T, *args: Any, **kwargs: Any) -> T:
        """An instance of ``name`` (an instance of the base is passed through as it is)."""
        if isinstance(name, self.base):
            return name
        return self.get(name)(*args, **kwargs)  # type: ignore[arg-type]

    def names(self) -> list[str]:
        """The installed names, sorted (what ``--help`` lists as choices)."""
        return sorted(self.load())

    def __getitem__(self, name: str) -> type[T]:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.load()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.load()))

    def __len__(self) -> int:
        return len(self.load())

    def keys(self) -> list[str]:
        return list(self.load())

    def items(self) -> list[tuple[str, type[T]]]:
        return list(self.load().items())

    def values(self) -> list[type[T]]:
        return list(self.load().values())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"

    # ------------------------------------------------------------------ plug-ins
    def _merge_entry_points(self) -> None:
        for ep in entry_points(group=self.group):
            if ep.name in self._entries:
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plug-in must not break the built-ins
                print(f"gnnsched: plug-in {ep.name!r} ({ep.value}) in {self.group} failed to "
                      f"load: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            if not (isinstance(obj, type) and issubclass(obj, self.base)):
                print(f"gnnsched: plug-in {ep.name!r} ({ep.value}) in {self.group} is not a "
                      f"{self.base.__name__} subclass; left out", file=sys.stderr)
                continue
            if "name" not in vars(obj):
                obj.name = ep.name  # the name users type, not an inherited built-in's
            self._entries[ep.name] = obj

    def forget(self) -> None:
        """Scan the entry points again on the next lookup (after installing a plug-in)."""
        self._loaded = False


def forget() -> None:
    """Every registry scans its entry points again on its next lookup."""
    for reg in list(_ALL):
        reg.forget()


__all__ = ["CliOption", "Registry", "UnknownName", "forget"]
