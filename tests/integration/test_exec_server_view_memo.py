"""The native view's PATH part kept by the exec server (native_fallbacks/view_memo.py,
issue 26), through the real `sprawl-orch` program, its server and bwrap: between two served
calls a PATH directory gains a link into the caller's ~/.ssh and one to a new tool, and a
bound install prefix is swapped for a link to ~/.ssh -- the next call sees the new tool and
never the key."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import missing

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


@pytest.fixture
def home() -> Iterator[Path]:
    """A caller's home beside the accounts' (the guard refuses all of /tmp), 0700."""
    base = Path("/home") if os.geteuid() == 0 else Path.home()
    made = base / f"memo-view-{secrets.token_hex(4)}"
    made.mkdir(mode=0o700)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_path_dir_changed_between_two_served_calls_is_judged_again(
    tmp_path: Path, home: Path
) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    secret = f"KEY-{secrets.token_hex(8)}"
    (home / ".ssh" / "bin").mkdir(parents=True)
    (home / ".ssh" / "lib").mkdir()
    (home / ".ssh" / "id_ed25519").write_text(secret)
    tools = home / "tools" / "bin"
    tools.mkdir(parents=True)
    gadget = home / "opt" / "gadget"
    (gadget / "bin").mkdir(parents=True)
    (gadget / "lib").mkdir()
    (gadget / "bin" / "gadget").write_text("#!/bin/sh\necho gadget\n")
    (gadget / "bin" / "gadget").chmod(0o755)
    pkg = home / "pkg"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "lib").mkdir()  # an install prefix: ~/pkg is bound whole
    tree, state, scratch, runtime = (tmp_path / n for n in ("tree", "state", "scratch", "run"))
    for d in (tree, scratch):
        d.mkdir()
    runtime.mkdir(mode=0o700)
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "native"\nscratch_dir = "{scratch}"\n[state]\ndir = "{state}"\n'
    )
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{tools}:{pkg / 'bin'}:{os.environ['PATH']}",
        "XDG_RUNTIME_DIR": str(runtime),
        "SPRAWL_EXEC_SERVER_IDLE": "30",
    }
    look = (
        f"cat {home}/.ssh/id_ed25519 {tools}/key {pkg}/id_ed25519 2>/dev/null; "
        f"ls {gadget}/bin 2>/dev/null; echo end"
    )

    def served() -> str:
        done = subprocess.run(
            [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", look],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert b"exec server is not used" not in done.stderr
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    try:
        first = served()
        assert first.endswith("end\n") and secret not in first and "gadget" not in first
        (tools / "key").symlink_to(home / ".ssh" / "id_ed25519")
        (tools / "gadget").symlink_to(gadget / "bin" / "gadget")
        shutil.rmtree(pkg)
        pkg.symlink_to(home / ".ssh")  # the bound prefix now leads to the keys
        second = served()
        assert secret not in second
        assert "gadget" in second  # the new link was seen: its prefix is bound
    finally:
        subprocess.run(
            [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
        )
