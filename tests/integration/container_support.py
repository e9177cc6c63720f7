"""Helpers shared by the container integration tests (not a test module)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from sprawl_orch.config import ContainerConfig, EngineImages
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import ContainerEngine
from sprawl_orch.engines.podman import PodmanEngine
from sprawl_orch.runs.launch import Finished, Launch


def config_for(engine: str, image: str, **limits: object) -> ContainerConfig:
    return ContainerConfig.model_validate(
        {"engine": engine, "images": EngineImages(**{engine: image}), **limits}
    )


def make_engine(name: str, environ: Mapping[str, str] | None = None) -> ContainerEngine:
    if name == "docker":
        return DockerEngine(environ=environ)
    return PodmanEngine(environ=environ)


class Case:
    """One command's directories, unique names, and cleanup evidence."""

    def __init__(self, tmp: Path, engine: str) -> None:
        self.session = f"t{secrets.token_hex(4)}"
        self.engine = engine
        self.source = tmp / "source"
        self.source.mkdir()
        (self.source / "a.txt").write_text("original\n")
        self.copy = tmp / "copy"
        shutil.copytree(self.source, self.copy)
        self.outputs = tmp / "outputs"
        self.counter = 0

    def launch(
        self,
        argv: Sequence[str] = (),
        *,
        shell: str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
    ) -> Launch:
        self.counter += 1
        if shell is not None:
            argv = ("/bin/sh", "-c", shell)
        return Launch(
            argv=tuple(argv),
            cwd=self.copy,
            env=dict(env or {}),
            outputs=self.outputs / str(self.counter),
            tag=f"{self.session}-{self.counter}",
            session=self.session,
            run="test",
            workdir=workdir,
        )

    def leftovers(self) -> list[str]:
        """Containers of this session still known to the engine (must be none)."""
        done = subprocess.run(
            [
                self.engine,
                "ps",
                "--all",
                "--quiet",
                "--filter",
                f"label=sprawl.session={self.session}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()


def run(arm: ContainerArm, launch: Launch, timeout: float = 120) -> Finished:
    running = arm.start(launch)
    assert running.wait(timeout), "the command did not end in time"
    return running.finish()


def image_ids(engine: str) -> set[str]:
    done = subprocess.run(
        [engine, "images", "--all", "--quiet", "--no-trunc"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.strip().removeprefix("sha256:") for line in done.stdout.split()}


def processes_with_cmdline(cmdline: list[str]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                parts = f.read().split(b"\0")
        except OSError:
            continue
        if [p.decode(errors="replace") for p in parts if p] == cmdline:
            found.append(int(entry))
    return found
