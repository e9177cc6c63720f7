"""The python arm's pure parts (issue 31): its config, its choice, the forms it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch import Config, SprawlError
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.native_fallbacks.wasi_guest import guest_argv
from sprawl_orch.native_fallbacks.wasi_python import check_command
from sprawl_orch.selection.choice import choose
from sprawl_orch.selection.offerings import Offerings


@pytest.mark.parametrize("key", ["fuel", "memory_bytes", "wall_seconds"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True, None])
def test_bad_limits_are_config_invalid(key: str, value: object) -> None:
    with pytest.raises(SprawlError) as err:
        Config(sandbox={"python": {key: value}})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert err.value.subject == f"[sandbox.python] {key}"


def test_limits_read_from_toml(tmp_path: Path) -> None:
    from sprawl_orch.config import parse_config

    config = parse_config({"sandbox": {"python": {"fuel": 5, "memory_bytes": 2**25}}})
    assert (config.sandbox.python.fuel, config.sandbox.python.memory_bytes) == (5, 2**25)
    with pytest.raises(SprawlError):
        Config(sandbox={"python": {"memory_bytes": 5 * 1024**3}})  # past wasm32's 4 GiB


def machine(python_missing: str | None) -> Offerings:
    return Offerings(platform="linux", scratch=Path("/tmp"), python_missing=python_missing)


def test_choice_follows_the_runtime() -> None:
    assert choose("python", machine(None)).arm is ArmName.PYTHON
    gone = choose("python", machine("the wasmtime package is not installed"))
    assert gone.arm is ArmName.UNAVAILABLE
    assert "wasmtime" in gone.reason() and "sprawl-orch[python]" in gone.reason()
    # auto never steps to the python arm: it runs only Python, not the agent's programs
    assert choose("auto", machine(None)).arm is not ArmName.PYTHON


@pytest.mark.parametrize(
    "argv",
    [["python", "-c", "pass"], ["python3", "-c", "x", "a"], ["python", "s.py", "-v"]],
)
def test_forms_accepted(argv: list[str], tmp_path: Path) -> None:
    check_command(argv, tmp_path)


@pytest.mark.parametrize(
    ("argv", "subject"),
    [
        (["ls"], "ls"),
        (["sh", "-c", "python -c pass"], "sh"),
        (["python"], "python"),
        (["python", "-c"], "python -c"),
        (["python", "-m", "pip"], "python -m"),
        (["/usr/bin/node", "x.js"], "/usr/bin/node"),
        (["python", "../x.py"], "../x.py"),
        (["python", "/etc/x.py"], "/etc/x.py"),
        (["python", "."], "."),
    ],
)
def test_everything_else_is_refused_naming_it(
    argv: list[str], subject: str, tmp_path: Path
) -> None:
    with pytest.raises(SprawlError) as err:
        check_command(argv, tmp_path)
    assert err.value.code is ErrorCode.TOOL_UNAVAILABLE
    assert err.value.subject == subject
    assert "arm" in err.value.recovery or "tree" in err.value.detail


def test_the_guest_argv_keeps_the_command_after_the_bootstrap() -> None:
    argv = guest_argv("/w", ["python", "-c", "print(1)", "a"], ["/w/.venv/s"])
    assert argv[:2] == ["python", "-c"] and argv[3:] == ["/w", "/w/.venv/s", "-c", "print(1)", "a"]


def test_fuel_past_wasmtimes_u64_is_config_invalid() -> None:
    # wasmtime's set_fuel takes a u64: 2**64 passed the config and failed in the runtime as
    # "runtime_failed" (atk-wasm break 3), not as the bad number it is.
    with pytest.raises(SprawlError) as err:
        Config(sandbox={"python": {"fuel": 2**64}})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert Config(sandbox={"python": {"fuel": 2**64 - 1}}).sandbox.python.fuel == 2**64 - 1
