"""One command entered into a running container: docker through the SDK's exec API (what
`exec_run` does: create, start, inspect), podman through `podman exec` (its API is not on
this machine's podman 4.3 without a service). stdout/stderr go to two files as they arrive.

`ended()` says the channel closed: the command ended AND nothing it left holds its stdout
or stderr. warm.py decides the command's end from the container's processes, not from this.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from sprawl_orch.container.command import write_env_file
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.docker_attach import close_hijacked, pump_demuxed
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.engines.podman import PodmanEngine


class Asked:
    """One engine call run in a thread of its own, its answer (or its error) read later: a
    round trip to the daemon that overlaps the host's own work (warm.py)."""

    def __init__(self, call: Callable[[str], Any], container: str) -> None:
        self._answer: Any = None
        self._error: BaseException | None = None

        def ask() -> None:
            try:
                self._answer = call(container)
            except BaseException as err:  # handed to the reader: raised there, in its thread
                self._error = err

        self._thread = threading.Thread(target=ask, name="sprawl-warm-ask", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._answer


def create_exec(
    engine: DockerEngine,
    container: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    user: str,
    workdir: str,
) -> str:
    """The exec's id: made, not started (nothing runs until its start)."""
    made = engine.api().exec_create(
        container,
        list(argv),
        stdout=True,
        stderr=True,
        environment=dict(env),
        user=user,
        workdir=workdir,
    )
    return str(made["Id"])


class Entered(Protocol):
    def ended(self, timeout: float) -> bool: ...

    def exit_code(self) -> int | None: ...

    def running(self) -> bool | None:
        """Whether the exec'd process itself still runs, when the engine says (None: ask
        the container's processes)."""
        ...

    def close(self) -> None:
        """Release the channel (after the container's strays were killed)."""
        ...


class DockerEntered:
    def __init__(
        self,
        engine: DockerEngine,
        container: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        user: str,
        workdir: str,
        stdout: Path,
        stderr: Path,
        made: Asked | None = None,
    ) -> None:
        self._api = engine.api()
        made_id: str | None = None
        if made is not None:
            # created ahead, while the checks before reuse ran (warm.py); one that failed
            # there is made again here, where its error is the command's
            with contextlib.suppress(Exception):
                made_id = str(made.result())
        if made_id is None:
            made_id = create_exec(engine, container, argv, env, user, workdir)
        self._id = made_id
        self._out: IO[bytes] = stdout.open("wb")
        self._err: IO[bytes] = stderr.open("wb")
        # the stream client has no read timeout: a quiet command must not lose its output
        self._stream = engine.streams().exec_start(self._id, stream=True, demux=True)
        self._reader = threading.Thread(target=self._pump, name="sprawl-warm-exec", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        with contextlib.suppress(Exception):  # the stream's end is the command's end
            pump_demuxed(self._stream, self._out, self._err)

    def ended(self, timeout: float) -> bool:
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def exit_code(self) -> int | None:
        code = self._api.exec_inspect(self._id).get("ExitCode")
        return None if code is None else int(code)

    def running(self) -> bool | None:
        return bool(self._api.exec_inspect(self._id).get("Running"))

    def close(self) -> None:
        self._reader.join(5.0)
        close_hijacked(self._stream)
        self._out.close()
        self._err.close()


class PodmanEntered:
    def __init__(
        self,
        engine: PodmanEngine,
        container: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        user: str,
        workdir: str,
        stdout: Path,
        stderr: Path,
    ) -> None:
        cli = [engine.cli_argv(["exec"])[0], "exec", "--user", user, "--workdir", workdir]
        # The values in a file of ours (as the create's, command.write_env_file), kept until
        # the exec ended; the CLI runs with its connection only, never the command's env
        # (issue 30: the command's LD_PRELOAD loaded into podman on the host).
        self._env_file = stdout.parent / f"exec-{secrets.token_hex(4)}.env"
        write_env_file(env, self._env_file)
        cli += ["--env-file", str(self._env_file)]
        try:
            with stdout.open("wb") as out, stderr.open("wb") as err:
                self._proc = subprocess.Popen(
                    [*cli, container, *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=engine.cli_env(),
                )
        except BaseException:
            self._env_file.unlink(missing_ok=True)
            raise

    def ended(self, timeout: float) -> bool:
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        self._env_file.unlink(missing_ok=True)
        return True

    def exit_code(self) -> int | None:
        return self._proc.returncode

    def running(self) -> bool | None:
        return None

    def close(self) -> None:
        try:
            self._proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._env_file.unlink(missing_ok=True)


def enter(
    engine: ContainerEngine,
    container: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    user: str,
    workdir: str,
    stdout: Path,
    stderr: Path,
    made: Asked | None = None,
) -> Entered:
    """`made`: docker's exec created ahead (warm.py's _create_ahead), started here."""
    if isinstance(engine, DockerEngine):
        return DockerEntered(engine, container, argv, env, user, workdir, stdout, stderr, made)
    if isinstance(engine, PodmanEngine):
        return PodmanEntered(engine, container, argv, env, user, workdir, stdout, stderr)
    raise TypeError(f"no exec for engine {engine.name}")
