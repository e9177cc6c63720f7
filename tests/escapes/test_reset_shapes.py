"""Escape class **reset races**, shapes of what a command leaves that the forking hopper of
test_reset_races.py does not try (issue 30 break 3, attacked again). Each probe: a first
command leaves something in a warm container; the next command of the same tool must find
the container holding its init alone and nothing of the first, judged from the host (the
container's pids cgroup and the engine's list of containers), never by the probe.

- `stopped`: a process stopped by SIGSTOP (and its child) when the cgroup is frozen.
- `deep-tmp`: a directory 1500 levels deep in /tmp (the reset walks /tmp and deletes what is
  new; a walk or a delete that recurses per level fails on it). Before the fix the reset
  raised RecursionError: the result was E_INTERNAL and the warm container was neither
  removed nor kept (it outlived its tool, still holding the tree).
"""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.test_reset_races import pids_current, settled_count

# A directory chain deeper than Python's recursion limit (1000), with a file at the bottom.
DEEP = (
    "i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || exit 9; i=$((i+1)); done; "
    "echo x >f; echo deep"
)
STOPPED = "sh -c 'sleep 1000 & sleep 1000' & p=$!; sleep 0.2; kill -STOP $p; echo stopped"


def warm_config(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, object]:
    image = str(request.getfixturevalue(f"{engine}_image"))
    (tmp_path / "scratch").mkdir()
    return {
        "sandbox": {
            "arm": "container",
            "scratch_dir": str(tmp_path / "scratch"),
            "container": {"engine": engine, "images": {engine: image}, "warm": True},
        },
        "state": {"dir": str(tmp_path / "state")},
    }


def containers_named(engine: str, name: str) -> list[str]:
    done = subprocess.run(
        [engine, "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [n for n in done.stdout.split() if n == name]


@pytest.mark.parametrize("shape", ["stopped", "deep-tmp"])
@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_what_a_command_leaves_never_reaches_the_next(
    engine: str, shape: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    token = secrets.token_hex(5)
    line, said = (STOPPED, "stopped") if shape == "stopped" else (f"cd /tmp && {DEEP}", "deep")
    names: list[str] = []
    with ExecTool(parse_config(warm_config(engine, tmp_path, request)), tree, warm=True) as tool:
        first = tool.exec(["true"], timeout=120)
        record = first.as_json_dict().get("container") or {}
        assert first.outcome == "settled" and record.get("warm"), (first.code, first.detail)
        names.append(str(record["name"]))
        counter, _ = pids_current(names[0], engine)
        idle = int(counter.read_text())
        left = tool.exec(["sh", "-c", line, token], timeout=120)
        got = left.as_json_dict()
        assert left.outcome == "settled", (left.code, left.detail)
        assert said in left.stdout, f"the probe never did its part: {got}"
        rec = got.get("container") or {}
        names.append(str(rec.get("name")))
        if not rec.get("replaced_after"):
            # kept: it must hold its init alone, and the next command find nothing
            assert settled_count(counter, idle, time.monotonic() + 5.0) == idle, (
                f"{shape}: {engine}'s kept container holds {counter.read_text().strip()} "
                f"processes after the reset (idle {idle})"
            )
        nxt = tool.exec(["sh", "-c", "ls -a /tmp; echo looked"], timeout=120)
        assert nxt.outcome == "settled" and "looked" in nxt.stdout, (nxt.code, nxt.detail)
        if (nxt.as_json_dict().get("container") or {}).get("reused"):
            assert "d" not in nxt.stdout.split(), f"{shape}: /tmp/d reached the next command"
    # Judged from the engine: no container of this tool outlived it.
    outlived = [n for n in dict.fromkeys(names) if containers_named(engine, n)]
    print(f"{engine} {shape}: replaced_after={rec.get('replaced_after')!r}; outlived {outlived}")
    assert not outlived, f"{shape}: {engine} containers {outlived} outlived their tool"
