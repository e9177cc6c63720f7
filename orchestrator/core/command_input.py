"""What a command reads: `-i/--interactive` and `-t/--tty`, as `docker run` has them.

Without either the command's stdin is /dev/null (every arm, as before). With `-i` the
caller's bytes reach it through a pipe made here, never the caller's own descriptor: the
command can't seek, re-open or ioctl the caller's file or terminal, and the server (one day)
feeds the same pipe from a socket. With `-t` the command gets a *new* pseudo-terminal as its
stdin, stdout and stderr (one stream, as `docker run -t`), and the caller's terminal is never
handed over: a command holding the caller's terminal could push keystrokes into it with
TIOCSTI (CVE-2017-5226, why bwrap grew --new-session). The new terminal's master is ours:
what the command writes goes from it into the stdout stream (output_pipe.py's FIFO, so the
cap and `--json` hold as for any command), what the caller types goes into it, and its window
size is the caller's (`resize`).

The terminal becomes the command's *controlling* terminal: a session leader that opens a
terminal without O_NOCTTY acquires it (Linux, setsid(2)), so the arms run
`sh -c 'exec 0<>"$0" 1>&0 2>&0; exec "$@"' TTY command…` in their new session (`TTY_OPEN`).
Then the kernel sends SIGWINCH to the command on every `resize`, and job control works.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import termios
import threading
import time
from pathlib import Path

CHUNK = 1 << 16
# After the command ended, how long what it left holding the terminal may keep it open.
DRAIN_SECONDS = 2.0
# Run in the command's own session: the new terminal ($0) becomes the controlling one.
TTY_OPEN = 'exec 0<>"$0" 1>&0 2>&0;'
EOT = b"\x04"


def window_size(fd: int) -> tuple[int, int] | None:
    """(rows, columns) of the terminal at `fd`; None when it is not a terminal."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8)))
    except OSError:
        # not a terminal (a pipe, a file): no size to forward
        return None
    return rows, cols


def on_terminal(tty: str, argv: list[str]) -> list[str]:
    """`argv` run with terminal `tty` as its controlling one (to be started in a new session)."""
    return ["/bin/sh", "-c", TTY_OPEN + ' exec "$@"', tty, *argv]


class CommandInput:
    """One command's input, made before the arm starts it and fed while it runs.

    `source`: the caller's descriptor (a terminal, a pipe, a file or a socket) whose bytes the
    command reads; None reads nothing (a `-t` alone: the command's stdin is its terminal,
    which no one types into). `tty`: a new pseudo-terminal of `size` (rows, columns).
    """

    def __init__(
        self, source: int | None, *, tty: bool = False, size: tuple[int, int] | None = None
    ) -> None:
        self.source = source
        self.tty = tty
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sink: int | None = None
        self.master: int | None = None
        self._slave: int | None = None
        self.read_end: int | None = None
        self._write: int | None = None
        if tty:
            self.master, self._slave = os.openpty()
            for fd in (self.master, self._slave):
                os.set_inheritable(fd, False)
            self.tty_path: str | None = os.ttyname(self._slave)
            if size is not None:
                self.resize(*size)
        else:
            self.tty_path = None
            self.read_end, self._write = os.pipe()

    def give_to(self, uid: int | None) -> None:
        """A command that drops to `uid` (a root caller's bwrap) must be able to open its
        terminal: the slave is the caller's, mode 0620, until given."""
        if self._slave is not None and uid is not None:
            os.fchown(self._slave, uid, -1)

    def go(self) -> None:
        """The pipe doubles as the arm's start gate (process.py): the gate's `read` takes this
        line, and the caller's bytes follow it only after (`start` runs once the arm started)."""
        assert self._write is not None, "go is for the pipe; a terminal's gate is its own"
        os.write(self._write, b"go\n")

    def into(self, stdout: Path) -> None:
        """Open the stdout stream for the terminal's output before the arm starts (the
        output pump counts writers: output_pipe.py); nothing for a pipe."""
        if self.tty:
            self._sink = os.open(stdout, os.O_WRONLY | os.O_CLOEXEC)

    def start(self) -> None:
        """The arm has started the command: feed it, and read its terminal. Our slave end stays
        open until `finish`: the command opens the terminal by its name a moment after its
        start, and a master with no slave holder reads EIO -- the reader ended before the
        first byte and a docker -t run showed nothing (seen once in five)."""
        if self.source is not None:
            self._spawn(self._feed, "sprawl-stdin")
        elif self._write is not None:
            os.close(self._write)
            self._write = None
        if self.master is not None:
            self._spawn(self._read_terminal, "sprawl-tty")

    def resize(self, rows: int, cols: int) -> None:
        """The caller's window changed: the kernel tells the command (SIGWINCH)."""
        if self.master is not None:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def finish(self, grace: float = DRAIN_SECONDS) -> None:
        """The command ended: read what its terminal still holds (to EIO: no holder left, or
        `grace` for what the command left holding it), stop feeding, close all."""
        deadline = time.monotonic() + grace
        if self._slave is not None:
            os.close(self._slave)
            self._slave = None
        for thread in self._threads:
            if thread.name == "sprawl-tty":
                thread.join(grace)
        self._stop.set()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()) + 0.5)
        self.close()

    def close(self) -> None:
        self._stop.set()
        for name in ("_slave", "_write", "read_end", "_sink", "master"):
            fd = getattr(self, name)
            setattr(self, name, None)
            if fd is not None:
                # close(2) releases the fd even when it reports an error: nothing to undo
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _spawn(self, target: object, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _feed(self) -> None:
        """Caller -> command, until the caller's EOF or the command's end."""
        assert self.source is not None
        target = self.master if self.master is not None else self._write
        poller = select.poll()
        poller.register(self.source, select.POLLIN | select.POLLHUP)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            try:
                chunk = os.read(self.source, CHUNK)
            except BlockingIOError:
                # woken for nothing (a non-blocking source): poll again
                continue
            except OSError:
                # the source failed (a closed terminal): end of the caller's input
                chunk = b""
            if not chunk:
                break
            if not self._write_all(target, chunk):
                return
        if self.master is not None:
            # a terminal has no EOF of its own: ^D is what a person types for it
            self._write_all(self.master, EOT)
        elif self._write is not None:
            fd, self._write = self._write, None
            # the command reads EOF; a close that reports an error still released the fd
            with contextlib.suppress(OSError):
                os.close(fd)

    def _write_all(self, fd: int | None, data: bytes) -> bool:
        while data and fd is not None:
            try:
                data = data[os.write(fd, data) :]
            except OSError:
                # the command closed its end (EPIPE) or the terminal went away: it reads no more
                return False
        return True

    def _read_terminal(self) -> None:
        """Command's terminal -> the stdout stream, until every holder of the slave is gone
        (EIO, ours closed by `finish`), or `finish` gives up on what the command left."""
        assert self.master is not None
        poller = select.poll()
        poller.register(self.master, select.POLLIN | select.POLLHUP)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            try:
                chunk = os.read(self.master, CHUNK)
            except OSError:
                # EIO: the slave has no holder left -- the command and all it left are gone
                return
            if not chunk:
                return
            if self._sink is not None and not self._write_all(self._sink, chunk):
                return
