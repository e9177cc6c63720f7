# ruff: noqa: E501 - the build logs below are quoted as the engines print them
"""Recipes an admin keeps outside the package, --include, build-log reading, image facts:
no engine needed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images.buildlog import failure
from sprawl_orch.images.engines import ImageEngine, LocalImage
from sprawl_orch.images.pin import pin
from sprawl_orch.images.recipe import DebianRootfs, load_recipe, read_recipe

GOOD = """\
[recipe]
name = "mine"
description = "bookworm with make"
tag = "me/make:{suite}"

[rootfs]
suite = "bookworm"
mirror = "http://mirror.example.org/debian"
include = ["make", "g++"]
dirs = { "/work" = "0755", "/tmp" = "1777" }
"""


def test_python_recipe_has_the_toolchain_and_a_sticky_tmp() -> None:
    python = load_recipe("python")
    assert isinstance(python.rootfs, DebianRootfs)
    assert {"python3", "python3-venv", "python3-pip", "git"} <= set(python.rootfs.include)
    assert python.rootfs.dirs["/tmp"] == "1777"
    assert python.tag_for(suite="bookworm") == "sprawl/python:bookworm"
    debian = load_recipe("debian").rootfs
    assert isinstance(debian, DebianRootfs) and debian.dirs["/tmp"] == "1777"


def test_an_admins_recipe_file_is_read_from_anywhere(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    recipe = read_recipe(path)
    assert recipe.name == "mine" and recipe.source == path
    assert isinstance(recipe.rootfs, DebianRootfs)
    assert recipe.rootfs.include == ("make", "g++")


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (
            ('include = ["make", "g++"]', 'include = ["make", "Bad,name"]'),
            "key rootfs.include: 'Bad,name' is not a Debian package name",
        ),
        (('"/tmp" = "1777"', '"/tmp" = "17777"'), "key rootfs.dirs: /tmp = '17777'"),
        (('suite = "bookworm"\n', ""), "key rootfs.suite: Field required"),
        (("[rootfs]\n", '[rootfs]\nsuit = "trixie"\n'), "key rootfs.suit: unknown key"),
        (('tag = "me/make:{suite}"\n', ""), "key recipe.tag: Field required"),
        (("[recipe]", "[recipe"), "the recipe is not valid TOML"),
    ],
)
def test_a_bad_recipe_names_the_file_and_the_key(
    tmp_path: Path, edit: tuple[str, str], named: str
) -> None:
    path = tmp_path / "mine.toml"
    assert edit[0] in GOOD
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(SprawlError) as caught:
        read_recipe(path)
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.subject == str(path)
    assert named in caught.value.detail
    # Only the keys of the rootfs kind the recipe meant (debootstrap), not busybox's.
    assert "busybox" not in caught.value.detail


def test_a_missing_recipe_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SprawlError) as caught:
        read_recipe(tmp_path / "absent.toml")
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "can't be read" in caught.value.detail


DOCKER_LOG = """\
Step 1/4 : FROM sprawl/python:bookworm
 ---> 1a2b3c
Step 2/4 : RUN apt-get update && apt-get install -y python3-pytest
 ---> Running in 9f8e7d
Err:1 http://mirror.example.org/debian bookworm InRelease
  Temporary failure resolving 'mirror.example.org'
Reading package lists...
W: Failed to fetch http://mirror.example.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'mirror.example.org'
W: Some index files failed to download. They have been ignored, or old ones used instead.
Reading package lists...
Building dependency tree...
E: Unable to locate package python3-pytest
The command '/bin/sh -c apt-get update && apt-get install -y python3-pytest' returned a non-zero code: 100
"""
PODMAN_LOG = """\
STEP 1/3: FROM sprawl/busybox:latest
STEP 2/3: RUN ls /absent
ls: /absent: No such file or directory
Error: building at STEP "RUN ls /absent": while running runtime: exit status 1
"""


def test_the_failing_step_and_its_own_error_lines_docker() -> None:
    why = failure(DOCKER_LOG)
    assert why.step == "step 2/4: RUN apt-get update && apt-get install -y python3-pytest"
    assert "E: Unable to locate package python3-pytest" in why.lines
    assert any("Temporary failure resolving 'mirror.example.org'" in line for line in why.lines)
    assert "Reading package lists..." not in why.lines
    assert why.network


def test_the_failing_step_and_its_own_error_lines_podman() -> None:
    why = failure(PODMAN_LOG)
    assert why.step == "step 2/3: RUN ls /absent"
    assert why.lines[0] == "ls: /absent: No such file or directory"
    assert not why.network


PIP_TLS_LOG = (
    """\
Step 2/2 : RUN pip install pytest
 ---> Running in 5d6c7b
"""
    + "".join(
        f"  WARNING: Retrying (Retry(total={n}, connect=None, read=None, redirect=None, status=None)) "
        "after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: "
        "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
        "certificate chain (_ssl.c:992)'))': /simple/pytest/\n"
        for n in range(4, -1, -1)
    )
    + """\
ERROR: Could not find a version that satisfies the requirement pytest (from versions: none)
ERROR: No matching distribution found for pytest
The command '/bin/sh -c pip install pytest' returned a non-zero code: 1
"""
)


def test_a_certificate_failure_said_only_in_warnings_is_the_first_line() -> None:
    # issue 27, item 13: the cause was one line away from the summary.
    why = failure(PIP_TLS_LOG)
    assert why.tls and not why.network
    assert "CERTIFICATE_VERIFY_FAILED" in why.lines[0]
    assert "ERROR: No matching distribution found for pytest" in why.lines


def test_a_failure_before_any_step_keeps_the_last_lines() -> None:
    why = failure("Error: no context directory\n")
    assert (why.step, why.lines) == ("", ("Error: no context directory",))


INSPECT = {
    "Id": "ab" * 32,
    "RepoTags": ["sprawl/python:bookworm"],
    "Created": "2026-11-30T20:00:00Z",
    "Size": 1,
    "Config": {
        "Env": ["LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"],
        "User": "",
        "WorkingDir": "/work",
        "Labels": {"sprawl.recipe": "python"},
    },
}


def test_the_images_own_path_user_and_workdir_are_read() -> None:
    image = ImageEngine("podman")._image(INSPECT)
    assert (image.path, image.user, image.workdir) == ("/usr/local/bin:/usr/bin:/bin", "", "/work")
    assert image.facts() == ("PATH=/usr/local/bin:/usr/bin:/bin user=(unset: root) workdir=/work")
    assert image.as_dict()["workdir"] == "/work"


def test_pin_records_the_images_own_config_beside_the_pin(tmp_path: Path) -> None:
    image_id = "sha256:" + "ab" * 32
    described = ImageEngine("docker")._image({**INSPECT, "Id": image_id})
    config = tmp_path / "sprawl.toml"
    result = pin(
        "sprawl/python:bookworm",
        config,
        engine_name="docker",
        resolver=lambda engine, ref: image_id,
        describer=lambda engine, ref: described if ref == image_id else None,
    )
    assert result.images == {"docker": described}
    text = config.read_text()
    assert (
        f'docker = "{image_id}" # image\'s own PATH=/usr/local/bin:/usr/bin:/bin '
        "user=(unset: root) workdir=/work\n"
    ) in text
    assert tomllib.loads(text)["sandbox"]["container"]["images"]["docker"] == image_id


def test_local_image_default_facts_are_unset() -> None:
    image = LocalImage("docker", "sha256:" + "0" * 64, (), {}, "", 0)
    assert image.facts() == "PATH=(unset) user=(unset: root) workdir=(unset: /)"
