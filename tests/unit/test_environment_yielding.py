"""The child's environment (design §8) and yielding (design §7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.core.environment import FLOOR, child_env, env_names
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.runs.yielding import Yielders, find_program, yield_prefix


def test_floor_and_passthrough_only() -> None:
    environ = {"PATH": "/bin", "LANG": "C.UTF-8", "HOME": "/root", "SECRET": "x", "KEEP": "1"}
    env = child_env(environ, ["KEEP", "UNSET_NAME"])
    assert env == {"PATH": "/bin", "LANG": "C.UTF-8", "KEEP": "1"}
    assert "UNSET_NAME" not in env  # unset names are omitted, not passed empty
    assert env_names(env) == ["KEEP", "LANG", "PATH"]


def test_floor_names() -> None:
    assert FLOOR == ("PATH", "LANG", "LC_ALL", "TZ")
    everything = {name: "v" for name in FLOOR}
    assert child_env(everything) == everything


def test_prefix_order() -> None:
    full = Yielders(nice="/usr/bin/nice", ionice="/usr/bin/ionice")
    assert yield_prefix(full) == [
        "/usr/bin/ionice",
        "-c",
        "2",
        "-n",
        "7",
        "/usr/bin/nice",
        "-n",
        "10",
        "--",
    ]
    assert yield_prefix(Yielders(nice="/usr/bin/nice", ionice=None)) == [
        "/usr/bin/nice",
        "-n",
        "10",
        "--",
    ]
    assert yield_prefix(Yielders(None, None)) == []
    mac = yield_prefix(
        Yielders(nice="/usr/bin/nice", ionice=None, taskpolicy="/usr/sbin/taskpolicy")
    )
    assert mac[:3] == ["/usr/sbin/taskpolicy", "-c", "utility"]


def test_find_program_like_execvp(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    assert find_program("sh", env, str(tmp_path)).endswith("/sh")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(SprawlError) as caught:
        find_program("./run.sh", env, str(tmp_path))
    assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE
    assert "not an executable file" in caught.value.detail
    script.chmod(0o755)
    assert find_program("./run.sh", env, str(tmp_path)) == "./run.sh"


@pytest.mark.parametrize("program", ["no-such-program-xyz", "./missing", "/nonexistent/bin/x"])
def test_missing_program_is_tool_unavailable(tmp_path: Path, program: str) -> None:
    with pytest.raises(SprawlError) as caught:
        find_program(program, {"PATH": "/usr/bin:/bin"}, str(tmp_path))
    err = caught.value
    assert err.code is ErrorCode.TOOL_UNAVAILABLE
    assert err.subject == program
    assert "shell arm" in err.recovery
