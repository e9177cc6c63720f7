"""`exec -i` and `exec -t` (issue 26) on every arm, by the real CLI: docker, podman,
linux_namespaces (bwrap) and copied_tree.

- without -i the command reads nothing (stdin is /dev/null), as before; with -i it reads the
  caller's bytes to their end;
- -t gives the command a terminal as stdin and stdout, of the caller's window size, and never
  the caller's own terminal (a command holding it could push keystrokes into it: TIOCSTI);
- -it: what the caller types reaches the command through its terminal; the exit status
  and the statement on stderr are as without.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.integration.test_contract_real import ARMS, ENGINES

CLI = [sys.executable, "-c", "from sprawl_orch.cli import main; main()"]


@pytest.fixture(params=ARMS)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    arm = str(request.param)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "scratch").mkdir()
    if arm in ENGINES:
        image = request.getfixturevalue(f"{arm}_image")
        sandbox = (
            f'arm = "container"\n[sandbox.container]\nengine = "{arm}"\n'
            f'[sandbox.container.images]\n{arm} = "{image}"\n'
        )
    else:
        sandbox = 'arm = "native"\n' if arm == "linux_namespaces" else 'arm = "copied_tree"\n'
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\nscratch_dir = "{tmp_path / "scratch"}"\n{sandbox}'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    return tree


def run(tree: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "exec", "-C", str(tree), *args],
        input=stdin,
        capture_output=True,
        timeout=240,
        check=False,
    )


def test_stdin_reaches_the_command_only_with_i(tree: Path) -> None:
    piped = b"piped\n\x00\xff bytes as they are"
    closed = run(tree, "--", "cat", stdin=piped)
    assert (closed.returncode, closed.stdout) == (0, b""), closed.stderr
    given = run(tree, "-i", "--", "cat", stdin=piped)
    assert (given.returncode, given.stdout) == (0, piped), given.stderr
    assert b"sprawl-orch: Runs under" in given.stderr
    # the caller's EOF is the command's: wc ends and counts
    counted = run(tree, "--interactive", "--", "wc", "-c", stdin=b"x" * 70000)
    assert counted.stdout.split() == [b"70000"], counted.stderr


def on_a_terminal(
    tree: Path,
    args: list[str],
    typed: bytes,
    rows: int,
    cols: int,
    program: tuple[str, ...] = tuple(CLI),
    env: dict[str, str] | None = None,
) -> tuple[int, bytes, bytes, str]:
    """The CLI (or `program`: the thin client) with its stdout on a terminal of rows x cols
    (ours), stdin a pipe carrying `typed`; returns (status, what the terminal showed, stderr,
    the caller terminal's name)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    name = os.ttyname(slave)
    proc = subprocess.Popen(
        [*program, "exec", "-C", str(tree), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    assert proc.stdin is not None
    proc.stdin.write(typed)
    proc.stdin.close()
    shown = b""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: no one holds the caller's terminal any more
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    status = proc.wait(30)
    assert proc.stderr is not None
    err = proc.stderr.read()
    os.close(master)
    return status, shown, err, name


def test_t_is_a_new_terminal_of_the_callers_size(tree: Path) -> None:
    # docker 20.10 sizes the container's terminal only after the start (its API takes no
    # size at create before 1.42; `docker run -it` has the same moment): wait for it
    size = (
        'i=0; while [ "$i" -lt 100 ]; do s=$(stty size 2>/dev/null); '
        'case "$s" in ""|"0 0") i=$((i+1)); sleep 0.1;; *) break;; esac; done; echo "$s"'
    )
    script = f"test -t 0 && test -t 1 && echo both-terminals; {size}; tty; exit 3"
    status, shown, err, caller = on_a_terminal(tree, ["-t", "--", "sh", "-c", script], b"", 33, 101)
    assert status == 3, err
    lines = shown.replace(b"\r", b"").decode().splitlines()
    assert "both-terminals" in lines, (shown, err)
    assert "33 101" in lines, (shown, err)
    # its terminal is one of its own, never the caller's (a container's names are of its
    # own devpts: /dev/pts/0 there is not ours)
    names = [line for line in lines if line.startswith("/dev/")]
    assert names, lines
    if 'arm = "container"' not in (tree / "sprawl.toml").read_text():
        assert caller not in names, (names, caller)
    assert b"sprawl-orch: Runs under" in err


def test_it_carries_what_the_caller_types(tree: Path) -> None:
    status, shown, err, _ = on_a_terminal(
        tree, ["-it", "--", "sh", "-c", 'read line; echo "got:$line"'], b"hello\n", 24, 80
    )
    assert status == 0, err
    assert b"got:hello" in shown, (shown, err)


def test_without_t_stdout_is_not_a_terminal(tree: Path) -> None:
    status, shown, err, _ = on_a_terminal(
        tree, ["--", "sh", "-c", "test -t 1 && echo terminal || echo not-a-terminal"], b"", 24, 80
    )
    assert status == 0, err
    assert b"not-a-terminal" in shown, (shown, err)
