"""The "bwrap as non-root" conformance row (and landlock's): test_conformance_native's bwrap
and landlock tests, run by an account of their own (CI runs as root, where the same tests
are the "bwrap as root" row).

The account (`sprawl-bwrap-caller`, a nologin system account made here if missing) gets
search -- only -- on the way to this checkout and to the interpreter running the tests
(pyenv keeps it under /root, mode 0700), through the same named ACL entries a root
caller's sandbox uid gets (native_fallbacks/sandbox_uid.py).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sprawl_orch.native_fallbacks.sandbox_uid import grant_search
from tests.integration.conformance import absent

ACCOUNT = "sprawl-bwrap-caller"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux's")


def caller_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(ACCOUNT)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                ACCOUNT,
            ],
            check=True,
        )
        return pwd.getpwnam(ACCOUNT)


def test_bwrap_conforms_as_a_non_root_caller() -> None:
    if os.geteuid() != 0:
        pytest.skip(
            "this run is not root: test_conformance_native's bwrap tests are the "
            "non-root row already"
        )
    if shutil.which("bwrap") is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    if shutil.which("setpriv") is None:
        absent("setpriv", "not installed (util-linux)")
    account = caller_account()
    uid, gid = account.pw_uid, account.pw_gid
    # Not under pytest's own basetemp: /tmp/pytest-of-root is chmod 0700'ed (its ACL mask
    # reset) and its old numbered dirs removed by every other pytest session on the machine.
    # Under /home, as an account's: the native view never binds /tmp or /var/tmp (issue 30),
    # and the conformance test's PATH tool directory lives in this home.
    Path("/home").mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="sprawl-bwrap-caller-", dir="/home"))
    os.chown(home, uid, gid)
    try:
        _run_as(uid, gid, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run_as(uid: int, gid: int, home: Path) -> None:
    for path in (REPO, Path(os.path.realpath(sys.executable)), home):
        grant_search(path, uid)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CI": os.environ.get("CI", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            f"--basetemp={home / 'pytest'}",
            "tests/integration/test_conformance_native.py",
            "-k",
            "bwrap or landlock",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    said = done.stdout[-3000:] + done.stderr[-2000:]
    print(said)
    assert done.returncode == 0, said
    # The row: every axis as claimed, the user axis not kept, and the host side agrees.
    assert f"bwrap as uid {uid}: user=no" in done.stdout, said
    assert (
        "linux_namespaces: filesystem=yes, network=yes, process_tree=yes, user=no, "
        "resources=no" in done.stdout
    ), said
    assert "'read_secret': True" in done.stdout and "'ours': True" in done.stdout, said
    # The landlock row as non-root: the caller's uid, so a chmod of the caller's file by
    # its path is not stopped (Landlock governs no chmod): filesystem and user not claimed.
    assert f"landlock as uid {uid}: user=no" in done.stdout, said
    assert (
        "landlock: filesystem=no, network=yes, process_tree=yes, user=no, resources=no"
        in done.stdout
    ), said
