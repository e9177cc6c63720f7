"""`doctor --config` and `image verify` through the real CLI, beside a running docker and
podman (issue 27, item 12): a config that names podman said docker was "not examined … install
docker.io" while docker ran, and a native config's `image verify` said NOT OK and suggested
building busybox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [str(Path(sys.executable).with_name("sprawl-orch"))]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )


def test_doctor_with_engine_podman_gives_docker_no_install_advice(
    tmp_path: Path, docker_image: str, podman_image: str
) -> None:
    # Both engines answer here (the fixtures built an image in each).
    config = tmp_path / "sprawl.toml"
    config.write_text('[sandbox.container]\nengine = "podman"\n')
    done = _run(tmp_path, "doctor", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["label"]: r for r in json.loads(done.stdout)["arms"]}
    docker = rows["container (docker)"]
    said = json.dumps(docker["missing"])
    assert "not examined: the config names [sandbox.container] engine" in said, said
    assert "install" not in said, said
    human = _run(tmp_path, "doctor", "--config", str(config))
    assert "apt-get install docker.io" not in human.stdout, human.stdout


def test_image_verify_under_a_native_config_is_ok(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "sprawl.toml").write_text('[sandbox]\narm = "native"\n')
    done = _run(tmp_path, "image", "verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOT OK" not in done.stdout and "image build busybox" not in done.stdout
    assert "ok: [sandbox] arm = native runs no image" in done.stdout
