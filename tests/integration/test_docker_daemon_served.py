"""Each served call's docker daemon is its own: the exec server keeps what one daemon
answered (engines/docker_daemon.py, in served_memo), and a later call whose DOCKER_HOST
reaches another daemon -- the same path, its symlink swapped between calls -- is told that
daemon's truth (the user axis: userns-remap), through the real `sprawl-orch` program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))


def test_a_served_call_is_told_the_daemon_it_reaches_now(
    tmp_path: Path, docker_image: str, docker_userns: tuple[dict[str, str], str]
) -> None:
    plain = os.environ["DOCKER_HOST"].removeprefix("unix://")
    remapped, remapped_image = (
        docker_userns[0]["DOCKER_HOST"].removeprefix("unix://"),
        docker_userns[1],
    )
    tree, scratch, runtime = tmp_path / "tree", tmp_path / "scratch", tmp_path / "run"
    tree.mkdir()
    scratch.mkdir()
    runtime.mkdir(mode=0o700)

    def call(target: str, image: str) -> dict[str, Any]:
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        (tree / "sprawl.toml").write_text(
            f'[sandbox]\narm = "container"\nscratch_dir = "{scratch}"\n'
            f'[sandbox.container]\nengine = "docker"\n'
            f'[sandbox.container.images]\ndocker = "{image}"\n'
            f'[state]\ndir = "{tmp_path / "state"}"\n'
        )
        done = subprocess.run(
            [PROGRAM, "exec", "--json", "-C", str(tree), "--", "id", "-u"],
            env=env, capture_output=True, timeout=240, check=False,
        )  # fmt: skip
        assert b"exec server is not used" not in done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        assert result["exit_code"] == 0, (result, done.stderr)
        return result

    with tempfile.TemporaryDirectory(prefix="sv-", dir="/var/tmp") as made:
        link = Path(made) / "docker.sock"
        env = {
            **os.environ,
            "DOCKER_HOST": f"unix://{link}",
            "XDG_RUNTIME_DIR": str(runtime),
            "SPRAWL_EXEC_SERVER_IDLE": "30",
        }
        try:
            users = [
                call(target, image)["confinement"]["assurances"]["user"]
                for target, image in [
                    (plain, docker_image),
                    (plain, docker_image),  # from the server's memory
                    (remapped, remapped_image),
                    (plain, docker_image),
                    (remapped, remapped_image),
                ]
            ]
        finally:
            subprocess.run(
                [PROGRAM, "server", "stop"], env=env, capture_output=True, timeout=60, check=False
            )
    assert users[2] == users[4] == "yes" and "yes" not in (users[0], users[1], users[3]), users
