"""output_pipe.py on real arms: the CLI's human mode still shows every byte live though the
host's file holds only `output_keep_bytes`; a daemon a command leaves holding its stdout
does not hold the result (the pump stops at its deadline, the daemon gets EPIPE)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.runner import config_data

CLI = "from sprawl_orch.cli import main; main()"


@pytest.mark.parametrize("row", ["copied_tree", "docker"])
def test_human_mode_shows_every_byte_past_the_cap(
    row: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "scratch").mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    engine = None
    if row == "docker":
        engine = ("docker", str(request.getfixturevalue("docker_image")))
    data = config_data(
        "container" if engine else "copied_tree", tmp_path / "scratch", tmp_path / "state", engine
    )
    lines = [f'[sandbox]\narm = "{data["sandbox"]["arm"]}"\n']
    lines.append(f'scratch_dir = "{tmp_path / "scratch"}"\n')
    if engine:
        lines.append(
            f'[sandbox.container]\nengine = "docker"\nimages = {{ docker = "{engine[1]}" }}\n'
        )
    lines.append(f'[state]\ndir = "{tmp_path / "state"}"\noutput_keep_bytes = 1048576\n')
    (tmp_path / "sprawl.toml").write_text("".join(lines))
    done = subprocess.run(
        [
            *(sys.executable, "-c", CLI, "exec", "--config", str(tmp_path / "sprawl.toml")),
            *("-C", str(tree), "--", "head", "-c", "20000000", "/dev/zero"),
        ],
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout) == 20_000_000, (len(done.stdout), done.stderr[-2000:])


def test_a_daemon_holding_stdout_does_not_hold_the_result(tmp_path: Path) -> None:
    (tmp_path / "scratch").mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    data = config_data("copied_tree", tmp_path / "scratch", tmp_path / "state")
    with ExecTool(parse_config(data), tree) as tool:
        started = time.monotonic()
        result = tool.exec(
            ["sh", "-c", "echo hi; (setsid sh -c 'while :; do echo x; sleep 0.1; done' &)"],
            timeout=60,
        )
        took = time.monotonic() - started
    assert result.outcome == "settled" and result.stdout.startswith("hi"), result.stdout[:200]
    # far-off bound: the pump's own deadline is 2 s, not the daemon's lifetime
    assert took < 30, took
