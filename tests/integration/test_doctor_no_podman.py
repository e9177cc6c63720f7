"""`doctor` runs no podman at all when the config names docker only (issue 27, item 16): any
podman command that enters the account's user namespace starts podman's rootless pause
process, which outlives doctor by design and is not ours to kill, so doctor must not start one
when it needs no rootless answer. A `podman` first on PATH records every call and refuses it;
the real doctor runs against the real docker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = [str(Path(sys.executable).with_name("sprawl-orch"))]


def _doctor(tmp_path: Path, engine: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / f"podman-{engine}.log"
    fake = bin_dir / "podman"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\necho "Error: not here" >&2\nexit 125\n')
    fake.chmod(0o755)
    config = tmp_path / f"{engine}.toml"
    config.write_text(f'[sandbox.container]\nengine = "{engine}"\n')
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    done = subprocess.run(
        [*CLI, "doctor", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done, (log.read_text().splitlines() if log.exists() else [])


def test_doctor_for_docker_runs_no_podman(tmp_path: Path, docker_image: str) -> None:
    done, calls = _doctor(tmp_path, "docker")
    assert done.returncode == 0, done.stderr
    assert calls == []
    # The recorder does see podman when the config asks for it (the check above can fail).
    done, calls = _doctor(tmp_path, "podman")
    assert calls, done.stdout
