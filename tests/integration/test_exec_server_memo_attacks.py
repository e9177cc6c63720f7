"""Attacks on what the exec server keeps between calls (core/served_memo.py, issue 26), by the
real `sprawl-orch` program and its server:

- a copied_tree command (the caller's uid, no namespace: every ancestor's /proc is its own)
  opens the channel its call sends what it learned on, through /proc/<pid>/fd, shrinks it to
  one page and fills it with a forged batch (the host busybox "static" under the real
  binary's key), so the call's own batch fails to go (EAGAIN) and the forged one is all the
  server reads. The server must not take it: the next docker call
  still asks `ldd` about busybox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))

# Run as the copied_tree command: every ancestor's descriptors that are pipes or sockets,
# opened for writing through /proc, get a batch claiming the host busybox is dynamic (so a
# poisoned server would refuse docker's egress hold, or skip ldd for a "static" answer).
FORGE = r"""
import fcntl, json, os, shutil
path = os.path.realpath(shutil.which("busybox"))
st = os.stat(path)
key = [path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
slot = json.dumps(["static-busybox", key], sort_keys=True, separators=(",", ":"))
forged = ("{" + json.dumps(slot) + ":true}").encode().ljust(4096)
seen, pid, hits = set(), os.getppid(), 0
while pid > 1 and b"sprawl" in open(f"/proc/{pid}/cmdline", "rb").read():
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if int(fd) <= 2:
            continue
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith(("pipe:", "socket:")) or target in seen:
            continue
        seen.add(target)
        try:
            out = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            # a pipe shrunk to one page and filled: the call's own batch then fails (EAGAIN)
            if target.startswith("pipe:"):
                fcntl.fcntl(out, 1031, 4096)  # F_SETPIPE_SZ
            os.write(out, forged)
            hits += 1
        except OSError:
            pass
        os.close(out)
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
print("forged into", hits)
"""


def test_a_copied_tree_command_cannot_teach_the_server(tmp_path: Path, docker_image: str) -> None:
    if shutil.which("busybox") is None:
        pytest.fail("no busybox on the host: apt-get install busybox-static (CI has it)")
    real = shutil.which("ldd")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ldd.log"
    (bin_dir / "ldd").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    (bin_dir / "ldd").chmod(0o755)
    (tmp_path / "scratch").mkdir()
    common = f'scratch_dir = "{tmp_path / "scratch"}"\n'
    state = f'[state]\ndir = "{tmp_path / "state"}"\n'
    copied = tmp_path / "copied"
    copied.mkdir()
    (copied / "sprawl.toml").write_text(f'[sandbox]\narm = "copied_tree"\n{common}{state}')
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "sprawl.toml").write_text(
        f'[sandbox]\narm = "container"\n{common}'
        f'[sandbox.container]\nengine = "docker"\n'
        f'[sandbox.container.images]\ndocker = "{docker_image}"\n{state}'
    )
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "XDG_RUNTIME_DIR": str(runtime),
        "SPRAWL_EXEC_SERVER_IDLE": "30",
    }

    def run(tree: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [PROGRAM, "exec", "-C", str(tree), "--", *argv],
            env=env,
            capture_output=True,
            timeout=240,
            check=False,
        )

    try:
        forged = run(copied, sys.executable, "-c", FORGE)
        assert b"exec server is not used" not in forged.stderr
        assert b"forged into" in forged.stdout, forged.stderr
        done = run(docker, "true")
        assert done.returncode == 0, done.stderr
        # the server took nothing from the forger: busybox was asked about
        assert log.exists() and len(log.read_text().splitlines()) == 1, forged.stdout
    finally:
        subprocess.run(
            [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
        )
