"""Real bwrap: the copy sits at the working directory's path (also under /tmp), the probe
cannot write, no host socket place is in the view, and nothing outside the copy is
writable (the tree's own absolute path is the copy; /tmp is private)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.native_fallbacks.bwrap import bwrap_argv, probe, probe_argv
from sprawl_orch.native_fallbacks.bwrap_view import system_view
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conformance import absent
from tests.polling import until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux's")


@pytest.fixture
def bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    assert path is not None
    ok, why = probe(path, "/")
    if not ok:
        absent("an unprivileged user namespace", why)
    return path


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    # Explicitly under /tmp: the default scratch root is /tmp/sprawl-orch.
    path = Path(tempfile.mkdtemp(prefix="sprawl-bwrap-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run(argv: list[str], fd: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        pass_fds=() if fd is None else (fd,),
    )


def test_a_copy_under_tmp_is_visible_and_writable_at_the_workdirs_path(
    bwrap: str, under_tmp: Path
) -> None:
    copy, work = under_tmp / "copy", under_tmp / "work"
    copy.mkdir()
    (copy / "seen.txt").write_text("here\n")
    argv = bwrap_argv(
        bwrap,
        system_view(),
        copy,
        work,
        ["sh", "-c", f"pwd && cat seen.txt && echo w > {work}/written.txt"],
    )
    done = run(argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{work}\nhere\n"
    assert (copy / "written.txt").read_text() == "w\n"
    assert not work.exists()


def test_the_probe_writes_nothing(bwrap: str, under_tmp: Path) -> None:
    argv = probe_argv(bwrap, under_tmp)
    argv[-1:] = ["sh", "-c", "echo x > probe-wrote.txt; echo x > /etc/probe-wrote.txt"]
    done = run(argv)
    # The working directory is an empty private directory there; the system is read-only.
    assert "Read-only file system" in done.stderr
    assert not (under_tmp / "probe-wrote.txt").exists()
    assert not Path("/etc/probe-wrote.txt").exists()


def test_no_host_socket_place_is_in_the_view(bwrap: str) -> None:
    """/run (the engines' sockets), /var, /home, /root, /tmp: absent, or private and empty."""
    script = (
        'for d in /run /tmp /var/tmp /dev/shm; do echo "$d:$(ls -A $d | wc -l)"; done; '
        "echo \"var:$(ls -A /var | tr '\\n' ' ')\"; "
        'for d in /home /root /srv /mnt /sys /var/lib; do test -e $d || echo "$d:absent"; done'
    )
    done = run(bwrap_argv(bwrap, system_view(), None, "/", ["sh", "-c", script]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "/run:0",
        "/tmp:0",
        "/var/tmp:0",
        "/dev/shm:0",
        "var:run tmp ",
        "/home:absent",
        "/root:absent",
        "/srv:absent",
        "/mnt:absent",
        "/sys:absent",
        "/var/lib:absent",
    ]


def test_writes_outside_the_copy_fail_and_the_tree_path_is_the_copy(
    bwrap: str, tmp_path: Path
) -> None:
    # Outside /tmp (a private tmpfs inside), on the root filesystem.
    tree = Path(tempfile.mkdtemp(prefix="sprawl-bwrap-tree-", dir="/var/tmp"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = parse_config(
        {
            "sandbox": {"arm": "native", "scratch_dir": str(scratch)},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    marker = f"/tmp/sprawl-bwrap-private-{secrets.token_hex(6)}"  # ours alone on the host
    try:
        with ExecTool(config, tree) as tool:
            result = tool.exec(
                [
                    "sh",
                    "-c",
                    f"echo x > {tree}/absolute.txt && cat "
                    f"{tree}/absolute.txt; echo y > /etc/sprawl-x; echo $?; "
                    f"echo y > {marker} && echo tmp-ok",
                ]
            )
        assert not (tree / "absolute.txt").exists()
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    assert result.outcome == "settled", result
    lines = result.stdout.splitlines()
    # The tree's own absolute path is the copy: the write landed there, not in the tree.
    assert lines[0] == "x"
    assert lines[1] != "0"  # the system view is read-only
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
    # /tmp is a private tmpfs: writable inside, nothing lands on the host.
    assert lines[2] == "tmp-ok"
    assert not Path(marker).exists()


def escaped(marker: str) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(marker in part for part in (p.info["cmdline"] or []))
    ]


@pytest.mark.parametrize("how", ["window", "halt"])
def test_ending_a_command_takes_its_escaped_grandchildren(
    bwrap: str, tmp_path: Path, how: str
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = parse_config(
        {
            "sandbox": {"arm": "native", "scratch_dir": str(scratch)},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    # tmp_path.name is the same in another session running this test: a token of our own.
    marker = f"sprawl-{how}-{secrets.token_hex(6)}"
    line = f"setsid sh -c 'sleep 60; : {marker}' & sleep 60"
    with ExecTool(config, tree) as tool:
        if how == "window":
            result = tool.exec(["sh", "-c", line], timeout=0.5, background_ok=False)
            assert result.killed and result.detail is not None and "window" in result.detail
        else:
            started = tool.exec(["sh", "-c", line], timeout=0.5)
            assert started.outcome == "backgrounded" and started.handle is not None
            # bwrap sets up its namespaces before the shell forks the grandchild: 0.5 s was
            # not always enough for it to appear under load.
            assert until(lambda: bool(escaped(marker)), every=0.05), (
                "the grandchild should be running while backgrounded"
            )
            result = tool.halt(started.handle)
            assert result.killed
        # Killed with the sandbox's pid namespace; it leaves the table when reaped (it would
        # otherwise sleep on for a minute).
        assert until(lambda: escaped(marker) == [], every=0.05), escaped(marker)


def test_a_chmod_of_a_parent_between_commands_does_not_lock_the_sandbox_out(
    bwrap: str, tmp_path: Path
) -> None:
    """A root caller's sandbox uid reaches its copy through ACL search entries on the
    parents; a chmod of a parent rewrites the ACL mask and silences them. The next command
    must find its way again (no cached "already granted")."""
    if os.geteuid() != 0:
        pytest.skip("only a root caller's bwrap runs as a uid of its own")
    private = tmp_path / "private"
    tree = private / "tree"
    tree.mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    private.chmod(0o700)
    config = parse_config({"sandbox": {"arm": "native"}, "state": {"dir": str(private / "state")}})
    with ExecTool(config, tree) as tool:
        first = tool.exec(["cat", "a.txt"])
        private.chmod(0o700)  # the mask goes to ---: the named entry no longer counts
        tmp_path.chmod(0o700)
        second = tool.exec(["cat", "a.txt"])
    assert (first.exit_code, first.stdout) == (0, "a\n"), first.stderr
    assert (second.exit_code, second.stdout) == (0, "a\n"), second.stderr


def test_no_nested_user_namespace(bwrap: str) -> None:
    """--disable-userns: `unshare -U` inside fails (max_user_namespaces is 0 there)."""
    done = run(
        bwrap_argv(
            bwrap,
            system_view(),
            None,
            "/",
            ["sh", "-c", "unshare -U true && echo nested || echo refused"],
        )
    )
    assert done.stdout == "refused\n", done.stderr


ISSUE_11_PROBE = (
    "import socket; s=socket.socket(socket.AF_UNIX); s.connect('/run/sprawl-orch/docker.sock');"
    " s.sendall(b'GET /_ping HTTP/1.0\\r\\n\\r\\n'); print(s.recv(60))"
)


def test_issue_11s_probe_verbatim_fails_and_the_statement_holds(bwrap: str, tmp_path: Path) -> None:
    """The command that reached dockerd as uid 0 under arm = "native" (issue 11)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    config = parse_config({"sandbox": {"arm": "native"}, "state": {"dir": str(tmp_path / "st")}})
    with ExecTool(config, tree) as tool:
        result = tool.exec(["python3", "-c", ISSUE_11_PROBE])
    assert result.outcome == "settled" and result.exit_code != 0, result
    assert "HTTP/1.0" not in result.stdout
    # Refused at socket(): the seccomp filter, before the view is even asked.
    assert "PermissionError: [Errno 1] Operation not permitted" in result.stderr
    assert result.confinement is not None
    assert result.confinement.assurances["network"] == "yes"
    assert "no unix socket can be created" in result.confinement.statement
