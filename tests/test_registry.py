"""The one registry shape behind placers, policies and launchers."""

from __future__ import annotations

import pytest

from gnnsched.placement import PLACERS
from gnnsched.policy import POLICIES, Fifo, Policy
from gnnsched.registry import CliOption, Registry, UnknownName
from gnnsched.runtime.launcher import LAUNCHERS
from gnnsched.spec import SpecError


@pytest.mark.parametrize("reg, flag, known", [(PLACERS, "--placer", "colocation"),
                                              (POLICIES, "--policy", "fifo"),
                                              (LAUNCHERS, "--launcher", "ray")])
def test_one_unknown_name_error_lists_what_is_installed(reg: Registry, flag: str,
                                                        known: str) -> None:
    with pytest.raises(UnknownName) as err:
        reg.get("no-such")
    msg = str(err.value)
    assert msg.startswith(f"{flag}: unknown {reg.kind} 'no-such' (valid: ")
    assert known in msg and set(reg.names()) <= set(msg.split("(valid: ")[1].rstrip(")")
                                                     .split(", "))
    # one error for every caller's habit: a SpecError (CLI), a ValueError, a KeyError
    assert isinstance(err.value, SpecError) and isinstance(err.value, KeyError)
    with pytest.raises(KeyError):
        reg["no-such"]


def test_register_create_and_pass_through() -> None:
    reg: Registry[Policy] = Registry("policy", Policy, group="gnnsched.test-none",
                                     flag="--policy")

    @reg.register("mine")
    class Mine(Fifo):
        pass

    assert Mine.name == "mine" and "mine" in reg and reg.names() == ["mine"]
    made = reg.create("mine")
    assert isinstance(made, Mine) and reg.create(made) is made
    assert reg.pop("mine") is Mine and "mine" not in reg


def test_builtin_modules_load_lazily() -> None:
    assert {"colocation", "cpsat", "gnnsched", "greedy", "random", "shares"} <= set(PLACERS)
    assert {"local", "netns", "ssh", "ray"} <= set(LAUNCHERS)  # ray: imported on lookup


def test_cli_option_dest() -> None:
    assert CliOption("--ray-address", "ray_address", "x").dest == "ray_address"
    assert LAUNCHERS.get("ssh").cli_options and not LAUNCHERS.get("local").cli_options
