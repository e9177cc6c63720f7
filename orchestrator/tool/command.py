"""What `ExecTool.exec` is asked, checked before anything runs -- the command as argv (or one
shell line) and the window -- and the parts it is run with: the shell a line runs under on
its arm, and the capped streams. Split from exec_tool.py, the story of one command."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from sprawl_orch.config import Config
from sprawl_orch.core.arg_bounds import check_window
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.command_input import CommandInput
from sprawl_orch.core.shell import container_shell, interpreter_name, require_shell, resolve_shell
from sprawl_orch.core.shell import shell_argv as expand_shell
from sprawl_orch.runs.launch import Arm
from sprawl_orch.runs.output_keep import OUTPUT_CAP
from sprawl_orch.runs.output_pipe import CappedStreams
from sprawl_orch.runs.output_pipe import available as pipes_available


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
    both). Warns at the caller's caller (the ``exec`` call). A window that is not a finite
    number of seconds above 0 is refused (core/arg_bounds.check_window)."""
    if timeout is None:
        return check_window(window)
    warnings.warn(
        "exec(timeout=...) is renamed window=: past it the command moves to the background, "
        "it is not killed (pass background_ok=False for that)",
        DeprecationWarning,
        stacklevel=3,
    )
    if window is not None:
        raise TypeError("exec(): give window= (timeout= is its old name), not both")
    return check_window(timeout)


def shell_argv(
    config: Config, environ: Mapping[str, str], arm: Arm, argv_in: list[str], shell: bool
) -> tuple[list[str], str | None]:
    """The argv a shell line runs as on `arm` (its shell found where it runs), and the
    interpreter's name; a program with arguments as it is."""
    if not shell:
        return argv_in, None
    if arm.name is ArmName.CONTAINER:
        found = container_shell()
    else:
        sandbox = config.sandbox
        found = require_shell(resolve_shell(sandbox.shell, sandbox.interpreter, environ))
    return list(expand_shell(found, argv_in[0])), interpreter_name(found.program)


def capped_streams(
    config: Config, outputs: Path, follow: tuple[BinaryIO, BinaryIO] | None
) -> CappedStreams | None:
    """The command's streams through pipes we read (output_pipe.py): what it prints
    costs the host's disk at most output_keep_bytes per stream (the first OUTPUT_CAP
    bytes always, for the result itself) while it runs."""
    if not pipes_available():
        return None
    cap = max(config.state.output_keep_bytes, OUTPUT_CAP)
    return CappedStreams(outputs, cap, follow)


def streams_done(
    streams: CappedStreams | None, given: CommandInput | None
) -> Callable[[], None] | None:
    """At the command's end: its terminal drained into the stream first (-t), then the
    stream's pump ends (it waits for every writer, the terminal's reader too)."""
    if given is None:
        return None if streams is None else streams.stop

    def done() -> None:
        given.finish()
        if streams is not None:
            streams.stop()

    return done
