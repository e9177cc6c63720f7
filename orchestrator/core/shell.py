"""Which shell runs a shell line (design §9, seed D30), and how the agent is told.

`[sandbox] shell` decides whether the shell arm is offered at all; `[sandbox]
interpreter` decides which one when it is. Resolution happens on the host, once,
and yields one value::

    Shell = Absent                      # shell = false: no shell arm
          | Missing(asked)              # asked for "system" or "pwsh"; none usable here
          | Found(program, interpreter) # the program to start, and its result spelling

- ``"system"``: ``$SHELL`` (else ``/bin/sh``) with ``-c``; on Windows ``%COMSPEC%``
  (else ``cmd.exe``) with ``/C``.
- ``"pwsh"``: ``pwsh`` from the search path with ``-NoLogo -NoProfile
  -NonInteractive -Command``, and only when ``pwsh --version`` prints a major
  version of 7 or more. A missing pwsh is refused at call time; it never falls
  back to another shell: a line written for pwsh is another language under cmd or
  sh, so a fallback trades a clear refusal for a failure nobody can read.

`interpreter_name` is the one place the result's ``interpreter`` spelling is made.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sprawl_orch.core.errors import ErrorCode, SprawlError

Interpreter = Literal["system", "pwsh"]

PWSH_FLAGS: tuple[str, ...] = ("-NoLogo", "-NoProfile", "-NonInteractive", "-Command")
PWSH_MIN_MAJOR = 7
PWSH_RECOVERY = 'install PowerShell 7, or set [sandbox] interpreter = "system"'
_PWSH_VERSION = re.compile(r"PowerShell\s+v?(\d+)\.")
# Long enough for a cold .NET start on a slow disk; pwsh --version takes ~0.3 s warm.
_VERSION_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Absent:
    """`[sandbox] shell = false`: the shell arm is not offered."""


@dataclass(frozen=True)
class Missing:
    """The configured interpreter has no usable program on this host."""

    asked: Interpreter
    # Why, with what was found ("pwsh --version printed 'PowerShell 6.2.7'").
    detail: str = ""


@dataclass(frozen=True)
class Found:
    """The program that runs shell lines, and its `interpreter` spelling in results."""

    program: str
    interpreter: str


Shell = Absent | Missing | Found

Which = Callable[[str], str | None]
RunVersion = Callable[[str], str | None]


def interpreter_name(program: str) -> str:
    """`C:\\Windows\\System32\\cmd.exe` -> `cmd`, `/usr/bin/bash` -> `bash`.

    The basename, lowercase, without its extension. Both separators are split so a
    Windows path reads the same when the ledger is viewed on another platform.
    """
    base = re.split(r"[\\/]", program)[-1].lower()
    stem, dot, _ext = base.rpartition(".")
    return stem if dot and stem else base


def run_version(program: str) -> str | None:
    """The first line `program --version` prints, or None when it can't be run."""
    try:
        done = subprocess.run(
            [program, "--version"],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=_VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        # a pwsh that can't start or answer is no pwsh: the caller says Missing
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0] if lines else None


def pwsh_major(version_line: str | None) -> int | None:
    """`PowerShell 7.4.1` -> 7; None when no major version can be read."""
    if version_line is None:
        return None
    match = _PWSH_VERSION.search(version_line)
    return int(match.group(1)) if match else None


def _env(environ: Mapping[str, str], name: str, windows: bool) -> str | None:
    # Windows environment names are case-insensitive; a plain Mapping isn't.
    if windows:
        for key, value in environ.items():
            if key.upper() == name:
                return value or None
        return None
    return environ.get(name) or None


def resolve_shell(
    enabled: bool,
    interpreter: Interpreter,
    environ: Mapping[str, str],
    platform: str = sys.platform,
    which: Which = shutil.which,
    run_version: RunVersion = run_version,
) -> Shell:
    """Resolve the shell arm on this host. Pure apart from `which` and `run_version`."""
    if not enabled:
        return Absent()
    windows = platform.startswith("win")
    if interpreter == "pwsh":
        return _resolve_pwsh(which, run_version)
    variable, spelled, default = (
        ("COMSPEC", "%COMSPEC%", "cmd.exe") if windows else ("SHELL", "$SHELL", "/bin/sh")
    )
    named = _env(environ, variable, windows)
    wanted = named or default
    source = spelled if named else f"the default {default}"
    program = which(wanted)
    if program is None:
        return Missing("system", f"{source} ({wanted}) is not an executable program on this host")
    return Found(program, interpreter_name(program))


def _resolve_pwsh(which: Which, run_version: RunVersion) -> Shell:
    program = which("pwsh")
    if program is None:
        return Missing("pwsh", "no pwsh on the search path")
    line = run_version(program)
    major = pwsh_major(line)
    if major is None:
        return Missing("pwsh", f"{program} --version printed {line!r}: no major version in it")
    if major < PWSH_MIN_MAJOR:
        return Missing(
            "pwsh",
            f"{program} --version printed {line!r}: major {major}, "
            f"{PWSH_MIN_MAJOR} or later is needed",
        )
    return Found(program, interpreter_name(program))


def container_shell() -> Found:
    """In a container arm a shell line runs under the image's `/bin/sh -c`."""
    return Found("/bin/sh", "sh")


def require_shell(shell: Shell) -> Found:
    """The Found shell, or the refusal a shell-line call gets. Never another shell."""
    if isinstance(shell, Found):
        return shell
    if isinstance(shell, Absent):
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject="shell arm",
            detail="the shell arm is off ([sandbox] shell = false); only a program with "
            "arguments can run",
            recovery="pass the program and its arguments instead of a shell line, or set "
            "[sandbox] shell = true",
        )
    if shell.asked == "pwsh":
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject="pwsh 7",
            detail=f'[sandbox] interpreter = "pwsh" but {shell.detail or "no pwsh 7 is here"}'
            "; a line written for pwsh is not run under another shell",
            recovery=PWSH_RECOVERY,
        )
    raise SprawlError(
        ErrorCode.TOOL_UNAVAILABLE,
        subject="system shell",
        detail=shell.detail or "no system shell is usable on this host",
        recovery="point $SHELL (Windows: %COMSPEC%) at an installed shell, or pass the "
        "program and its arguments instead of a shell line",
    )


def shell_argv(shell: Found, line: str) -> tuple[str, ...]:
    """The argv that runs `line` under `shell`: `-c`, `/C` or pwsh's flags."""
    name = shell.interpreter
    if name == "pwsh":
        return (shell.program, *PWSH_FLAGS, line)
    if name == "cmd":
        return (shell.program, "/C", line)
    return (shell.program, "-c", line)


BASE_DESCRIPTION = (
    "Run a command confined: a program with its arguments, or a shell line. A command "
    "still running when the window ends continues in the background and returns a handle."
)


def tool_description(shell: Shell, statement: str | None = None) -> str:
    """The exec tool's description for agents.

    `statement` is the arm's confinement statement (assurances.statement()). When the
    shell arm is Found the description ends with `A shell line runs under <name>.`:
    the model picks its syntax from it (the same line means different things in
    cmd, pwsh and sh). Absent and Missing add nothing; the call's refusal says why.
    """
    parts = [BASE_DESCRIPTION]
    if statement:
        parts.append(statement.strip())
    if isinstance(shell, Found):
        parts.append(f"A shell line runs under {shell.interpreter}.")
    return " ".join(parts)
