"""core/command_input.py by itself (the arms' use of it: tests/integration/test_exec_input.py):
a pipe carries the caller's bytes to their end; a terminal is a new one, sized and resized,
whose output lands in the stream file; nothing stays open after finish()."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sprawl_orch.core.command_input import CommandInput, on_terminal, window_size
from sprawl_orch.runs.process import HostProcess


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_the_pipe_carries_every_byte_then_eof(tmp_path: Path) -> None:
    before = open_fds()
    source_r, source_w = os.pipe()
    data = os.urandom(200_000)
    given = CommandInput(source_r)
    assert given.read_end is not None and given.tty_path is None
    child = subprocess.Popen(["wc", "-c"], stdin=given.read_end, stdout=subprocess.PIPE)
    given.start()
    os.write(source_w, data[:100_000])
    os.write(source_w, data[100_000:])
    os.close(source_w)
    out, _ = child.communicate(timeout=30)
    given.finish()
    os.close(source_r)
    assert out.split() == [b"200000"]
    assert open_fds() == before


def test_a_new_terminal_sized_resized_and_drained(tmp_path: Path) -> None:
    before = open_fds()
    sink = tmp_path / "stdout"
    sink.write_bytes(b"")
    given = CommandInput(None, tty=True, size=(33, 101))
    assert given.tty_path is not None and given.read_end is None
    assert given.master is not None and window_size(given.master) == (33, 101)
    given.into(sink)
    argv = on_terminal(given.tty_path, ["sh", "-c", "tty; stty size; exit 4"])
    child = subprocess.Popen(argv, start_new_session=True)
    given.start()
    assert child.wait(30) == 4
    given.finish()
    shown = sink.read_bytes().replace(b"\r", b"").decode().splitlines()
    assert shown == [given.tty_path, "33 101"]
    assert open_fds() == before


def test_a_host_process_gets_its_terminal_as_the_controlling_one(tmp_path: Path) -> None:
    """HostProcess (copied_tree, bwrap) opens the terminal in the command's new session, so
    /dev/tty is the new terminal and a resize reaches the command as SIGWINCH."""
    given = CommandInput(None, tty=True, size=(10, 20))
    outputs = tmp_path / "out"
    script = (
        "import os, signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGWINCH, lambda *a: got.append(1))\n"
        "fd = os.open('/dev/tty', os.O_RDWR)\n"
        "print(os.ttyname(0), os.tcgetpgrp(fd) == os.getpgrp(), flush=True)\n"
        "deadline = time.monotonic() + 20\n"
        "while not got and time.monotonic() < deadline: time.sleep(0.01)\n"
        "print('winch', os.get_terminal_size(fd), flush=True)\n"
    )
    (outputs).mkdir()
    (outputs / "stdout").write_bytes(b"")
    given.into(outputs / "stdout")
    proc = HostProcess(
        [sys.executable, "-c", script], tmp_path, dict(os.environ), outputs, given=given
    )
    given.start()
    # resize until the command has its handler (no fixed sleep: it says when it saw one)
    sizes = [(40, 120), (41, 121)]
    while not proc.wait(0.05):
        sizes.reverse()  # the same size twice is no change: the kernel sends no SIGWINCH
        given.resize(*sizes[0])
    finished = proc.finish()
    given.finish()
    text = (outputs / "stdout").read_bytes().replace(b"\r", b"").decode()
    assert finished.exit_code == 0, text
    assert given.tty_path is not None
    assert text.splitlines()[0] == f"{given.tty_path} True", text
    assert "winch os.terminal_size(columns=12" in text
