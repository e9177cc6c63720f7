"""`podman start --attach`: one command's run, its streams written to the two files.

Split from podman.py (its own file, as docker_attach.py is docker's): the attach process, and
the relay that keeps podman's own start failure out of the command's stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from sprawl_orch.core.command_input import CommandInput, on_terminal
from sprawl_orch.engines.engine import ZERO_TIME

# podman's own line when a container cannot start (podman 4.3: "Error: unable to start
# container <64 hex>: runc: runc create failed: …"), never the command's (it did not run).
_START_ERROR_TEXT = b"Error: unable to start container "
_START_ERROR = re.compile(re.escape(_START_ERROR_TEXT) + rb"[0-9a-f]{64}: ")


class PodmanAttached:
    """`podman start --attach`: the attach process writes the two files as they come."""

    def __init__(
        self,
        cli: str,
        container: str,
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        cwd: str | None,
        given: CommandInput | None = None,
    ) -> None:
        self._out: IO[bytes] = stdout.open("wb")
        argv = [cli, "start", "--attach", container]
        stdin: int = subprocess.DEVNULL
        if given is not None:
            argv[3:3] = ["--interactive"]  # -t alone too: the CLI's stdin is the terminal
            stdin = given.read_end if given.read_end is not None else stdin
        if given is not None and given.tty_path is not None:
            # the CLI's own terminal is the new one: it sizes the container's from it
            argv = on_terminal(given.tty_path, argv)
        self._err: IO[bytes] = stderr.open("wb")
        self.start_error: str | None = None
        self._inspect = [cli, "inspect", "--format", "{{.State.StartedAt}}", container]
        self._env = dict(env)
        # Without a terminal, podman's own words share the command's stderr: relayed, so that
        # its start failure is said once, by sprawl-orch (issue 27, item 10).
        relayed = given is None or given.tty_path is None
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=self._out,
                stderr=subprocess.PIPE if relayed else self._err,
                env=self._env,
                start_new_session=True,
                cwd=cwd,
            )
        except OSError:
            self._close()
            raise
        self._relay: threading.Thread | None = None
        if relayed:
            self._relay = threading.Thread(target=self._relay_err, name="sprawl-podman-err")
            self._relay.start()

    def _relay_err(self) -> None:
        """Copy podman's stderr into the file, holding back a first line that is podman's own
        "Error: unable to start container <id>: …" -- printed only when the container could
        not start, so the command never ran -- which becomes `start_error` instead: the
        outsider saw podman's raw line on stderr before sprawl-orch's E_TOOL_UNAVAILABLE. A
        command that forges it gets it written back: anything after it, or a container that
        did start, shows the line was the command's."""
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        head: bytes | None = b""  # None once the first line is decided
        held = b""
        while chunk := os.read(fd, 1 << 16):
            if held:
                self._err.write(held)
                held = b""
            if head is None:
                self._err.write(chunk)
                self._err.flush()
                continue
            head += chunk
            line, newline, rest = head.partition(b"\n")
            if newline and _START_ERROR.match(line):
                held, head = line + newline, None
                self._err.write(rest)
            elif newline or not _START_ERROR_TEXT.startswith(head[: len(_START_ERROR_TEXT)]):
                self._err.write(head)
                head = None
            self._err.flush()
        if head:
            self._err.write(head)
        if held and self._started():
            self._err.write(held)
        elif held:
            self.start_error = held.decode(errors="replace").strip()
        self._err.flush()

    def _started(self) -> bool:
        done = subprocess.run(self._inspect, env=self._env, capture_output=True, text=True)
        return done.returncode == 0 and not done.stdout.strip().startswith(ZERO_TIME)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def wait(self, timeout: float | None) -> bool:
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _close(self) -> None:
        self._out.close()
        self._err.close()

    def collect(self) -> str | None:
        if self._relay is not None:
            self._relay.join()
        self._close()
        return self.start_error

    def stop_attach(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
