"""What a training run is started with, besides its files: injected faults and the launcher's
own options.

``gnnsched train`` parses ``--kill-at`` with :func:`parse_faults` (the targets are checked
against the plan by :func:`gnnsched.api.check_faults`) and builds the chosen launcher's
keywords from its declared flags (``Launcher.cli_options`` of every installed launcher,
:func:`gnnsched.api.launchers`) with :func:`launcher_kwargs`. Re-exported by
:mod:`gnnsched.api`.
"""

from __future__ import annotations

from typing import Any

from gnnsched.spec import SpecError

FAULT_ROLES = ("trainer", "sampler", "store", "fetcher", "machine")
# CUT: off the network, processes alive; SLOW: an eighth of its CPU (a straggler)
FAULT_SIGNALS = ("KILL", "STOP", "TERM", "CUT", "SLOW")
FAULT_FORM = ("ROLE:ID:STEP[:KILL|STOP|TERM] or machine:ID:STEP:CUT|SLOW:SECONDS, e.g. "
              "sampler:1:20, machine:store0:5:STOP or machine:gpu1:12:CUT:3")


def parse_faults(specs: list[str]) -> tuple[Any, ...]:
    """``--kill-at`` values (``ROLE:ID:STEP[:SIGNAL]``) as the coordinator's ``Fault``
    records: syntax, role kind, step and signal checked, each error naming the value and
    what is valid (the targets: :func:`gnnsched.api.check_faults`)."""
    from gnnsched.runtime.coordinator import Fault

    out = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (3, 4, 5) or not all(p.strip() for p in parts):
            raise SpecError("--kill-at", "", f"cannot parse {spec!r}", FAULT_FORM)
        kind, ident = parts[0].strip().lower(), parts[1].strip()
        if kind not in FAULT_ROLES:
            raise SpecError("--kill-at", "", f"unknown role {parts[0]!r} in {spec!r}",
                            ", ".join(FAULT_ROLES))
        try:
            step = int(parts[2])
        except ValueError:
            raise SpecError("--kill-at", "", f"cannot parse {spec!r}: step {parts[2]!r} is "
                            "not a whole number", FAULT_FORM) from None
        if step < 0:
            raise SpecError("--kill-at", "", f"step must be >= 0, got {step} in {spec!r}",
                            "a training step 0, 1, ...")
        sig = parts[3].strip().upper() if len(parts) > 3 else "KILL"
        sig = sig[3:] if sig.startswith("SIG") else sig
        if sig not in FAULT_SIGNALS:
            raise SpecError("--kill-at", "", f"unknown signal {parts[3]!r} in {spec!r}",
                            ", ".join(FAULT_SIGNALS))
        seconds = 0.0
        if sig in ("CUT", "SLOW") or len(parts) == 5:
            if sig not in ("CUT", "SLOW") or kind != "machine" or len(parts) != 5:
                raise SpecError("--kill-at", "", f"cannot parse {spec!r}: only a machine is cut "
                                "off or slowed, for a number of seconds", FAULT_FORM)
            try:
                seconds = float(parts[4])
            except ValueError:
                seconds = -1.0
            if not 0 < seconds <= 3600:
                raise SpecError("--kill-at", "", f"{sig} seconds must be in (0, 3600], got "
                                f"{parts[4]!r} in {spec!r}", "e.g. machine:gpu1:12:CUT:3")
        out.append(Fault(f"{kind}:{ident}", step, sig, seconds))
    return tuple(out)


def launcher_kwargs(name: str, values: Any) -> dict[str, Any]:
    """The constructor keywords of launcher ``name`` from its own options' values, read off
    ``values`` (an argparse namespace) by each option's ``dest`` (its default where absent)."""
    from gnnsched.runtime.launcher import LAUNCHERS

    cls = LAUNCHERS.get(name)
    return {o.kwarg: getattr(values, o.dest, o.default) for o in cls.cli_options}


def check_placer(name: str, flag: str) -> None:
    """An unknown placer name is a SpecError naming ``flag`` and the installed placers, now
    rather than when it is first used (a recovery's re-plan)."""
    from gnnsched.placement.base import get_placer

    try:
        get_placer(name)
    except SpecError as exc:
        raise SpecError(flag, "", exc.problem, exc.valid) from None


__all__ = ["FAULT_FORM", "FAULT_ROLES", "FAULT_SIGNALS", "check_placer", "launcher_kwargs",
           "parse_faults"]
