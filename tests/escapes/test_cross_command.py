"""Two commands of two working directories at once, as one host uid (issue #14: the user axis
claims a principal of its own). The same host uid is by design on two arms: bwrap for a root
caller (every command runs as sprawl-orch's one sandbox uid) and docker userns-remap (every
container of the daemon shares the remap range). Podman --userns=auto gives each copy's
container a range of its own (test_userns_share.py). Sharing a uid is only safe if the
commands still cannot reach each other, which is what this tries:

- command A (copy A) runs a marked sleeper and leaves marked files in its copy, /tmp and
  /dev/shm; while it runs, command B (copy B) sweeps every /proc entry it can see for the
  sleeper (and SIGKILLs it when found) and searches its whole view for A's files;
- the host judges: A's marker never in B's output, A's sleeper alive when B is done.

The landlock mechanism shares the host's /proc and claims no user axis: there B must see A's
command line, and still neither A's files nor (from Landlock ABI 6) a signal to A.

Unix and abstract sockets are not tried here: every arm gives each command its own network
namespace, and bwrap's seccomp refuses AF_UNIX (probes_net.py tries both per arm).
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.native_fallbacks import landlock
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing

WAIT_S = 180.0
A = """
tok=$1
echo "a-$tok" > a-marker-$tok; echo "a-$tok" > /tmp/a-marker-$tok
echo "a-$tok" > /dev/shm/a-marker-$tok 2>/dev/null
touch a-started
sh -c 'while [ ! -e stop ]; do sleep 0.2; done; echo a-$0' "sleeper-$tok" &
wait
echo A-DONE
"""
B = """
tok=$1
for p in /proc/[0-9]*; do
  if busybox grep -q "sleeper-$tok" $p/cmdline 2>/dev/null; then
    echo "SAW ${p#/proc/} $(busybox tr '\\0' ' ' < $p/cmdline)"; kill -9 ${p#/proc/}
  fi
done
busybox find / -path /proc -prune -o -name "a-marker-$tok" -print 2>/dev/null | sed 's/^/FOUND /'
echo B-DONE
"""


def config(tmp: Path, arm: str, container: dict[str, Any] | None = None) -> dict[str, Any]:
    sandbox: dict[str, Any] = {"arm": arm, "scratch_dir": str(tmp / "scratch")}
    if container:
        sandbox["container"] = container
    return {"sandbox": sandbox, "state": {"dir": str(tmp / "state")}}


def tree(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.mkdir()
    (path / "f.txt").write_text("x\n")
    return path


def started(tmp: Path) -> Path | None:
    found = list((tmp / "state" / "copies").glob("*/*/tree/a-started"))
    return found[0].parent if found else None


def run_pair(
    tmp: Path, data: dict[str, Any], *, sees_cmdlines: bool = False, kills: bool = False
) -> tuple[ExecResult, ExecResult]:
    """`sees_cmdlines`: B may print A's command line (an arm sharing the host's /proc, whose
    user axis is not claimed); `kills`: B's SIGKILL reaches A's sleeper (the same uid with
    no signal scoping) -- then A's sleeper must have died, so the row still proves which."""
    tok = secrets.token_hex(4)
    (tmp / "scratch").mkdir()
    tool_a = ExecTool(parse_config(data), tree(tmp, "A"))
    tool_b = ExecTool(parse_config(data), tree(tmp, "B"))
    got: dict[str, ExecResult] = {}
    runner = threading.Thread(
        target=lambda: got.setdefault(
            "a", tool_a.exec(["sh", "-c", A, "sh", tok], timeout=2 * WAIT_S)
        )
    )
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while started(tmp) is None and "a" not in got:
            assert time.monotonic() < deadline, "A's command never started"
            time.sleep(0.1)
        assert "a" not in got, got["a"].as_json_dict()
        b = tool_b.exec(["sh", "-c", B, "sh", tok], timeout=WAIT_S)
        a_ended_first = "a" in got
    finally:
        copy_a = started(tmp)
        if copy_a is not None:
            (copy_a / "stop").touch()
        runner.join(2 * WAIT_S)
        tool_a.close()
        tool_b.close()
    a = got["a"]
    for name, r in (("A", a), ("B", b)):
        assert r.outcome == "settled", f"{name}: {r.as_json_dict()}"
    assert "B-DONE" in b.stdout, b.as_json_dict()
    seen = [line for line in b.stdout.splitlines() if line.startswith(("SAW", "FOUND"))]
    if sees_cmdlines:
        assert any(line.startswith("SAW") for line in seen), f"B never saw A: {b.stdout}"
        seen = [line for line in seen if not line.startswith("SAW")]
    assert not seen, f"B reached A: {seen}"
    assert "A-DONE" in a.stdout, a.as_json_dict()
    if kills:
        assert f"a-sleeper-{tok}" not in a.stdout, f"B's SIGKILL missed A's sleeper: {a.stdout}"
        return a, b
    assert not a_ended_first, "A's command ended before B's was done: nothing was tried"
    assert f"a-sleeper-{tok}" in a.stdout, (
        f"A's sleeper did not live to the end: {a.stdout} {a.stderr}"
    )
    assert a.confinement is not None and b.confinement is not None
    return a, b


def test_bwrap_commands_of_a_root_caller_do_not_reach_each_other(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap is not installed (apt-get install bubblewrap)")
    if os.geteuid() != 0:
        pytest.skip("the shared sandbox uid is a root caller's (non-root: the caller's own)")
    a, b = run_pair(tmp_path, config(tmp_path, "native"))
    for r in (a, b):  # both claim a principal of their own, though it is one host uid
        assert r.confinement is not None and r.confinement.assurances["user"] == "yes"


def test_landlock_commands_see_each_others_cmdline_only(tmp_path: Path) -> None:
    """The landlock mechanism shares the host's /proc and (as root) one sandbox uid, so B
    reads A's command line -- why its user axis is not claimed (docs/landlock.md) -- but not
    A's files (no rule grants another copy), and from Landlock ABI 6 its SIGKILL is scoped
    away from A's processes; below ABI 6 it lands (the same uid, nothing between them)."""
    data = config(tmp_path, "native")
    data["sandbox"]["native"] = {"mechanism": "landlock"}
    a, b = run_pair(tmp_path, data, sees_cmdlines=True, kills=landlock.abi() < landlock.SCOPE_ABI)
    for r in (a, b):
        assert r.arm == "landlock", r.as_json_dict()
        assert r.confinement is not None and r.confinement.assurances["user"] == "no"


def test_userns_remap_containers_do_not_reach_each_other(
    tmp_path: Path, docker_userns: tuple[dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env, image = docker_userns
    monkeypatch.setenv("DOCKER_HOST", env["DOCKER_HOST"])
    a, b = run_pair(
        tmp_path, config(tmp_path, "container", {"engine": "docker", "images": {"docker": image}})
    )
    for r in (a, b):  # both claim a principal of their own, though it is one host uid
        assert r.confinement is not None and r.confinement.assurances["user"] == "yes"
