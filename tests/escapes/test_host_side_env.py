"""Host-side environment (attack3, issue 30's credential-name class): a variable passed through
`[sandbox] env_passthrough` is meant for the command, inside the sandbox, but the native arm
ran its host-side wrappers (ionice, nice, bwrap) -- and the container arms their engine CLI
-- with the command's whole environment, in the copy. The dynamic loader reads
LD_LIBRARY_PATH there, on the host, before any namespace exists: the classic
`export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH` leaves an empty entry (the
working directory), and a tree that ships a library a wrapper loads (libpcre2-8.so.0, via
libselinux) runs its constructor on the host. (The suite's own env-library-and-venv-names
scenario passes LD_LIBRARY_PATH as an ordinary name.)

Judged from the host: the planted library's constructor writes a mark under a host /tmp
directory, which every sandbox replaces with a private /tmp (the landlock mechanism's
command may not write there: no rule grants it) -- a mark there means the library ran
outside. `raw` (the command `ls`, which loads the same library, run in the tree without
sprawl-orch) is the control and must escape. The landlock row plants a library of its
helper's python (outside the Landlock domain, its cwd the copy), with that interpreter run
in the tree as its own control.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.native_fallbacks import landlock
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.runner import config_data, landlock_data
from tests.integration.conftest import missing

ARMS = ("raw", "linux_namespaces", "landlock", "docker", "podman")
LIBRARY_PATH = "/nonexistent-cuda/lib64:"  # the empty last entry: the working directory
EVIL = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/ran-%d", MARKS, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) { fprintf(f, "uid %d\n", (int)getuid()); fclose(f); }
}
"""


def _deps(program: str) -> dict[str, str]:
    done = subprocess.run(["ldd", program], capture_output=True, text=True, check=False)
    return dict(re.findall(r"^\s*(\S+) => (/\S+)", done.stdout, re.M))


def plant_library(tree: Path, marks: Path, wrapper: str, also: str | None = None) -> bool:
    """A library named after one that both `wrapper` and `also` (default `ls`) load (not
    libc), whose constructor marks, and which needs the real one by its absolute path (so
    the program still runs)."""
    if shutil.which("gcc") is None:
        missing("gcc is not installed (apt-get install gcc)")
    ls = also or shutil.which("ls") or "/bin/ls"
    shared = sorted(set(_deps(wrapper)) & set(_deps(ls)) - {"libc.so.6"})
    if not shared:
        # a static program (the docker CLI is Go, built static) loads nothing: holds as built
        done = subprocess.run(["ldd", wrapper], capture_output=True, text=True, check=False)
        assert "not a dynamic executable" in done.stdout + done.stderr, done.stdout
        return False
    name = shared[-1]
    real = _deps(ls)[name]
    build = tree.parent / "build"
    build.mkdir()
    (build / "stub.c").write_text("void stub(void) {}\n")
    (build / "evil.c").write_text(f'#define MARKS "{marks}"\n{EVIL}')
    cc = ["gcc", "-shared", "-fPIC"]
    subprocess.run(
        [*cc, "-o", build / "stub.so", f"-Wl,-soname,{real}", build / "stub.c"], check=True
    )
    out = ["-o", tree / name, f"-Wl,-soname,{name}", "-Wl,--no-as-needed"]
    subprocess.run([*cc, *out, build / "evil.c", build / "stub.so"], check=True)
    (tree / name).chmod(0o755)
    return True


def _data(arm: str, tmp: Path, request: pytest.FixtureRequest) -> tuple[dict[str, Any], str]:
    scratch, state = tmp / "scratch", tmp / "state"
    scratch.mkdir()
    if arm in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{arm}_image"))
        cli = shutil.which(arm) or arm
        return config_data("container", scratch, state, (arm, image)), cli
    if arm == "landlock":  # the helper: python, outside the Landlock domain, cwd the copy
        return landlock_data(scratch, state), landlock.python()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    return config_data("native", scratch, state), os.path.realpath(bwrap)


@pytest.mark.parametrize("arm", ARMS)
def test_a_passed_through_loader_path_never_reaches_the_host_side(
    arm: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = Path(f"/tmp/esc-hostenv-{secrets.token_hex(4)}")
    marks.mkdir(mode=0o1777)
    marks.chmod(0o1777)  # a root caller's wrappers run as the sandbox uid
    tree = tmp_path / "tree"
    tree.mkdir()
    try:
        if arm == "raw":
            plant_library(tree, marks, shutil.which("ls") or "/bin/ls")
            env = {"PATH": os.defpath, "LD_LIBRARY_PATH": LIBRARY_PATH}
            subprocess.run(["ls"], cwd=tree, env=env, capture_output=True, check=False)
            assert list(marks.iterdir()), "the control did not escape: the probe sees nothing"
            return
        data, wrapper = _data(arm, tmp_path, request)
        # The landlock helper's python shares no library with ls: a library of its own is
        # planted, and its control is the helper's interpreter run in the tree.
        also = wrapper if arm == "landlock" else None
        if not plant_library(tree, marks, wrapper, also):
            return  # a static engine CLI (docker's) loads no library: holds as built
        if also is not None:
            env = {"PATH": os.defpath, "LD_LIBRARY_PATH": LIBRARY_PATH}
            subprocess.run([also, "-c", "pass"], cwd=tree, env=env, check=False)
            assert list(marks.iterdir()), "the control did not escape: the probe sees nothing"
            for mark in marks.iterdir():
                mark.unlink()
        data["sandbox"]["env_passthrough"] = ["LD_LIBRARY_PATH"]
        environ = {**os.environ, "LD_LIBRARY_PATH": LIBRARY_PATH}
        monkeypatch.chdir(tree)  # `sprawl-orch exec` is run from the tree: its cwd
        with ExecTool(parse_config(data), tree, environ=environ) as tool:
            for _ in range(2):  # the second may reuse what the first made
                result = tool.exec(["ls"], where="sandbox", timeout=120, background_ok=False)
                assert result.outcome == "settled", result
            seen = tool.exec(["sh", "-c", "echo LDP=$LD_LIBRARY_PATH"], where="sandbox")
        # the command is still given the variable: only the host side goes without it
        assert f"LDP={LIBRARY_PATH}" in seen.stdout, seen
        ran = [f"{p.name}: {p.read_text().strip()}" for p in marks.iterdir()]
        assert not ran, f"ESCAPED on {arm}: the tree's library ran on the host side: {ran}"
    finally:
        shutil.rmtree(marks, ignore_errors=True)
