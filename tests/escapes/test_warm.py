"""Warm mode (docs/warm.md): what one command leaves in a kept container must not reach the
next. A first command writes a marked file into every directory of the container it can
write (outside its copy, which the sync makes exact again); the next command, in the same
exec tool and run (so the same warm container), looks for them.

Rows: docker and podman (podman --userns=auto claims all five axes here), each with the
default command user and with uid 0 -- the idle init's own uid, as which a command could
write root's places (/dev) and ptrace or signal the init. A config the arm cannot keep
must be refused with E_CONFIG_INVALID; whatever runs must leave nothing behind.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.tool.exec_tool import ExecTool

# Every directory but /proc and /sys (kernel views; /sys/fs/cgroup, a tmpfs, is tried by
# name) and the copy: a marked file in each one the command can write.
PLANT = """
tok=$1
for d in $(busybox find / -path /proc -prune -o -path /sys -prune -o -type d -print \
          2>/dev/null) /sys/fs/cgroup; do
  case "$d" in "$PWD"|"$PWD"/*) continue;; esac
  if echo left > "$d/.esc-left-$tok" 2>/dev/null; then echo "PLANTED $d"; fi
done
echo PLANT-DONE
"""
LOOK = """
tok=$1
for d in $(busybox find / -path /proc -prune -o -path /sys -prune -o -type d -print \
          2>/dev/null) /sys/fs/cgroup; do
  case "$d" in "$PWD"|"$PWD"/*) continue;; esac
  if [ -e "$d/.esc-left-$tok" ]; then echo "LEFT $d"; fi
done
echo LOOK-DONE
"""


@pytest.mark.parametrize("user", ["65534:65534", "0:0"])
@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_warm_command_leaves_nothing_for_the_next(
    engine: str, user: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    image = str(request.getfixturevalue(f"{engine}_image"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    (tmp_path / "scratch").mkdir()
    data = {
        "sandbox": {
            "arm": "container",
            "scratch_dir": str(tmp_path / "scratch"),
            "container": {"engine": engine, "images": {engine: image}, "user": user, "warm": True},
        },
        "state": {"dir": str(tmp_path / "state")},
    }
    try:
        config = parse_config(data)
    except SprawlError as err:
        assert err.code is ErrorCode.CONFIG_INVALID, err
        assert user.startswith("0:"), f"{user} refused: {err}"
        return
    tok = secrets.token_hex(4)
    with ExecTool(config, tree, warm=True) as tool:
        first = tool.exec(["sh", "-c", PLANT, "sh", tok], timeout=180)
        assert first.outcome == "settled", first.as_json_dict()
        assert "PLANT-DONE" in first.stdout, first.as_json_dict()
        second = tool.exec(["sh", "-c", LOOK, "sh", tok], timeout=180)
        assert second.outcome == "settled", second.as_json_dict()
        assert "LOOK-DONE" in second.stdout, second.as_json_dict()
        record = second.as_json_dict().get("container") or {}
    planted = [line for line in first.stdout.splitlines() if line.startswith("PLANTED")]
    left = [line for line in second.stdout.splitlines() if line.startswith("LEFT")]
    print(
        f"{engine} warm as {user}: planted {planted}; found by the next command {left}; "
        f"reused={record.get('reused')} replaced={record.get('replaced')}"
    )
    assert planted, "the first command could write nowhere outside its copy: proves nothing"
    # Entered the first command's container (or the arm saw a change and replaced it, which
    # is the guarantee working): else nothing of warm mode was tried.
    assert record.get("reused") is True or record.get("replaced"), record
    assert not left, f"the next command in the warm container found {left}"
