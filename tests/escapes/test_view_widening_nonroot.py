"""The view-widening inputs class as a non-root caller (issue 30 broke the view for one: its
own 0600 ~/.ssh key, its ~/.local/state/sprawl-orch): test_view_widening.py's raw control and
linux_namespaces row, run by test_bwrap_nonroot.py's account with a HOME under /home."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sprawl_orch.native_fallbacks.sandbox_uid import grant_search
from tests.integration.conformance import absent
from tests.integration.test_bwrap_nonroot import REPO, caller_account

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux's")


def test_view_widening_as_a_non_root_caller() -> None:
    if os.geteuid() != 0:
        pytest.skip("this run is not root: test_view_widening.py is the non-root row already")
    if shutil.which("bwrap") is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    if shutil.which("setpriv") is None:
        absent("setpriv", "not installed (util-linux)")
    account = caller_account()
    uid, gid = account.pw_uid, account.pw_gid
    Path("/home").mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="sprawl-view-caller-", dir="/home"))
    os.chown(home, uid, gid)
    try:
        for path in (REPO, Path(os.path.realpath(sys.executable)), home):
            grant_search(path, uid)
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "CI": os.environ.get("CI", ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            # the pyenv this machine runs python from (/root/.pyenv): the common case
            **{k: v for k, v in os.environ.items() if k == "PYENV_ROOT"},
        }
        argv = [
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
            "tests/escapes/test_view_widening.py",
            "-k",
            "raw or linux_namespaces",
        ]
        done = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    said = done.stdout[-6000:] + done.stderr[-2000:]
    print(said)
    assert done.returncode == 0, said
    assert "2 passed" in done.stdout, said
    row = re.search(r"^\| linux_namespaces \| (\d+) \| blocked (\d+) \|$", done.stdout, re.M)
    assert row is not None and row.group(1) == row.group(2), said
