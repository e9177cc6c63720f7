"""native_fallbacks/probe_memo.py with the real bwrap and kernel: a pass is kept once per
bwrap and kernel settings; a replaced bwrap or a changed user-namespace sysctl is asked
again; and should namespaces stop working with a pass kept anyway, the command fails closed
in bwrap, in bwrap's words (nothing of it runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.core import served_memo
from sprawl_orch.native_fallbacks import probe_memo
from sprawl_orch.native_fallbacks.bwrap import probe
from tests.integration.conftest import missing


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    served_memo._memo.clear()
    yield
    served_memo._memo.clear()


@pytest.fixture
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    assert found is not None
    return found


def kept() -> int:
    return sum(1 for s in served_memo._memo if f'["{probe_memo.KIND}",' in s)


def test_a_pass_is_kept_once_and_a_replaced_bwrap_is_asked_again(
    bwrap: str, tmp_path: Path
) -> None:
    assert probe(bwrap, tmp_path) == (True, "")
    assert probe(bwrap, tmp_path) == (True, "") and kept() == 1
    copy = tmp_path / "bwrap"
    shutil.copy2(bwrap, copy)  # another file, same bytes and mtime: another identity
    assert probe(str(copy), tmp_path) == (True, "") and kept() == 2
    os.utime(copy)
    assert probe(str(copy), tmp_path) == (True, "") and kept() == 3


CHILD = """
import os, subprocess, sys
from pathlib import Path
from sprawl_orch.core import served_memo
from sprawl_orch.native_fallbacks import probe_memo
from sprawl_orch.native_fallbacks.bwrap import bwrap_argv, probe
from sprawl_orch.native_fallbacks.bwrap_view import system_view
bwrap, work, copy = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
assert probe(bwrap, work, None) == (True, ""), "namespaces work before"
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")  # this user namespace may make no more: what a distribution's switch does
ok, why = probe(bwrap, work, None)
print("after the change:", ok, why)
view = system_view()
seen = [list(view.binds), [list(link) for link in view.links]]
served_memo.learn(probe_memo.KIND, probe_memo.key(bwrap, str(work), None, seen), True)
print("kept anyway:", probe(bwrap, work, None))
argv = bwrap_argv(bwrap, view, copy, work, ["sh", "-c", "echo ran > ran.txt"])
done = subprocess.run(argv, capture_output=True, text=True)
print("command:", done.returncode, done.stderr.strip())
"""


def test_namespaces_stopping_is_asked_again_and_a_kept_pass_fails_closed(
    bwrap: str, tmp_path: Path
) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        missing("unshare is not installed (util-linux)")
    assert unshare is not None
    work, copy = tmp_path / "work", tmp_path / "copy"
    work.mkdir()
    copy.mkdir()
    child = [sys.executable, "-c", CHILD, bwrap, str(work), str(copy)]
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", *child],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the sysctl is part of the key: the probe ran again, and was refused
    assert lines[0].startswith("after the change: False") and "namespace" in lines[0]
    assert lines[1] == "kept anyway: (True, '')"
    # the command under the stale pass: bwrap could not make its namespaces, nothing ran
    assert lines[2].startswith("command: 1 ") and "namespace" in lines[2]
    assert not (copy / "ran.txt").exists() and not (work / "ran.txt").exists()
