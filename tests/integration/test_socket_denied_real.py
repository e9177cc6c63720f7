"""A docker socket this account may not open, met for real (issue 27, item 7): an account
outside the socket's group runs `sprawl-orch exec` against the project's private dockerd. The
refusal names the socket, its owner, group and mode, docker's own words, and the fix for that
error (join the group, or rootless podman) -- not "the daemon is not running … install"."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from tests.integration.conftest import missing
from tests.integration.test_rootless import ACCOUNT, PYTHON, as_account, import_view, readable_tree


def test_a_socket_the_account_may_not_open(tmp_path: Path) -> None:
    address = os.environ.get("DOCKER_HOST", "")
    path = address.removeprefix("unix://")
    if os.geteuid() != 0 or not address.startswith("unix://") or not Path(PYTHON).exists():
        missing("needs root, python3 and DOCKER_HOST on a unix socket (. .ci/env)")
    try:
        account = pwd.getpwnam(ACCOUNT)
    except KeyError:
        missing(f"no account {ACCOUNT} (run .ci/setup-engines)")
    st = os.stat(path)
    group = grp.getgrgid(st.st_gid)
    if stat.S_IMODE(st.st_mode) & 0o006 or ACCOUNT in group.gr_mem or st.st_uid == account.pw_uid:
        missing(f"{ACCOUNT} may open {path} here")
    tree = readable_tree(tmp_path)
    site = (
        tree / "site"
        if tree != Path(__file__).resolve().parents[2]
        else Path(next(p for p in sys.path if p.endswith("site-packages")))
    )
    where = Path(tempfile.mkdtemp(prefix="sprawl-denied-", dir="/tmp"))
    try:
        view = import_view(tree, where)
        work = where / "work"
        work.mkdir()
        (work / "sprawl.toml").write_text(
            '[sandbox]\narm = "container"\n\n[sandbox.container]\nengine = "docker"\n'
            f'\n[state]\ndir = "{where / "state"}"\n'
        )
        os.chown(work, account.pw_uid, account.pw_gid)
        os.chown(where, account.pw_uid, account.pw_gid)
        done = as_account(
            PYTHON,
            "-c",
            "from sprawl_orch.cli import main; main()",
            "exec",
            "-C",
            str(work),
            "--",
            "true",
            env={"PYTHONPATH": f"{view}:{site}", "DOCKER_HOST": address},
            timeout=300,
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    said = done.stderr
    assert done.returncode == 125, said
    assert f"{ACCOUNT} may not use the docker socket {path}" in said, said
    assert f":{group.gr_name}, mode {stat.S_IMODE(st.st_mode):04o}" in said, said
    assert "from DOCKER_HOST" in said and "ermission denied" in said, said
    assert f"usermod -aG {group.gr_name} {ACCOUNT}" in said, said
    assert "apt-get install" not in said and "not running" not in said, said
