"""The dry run of `apply`: a unified diff for text files, a one-line summary for binary ones.

"Old" is the working directory's file now (the conflict check has shown it is what the
command's sync read), "new" is the kept bytes. A file is binary when its first 8 KiB hold a NUL
byte or it is not UTF-8 (git's rule, plus the decoding we use for output).
"""

from __future__ import annotations

import difflib
import os

from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.changes.store import Kept
from sprawl_orch.core.beneath import NotBeneath, open_file_beneath, parts_of
from sprawl_orch.core.protected import under_git
from sprawl_orch.core.terminal import line_safe, safe

_SNIFF = 8192


def _text(data: bytes) -> str | None:
    if b"\0" in data[:_SNIFF]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_beneath(root: str, rel: str) -> bytes:
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        f = open_file_beneath(root_fd, parts_of(rel))
        with os.fdopen(f, "rb") as handle:
            return handle.read()
    finally:
        os.close(root_fd)


def _one(kept: Kept, e: ChangeEntry) -> list[str]:
    a, b = f"a/{safe(e.path)}", f"b/{safe(e.path)}"
    head = [f"diff --sprawl {a} {b}\n"]
    if under_git(e.path):
        mode = f" mode {e.mode}" if e.mode else ""
        return [*head, f"{e.change} {e.kind or e.was_kind}{mode} under .git: never applied\n"]
    if e.change == "mode_changed":
        return [*head, f"old mode {e.was_mode}\n", f"new mode {e.mode}\n"]
    if e.kind == "dir" or (e.change == "deleted" and e.was_kind == "dir"):
        verb = "deleted" if e.change == "deleted" else "new"
        return [*head, f"{verb} directory mode {e.mode or e.was_mode}\n"]
    if e.kind == "link":
        return [*head, f"{e.change} symbolic link -> {safe(e.target or '')}\n"]
    old = b""
    if e.was_kind == "file" and e.change in ("modified", "deleted", "kind_changed"):
        try:
            old = _read_beneath(str(kept.workdir), e.path)
        except (OSError, NotBeneath):
            old = b""
    new = b""
    blob = kept.blob(e.path)
    if blob is not None:
        new = blob.read_bytes()
    if e.was_mode and e.mode and e.was_mode != e.mode:
        head += [f"old mode {e.was_mode}\n", f"new mode {e.mode}\n"]
    old_text, new_text = _text(old), _text(new)
    if old_text is None or new_text is None:
        return [*head, f"Binary files {a} and {b} differ ({len(old)} -> {len(new)} bytes)\n"]
    lines = list(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile="/dev/null" if e.change == "created" else a,
            tofile="/dev/null" if e.change == "deleted" else b,
        )
    )
    return head + [
        line_safe(ln) if ln.endswith("\n") else line_safe(ln) + "\n\\ No newline at end of file\n"
        for ln in lines
    ]


def diff_of(kept: Kept, entries: list[ChangeEntry]) -> str:
    return "".join(line for e in entries for line in _one(kept, e))
