"""Real bwrap: the mount order keeps a copy under /tmp visible, the probe cannot write, and
nothing outside the copy is writable (not the source tree by absolute path, not /tmp)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from native_fallbacks.bwrap import bwrap_argv, probe, probe_argv
from orchestrator.config import parse_config
from orchestrator.exec_tool import ExecTool
from tests.integration.conformance import absent

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


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_a_copy_under_tmp_is_visible_and_writable(bwrap: str, under_tmp: Path) -> None:
    copy = under_tmp / "copy"
    copy.mkdir()
    (copy / "seen.txt").write_text("here\n")
    done = run(bwrap_argv(bwrap, copy, ["sh", "-c", "cat seen.txt && echo w > written.txt"]))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "here\n"
    assert (copy / "written.txt").read_text() == "w\n"


def test_the_spec_order_would_hide_it(bwrap: str, under_tmp: Path) -> None:
    """Why the order matters: with --tmpfs /tmp after the bind, the copy is covered."""
    copy = under_tmp / "copy"
    copy.mkdir()
    (copy / "seen.txt").write_text("here\n")
    argv = bwrap_argv(bwrap, copy, ["cat", str(copy / "seen.txt")])
    i = argv.index("--tmpfs")
    tmpfs = argv[i:i + 2]
    del argv[i:i + 2]
    j = argv.index("--dev")
    argv[j:j] = tmpfs
    assert run(argv).returncode != 0


def test_the_probe_writes_nothing(bwrap: str, under_tmp: Path) -> None:
    argv = probe_argv(bwrap, under_tmp)
    argv[-1:] = ["sh", "-c", "echo x > probe-wrote.txt"]
    done = run(argv)
    assert done.returncode != 0
    assert "Read-only file system" in done.stderr
    assert not (under_tmp / "probe-wrote.txt").exists()


def test_writes_outside_the_copy_fail(bwrap: str, tmp_path: Path) -> None:
    # Outside /tmp, so the source tree is visible in the sandbox (under /tmp it would be
    # hidden by the tmpfs altogether); /var/tmp is on the root filesystem.
    tree = Path(tempfile.mkdtemp(prefix="sprawl-bwrap-tree-", dir="/var/tmp"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = parse_config({"sandbox": {"arm": "native", "scratch_dir": str(scratch)},
                           "state": {"dir": str(tmp_path / "state")}})
    marker = f"/tmp/sprawl-bwrap-private-{tmp_path.name}"
    try:
        with ExecTool(config, tree) as tool:
            result = tool.exec(["sh", "-c", f"echo x > {tree}/absolute.txt; echo $?; "
                                f"echo y > {marker} && echo tmp-ok"])
        assert not (tree / "absolute.txt").exists()
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    assert result.outcome == "settled", result
    lines = result.stdout.splitlines()
    assert lines[0] != "0"  # the source tree by absolute path: read-only
    assert "Read-only file system" in result.stderr
    # /tmp is a private tmpfs: writable inside, nothing lands on the host.
    assert lines[1] == "tmp-ok"
    assert not Path(marker).exists()


def escaped(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if any(marker in part for part in (p.info["cmdline"] or []))]


@pytest.mark.parametrize("how", ["window", "halt"])
def test_ending_a_command_takes_its_escaped_grandchildren(bwrap: str, tmp_path: Path,
                                                          how: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = parse_config({"sandbox": {"arm": "native", "scratch_dir": str(scratch)},
                           "state": {"dir": str(tmp_path / "state")}})
    marker = f"sprawl-{how}-{tmp_path.name}"
    line = f"setsid sh -c 'sleep 60; : {marker}' & sleep 60"
    with ExecTool(config, tree) as tool:
        if how == "window":
            result = tool.exec(["sh", "-c", line], timeout=0.5, background_ok=False)
            assert result.killed and result.detail is not None and "window" in result.detail
        else:
            started = tool.exec(["sh", "-c", line], timeout=0.5)
            assert started.outcome == "backgrounded" and started.handle is not None
            assert escaped(marker), "the grandchild should be running while backgrounded"
            result = tool.halt(started.handle)
            assert result.killed
        assert escaped(marker) == []
