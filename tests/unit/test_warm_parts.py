"""Warm mode's pure parts: program lookup inside a container root (symlinks resolved there,
not on the host), the init-user check of verification, and the config switch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config, with_warm
from sprawl_orch.container.verify import as_command_user
from sprawl_orch.container.warm_program import cannot_run, inside
from sprawl_orch.core.errors import SprawlError


@pytest.fixture
def root(tmp_path: Path) -> str:
    r = tmp_path / "root"
    (r / "bin").mkdir(parents=True)
    (r / "work").mkdir()
    (r / "bin" / "busybox").write_text("#!/bin/busybox\n")
    (r / "bin" / "busybox").chmod(0o755)
    (r / "bin" / "sh").symlink_to("busybox")
    (r / "bin" / "abs").symlink_to("/bin/busybox")  # absolute: resolved in the root
    (r / "work" / "data.txt").write_text("x")
    (r / "work" / "dir").mkdir()
    return str(r)


def test_lookup_inside_the_root(root: str) -> None:
    assert inside(root, "/bin/abs") == f"{root}/bin/busybox"
    assert inside(root, "/bin/../bin/sh") == f"{root}/bin/busybox"
    assert inside(root, "/nope/x") is None
    assert cannot_run(root, "sh", "/usr/bin:/bin", "/work") is None
    assert cannot_run(root, "abs", "/bin", "/work") is None
    assert cannot_run(root, "sh", None, "/work") is None  # runc's default PATH
    assert cannot_run(root, "nope", "/bin", "/work") == (
        'exec: "nope": executable file not found in $PATH'
    )
    assert cannot_run(root, "./data.txt", "/bin", "/work") == (
        'exec: "./data.txt": permission denied'
    )
    assert cannot_run(root, "dir", "/work", "/work") is not None
    assert cannot_run(root, "/bin/missing", "/bin", "/work") == (
        'exec: "/bin/missing": no such file or directory'
    )


def test_a_link_loop_is_not_found(root: str) -> None:
    os.symlink("loop", f"{root}/bin/loop")
    assert inside(root, "/bin/loop") is None


def test_init_user_checked_then_the_commands_user_compared() -> None:
    inspect: dict[str, Any] = {"Config": {"User": "0:0", "Image": "x"}, "Id": "c"}
    seen = as_command_user(inspect, "0:0", "65534:65534")
    assert seen["Config"]["User"] == "65534:65534" and seen["Config"]["Image"] == "x"
    assert inspect["Config"]["User"] == "0:0"  # not changed in place
    with pytest.raises(SprawlError, match="warm container's init"):
        as_command_user({"Config": {"User": "65534:65534"}}, "0:0", "65534:65534")


def test_the_switch() -> None:
    config = parse_config({"sandbox": {"container": {"warm": True}}})
    assert config.sandbox.container.warm is True
    assert with_warm(config, False).sandbox.container.warm is False
    assert parse_config({}).sandbox.container.warm is False
