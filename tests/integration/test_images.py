"""`sprawl-orch image …` against the real docker and podman of this machine.

Every image a test makes is recorded and removed at the end of the session (by ID, with
its tags). Tags are unique per session so nothing here moves `sprawl/busybox:latest`.
An engine that doesn't answer fails these tests in CI (CI=true) and skips them elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import engine_absent, engine_problem

from sprawl_orch.cli import main
from sprawl_orch.config import load_config
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images import build_busybox
from sprawl_orch.images.apt_sources import debian_mirror
from sprawl_orch.images.engines import ImageEngine

RUN = uuid.uuid4().hex[:8]
TAG = f"sprawl-test/busybox:{RUN}"
FIXED = re.compile(r"^(docker|podman)\s+(sha256:[0-9a-f]{64})\s", re.MULTILINE)
# Podman's default rlimits exceed these hosts' hard limits (ENVIRONMENT.md).
PODMAN_RUN = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


class Made:
    """Images this session created, removed at its end (and checked gone)."""

    def __init__(self) -> None:
        self.ids: list[tuple[str, str]] = []

    def add(self, engine: str, image_id: str) -> str:
        self.ids.append((engine, image_id))
        return image_id

    def remove_all(self) -> list[str]:
        left: list[str] = []
        for engine, image_id in reversed(self.ids):
            handle = ImageEngine(engine)
            if handle.resolve(image_id) is None:
                continue
            handle.remove(image_id)
            if handle.resolve(image_id) is not None:
                left.append(f"{engine} {image_id}")
        return left


@pytest.fixture(scope="session")
def made() -> Iterator[Made]:
    record = Made()
    yield record
    assert record.remove_all() == [], "images this session made are still present"


@pytest.fixture(scope="session")
def engines() -> tuple[str, ...]:
    for name in ENGINES:
        problem = engine_problem(name)
        if problem is not None:
            engine_absent(name, problem)
    return ENGINES


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# What debootstrap and apt-get say when the mirror, not the build, failed. These builds reach
# the machine's apt mirror; one dropped connection must not fail an all-or-nothing CI run.
MIRROR_HICCUP = re.compile(
    r"Temporary failure resolving|Could not resolve|Failed to fetch|Couldn't download|"
    r"Could not connect|Connection (?:timed out|refused|reset|failed)|Unable to fetch|"
    r"Hash Sum mismatch|Failed getting release file|Network is unreachable|"
    r"Undetermined Error",
    re.IGNORECASE,
)


def build_cli(*args: str, attempts: int = 3) -> Result:
    """`cli("image", "build", ...)`, again (after 10 s, 20 s) when it failed and said a mirror
    download failed; any other failure is returned at once."""
    for n in range(1, attempts + 1):
        result = cli("image", "build", *args)
        if result.exit_code == 0 or n == attempts or not MIRROR_HICCUP.search(result.output):
            return result
        print(f"image build: the mirror failed (try {n} of {attempts}); again")
        time.sleep(10 * n)
    raise AssertionError("unreachable")


def inspect(engine: str, image_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [engine, "image", "inspect", image_id], capture_output=True, text=True, check=True
    )
    data: dict[str, Any] = json.loads(done.stdout)[0]
    return data


@pytest.fixture(scope="session")
def busybox_pair(engines: tuple[str, ...], made: Made) -> dict[str, str]:
    """`image build busybox --engine all`, once per session: {engine: ID} as printed."""
    result = cli("image", "build", "busybox", "--engine", "all", "--tag", TAG)
    ids = dict(FIXED.findall(result.stdout))
    for engine, image_id in ids.items():
        made.add(engine, image_id)
    assert result.exit_code == 0, result.stderr
    assert set(ids) == set(engines), result.stdout
    return ids


CONFIG = """\
# written by hand; the pin must keep this comment
[sandbox]
arm = "container"  # container first

[sandbox.container]
engine = "auto"

[state]
dir = "{state}"
"""


def test_build_prints_one_fixed_id_per_engine(busybox_pair: dict[str, str]) -> None:
    assert busybox_pair["docker"] != busybox_pair["podman"]  # same rootfs, two IDs
    for engine, image_id in busybox_pair.items():
        data = inspect(engine, image_id)
        assert "sha256:" + data["Id"].removeprefix("sha256:") == image_id
        labels = data["Config"]["Labels"]
        assert labels["sprawl.recipe"] == "busybox"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["sprawl.date"])
        assert "/usr/bin/busybox sha256:" in labels["sprawl.source"]
        assert any(tag.endswith(TAG) for tag in data["RepoTags"])


def test_busybox_layer_is_the_same_every_build(busybox_pair: dict[str, str], made: Made) -> None:
    for engine, first in busybox_pair.items():
        again = made.add(engine, build_busybox(engine, tag=f"sprawl-test/again:{RUN}"))
        layers = [inspect(engine, i)["RootFS"]["Layers"] for i in (first, again)]
        assert layers[0] == layers[1] and len(layers[0]) == 1


def test_pin_verify_list_and_exec(busybox_pair: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text(CONFIG.format(state=tmp_path / "state"))

    pinned = cli("image", "pin", TAG, "--config", str(config))
    assert pinned.exit_code == 0, pinned.stderr
    for engine, image_id in busybox_pair.items():
        assert f'[sandbox.container.images] {engine} = "{image_id}"' in pinned.stdout
    text = config.read_text()
    assert text.startswith("# written by hand; the pin must keep this comment\n")
    assert 'arm = "container"  # container first' in text
    loaded = load_config(config).sandbox.container
    assert {e: loaded.image_for(e) for e in ENGINES} == busybox_pair

    verified = cli("image", "verify", "--config", str(config), "--json")
    assert verified.exit_code == 0, verified.output
    report = json.loads(verified.stdout)
    assert report["ok"] is True
    assert {(e["engine"], e["status"], e["pinned"]) for e in report["engines"]} == {
        (engine, "present", image_id) for engine, image_id in busybox_pair.items()
    }

    listed = cli("image", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    by_engine = {item["engine"]: item for item in json.loads(listed.stdout)}
    for engine, image_id in busybox_pair.items():
        entry = next(i for i in by_engine[engine]["images"] if i["id"] == image_id)
        assert entry["labels"]["sprawl.recipe"] == "busybox"

    # The raw engine runs it, and so does sprawl-orch exec on the pinned config.
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            busybox_pair["docker"],
            "/bin/busybox",
            "true",
        ],
        check=True,
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    for engine, image_id in busybox_pair.items():
        per_engine = tmp_path / f"{engine}.toml"
        per_engine.write_text(text.replace('engine = "auto"', f'engine = "{engine}"'))
        ran = cli(
            "exec",
            "-C",
            str(workdir),
            "--config",
            str(per_engine),
            "--json",
            "--",
            "/bin/busybox",
            "id",
            "-u",
        )
        result = json.loads(ran.stdout)
        assert (result["outcome"], result["exit_code"]) == ("settled", 0), ran.output
        assert result["container"]["engine"] == engine
        assert result["container"]["image"] == image_id
        assert result["stdout"].strip() == "65534"  # the recipe's nobody user


def test_verify_reports_a_pin_the_engine_does_not_have(
    engines: tuple[str, ...], tmp_path: Path
) -> None:
    absent = "sha256:" + "0" * 64
    config = tmp_path / "sprawl.toml"
    config.write_text(f'[sandbox.container]\nengine = "docker"\nimage = "{absent}"\n')
    # -C: the suggested recipe follows the tree (a Python project's is `python`).
    verified = cli("image", "verify", "-C", str(tmp_path), "--config", str(config))
    assert verified.exit_code == 1
    assert re.search(rf"^docker\s+missing\s+{absent}", verified.stdout, re.MULTILINE)
    assert "sprawl-orch image build busybox --engine docker" in verified.stdout


def test_pin_of_a_tag_that_is_not_local_is_refused(
    engines: tuple[str, ...], tmp_path: Path
) -> None:
    config = tmp_path / "sprawl.toml"
    refused = cli("image", "pin", f"sprawl-test/absent:{RUN}", "--config", str(config))
    assert refused.exit_code == 125  # a refusal, as on every subcommand
    assert f"E_IMAGE_INVALID: sprawl-test/absent:{RUN}" in refused.stderr
    assert "not a local image in docker or podman" in refused.stderr
    assert "what you can do: build or import it first: sprawl-orch image build busybox" in (
        refused.stderr
    )
    assert not config.exists()


class FakeRegistry:
    """A TCP listener on loopback: any engine that tries to pull from it connects."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_dockerfile_whose_base_is_not_local_is_refused_without_pulling(
    engines: tuple[str, ...], tmp_path: Path, engine: str
) -> None:
    registry = FakeRegistry()
    try:
        base = f"127.0.0.1:{registry.port}/absent/base:{RUN}"
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(f"ARG BASE={base}\nFROM $BASE AS build\nRUN true\nFROM build\n")
        refused = cli("image", "build", "--dockerfile", str(dockerfile), "--engine", engine)
        assert refused.exit_code == 125
        assert f"E_IMAGE_INVALID: FROM {base}" in refused.stderr
        assert f"{dockerfile}:2: base image {base} is not in {engine}'s local images" in (
            refused.stderr
        )
        assert "what you can do: build or import it first: sprawl-orch image build busybox" in (
            refused.stderr
        )
        assert registry.connections == 0
        if engine == "docker":
            # Why the check exists: docker's own --pull=false does reach for the registry.
            subprocess.run(
                ["docker", "build", "--pull=false", "-q", str(tmp_path)],
                capture_output=True,
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
                check=False,
            )
            assert registry.connections > 0
    finally:
        registry.close()


def test_dockerfile_on_a_local_base_builds_in_both(
    busybox_pair: dict[str, str], made: Made, tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {TAG}\nRUN echo built-{RUN} > /built.txt\n")
    tag = f"sprawl-test/derived:{RUN}"
    # No --engine: every engine that answers, which here must be both.
    built = cli("image", "build", "--dockerfile", str(dockerfile), "--tag", tag, "--json")
    report = json.loads(built.stdout) if built.exit_code == 0 else {"images": {}}
    for engine, image_id in report["images"].items():
        made.add(engine, image_id)
    assert built.exit_code == 0, built.output
    assert set(report["images"]) == set(ENGINES)
    for engine, image_id in report["images"].items():
        labels = inspect(engine, image_id)["Config"]["Labels"]
        assert (labels["sprawl.recipe"], labels["sprawl.source"]) == ("dockerfile", str(dockerfile))
        extra = PODMAN_RUN if engine == "podman" else []
        out = subprocess.run(
            [engine, "run", "--rm", "--network", "none", *extra, image_id, "cat", "/built.txt"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout == f"built-{RUN}\n"


@pytest.mark.slow
def test_debian_build_with_debootstrap_into_both(
    engines: tuple[str, ...], made: Made, tmp_path: Path
) -> None:
    tag = f"sprawl-test/debian:{RUN}"
    built = build_cli("debian", "--engine", "all", "--tag", tag)
    ids = dict(FIXED.findall(built.stdout))
    for engine, image_id in ids.items():
        made.add(engine, image_id)
    assert built.exit_code == 0, built.output
    assert set(ids) == set(ENGINES) and ids["docker"] != ids["podman"]
    assert "✓ debootstrap bookworm" in built.stderr
    for engine, image_id in ids.items():
        labels = inspect(engine, image_id)["Config"]["Labels"]
        assert labels["sprawl.recipe"] == "debian"
        # The mirror this machine's apt uses (issue 27, item 17): no host named here.
        assert labels["sprawl.source"] == (
            f"debootstrap --variant=minbase bookworm {debian_mirror('bookworm')}"
        )
        extra = PODMAN_RUN if engine == "podman" else []
        out = subprocess.run(
            [
                engine,
                "run",
                "--rm",
                "--network",
                "none",
                "--user",
                "65534:65534",
                *extra,
                image_id,
                "sh",
                "-c",
                ". /etc/os-release; echo $VERSION_CODENAME; id -un; pwd",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.split() == ["bookworm", "nobody", "/work"]


def test_a_tag_in_the_config_is_fixed_by_the_pin_its_refusal_names(
    busybox_pair: dict[str, str], tmp_path: Path
) -> None:
    # Issue 27: the refusal said "remove it to take the default" (there is none), and the
    # pin it should have named wrote per-engine pins beside the tag, still refused.
    config = tmp_path / "sprawl.toml"
    config.write_text(
        CONFIG.format(state=tmp_path / "state").replace(
            'engine = "auto"', f'engine = "auto"\nimage = "{TAG}"'
        )
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    refused = cli("exec", "-C", str(workdir), "--config", str(config), "--", "/bin/busybox", "true")
    assert refused.exit_code == 125, refused.output
    assert (
        f"what you can do: resolve it locally and write its ID in its place: "
        f"sprawl-orch image pin {TAG}" in refused.stderr
    )
    assert "default" not in refused.stderr
    pinned = cli("image", "pin", TAG, "--config", str(config))
    assert pinned.exit_code == 0, pinned.output
    loaded = load_config(config).sandbox.container
    assert loaded.image is None
    assert {e: loaded.image_for(e) for e in ENGINES} == busybox_pair
    ran = cli("exec", "-C", str(workdir), "--config", str(config), "--", "/bin/busybox", "true")
    assert ran.exit_code == 0, ran.output
