"""The scratch-hijack probe (issue 22): a second account pre-creates the scratch root.

Before, `offerings` checked a machine-wide `$TMPDIR/sprawl-orch` (made with exist_ok, checked
with os.access): once one account made it 0700, every other account got "all arms
unavailable" -- root included, when an unprivileged account made it first. Now the scratch
root is the person's own (`[sandbox] scratch_dir`, else `<state dir>/copies`), lstat-ed and
owner-checked, never followed through a link.

Two real accounts: root (this test, as CI runs it) and `nobody`, switched to with setpriv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import missing

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
PROBE = (
    "import json, os, sys; from pathlib import Path;"
    "from sprawl_orch.config import parse_config;"
    "from sprawl_orch.selection.offerings import Offerings;"
    "from sprawl_orch.selection.choice import choose;"
    "o = Offerings.this_machine(parse_config({'sandbox': {'arm': 'copied_tree'}}),"
    " with_engines=False, with_native=False);"
    "c = choose('copied_tree', o);"
    "print(json.dumps({'scratch': str(o.scratch), 'problem': o.scratch_problem,"
    " 'arm': c.arm.value}))"
)


def as_account(uid: int, tmp: Path, home: Path) -> dict[str, str]:
    argv = [sys.executable, "-c", PROBE]
    if uid != os.geteuid():
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp),
        "HOME": str(home),
    }
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    answer: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return answer


@pytest.fixture
def area() -> Iterator[Path]:
    """A directory both accounts reach (pytest's own base is 0700, root's alone)."""
    if os.geteuid() != 0:
        missing("the scratch-hijack probe switches between two accounts: run it as root (CI does)")
    root = Path(tempfile.mkdtemp(prefix="sprawl-hijack-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared_tmp(area: Path) -> Path:
    shared = area / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    return shared


def home_of(area: Path, uid: int) -> Path:
    home = area / f"home-{uid}"
    home.mkdir()
    os.chown(home, uid, uid)
    return home


def plant(shared: Path, uid: int) -> None:
    """The other account makes every name an old or a guessable scratch root could have."""
    for name in ("sprawl-orch", f"sprawl-orch-{os.geteuid()}", f"sprawl-orch-{NOBODY}"):
        path = shared / name
        if not path.exists():
            path.mkdir(mode=0o700)
            os.chown(path, uid, uid)


def test_an_unprivileged_account_cannot_hold_the_scratch_root_against_root(
    area: Path, shared_tmp: Path
) -> None:
    plant(shared_tmp, NOBODY)
    got = as_account(0, shared_tmp, home_of(area, 0))
    assert got["problem"] is None and got["arm"] == "copied_tree", got
    assert not got["scratch"].startswith(str(shared_tmp)), got


def test_root_cannot_hold_it_against_another_account(area: Path, shared_tmp: Path) -> None:
    plant(shared_tmp, 0)
    got = as_account(NOBODY, shared_tmp, home_of(area, NOBODY))
    assert got["problem"] is None and got["arm"] == "copied_tree", got


def test_a_planted_link_or_foreign_directory_is_refused_not_followed(tmp_path: Path) -> None:
    from sprawl_orch.core.private import private_dir

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert "symbolic link" in (private_dir(link) or "")
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, NOBODY, NOBODY)
        assert "another account made it first" in (private_dir(foreign) or "")
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    assert "other accounts can write it" in (private_dir(loose) or "")
