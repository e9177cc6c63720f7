"""Where the exec server is and what both ends read before a call (core/exec_place.py) and
the call's header the client writes (client/exec_client.py), as the real program does them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.client.exec_client import call_header
from tests.unit.test_exec_client import PROGRAM, env, program, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_client


@pytest.mark.parametrize("signals", [([2, 10], [1]), ([], []), ([64], list(range(1, 65)))])
@pytest.mark.parametrize(
    ("args", "cwd", "environ", "umask"),
    [
        (["true"], "/tmp", {"A": "b"}, 0o22),
        # quotes, backslashes, controls, non-ASCII, an undecodable byte (a lone surrogate)
        (
            ['a"b\\c', "\udcff\n\t\x00", "\u00e9\u6f22\U0001f600", ""],
            "/t/\udce9",
            {"K\x01": "v\u2028"},
            0,
        ),
        ([], "/", {}, 0o777),
    ],
)
def test_the_call_header_is_what_json_dumps_gives(
    args: list[str],
    cwd: str,
    environ: dict[str, str],
    umask: int,
    signals: tuple[list[int], list[int]],
) -> None:
    """The client encodes with json's C string encoder alone; the server decodes with json."""
    blocked, ignored = signals
    want = {"op": "exec", "args": args, "cwd": cwd, "env": environ, "umask": umask}
    want |= {"blocked": blocked, "ignored": ignored}
    header = call_header(args, cwd, environ, umask, blocked, ignored)
    assert header == json.dumps(want).encode()
    assert json.loads(header) == want


def test_a_caller_whose_name_is_not_utf8_is_served_and_the_server_lives(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """/proc/PID/status names the file a process ran, in whatever bytes: both ends read it
    (core/exec_place.context). Such a client crashed with UnicodeDecodeError; a caller so
    named that connects by hand must not take the server down either."""
    odd = os.path.join(os.fsencode(tmp_path), b"\xffsprawl")
    os.symlink(PROGRAM, odd)
    args = ["exec", "-C", str(tree), "--", "true"]
    done = subprocess.run([odd, *args], capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0 and b"Runs under copied_tree" in done.stderr, done.stderr[-2000:]
    before = program(["server", "status"], env).stdout
    hand = (
        "import ctypes, os; from sprawl_orch.client.exec_client import connect; "
        "from sprawl_orch.core.exec_place import socket_path; "
        "path = socket_path(dict(os.environ)); "
        "ctypes.CDLL(None).prctl(15, b'\\xffnamed', 0, 0, 0); "  # PR_SET_NAME
        "connect(path).close()"
    )
    subprocess.run([sys.executable, "-c", hand], env=env, timeout=60, check=True)
    assert program(args, env).returncode == 0
    assert program(["server", "status"], env).stdout == before  # the same server, same pid


def test_the_code_stamp_sees_every_py_file_and_each_change(tmp_path: Path) -> None:
    """The server's socket name holds the code's stamp: a .py file added, grown or touched
    anywhere below (but in __pycache__) is another server (core/exec_place.py)."""
    from sprawl_orch.core.exec_place import _stamp_tree

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("b")
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    (tmp_path / "pkg" / "__pycache__" / "c.py").write_text("cached")

    def stamp() -> list[str]:
        lines: list[str] = []
        _stamp_tree(str(tmp_path / "pkg"), lines)
        return lines

    first = stamp()
    assert [line.split(":")[0] for line in first] == [
        f"{tmp_path}/pkg/a.py",
        f"{tmp_path}/pkg/sub/b.py",
    ]
    (tmp_path / "pkg" / "sub" / "b.py").write_text("bb")
    grown = stamp()
    assert grown != first
    os.utime(tmp_path / "pkg" / "a.py", ns=(1, 1))
    assert stamp() != grown
    (tmp_path / "pkg" / "sub" / "new.py").write_text("")
    assert len(stamp()) == 3
