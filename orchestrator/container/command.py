"""The command as a container sees it, for a fresh container (arm.py) and a warm one (warm.py)
alike: its environment, the host venv it names, why it could not start, and the removal of a
container it must not run in.

A leaf of its own: warm.py needs these and arm.py creates the warm pool, so while they lived
in arm.py the two modules imported each other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_file
from sprawl_orch.core.unrunnable import host_venv, runtime_refusal
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.runs.launch import Launch


def start_refusal(
    words: str, program: str, err: SprawlError | None, venv: str | None = None
) -> SprawlError:
    """The command never ran: say why, as exec would on the host (design §7)."""
    refusal = runtime_refusal(words, program, venv)
    if refusal is not None:
        return refusal
    if err is not None:
        return err
    return SprawlError(
        ErrorCode.ENGINE_REFUSED,
        "container start",
        words,
        "see `sprawl-orch doctor`; the engine could not start the container",
    )


def command_env(launch: Launch) -> dict[str, str]:
    """PATH is the image's (its config's Env, else the engine's default), never the host's
    (pyenv shims, ~/.local/bin): the engine fills it in when we pass none."""
    return {k: v for k, v in launch.env.items() if k != "PATH"}


def write_env_file(env: Mapping[str, str], path: Path) -> Path:
    """The command's environment as an engine reads `--env-file` (NAME=VALUE a line), in a
    new file only we can read; the caller deletes it once the create returned. A value with a
    line break cannot be written so (docker and podman split the file on lines, dropping a
    final CR): refused, never cut short."""
    for name, value in env.items():
        if "\n" in value or "\r" in value:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                name,
                f"the value of {name} holds a line break; a container's environment is "
                "handed over one line per variable",
                f"pass {name} without line breaks (e.g. base64), or use another arm",
            )
    text = "".join(f"{name}={value}\n" for name, value in sorted(env.items()))
    with os.fdopen(
        private_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w", encoding="utf-8"
    ) as out:
        out.write(text)
    return path


def command_venv(launch: Launch, command: Sequence[str]) -> str | None:
    """Judged on the working directory: the copy turns links out of the tree into files."""
    return host_venv(launch.workdir or launch.cwd.resolve(), command[0])


def remove_quietly(
    engine: ContainerEngine,
    ref: str,
    launch: Launch,
    name: str | None = None,
) -> str:
    """Remove a container that must not run; '' when gone, else what stayed."""
    try:
        engine.remove(ref)
    except SprawlError as err:
        return f"the container {ref} could not be removed: {err.detail}"
    launch.watcher.gone(name or ref)
    return ""
