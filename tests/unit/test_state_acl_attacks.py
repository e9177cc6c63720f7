"""ACL tricks on the state directory against core/private.py's rule (a search-only named-user
entry is left; anything more is tightened): a named user with rwx, a default ACL that hands
every new entry to a named user, group bits of a real group. Judged by the kernel itself: a
process of that uid tries to list and read everything a real CLI run left under the state."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.core.private import prepare_state

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can set an ACL for another uid and act as it"
)
OTHER = 4242  # an account that is not ours
COMMAND = ("sh", "-c", "echo out > new.txt; cat s.txt")
_U_OBJ, _U, _G_OBJ, _MASK, _OTHER = 1, 2, 4, 16, 32
_NOID = 0xFFFFFFFF


def set_acl(path: Path, xattr: str, named: int, mask: int) -> None:
    entries = [(_U_OBJ, 7, _NOID), (_U, named, OTHER), (_G_OBJ, 0, _NOID), (_MASK, mask, _NOID)]
    entries.append((_OTHER, 0, _NOID))
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    try:
        os.setxattr(path, f"system.posix_acl_{xattr}", raw)
    except OSError as err:
        pytest.skip(f"no POSIX ACLs on this filesystem: {err}")


REACH = """
import os, sys
got = []
for path in sys.stdin.read().split("\\0"):
    try:
        if os.path.isdir(path):
            os.listdir(path)
            got.append("LIST " + path)
        else:
            with open(path, "rb") as fh:
                fh.read(1)
            got.append("READ " + path)
    except OSError:
        pass
print("\\n".join(got))
"""


def reached_by_other(state: Path) -> list[str]:
    """What the other uid lists or reads of every path under ``state``, its names given (a
    search entry lets it pass by names it knows or guesses, without listing)."""
    # A system interpreter: the test's own may sit under root's home, which the uid cannot pass.
    python = next((p for p in ("/usr/bin/python3", "/bin/python3") if os.path.exists(p)), None)
    if python is None:
        pytest.skip("no system python3 the other uid may run")
    paths = [str(state), *(str(p) for p in sorted(state.rglob("*")))]
    done = subprocess.run(
        [python, "-S", "-c", REACH],
        input="\0".join(paths),
        user=OTHER,
        group=OTHER,
        extra_groups=[],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in done.stdout.split("\n") if line]


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory the other uid can reach (pytest's own are 0700 on the way): the probe must
    be able to see an open state directory, or its empty answer proves nothing."""
    path = Path(tempfile.mkdtemp(prefix="sprawl-acl-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_probe_sees_an_open_directory(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open" / "f").write_text("x")
    (tmp_path / "open" / "f").chmod(0o644)
    assert reached_by_other(tmp_path / "open") == [
        f"LIST {tmp_path / 'open'}",
        f"READ {tmp_path / 'open' / 'f'}",
    ]


def test_a_named_user_with_rwx_on_the_state_directory_is_masked(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    set_acl(state, "access", 7, 7)
    assert reached_by_other(state) == [f"LIST {state}"]  # open before prepare_state
    prepare_state(state)
    assert not stat.S_IMODE(state.stat().st_mode) & 0o077
    (state / "kept").write_text("x")
    assert reached_by_other(state) == []


def test_group_bits_of_a_real_group_are_tightened(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 0, OTHER)
    state.chmod(0o750)
    prepare_state(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_a_default_acl_for_a_named_user_reaches_nothing_a_command_left(tmp_path: Path) -> None:
    """Search-only in the access ACL (what the rule keeps), rwx in the default ACL: every entry
    made under the state inherits the named entry; the modes sprawl-orch gives them must still
    mask it, through a real first sync, a command and its kept changes."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    (tree / "sub").mkdir(parents=True)
    (tree / "s.txt").write_text("secret")
    (tree / "sub" / "t").write_text("secret too")
    (tree / "s.txt").chmod(0o644)
    state.mkdir(mode=0o700)
    set_acl(state, "access", 1, 1)
    set_acl(state, "default", 7, 7)
    config = tmp_path / "sprawl.toml"
    config.write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{state}"\n'
    )
    cli = Path(sys.executable).with_name("sprawl-orch")
    done = subprocess.run(
        [str(cli), "exec", "--json", "--config", str(config), "-C", str(tree), "--", *COMMAND],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = json.loads(done.stdout)
    assert said["stdout"] == "secret", said
    assert any(p.name == "s.txt" for p in state.rglob("*"))  # the copy is under the state
    # It may search the state directory (its entry is search-only): it lists and reads nothing.
    assert reached_by_other(state) == []
