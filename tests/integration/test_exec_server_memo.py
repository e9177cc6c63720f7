"""What one served call learned is the next call's (core/served_memo.py, issue 26), through
the real `sprawl-orch` program and its exec server on docker: the host busybox's `ldd`
(egress_hold.static_busybox) runs once for two calls, and again once the binary changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


def test_the_second_call_is_spared_what_the_first_learned(
    tmp_path: Path, docker_image: str
) -> None:
    if shutil.which("busybox") is None:
        pytest.fail("no busybox on the host: apt-get install busybox-static (CI has it)")
    real = shutil.which("ldd")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ldd.log"
    # the host's ldd, each run written down
    (bin_dir / "ldd").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    (bin_dir / "ldd").chmod(0o755)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[sandbox.container]\nengine = "docker"\n'
        f'[sandbox.container.images]\ndocker = "{docker_image}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    (tmp_path / "scratch").mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "XDG_RUNTIME_DIR": str(runtime),
        "SPRAWL_EXEC_SERVER_IDLE": "20",
    }
    try:
        for _ in range(2):
            done = subprocess.run(
                [PROGRAM, "exec", "-C", str(tree), "--", "true"],
                env=env,
                capture_output=True,
                timeout=240,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert b"exec server is not used" not in done.stderr
        assert len(log.read_text().splitlines()) == 1
    finally:
        subprocess.run(
            [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
        )
