"""A Landlock-confined caller stays confined through the exec server (atkserve, issue 26).

Landlock is kept across fork and exec and shown nowhere in /proc (no status field, no
namespace), so the server's check of its caller (exec_place.context) did not see it: a caller
whose domain let it make files only beneath /tmp had its served command make one anywhere,
where the in-process CLI's command was refused -- as root without no_new_privs (root may
restrict itself so) and as any caller with it once another no_new_privs caller had started
the server. Run by the real `sprawl-orch` on the copied_tree arm, whose command runs in the
server's own domain.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import missing
from tests.integration.test_exec_server_attacks import env, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_server_attacks

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))
# Run argv[2:] in a Landlock domain that handles only the making of regular files and allows
# it beneath argv[1] and /dev (the CLI's own state and scratch live under the first).
CONFINE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
MAKE_REG = 1 << 8
class Attr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]
class Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
attr = Attr(MAKE_REG)
ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
assert ruleset >= 0, os.strerror(ctypes.get_errno())
for path in (sys.argv[1], "/dev"):
    rule = Beneath(MAKE_REG, os.open(path, os.O_PATH))
    assert libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) == 0
if os.environ.pop("CONFINE_NNP", ""):
    assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.syscall(446, ruleset, 0) == 0, os.strerror(ctypes.get_errno())
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _landlock() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(444, None, 0, 1) < 1:  # LANDLOCK_CREATE_RULESET_VERSION
        missing("Landlock (Linux >= 5.13, enabled) to confine a caller")


def _exec(
    tree: Path, env: dict[str, str], argv: list[str], prefix: list[str]
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*prefix, PROGRAM, "exec", "-C", str(tree), "--", *argv],
        env=env,
        capture_output=True,
        timeout=240,
        check=False,
    )


def _outside(tmp_path: Path, tree: Path, env: dict[str, str], nnp: bool) -> None:
    # a place outside the domain's one writable tree: the test's tmp_path is under /tmp,
    # so the domain is given the test's own directory, and the target is beside it
    target = tmp_path.parent / f"atkserve-landlock-{secrets.token_hex(4)}"
    confine = [sys.executable, "-c", CONFINE, str(tmp_path)]
    env = {**env, "CONFINE_NNP": "1"} if nnp else env
    try:
        local = _exec(tree, {**env, "SPRAWL_EXEC_SERVER": "0"}, ["touch", str(target)], confine)
        assert local.returncode != 0 and not target.exists(), local.stderr  # the domain holds
        served = _exec(tree, env, ["touch", str(target)], confine)
        assert not target.exists(), served.stderr
        assert served.returncode == local.returncode, served.stderr
    finally:
        target.unlink(missing_ok=True)


def test_a_landlocked_root_caller_s_command_stays_in_its_domain(
    tmp_path: Path, tree: Path, env: dict[str, str]
) -> None:
    _landlock()
    if os.geteuid() != 0:
        missing("root, which may enter a Landlock domain without no_new_privs")
    started = _exec(tree, env, ["true"], [])  # the server, started by an unconfined caller
    assert started.returncode == 0, started.stderr
    _outside(tmp_path, tree, env, nnp=False)


def test_a_landlocked_caller_is_not_served_by_another_no_new_privs_caller_s_server(
    tmp_path: Path, tree: Path, env: dict[str, str]
) -> None:
    _landlock()
    started = _exec(tree, env, ["true"], ["setpriv", "--no-new-privs", "--"])
    assert started.returncode == 0, started.stderr
    _outside(tmp_path, tree, env, nnp=True)


def test_a_caller_in_the_server_s_own_domain_is_served(
    tmp_path: Path, tree: Path, env: dict[str, str]
) -> None:
    """The check costs no caller its server: one whose domain started the server is served
    (and its command stays confined, by that server's inherited domain)."""
    _landlock()
    confine = [sys.executable, "-c", CONFINE, str(tmp_path)]
    env = {**env, "CONFINE_NNP": "1"}
    target = tmp_path.parent / f"atkserve-landlock-{secrets.token_hex(4)}"
    # one domain for both calls: a shell confined once runs the client twice
    both = subprocess.run(
        [
            *confine,
            "sh",
            "-c",
            '"$0" exec -C "$1" -- true && "$0" exec -C "$1" -- touch "$2"; echo "status $?"',
            PROGRAM,
            str(tree),
            str(target),
        ],
        env=env,
        capture_output=True,
        timeout=240,
        check=False,
    )
    try:
        assert not target.exists(), both.stderr
        assert b"Permission denied" in both.stderr, both.stderr
        assert b"exec server is not used" not in both.stderr, both.stderr
    finally:
        target.unlink(missing_ok=True)
