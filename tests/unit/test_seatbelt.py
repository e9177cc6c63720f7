"""The Seatbelt profile (pure) and the arm's refusals, on any platform with a fake
sandbox-exec. Real confinement is proven on macos-latest (test_conformance_native)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks.seatbelt import SeatbeltArm, profile, seatbelt_argv
from sprawl_orch.runs.yielding import Yielders
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

COPY = "/private/var/folders/xy/T/sprawl-orch/sprawl-s1-abc"
NO_YIELD = Yielders(nice=None, ionice=None)


def test_profile_denies_by_default_and_names_the_copy_once() -> None:
    text = profile(COPY)
    lines = text.splitlines()
    assert lines[0] == "(version 1)"
    assert lines[1] == "(deny default)"
    assert text.count(COPY) == 1
    assert f'(allow file-write* (subpath "{COPY}"))' in lines


def test_profile_writes_only_under_the_copy_and_devices() -> None:
    text = profile(COPY)
    # Every rule that allows writing a file names the copy or a device, nothing else.
    writes = re.findall(r"\(allow file-write[^\n]*(?:\n  [^\n]*)*", text)
    assert writes
    for rule in writes:
        paths = re.findall(r'"([^"]+)"', rule)
        assert paths and all(p == COPY or p.startswith("/dev/") for p in paths), rule
    assert "/tmp" not in text


def test_profile_denies_the_network() -> None:
    text = profile(COPY)
    assert "(deny network*)" in text
    assert "(allow network" not in text


def test_profile_quotes_a_path_that_could_end_the_string() -> None:
    text = profile('/tmp/a"b\\c')
    assert '(subpath "/tmp/a\\"b\\\\c")' in text


def test_profile_is_pure() -> None:
    assert profile(COPY) == profile(Path(COPY))


def test_argv_keeps_the_command_after_the_separator() -> None:
    argv = seatbelt_argv("/usr/bin/sandbox-exec", COPY, ["-weird", "x"])
    assert argv[:2] == ["/usr/bin/sandbox-exec", "-p"]
    assert argv[2] == profile(COPY)
    assert argv[3:] == ["--", "-weird", "x"]


def fake_sandbox_exec(tmp_path: Path, refuse: bool) -> tuple[Path, Path]:
    script, log = tmp_path / "sandbox-exec", tmp_path / "profiles"
    body = (
        "echo 'sandbox-exec: profile rejected' >&2; exit 65\n"
        if refuse
        else f'printf "%s\\n---\\n" "$2" >> {log}\nshift 3\nexec "$@"\n'
    )
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def macos(sandbox_exec: Path | None, scratch: Path) -> Offerings:
    return Offerings(
        platform="darwin", scratch=scratch, sandbox_exec=str(sandbox_exec) if sandbox_exec else None
    )


def test_refused_profile_refuses_the_command_before_the_copy(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    script, _ = fake_sandbox_exec(tmp_path, refuse=True)
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=macos(script, scratch)) as tool:
        result = tool.exec(["sh", "-c", "echo ran > ran.txt"])
        assert list(scratch.iterdir()) == []
    assert result.outcome == "exceptional" and result.code == ErrorCode.SANDBOX_DENIED.value
    assert result.subject == "sandbox-exec"
    assert result.detail is not None and "profile rejected" in result.detail
    assert "not run unconfined" in result.detail
    assert not (tree / "ran.txt").exists()


def test_absent_sandbox_exec_is_refused_never_run_bare(tmp_path: Path) -> None:
    arm = SeatbeltArm(str(tmp_path / "missing"), NO_YIELD)
    with pytest.raises(SprawlError) as raised:
        arm.prepare(tmp_path)
    assert raised.value.code is ErrorCode.SANDBOX_DENIED
    assert "not an executable file" in raised.value.detail


def test_explicit_native_without_sandbox_exec_is_unavailable(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=macos(None, scratch)) as tool:
        result = tool.exec(["true"])
        assert list(scratch.iterdir()) == []
    assert result.outcome == "exceptional" and result.arm == "unavailable"
    assert result.detail is not None and "sandbox-exec" in result.detail


def test_commands_run_under_a_profile_naming_the_resolved_copy(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    script, log = fake_sandbox_exec(tmp_path, refuse=False)
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=macos(script, scratch)) as tool:
        result = tool.exec(["pwd"])
    assert result.outcome == "settled", result
    assert result.arm == "macos_seatbelt"
    copy = result.stdout.strip()
    profiles = log.read_text().split("---\n")
    # The probe (on the working directory), then the command (on its copy).
    assert f'(subpath "{tree.resolve()}")' in profiles[0]
    assert f'(subpath "{Path(copy).resolve()}")' in profiles[1]
