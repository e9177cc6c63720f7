"""bwrap's argv (pure) and its probe, with a fake bwrap: the probe refuses before any copy is
made, and runs again before every command (never cached)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks import bwrap as bwrap_module
from sprawl_orch.native_fallbacks.bwrap import (
    NAMESPACE_FLAGS,
    PROBE_ATTEMPTS,
    BwrapArm,
    bwrap_argv,
    env_args,
    probe_argv,
    user_namespace_works,
)
from sprawl_orch.native_fallbacks.bwrap_view import View
from sprawl_orch.runs.yielding import Yielders
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

COPY = "/root/.local/state/sprawl-orch/copies/abc"
WORK = "/home/me/project"
VIEW = View(binds=("/usr", "/etc", "/home/me/.pyenv"), links=(("usr/bin", "/bin"),))


@pytest.fixture(autouse=True)
def as_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake bwrap below lives in a 0700 pytest directory: run it as ourselves, not as
    the sandbox uid a root caller drops to (tested for real in tests/integration)."""
    monkeypatch.setattr(bwrap_module, "drop_uid", lambda: None)


def test_argv_is_the_spec_line_private_places_before_the_view_and_the_copy_last() -> None:
    assert bwrap_argv(
        "/usr/bin/bwrap", VIEW, COPY, WORK, ["pytest", "-q"], home="/home/me", seccomp_fd=7
    ) == [
        "/usr/bin/bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/dev/shm",
        "--symlink",
        "../run",
        "/var/run",
        "--tmpfs",
        "/home/me",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
        "--ro-bind",
        "/home/me/.pyenv",
        "/home/me/.pyenv",
        "--symlink",
        "usr/bin",
        "/bin",
        "--bind",
        COPY,
        WORK,
        "--chdir",
        WORK,
        "--remount-ro",
        "/",
        "--seccomp",
        "7",
        "--",
        "pytest",
        "-q",
    ]


def test_no_host_root_is_bound() -> None:
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"])
    binds = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert "/" not in binds and "/run" not in binds and "/home/me" not in binds


def test_a_home_inside_the_view_is_not_covered_by_a_tmpfs() -> None:
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"], home="/etc/home")
    assert "/etc/home" not in argv
    assert "/" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]


def test_a_home_already_private_gets_no_second_tmpfs() -> None:
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"], home="/tmp")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"].count("/tmp") == 1


def test_user_namespace_is_demanded_not_tried() -> None:
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"])
    assert "--unshare-user" in argv and "--unshare-user-try" not in argv
    assert tuple(argv[1:8]) == NAMESPACE_FLAGS


def test_arguments_after_the_separator_are_the_command_verbatim() -> None:
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["--bind", "/", "/x"])
    assert argv[argv.index("--") + 1 :] == ["--bind", "/", "/x"]
    assert argv.count("--bind") == 2


def test_probe_binds_nothing_writable_and_nothing_of_the_tree() -> None:
    argv = probe_argv("bwrap", WORK, seccomp_fd=3)
    assert "--bind" not in argv
    assert argv[argv.index("--dir") + 1] == WORK
    assert argv[-1].endswith("true") and argv[-2] == "--"
    assert argv[argv.index("--seccomp") + 1] == "3"


def fake_bwrap(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bwrap stand-in: refuses (like a kernel without user namespaces) while `deny`
    exists, else logs the call and runs what follows `--` unconfined."""
    script, deny, log = tmp_path / "bwrap", tmp_path / "deny", tmp_path / "calls"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f"if [ -e {deny} ]; then\n"
        "  echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1\nfi\n"
        'while [ "$1" != -- ]; do shift; done; shift\nexec "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, deny, log


def offerings_with(bwrap: Path, scratch: Path) -> Offerings:
    return Offerings(platform="linux", scratch=scratch, bwrap=str(bwrap), user_namespace=True)


def test_failing_probe_refuses_before_the_copy_exists(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    script, deny, log = fake_bwrap(tmp_path)
    deny.touch()
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=offerings_with(script, scratch)) as tool:
        result = tool.exec(["sh", "-c", "echo ran > ran.txt"])
        assert list(scratch.iterdir()) == []  # no copy was made
    assert result.outcome == "exceptional"
    assert result.code == ErrorCode.SANDBOX_DENIED.value
    assert result.subject == "bwrap"
    assert result.detail is not None and "unprivileged user namespace" in result.detail
    assert "setting up uid map: Permission denied" in result.detail
    assert result.recovery is not None and 'where = "host"' in result.recovery
    assert not (tree / "ran.txt").exists()
    # The one call was the probe: nothing of the tree bound, running true there.
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and f"--dir {tree} --chdir {tree}" in calls[0]
    assert f"--bind {tree}" not in calls[0] and f"--ro-bind {tree}" not in calls[0]


def test_a_kept_probe_pass_still_fails_the_command_closed_and_says_so(
    tmp_path: Path, tree: Path, scratch: Path
) -> None:
    """A pass is kept per bwrap and kernel settings (probe_memo.py); when namespaces stop
    working in a way the key does not show (the LSM changed its mind), the command is not
    run unconfined: bwrap cannot make the namespaces, the command fails, in bwrap's words."""
    script, deny, log = fake_bwrap(tmp_path)
    config = make_config(tmp_path, arm="native")
    with ExecTool(config, tree, offerings=offerings_with(script, scratch)) as tool:
        first = tool.exec(["sh", "-c", "echo one > one.txt"])
        assert first.outcome == "settled" and first.exit_code == 0
        assert first.arm == ArmName.LINUX_NAMESPACES.value
        deny.touch()  # the LSM changed its mind between two commands
        second = tool.exec(["sh", "-c", "echo two > two.txt"])
        deny.unlink()
        third = tool.exec(["sh", "-c", "echo three"])
    assert second.outcome == "settled" and second.exit_code == 1
    assert "setting up uid map: Permission denied" in second.stderr
    assert not any(p.name == "two.txt" for p in scratch.rglob("two.txt"))
    assert third.outcome == "settled" and third.stdout == "three\n"
    calls = log.read_text().splitlines()
    probes = [c for c in calls if c.endswith("true")]
    # probe + command, command (refused by bwrap), command: one probe for the three.
    assert len(calls) == 4 and len(probes) == 1


def test_prepare_raises_sprawl_error_with_bwraps_words(tmp_path: Path) -> None:
    script, deny, _ = fake_bwrap(tmp_path)
    deny.touch()
    arm = BwrapArm(str(script), Yielders(nice=None, ionice=None))
    with pytest.raises(SprawlError) as raised:
        arm.prepare(tmp_path)
    assert raised.value.code is ErrorCode.SANDBOX_DENIED
    assert "exit 1" in raised.value.detail


def test_user_namespace_sample_reports_the_refusal(tmp_path: Path) -> None:
    script, deny, log = fake_bwrap(tmp_path)
    deny.touch()
    ok, why = user_namespace_works(str(script))
    assert ok is False and "Permission denied" in why
    deny.unlink()
    # a refusal is never kept: asked again, and the pass now kept (probe_memo.py)
    assert user_namespace_works(str(script))[0] is True
    assert user_namespace_works(str(script))[0] is True
    assert len(log.read_text().splitlines()) == 2


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
        'remount /newroot/var/lib/docker/overlay2/x/merged: No such file or directory" >&2\n'
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


def test_the_command_env_goes_through_args_fd_not_argv() -> None:
    # issue 30: bwrap ran on the host with the command's env (LD_PRELOAD loaded into it); the
    # values go in through --args FD, never on argv (/proc/<pid>/cmdline is everyone's)
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"], env_fd=7)
    assert argv[argv.index("--args") + 1] == "7"
    assert argv.index("--args") < argv.index("--")
    words = env_args({"A": "1 2", "LD_PRELOAD": "/x.so"}).split(b"\0")
    assert words[0] == b"--clearenv" and words[-1] == b""
    assert words[1:-1] == [b"--setenv", b"A", b"1 2", b"--setenv", b"LD_PRELOAD", b"/x.so"]


def test_a_masked_secret_file_is_covered_after_the_view_and_before_the_copy() -> None:
    """bwrap applies mounts in order: a mask before the view's bind of /etc would be under
    it, unseen."""
    argv = bwrap_argv("bwrap", VIEW, COPY, WORK, ["true"], masks=["/etc/app/token"])
    at = argv.index("/etc/app/token")
    assert argv[at - 2 : at] == ["--ro-bind", "/dev/null"]
    assert argv.index("/etc") < at < argv.index(COPY)
