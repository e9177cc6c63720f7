"""Floors and plain timers for benchmarks/cli_profile.py: the raw mechanisms a served call is
measured against (docker's minimal create..rm, a program a call ran, run bare), kept apart so
cli_profile stays readable (benchmarks/*.py are the runnable scripts)."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.cli_oneshot import raw_run

Program = tuple[list[str], int | None, dict[str, str] | None]
"""A program a profiled call ran: argv, the uid it ran it as, its environment."""


def lstat_walk(roots: list[Path]) -> float:
    """A metadata-only walk: one lstat per entry, as a no-change resync needs at least."""
    started = time.perf_counter()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                os.lstat(os.path.join(dirpath, name))
    return time.perf_counter() - started


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - started


def docker_floor(image: str, tree: Path) -> float:
    """create (CLI, our argv) -> inspect -> attach+start -> wait -> inspect -> rm."""
    import docker
    from docker.utils import kwargs_from_env

    argv = raw_run("docker", image, tree, None)
    create = ["docker", "create", *argv[3:]]  # drop `run --rm`
    api = docker.APIClient(**kwargs_from_env(), version="auto")
    started = time.perf_counter()
    cid = subprocess.run(create, capture_output=True, text=True, check=True).stdout.strip()
    api.inspect_container(cid)
    sock = api.attach_socket(cid, params={"stdout": 1, "stderr": 1, "stream": 1})
    api.start(cid)
    api.wait(cid)
    sock.close()
    api.inspect_container(cid)
    api.remove_container(cid, force=True)
    took = time.perf_counter() - started
    api.close()
    return took


def wall_env(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, env=env)
    return time.perf_counter() - started


def bare(program: Program) -> float:
    """A program a call ran, run bare: the same argv, uid and environment, with bwrap's
    seccomp program and the command's environment (--args) on fds made afresh (the call's
    closed with it) -- the mechanism's own cost with every guarantee it carries."""
    from sprawl_orch.native_fallbacks.bwrap import open_env_fd
    from sprawl_orch.native_fallbacks.seccomp_filter import program_fd

    argv, user, env = list(program[0]), program[1], program[2]
    fds: list[int] = []
    try:
        command_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        for flag, make in (("--seccomp", program_fd), ("--args", lambda: open_env_fd(command_env))):
            if flag in argv:
                fds.append(make())
                argv[argv.index(flag) + 1] = str(fds[-1])
        started = time.perf_counter()
        subprocess.run(
            argv,
            env=env,
            user=user,
            group=user,
            extra_groups=None if user is None else [],
            pass_fds=fds,
            capture_output=True,
            check=True,
        )
        return time.perf_counter() - started
    finally:
        for fd in fds:
            os.close(fd)


def med(values: list[float]) -> float:
    return statistics.median(values) * 1000
