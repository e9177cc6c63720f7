"""The small backend interface every container engine implements.

Two backends exist (`docker`, `podman`). Admission, verification and the arm talk only to
this interface, so a unit test can hand them a small fake and an integration test can
wrap a real engine (e.g. to alter the create argv and watch verification refuse it).

The create always goes through the engine's CLI with the argv `argv.create_argv` built,
so the argv recorded in a result is the argv that ran. The other steps use whatever
measured fastest per engine (benchmarks/container_steps.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from sprawl_orch.core.errors import ErrorCode, SprawlError, from_os

if TYPE_CHECKING:
    from sprawl_orch.core.command_input import CommandInput

EngineName = Literal["docker", "podman"]
# Every engine sprawl-orch drives, in the order engine = "auto" tries them. The one list:
# config, admission, the create argv, images and the guardian all read it from here.
ENGINES: tuple[EngineName, ...] = get_args(EngineName)
# What both engines call an image: the full content digest (podman prints it without the
# prefix; engines.images.fixed_id adds it).
IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
# `State.StartedAt` of a container that was created but never started (Go's zero time).
ZERO_TIME = "0001-01-01"
CLI_TIMEOUT = 120.0


@dataclass(frozen=True)
class EngineFacts:
    """What the engine says about itself (design §3.1 step 1)."""

    engine: str
    server_version: str
    api_version: str
    os: str
    arch: str
    cgroup_version: str
    cgroup_driver: str
    memory_limit: bool
    swap_limit: bool
    pids_limit: bool
    cpu_cfs_quota: bool
    rootless: bool
    userns_remap: bool
    default_runtime: str
    runtimes: tuple[str, ...] = ()
    # docker: the program each registered runtime runs (`docker info` Runtimes[name].path)
    runtime_paths: tuple[tuple[str, str], ...] = ()
    # docker: the arguments each registered runtime is run with (runtimeArgs), space-joined
    runtime_args: tuple[tuple[str, str], ...] = ()
    security_options: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    # docker: `DockerRootDir` (ends in "<uid>.<gid>" under userns-remap)
    root_dir: str = ""
    # podman: `host.idMappings` ([{container_id, host_id, size}]; rootless only)
    uid_map: tuple[tuple[int, int, int], ...] = ()
    gid_map: tuple[tuple[int, int, int], ...] = ()
    # podman: the default seccomp profile it reads (host.security.seccompProfilePath)
    seccomp_profile: str = ""

    def uids_namespaced(self) -> tuple[bool, str]:
        """(kept, why) for the user axis (design §1)."""
        if self.rootless:
            return True, (
                f"{self.engine} runs rootless: container uids map onto the caller's "
                "subordinate uid range, not onto host principals"
            )
        if self.userns_remap:
            return True, (
                f"{self.engine} remaps uids (userns-remap): container uids map onto a "
                "subordinate range reserved for it"
            )
        return False, (
            f"{self.engine} {self.server_version} runs rootful without user-namespace "
            "remapping, so the container's uid is the same number on the host and may be "
            "shared with other host principals — a distinct principal is not claimed"
        )

    def unsupported_limits(self) -> list[str]:
        missing = [
            name
            for name, ok in (
                ("memory", self.memory_limit),
                ("memory-swap", self.swap_limit),
                ("pids", self.pids_limit),
                ("cpu quota", self.cpu_cfs_quota),
            )
            if not ok
        ]
        return missing

    def summary(self) -> str:
        return (
            f"{self.engine} {self.server_version} (API {self.api_version}), {self.os}/{self.arch}, "
            f"cgroup v{self.cgroup_version.removeprefix('v')} ({self.cgroup_driver}), "
            f"default runtime {self.default_runtime}"
        )


class Attached(Protocol):
    """A started container whose stdout/stderr end up in two files."""

    # Set when the engine refused to start it synchronously (the command never ran).
    start_error: str | None

    def wait(self, timeout: float | None) -> bool:
        """True once the container's command ended (timeout None: wait forever)."""
        ...

    def collect(self) -> str | None:
        """Complete the stdout/stderr files (after wait). Returns the engine's words when
        the container never started (its command was never run), else None."""
        ...


class ContainerEngine(Protocol):
    """An engine as the container arm uses it: admit, create, verify, run and remove the
    containers commands run in (docker.py, podman.py)."""

    name: str

    def endpoint(self) -> str:
        """Where the engine is reached (socket, or the CLI + its config): a cache key."""
        ...

    def identity(self) -> dict[str, Any]:
        """What admission's evidence is valid for, read cheaply (JSON-able; see
        container/evidence.py). Raises SprawlError when the engine can't be asked."""
        ...

    def facts(self) -> EngineFacts:
        """Connect and read the engine's own facts. Raises SprawlError when it can't."""
        ...

    def local_image(self, image_id: str) -> str | None:
        """The image's full ID if present locally, else None. Never pulls."""
        ...

    def cli_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The full argv that runs `argv` through the engine's CLI (what is recorded)."""
        ...

    def create(self, argv: Sequence[str]) -> str:
        """Run `<cli> create …` with the CLI's own fixed environment (the command's values
        go by the argv's --env-file); return the container ID. Raises SprawlError with the
        engine's words."""
        ...

    def inspect(self, container: str) -> dict[str, Any]: ...

    def start(
        self, container: str, stdout: Path, stderr: Path, given: CommandInput | None = None
    ) -> Attached:
        """Attach, then start. `given` (-i/-t, core/command_input.py): through the engine's
        CLI (`start --attach --interactive`), which feeds the container's stdin and sizes its
        terminal; the container was created with --interactive/--tty to match."""
        ...

    def kill(self, container: str) -> None:
        """SIGKILL the container's processes; no error when it already ended."""
        ...

    def remove(self, container: str) -> None:
        """Force-remove; a container already gone is not an error. Raises on failure."""
        ...

    def list_labelled(self, label: str) -> list[str]:
        """IDs of every container (any state) carrying label `key=value`."""
        ...

    def close(self) -> None: ...


def not_found_in_image(words: str) -> bool:
    """The runtime's words for "the program is not in the image" (runc 1.1, crun 1.8)."""
    low = words.lower()
    return "executable file not found" in low or (
        "no such file or directory" in low and "exec" in low
    )


def daemon_refused(words: str) -> bool:
    """The engine's words for "no daemon answers": docker 20.10 "Cannot connect to the Docker
    daemon at unix://… Is the docker daemon running?", "dial unix …: connect: no such file or
    directory", podman "cannot connect to Podman"."""
    low = words.lower()
    return (
        "connection refused" in low
        or "cannot connect" in low
        or "is the docker daemon running" in low
        or (
            "no such file or directory" in low
            and ("connect" in low or "api version" in low or "sock" in low)
        )
    )


def socket_denied(words: str) -> bool:
    """The engine's words for "this user may not use its socket"."""
    low = words.lower()
    return "permission denied" in low and "sock" in low


def engine_error(engine: str, verb: str, words: str, recovery: str) -> SprawlError:
    return SprawlError(ErrorCode.ENGINE_REFUSED, f"{engine} {verb}", words.strip(), recovery)


def run_cli(
    engine: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    timeout: float | None = CLI_TIMEOUT,
    check: bool = True,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run an engine CLI (the one runner: the container arm, images and the guardian), its
    output as text (undecodable bytes replaced); a CLI that can't be run, no answer within
    `timeout`, and (with `check`) a non-zero exit are SprawlErrors. `stdin`: bytes fed to
    it (an image tar), else it reads nothing."""
    feed: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    try:
        raw = subprocess.run(
            list(argv), env=dict(env), capture_output=True, timeout=timeout, check=False, **feed
        )
    except FileNotFoundError as err:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            engine,
            f"{argv[0]} is not installed",
            f"install it: apt-get install {'docker.io' if engine == 'docker' else engine}",
        ) from err
    except OSError as err:
        raise from_os(
            err,
            ErrorCode.TOOL_UNAVAILABLE,
            engine,
            f"cannot run {argv[0]}",
            f"check that {argv[0]} is an executable {engine} CLI",
        ) from err
    except subprocess.TimeoutExpired as err:
        raise engine_error(
            engine,
            argv[1] if len(argv) > 1 else "",
            f"no answer within {timeout:g} s",
            f"check the {engine} engine is healthy (`{engine} info`)",
        ) from err
    done = subprocess.CompletedProcess(
        raw.args, raw.returncode, _text(raw.stdout), _text(raw.stderr)
    )
    if check and done.returncode != 0:
        words = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
        raise engine_error(
            engine,
            argv[1] if len(argv) > 1 else "",
            words,
            f"see `{engine} info`; `sprawl-orch doctor` explains admission",
        )
    return done


def _text(raw: bytes) -> str:
    # what text=True gave (universal newlines), without its strict decoding
    return raw.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def stamp(path: str | os.PathLike[str] | None, *, contents: bool = True) -> list[int] | None:
    """(device, inode[, size, mtime_ns]) of a file, None when it is absent. `contents`
    False: only which file it is (a directory whose entries come and go)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        # the stamped file is gone: no stamp, so the evidence can't match
        return None
    if not contents:
        return [st.st_dev, st.st_ino]
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
