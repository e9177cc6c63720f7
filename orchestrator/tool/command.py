"""What `ExecTool.exec` is asked, checked before anything runs: the command as argv (or one
shell line) and the window. Split from exec_tool.py, the story of one command."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Sequence


def command_argv(command: Sequence[str] | str, shell: bool, interpreter: str) -> list[str]:
    """The argv, or the one shell line. A str without shell=True is a TypeError: it
    would otherwise be looked up as a program named "echo hi"."""
    if isinstance(command, str):
        if not shell:
            raise TypeError(
                f"exec({command!r}): a str is a shell line; pass shell=True to run it "
                "under the shell, or a list of program and arguments "
                f"(e.g. {shlex.split(command)!r})"
            )
        return [command]
    if isinstance(command, bytes) or not all(isinstance(a, str | os.PathLike) for a in command):
        raise TypeError(f"exec({command!r}): the command is a list of str (or paths)")
    argv = [os.fspath(a) for a in command]
    if not all(isinstance(a, str) for a in argv):
        raise TypeError(f"exec({command!r}): bytes paths are not accepted; use str")
    if shell and len(argv) > 1:
        if interpreter != "system" or os.name != "posix":
            raise TypeError(
                "exec(list, shell=True) quotes the list for a POSIX shell; with "
                f"interpreter {interpreter!r} pass one shell line (str)"
            )
        # Each item stays one word, as the list said: `printf '%s|' 'a b' c`.
        return [shlex.join(argv)]
    return argv


def window_of(window: float | None, timeout: float | None) -> float | None:
    """`window`, or the deprecated `timeout=` it was called before (issue 28: the CLI's
    ``--timeout`` kills, the library's window moves to the background; one name can't say
    both). Warns at the caller's caller (the ``exec`` call)."""
    if timeout is None:
        return window
    warnings.warn(
        "exec(timeout=...) is renamed window=: past it the command moves to the background, "
        "it is not killed (pass background_ok=False for that)",
        DeprecationWarning,
        stacklevel=3,
    )
    if window is not None:
        raise TypeError("exec(): give window= (timeout= is its old name), not both")
    return timeout
