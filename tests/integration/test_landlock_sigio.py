"""Attacks on the landlock helper (the subreaper outside the domain) by ways of signalling
it other than kill(): SIGIO from a file whose owner is the process group (the helper is
its leader, and SIGIO's default action terminates it) or the helper's own tid, and a
command that makes itself a subreaper too before double-forking. The helper must live,
reap, and leave no descendant behind (atkland, issue 32; these held on ABI 7)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.test_landlock_real import answers, landlock_config, need_landlock

# argv[1]: the marker the survivor carries. The handler counts SIGIO that reached the
# command itself: the control that the signal is really sent (to the whole group).
SIGIO = r"""
import ctypes, fcntl, os, signal, struct, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
print("subreaper", libc.prctl(36, 1, 0, 0, 0), flush=True)
if os.fork() == 0:
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(0)
os.wait()
helper = os.getpgrp()
got = []
signal.signal(signal.SIGIO, lambda *_: got.append(1))
for owner in ("group", "tid"):
    r, w = os.pipe()
    if owner == "group":
        fcntl.fcntl(r, fcntl.F_SETOWN, -helper)
    else:
        fcntl.fcntl(r, 15, struct.pack("ii", 0, helper))  # F_SETOWN_EX, F_OWNER_TID
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
time.sleep(0.3)
print("sigio_self", len(got), flush=True)
try:
    os.kill(helper, signal.SIGTERM)
    print("kill_helper allowed", flush=True)
except OSError as err:
    print("kill_helper", err.errno, flush=True)
state = open(f"/proc/{helper}/stat").read().rsplit(")", 1)[1].split()[0]
print("helper_state", state, flush=True)
"""


def test_sigio_never_reaches_the_helper_and_nothing_outlives_it(tmp_path: Path) -> None:
    need_landlock()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "probe.py").write_text(SIGIO)
    (tmp_path / "scratch").mkdir()
    marker = str(8_000_000 + int.from_bytes(os.urandom(3), "big"))
    with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
        done = tool.exec(["python3", "probe.py", marker], background_ok=False)
    said = answers(done.stdout)
    assert said.get("subreaper") == "0", done  # the command may be a subreaper itself
    assert said.get("sigio_self") == "1", done  # the group's SIGIO is sent: it reached us
    assert said.get("kill_helper") == "1", done  # EPERM: ABI 6 signal scoping
    assert said.get("helper_state") in ("S", "R"), done  # SIGIO did not end the helper
    deadline = time.monotonic() + 30
    alive = ["?"]
    while alive and time.monotonic() < deadline:
        alive = [
            str(p.pid)
            for p in psutil.process_iter(["cmdline"])
            if marker in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE
        ]
        if alive:
            time.sleep(0.1)
    for pid in alive:
        if pid != "?":
            psutil.Process(int(pid)).kill()
    assert not alive, f"the sleep {marker} below a subreaper outlived the command: {alive}"
