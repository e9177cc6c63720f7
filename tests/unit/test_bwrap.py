"""bwrap's argv (pure) and its probe, with a fake bwrap: the probe refuses before any copy is
made, and runs again before every command (never cached)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from native_fallbacks.bwrap import (
    NAMESPACE_FLAGS,
    PROBE_ATTEMPTS,
    BwrapArm,
    bwrap_argv,
    probe_argv,
    user_namespace_works,
)
from orchestrator.arms import ArmName
from orchestrator.errors import ErrorCode, SprawlError
from orchestrator.exec_tool import ExecTool
from orchestrator.offerings import Offerings
from orchestrator.yielding import Yielders
from tests.unit.conftest import make_config

COPY = "/tmp/sprawl-orch/sprawl-s1-abc"


def test_argv_is_the_spec_line_with_tmp_before_the_copy() -> None:
    assert bwrap_argv("/usr/bin/bwrap", COPY, ["pytest", "-q"]) == [
        "/usr/bin/bwrap",
        "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
        "--cap-drop", "ALL",
        "--ro-bind", "/", "/",
        "--tmpfs", "/tmp",
        "--bind", COPY, COPY,
        "--dev", "/dev",
        "--proc", "/proc",
        "--chdir", COPY,
        "--", "pytest", "-q",
    ]


def test_the_tmpfs_cannot_cover_a_copy_under_tmp() -> None:
    argv = bwrap_argv("bwrap", COPY, ["true"])
    # bwrap mounts in order: a tmpfs on /tmp after the copy's bind would hide the copy.
    assert argv.index("--tmpfs") < argv.index("--bind")
    assert argv[argv.index("--tmpfs") + 1] == "/tmp"


def test_user_namespace_is_demanded_not_tried() -> None:
    argv = bwrap_argv("bwrap", COPY, ["true"])
    assert "--unshare-user" in argv and "--unshare-user-try" not in argv
    assert tuple(argv[1:7]) == NAMESPACE_FLAGS


def test_arguments_after_the_separator_are_the_command_verbatim() -> None:
    argv = bwrap_argv("bwrap", COPY, ["--bind", "/", "/x"])
    assert argv[argv.index("--") + 1:] == ["--bind", "/", "/x"]
    assert argv.count("--bind") == 2


def test_probe_binds_the_working_directory_read_only() -> None:
    argv = probe_argv("bwrap", "/home/me/project")
    assert "--bind" not in argv
    i = argv.index("--ro-bind", argv.index("--tmpfs"))
    assert argv[i:i + 3] == ["--ro-bind", "/home/me/project", "/home/me/project"]
    assert argv[-1].endswith("true") and argv[-2] == "--"
    # Otherwise exactly the wrapper arguments of a real command.
    real = bwrap_argv("bwrap", "/home/me/project", [argv[-1]])
    real[real.index("--bind")] = "--ro-bind"
    assert argv == real


def fake_bwrap(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bwrap stand-in: refuses (like a kernel without user namespaces) while `deny`
    exists, else logs the call and runs what follows `--` unconfined."""
    script, deny, log = tmp_path / "bwrap", tmp_path / "deny", tmp_path / "calls"
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {log}\n"
        f"if [ -e {deny} ]; then\n"
        "  echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1\nfi\n"
        "while [ \"$1\" != -- ]; do shift; done; shift\nexec \"$@\"\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, deny, log


def offerings_with(bwrap: Path, scratch: Path) -> Offerings:
    return Offerings(platform="linux", scratch=scratch, bwrap=str(bwrap), user_namespace=True)


def test_failing_probe_refuses_before_the_copy_exists(tmp_path: Path, tree: Path,
                                                      scratch: Path) -> None:
    script, deny, log = fake_bwrap(tmp_path)
    deny.touch()
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=offerings_with(script, scratch)) as tool:
        result = tool.exec(["sh", "-c", "echo ran > ran.txt"])
        assert list(scratch.iterdir()) == []  # no copy was made
    assert result.outcome == "exceptional"
    assert result.what == ErrorCode.SANDBOX_DENIED.value
    assert result.subject == "bwrap"
    assert result.detail is not None and "unprivileged user namespace" in result.detail
    assert "setting up uid map: Permission denied" in result.detail
    assert result.recovery is not None and 'where = "host"' in result.recovery
    assert not (tree / "ran.txt").exists()
    # The one call was the probe: read-only on the working directory, running true.
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and f"--ro-bind {tree} {tree}" in calls[0]


def test_probe_runs_before_every_command_never_cached(tmp_path: Path, tree: Path,
                                                      scratch: Path) -> None:
    script, deny, log = fake_bwrap(tmp_path)
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=offerings_with(script, scratch)) as tool:
        first = tool.exec(["sh", "-c", "echo one"])
        assert first.outcome == "settled" and first.stdout == "one\n"
        assert first.arm == ArmName.LINUX_NAMESPACES.value
        deny.touch()  # the LSM changed its mind between two commands
        second = tool.exec(["sh", "-c", "echo two"])
        deny.unlink()
        third = tool.exec(["sh", "-c", "echo three"])
    assert second.outcome == "exceptional" and second.what == ErrorCode.SANDBOX_DENIED.value
    assert third.outcome == "settled" and third.stdout == "three\n"
    calls = log.read_text().splitlines()
    probes = [c for c in calls if c.endswith("true")]
    # probe + command, probe (refused), probe + command.
    assert len(calls) == 5 and len(probes) == 3


def test_prepare_raises_sprawl_error_with_bwraps_words(tmp_path: Path) -> None:
    script, deny, _ = fake_bwrap(tmp_path)
    deny.touch()
    arm = BwrapArm(str(script), Yielders(nice=None, ionice=None))
    with pytest.raises(SprawlError) as raised:
        arm.prepare(tmp_path)
    assert raised.value.code is ErrorCode.SANDBOX_DENIED
    assert "exit 1" in raised.value.detail


def test_user_namespace_sample_reports_the_refusal(tmp_path: Path) -> None:
    script, deny, _ = fake_bwrap(tmp_path)
    assert user_namespace_works(str(script))[0] is True
    deny.touch()
    ok, why = user_namespace_works(str(script))
    assert ok is False and "Permission denied" in why


def test_a_missing_bwrap_binary_is_a_refusal_not_a_crash(tmp_path: Path) -> None:
    arm = BwrapArm(str(tmp_path / "no-such-bwrap"), Yielders(nice=None, ionice=None))
    with pytest.raises(SprawlError) as raised:
        arm.prepare(tmp_path)
    assert "could not be started" in raised.value.detail


def racing_bwrap(tmp_path: Path, races: int) -> tuple[Path, Path]:
    """A bwrap that loses the mount-table race `races` times, then works."""
    script, log = tmp_path / "bwrap", tmp_path / "calls"
    script.write_text(
        "#!/bin/sh\n"
        f"echo call >> {log}\n"
        f"if [ $(wc -l < {log}) -le {races} ]; then\n"
        "  echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: "
        "remount /newroot/var/lib/docker/overlay2/x/merged: No such file or directory\" >&2\n"
        "  exit 1\nfi\nexit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def test_a_lost_mount_race_is_tried_again(tmp_path: Path) -> None:
    script, log = racing_bwrap(tmp_path, races=2)
    BwrapArm(str(script), Yielders(nice=None, ionice=None)).prepare(tmp_path)
    assert len(log.read_text().splitlines()) == 3


def test_a_race_lost_every_time_refuses(tmp_path: Path) -> None:
    script, log = racing_bwrap(tmp_path, races=99)
    with pytest.raises(SprawlError) as raised:
        BwrapArm(str(script), Yielders(nice=None, ionice=None)).prepare(tmp_path)
    assert "Unable to apply mount flags" in raised.value.detail
    assert len(log.read_text().splitlines()) == PROBE_ATTEMPTS


def test_a_real_refusal_is_not_retried(tmp_path: Path) -> None:
    script, deny, log = fake_bwrap(tmp_path)
    deny.touch()
    assert user_namespace_works(str(script))[0] is False
    assert len(log.read_text().splitlines()) == 1
