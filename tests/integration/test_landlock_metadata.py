"""What Landlock does not govern, reached on a file outside the copy that the command's uid
may write by its mode (0666: files unpacked with umask 0, shared checkouts): a `user.*`
extended attribute needs only write permission on a regular file, never its owner, and no
open. As root the command is the sandbox uid, the filesystem axis is claimed ("your tree is
untouched"), and a world-searchable tree is reached by its absolute path (atkland, issue
32: on ABI 7 the attribute landed on the person's file before seccomp refused the xattr
writes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.test_landlock_real import answers, landlock_config, need_landlock

# argv[1:]: the files to mark. Each answer: allowed, or the errno's name.
MARK = r"""
import errno, os, sys
for n, path in enumerate(sys.argv[1:]):
    for name, call in (
        ("setxattr", lambda: os.setxattr(path, "user.sprawl_probe", b"in")),
        ("lsetxattr", lambda: os.setxattr(path, "user.sprawl_p2", b"in", follow_symlinks=False)),
    ):
        try:
            call()
            print(f"{name}{n} allowed", flush=True)
        except OSError as err:
            print(f"{name}{n}", errno.errorcode[err.errno], flush=True)
"""


def _xattrs_supported(path: Path) -> bool:
    try:
        os.setxattr(path, "user.sprawl_check", b"1")
        os.removexattr(path, "user.sprawl_check")
    except OSError:  # tmpfs without user xattrs, or a filesystem mounted without them
        return False
    return True


def test_no_extended_attribute_lands_outside_the_copy(tmp_path: Path) -> None:
    need_landlock()
    if os.geteuid() != 0:
        pytest.skip("the filesystem axis is claimed for a root caller only (docs/landlock.md)")
    os.chmod(tmp_path, 0o755)  # pytest makes it 0700: the tree must be world-searchable
    tree = tmp_path / "tree"
    tree.mkdir(mode=0o755)
    (tree / "mark.py").write_text(MARK)
    (tmp_path / "scratch").mkdir()
    target, control = tree / "shared.txt", tree / "control.txt"
    for f in (target, control):
        f.write_text("the person's file\n")
        os.chmod(f, 0o666)
    assert _xattrs_supported(control), "this filesystem keeps no user.* attributes"
    with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
        host = tool.exec(["python3", "mark.py", str(control)], where="host", background_ok=False)
        done = tool.exec(["python3", "mark.py", str(target)], background_ok=False)
    # the control: on the host the same probe marks the file (the probe can see it land)
    assert answers(host.stdout).get("setxattr0") == "allowed", host
    assert "user.sprawl_probe" in os.listxattr(control), host
    said = answers(done.stdout)
    assert said.get("setxattr0") == "EPERM", done
    assert said.get("lsetxattr0") == "EPERM", done
    assert os.listxattr(target) == [], f"an attribute landed on the person's file: {done}"


TOUCH = r"""
import errno, os, sys
path = sys.argv[1]
for name, call in (
    ("now", lambda: os.utime(path)),
    ("explicit", lambda: os.utime(path, ns=(0, 0))),
    ("write", lambda: open(path, "a").write("agent\n")),
    ("chmod", lambda: os.chmod(path, 0o600)),
):
    try:
        call()
        print(name, "allowed", flush=True)
    except OSError as err:
        print(name, errno.errorcode[err.errno], flush=True)
"""


def test_times_set_to_now_are_the_one_stated_exception(tmp_path: Path) -> None:
    """A file every account may write can have its times set to now (Landlock governs no
    utime; seccomp cannot tell now from explicit times): the note says so, and nothing else
    of the file -- explicit times, bytes, bits -- changes."""
    need_landlock()
    if os.geteuid() != 0:
        pytest.skip("the filesystem axis is claimed for a root caller only (docs/landlock.md)")
    os.chmod(tmp_path, 0o755)
    tree = tmp_path / "tree"
    tree.mkdir(mode=0o755)
    (tree / "touch.py").write_text(TOUCH)
    (tmp_path / "scratch").mkdir()
    target = tree / "shared.txt"
    target.write_text("the person's file\n")
    os.chmod(target, 0o666)
    os.utime(target, ns=(10**18, 10**18))
    with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
        done = tool.exec(["python3", "touch.py", str(target)], background_ok=False)
    said = answers(done.stdout)
    assert said == {"now": "allowed", "explicit": "EPERM", "write": "EACCES", "chmod": "EPERM"}, (
        done
    )
    assert target.read_text() == "the person's file\n"
    assert stat_bits(target) == 0o666
    assert done.confinement is not None
    assert "times set to now" in done.confinement.statement, done.confinement.statement


def stat_bits(path: Path) -> int:
    return path.stat().st_mode & 0o7777
