"""What a refusal says when the engine can't be reached (issue 27, item 7), through the real CLI
and the real docker SDK: the socket, where its address came from, the error and the fix for that
error -- once, not "the daemon is not running … apt-get install docker.io" with both installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

CLI = [str(Path(sys.executable).with_name("sprawl-orch"))]


def _exec(tree: Path, docker_host: str) -> subprocess.CompletedProcess[str]:
    (tree / "sprawl.toml").write_text(
        '[sandbox]\narm = "container"\n\n[sandbox.container]\nengine = "docker"\n'
    )
    env = dict(os.environ, DOCKER_HOST=docker_host)
    return subprocess.run(
        [*CLI, "exec", "-C", str(tree), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_socket_path_that_does_not_exist(tmp_path: Path) -> None:
    gone = tmp_path / "gone.sock"
    done = _exec(tmp_path, f"unix://{gone}")
    assert done.returncode == 125, done.stderr
    assert f"no docker socket at {gone}" in done.stderr
    assert "comes from DOCKER_HOST" in done.stderr
    assert "apt-get install" not in done.stderr  # docker is installed here
    # The fix is said once (it was printed in the detail and again as "what you can do").
    assert done.stderr.count("start the docker daemon so it listens at") == 1


def test_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead))
    s.close()  # the path exists, nothing listens: connect() is refused
    done = _exec(tmp_path, f"unix://{dead}")
    assert done.returncode == 125, done.stderr
    assert f"nothing answers at unix://{dead} (from DOCKER_HOST)" in done.stderr
    assert "Connection refused" in done.stderr  # the engine's (SDK's) own words


def test_auto_names_the_engine_it_stepped_past(tmp_path: Path, podman_image: str) -> None:
    # An outsider's case (issue 27, item 9): docker dead, userns off, auto ran podman and the
    # statement never said why not docker.
    (tmp_path / "sprawl.toml").write_text(
        '[sandbox.container]\nuserns = "off"\n\n'
        f'[sandbox.container.images]\npodman = "{podman_image}"\n'
    )
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/gone.sock")
    done = subprocess.run(
        [*CLI, "exec", "--json", "-C", str(tmp_path), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["arm"] == "container"
    statement = result["confinement"]["statement"]
    assert (
        f"Stepped down: docker passed over for podman: no docker socket at {tmp_path}/gone.sock"
        in statement
    )


def _podman_tree(tmp_path: Path, podman_image: str) -> Path:
    (tmp_path / "sprawl.toml").write_text(
        '[sandbox]\narm = "container"\n\n[sandbox.container]\nengine = "podman"\n\n'
        f'[sandbox.container.images]\npodman = "{podman_image}"\n'
    )
    return tmp_path


def test_podmans_own_start_error_is_said_once_by_us(tmp_path: Path, podman_image: str) -> None:
    # issue 27, item 10: podman's raw "Error: unable to start container …" line came on
    # stderr before sprawl-orch's own E_TOOL_UNAVAILABLE line (docker's never did).
    tree = _podman_tree(tmp_path, podman_image)
    done = subprocess.run(
        [*CLI, "exec", "-C", str(tree), "--", "/no-such-program"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 125, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("sprawl-orch: E_TOOL_UNAVAILABLE: /no-such-program"), lines
    assert not any(line.startswith("Error: unable to start container") for line in lines)


def test_a_command_that_prints_podmans_words_keeps_them(tmp_path: Path, podman_image: str) -> None:
    tree = _podman_tree(tmp_path, podman_image)
    forged = "Error: unable to start container " + "0" * 64 + ": made up"
    done = subprocess.run(
        [*CLI, "exec", "-C", str(tree), "--shell", "--", f"echo '{forged}' >&2; echo ran"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    assert done.stderr.splitlines()[0] == forged
