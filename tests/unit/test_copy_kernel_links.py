"""The sync never follows a link into /proc, /sys or another kernel filesystem
(copy_links.kernel_state): a tree's `env -> /proc/self/environ` copied the orchestrator's own
environment into the copy, where the sandboxed command read it (test_shaping.py runs that
end to end on every arm)."""

from __future__ import annotations

import os
from pathlib import Path

from sprawl_orch.copy.sync import sync


def test_links_into_kernel_filesystems_are_left_out(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("kept\n")
    (src / "env").symlink_to("/proc/self/environ")
    (src / "climb").symlink_to(os.path.relpath("/proc/self/status", src))
    (src / "me").symlink_to("/proc/self")
    (src / "kernel").symlink_to("/sys/kernel")
    (src / "outside.txt").symlink_to(src / "a.txt")  # an absolute link: the content rule
    copy = tmp_path / "copy"
    sync(src, copy)
    assert sorted(os.listdir(copy)) == ["a.txt", "outside.txt"]
    assert (copy / "outside.txt").read_text() == "kept\n"
