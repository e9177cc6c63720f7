"""Shell resolution with fake `which` and version runners (design §9, seed D30)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.shell import (
    Absent,
    Found,
    Missing,
    container_shell,
    interpreter_name,
    pwsh_major,
    require_shell,
    resolve_shell,
    run_version,
    shell_argv,
    tool_description,
)


def fake_which(*present: str) -> Callable[[str], str | None]:
    """`which` that finds exactly the names in `present`: a path is returned as is,
    a bare name as /usr/bin/<name>."""

    def which(name: str) -> str | None:
        if name not in present:
            return None
        return name if ("/" in name or "\\" in name) else f"/usr/bin/{name}"

    return which


def version(line: str | None) -> Callable[[str], str | None]:
    calls: list[str] = []

    def run(program: str) -> str | None:
        calls.append(program)
        return line

    run.calls = calls  # type: ignore[attr-defined]
    return run


def never_run(program: str) -> str | None:
    raise AssertionError(f"{program} --version must not be run for the system shell")


def test_shell_false_is_absent() -> None:
    which = fake_which("/bin/sh", "pwsh")
    assert resolve_shell(False, "system", {}, "linux", which, never_run) == Absent()
    assert resolve_shell(False, "pwsh", {}, "linux", which, never_run) == Absent()


def test_system_uses_dollar_shell() -> None:
    shell = resolve_shell(
        True, "system", {"SHELL": "/usr/bin/zsh"}, "linux", fake_which("/usr/bin/zsh"), never_run
    )
    assert shell == Found("/usr/bin/zsh", "zsh")
    assert shell_argv(shell, "echo hi") == ("/usr/bin/zsh", "-c", "echo hi")


@pytest.mark.parametrize("environ", [{}, {"SHELL": ""}], ids=["unset", "empty"])
def test_system_without_shell_is_bin_sh(environ: dict[str, str]) -> None:
    shell = resolve_shell(True, "system", environ, "linux", fake_which("/bin/sh"), never_run)
    assert shell == Found("/bin/sh", "sh")
    assert shell_argv(shell, "ls | wc -l") == ("/bin/sh", "-c", "ls | wc -l")


def test_system_on_macos_is_the_same_rule() -> None:
    shell = resolve_shell(
        True, "system", {"SHELL": "/bin/zsh"}, "darwin", fake_which("/bin/zsh"), never_run
    )
    assert shell == Found("/bin/zsh", "zsh")


def test_system_shell_not_executable_is_missing_not_bin_sh() -> None:
    shell = resolve_shell(
        True, "system", {"SHELL": "/opt/gone/fish"}, "linux", fake_which("/bin/sh"), never_run
    )
    assert isinstance(shell, Missing)
    assert shell.asked == "system"
    assert "/opt/gone/fish" in shell.detail
    with pytest.raises(SprawlError) as caught:
        require_shell(shell)
    assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE
    assert caught.value.subject == "system shell"


def test_windows_comspec() -> None:
    comspec = "C:\\Windows\\system32\\cmd.exe"
    shell = resolve_shell(
        True,
        "system",
        {"ComSpec": comspec, "SHELL": "/usr/bin/bash"},
        "win32",
        fake_which(comspec),
        never_run,
    )
    assert shell == Found(comspec, "cmd")
    assert shell_argv(shell, "dir") == (comspec, "/C", "dir")


def test_windows_without_comspec_is_cmd_exe() -> None:
    which = fake_which("cmd.exe")
    shell = resolve_shell(True, "system", {}, "win32", which, never_run)
    assert shell == Found("/usr/bin/cmd.exe", "cmd")


@pytest.mark.parametrize(
    "line", ["PowerShell 7.4.1", "PowerShell 7.5.0-preview.2", "PowerShell 10.0.0"]
)
def test_pwsh_7_or_later_is_found(line: str) -> None:
    runner = version(line)
    shell = resolve_shell(
        True, "pwsh", {"SHELL": "/bin/bash"}, "linux", fake_which("pwsh", "/bin/bash"), runner
    )
    assert shell == Found("/usr/bin/pwsh", "pwsh")
    assert runner.calls == ["/usr/bin/pwsh"]  # type: ignore[attr-defined]
    assert shell_argv(shell, "Get-ChildItem") == (
        "/usr/bin/pwsh",
        "-NoLogo",
        "-NoProfile",
        "-NonInteractive",
        "-Command",
        "Get-ChildItem",
    )


def test_pwsh_on_windows_is_found_the_same_way() -> None:
    shell = resolve_shell(
        True,
        "pwsh",
        {"COMSPEC": "cmd.exe"},
        "win32",
        fake_which("cmd.exe", "C:\\Program Files\\PowerShell\\7\\pwsh.exe"),
        version("PowerShell 7.4.6"),
    )
    # fake_which finds only exact names: "pwsh" is absent here, so Missing, not cmd.
    assert isinstance(shell, Missing)

    def which(name: str) -> str | None:
        return {"pwsh": "C:\\Program Files\\PowerShell\\7\\pwsh.exe"}.get(name)

    shell = resolve_shell(True, "pwsh", {}, "win32", which, version("PowerShell 7.4.6"))
    assert shell == Found("C:\\Program Files\\PowerShell\\7\\pwsh.exe", "pwsh")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("PowerShell 6.2.7", "major 6"),
        ("PowerShell 5.1.19041", "major 5"),
        ("garbage", "no major version"),
        (None, "no major version"),
    ],
    ids=["pwsh6", "pwsh5", "unreadable", "would-not-run"],
)
def test_pwsh_below_7_or_unreadable_is_missing(line: str | None, fragment: str) -> None:
    shell = resolve_shell(
        True,
        "pwsh",
        {"SHELL": "/bin/bash"},
        "linux",
        fake_which("pwsh", "/bin/bash", "/bin/sh"),
        version(line),
    )
    assert isinstance(shell, Missing)
    assert shell.asked == "pwsh"
    assert fragment in shell.detail


def test_pwsh_absent_is_missing_and_never_falls_back() -> None:
    # Every other shell is present; none of them may be chosen.
    which = fake_which("/bin/sh", "/bin/bash", "cmd.exe", "powershell")
    for platform in ("linux", "darwin", "win32"):
        shell = resolve_shell(
            True,
            "pwsh",
            {"SHELL": "/bin/bash", "COMSPEC": "cmd.exe"},
            platform,
            which,
            version("PowerShell 7.4.1"),
        )
        assert shell == Missing("pwsh", "no pwsh on the search path")


def test_missing_pwsh_refusal_text_is_exact() -> None:
    with pytest.raises(SprawlError) as caught:
        require_shell(Missing("pwsh", "no pwsh on the search path"))
    err = caught.value
    assert err.code is ErrorCode.TOOL_UNAVAILABLE
    assert err.subject == "pwsh 7"
    assert err.recovery == 'install PowerShell 7, or set [sandbox] interpreter = "system"'
    assert "no pwsh on the search path" in err.detail
    assert "not run under another shell" in err.detail


def test_absent_refusal_says_the_shell_arm_is_off() -> None:
    with pytest.raises(SprawlError) as caught:
        require_shell(Absent())
    err = caught.value
    assert err.code is ErrorCode.TOOL_UNAVAILABLE
    assert "[sandbox] shell = false" in err.detail
    assert "[sandbox] shell = true" in err.recovery


def test_require_shell_returns_found_unchanged() -> None:
    found = Found("/bin/bash", "bash")
    assert require_shell(found) is found


@pytest.mark.parametrize(
    ("program", "name"),
    [
        ("C:\\Windows\\System32\\CMD.EXE", "cmd"),
        ("cmd.exe", "cmd"),
        ("C:\\Program Files\\PowerShell\\7\\pwsh.exe", "pwsh"),
        ("/usr/bin/pwsh", "pwsh"),
        ("/bin/sh", "sh"),
        ("/usr/bin/bash", "bash"),
        ("/bin/zsh", "zsh"),
        ("/usr/local/bin/Bash", "bash"),
        ("busybox", "busybox"),
    ],
)
def test_interpreter_name(program: str, name: str) -> None:
    assert interpreter_name(program) == name


def test_pwsh_major_parses_the_version_line() -> None:
    assert pwsh_major("PowerShell 7.4.1") == 7
    assert pwsh_major("PowerShell 6.2.7") == 6
    assert pwsh_major("7.4.1") is None
    assert pwsh_major(None) is None


def test_description_names_the_interpreter_last() -> None:
    for shell, name in (
        (Found("/usr/bin/bash", "bash"), "bash"),
        (Found("C:\\x\\cmd.exe", "cmd"), "cmd"),
        (Found("/usr/bin/pwsh", "pwsh"), "pwsh"),
        (container_shell(), "sh"),
    ):
        text = tool_description(shell, statement="Writes land only in a copy.")
        assert text.endswith(f"A shell line runs under {name}.")
        assert "Writes land only in a copy." in text


@pytest.mark.parametrize("shell", [Absent(), Missing("pwsh"), Missing("system")])
def test_description_adds_nothing_without_a_shell(shell: Absent | Missing) -> None:
    text = tool_description(shell)
    assert "shell line runs under" not in text
    assert text == tool_description(Absent())


def test_container_shell_is_the_images_bin_sh() -> None:
    shell = container_shell()
    assert shell == Found("/bin/sh", "sh")
    assert shell_argv(shell, "echo $HOME") == ("/bin/sh", "-c", "echo $HOME")


def test_run_version_reads_a_real_program_and_survives_a_missing_one() -> None:
    # A real program stands in for pwsh: the runner returns its first line.
    import sys

    line = run_version(sys.executable)
    assert line is not None and line.startswith("Python 3.")
    assert run_version("/nonexistent/pwsh") is None
