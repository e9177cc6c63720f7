"""Two trees of a workspace compared path by path, and one path of one made equal to the other.

A workspace (workspace.py) keeps three trees in its state directory: ``tree`` (the agent's),
``base`` (the person's tree as of the last flow-in, a synced copy) and the saved versions of
conflicting and changed paths. Both trees are ours (made by syncs and by this module), but
the agent's commands wrote ``tree``: nothing in it is followed -- entries are read with
``lstat``, files opened ``O_NOFOLLOW``, and a path is only written after every directory on
the way was seen to be a real directory (``real_parent``).

Equality is exact: kind, permission bits, a link's target, a file's bytes (compared in full
when the sizes match). Bytes are only skipped by the racy-clean rule (copy/stamps.py), on
both files' full stamps (inode, device, size, mtime, ctime, mode): :class:`Clean` records the
stamps of two files found equal and a line taken from the filesystem's clock after them; any
later write, chmod, utime or rename sets a ctime at or past that line, which no command can
set back. The workspace records only while none of its commands runs, so nothing writes
either tree between the stamps and the line. Modification times are carried by
:func:`replace_path` but are not changes.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import stat
import threading
import time
from pathlib import Path

from sprawl_orch.changes.changes import ChangeEntry, equal_files
from sprawl_orch.changes.record import fs_now_ns, kind_of, norm_mode
from sprawl_orch.changes.workspace_state import STAGING
from sprawl_orch.core import fs_clock
from sprawl_orch.core.beneath import open_file
from sprawl_orch.core.removal import delete_path

Listing = dict[str, os.stat_result]


def scan(root: Path) -> Listing:
    """lstat of every entry under ``root`` by "/"-separated relative path (unordered)."""
    out: Listing = {}
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        prefix = rel_dir + "/" if rel_dir else ""
        try:
            it = os.scandir(abs_dir)
        except FileNotFoundError:
            # removed since it was listed: nothing under it to compare
            continue
        with it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                out[prefix + entry.name] = st
                if stat.S_ISDIR(st.st_mode):
                    stack.append((prefix + entry.name, entry.path))
    return out


def _same_bytes(a: Path, b: Path) -> bool:
    # unreadable (None) counts as different: compared again, never trusted
    return equal_files(str(a), str(b), follow_a=False) is True


def same_entry(a_root: Path, a: os.stat_result, b_root: Path, b: os.stat_result, rel: str) -> bool:
    """Whether entry ``rel`` is the same in both trees (kind, bits, target, bytes)."""
    if norm_mode(a.st_mode) != norm_mode(b.st_mode):
        return False
    if stat.S_ISLNK(a.st_mode):
        return os.readlink(a_root / rel) == os.readlink(b_root / rel)
    if stat.S_ISREG(a.st_mode):
        return a.st_size == b.st_size and _same_bytes(a_root / rel, b_root / rel)
    return True  # directories (their entries are compared one by one), or other kinds


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


class Clean:
    """Pairs of equal files by their stamps, trusted below ``line`` (see the docstring)."""

    def __init__(self, pairs: dict[str, list[int]] | None = None, line: int = 0) -> None:
        self.pairs = pairs or {}
        self.line = line

    def vouches(self, rel: str, a: os.stat_result, b: os.stat_result) -> bool:
        was = self.pairs.get(rel)
        return (
            was is not None
            and max(a.st_ctime_ns, b.st_ctime_ns) < self.line
            and was == _stamp(a) + _stamp(b)
        )

    def dump(self) -> str:
        return json.dumps({"line": self.line, "pairs": self.pairs})

    @classmethod
    def load(cls, text: str) -> Clean:
        try:
            data = json.loads(text)
            return cls({str(k): list(v) for k, v in data["pairs"].items()}, int(data["line"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls()


def diff(
    new_root: Path, old_root: Path, clean: Clean | None = None, learn: Clean | None = None
) -> list[ChangeEntry]:
    """What ``new_root`` changed relative to ``old_root``, as `changes` lists it. ``clean``
    vouches for equal files by stamp; ``learn``, when given, gets every regular file pair
    found equal now, and its line (call only while nothing writes either tree)."""
    new, old = scan(new_root), scan(old_root)
    out: list[ChangeEntry] = []
    clean = clean or Clean()
    for rel in sorted(new.keys() | old.keys()):
        a, b = new.get(rel), old.get(rel)
        if a is not None and b is not None:
            if stat.S_ISREG(a.st_mode) and clean.vouches(rel, a, b):
                if learn is not None:
                    learn.pairs[rel] = _stamp(a) + _stamp(b)
                continue
            if same_entry(new_root, a, old_root, b, rel):
                if learn is not None and stat.S_ISREG(a.st_mode):
                    learn.pairs[rel] = _stamp(a) + _stamp(b)
                continue
        kind = kind_of(a.st_mode) if a is not None else None
        was = kind_of(b.st_mode) if b is not None else None
        if a is None:
            assert b is not None
            change = "deleted"
        elif b is None:
            change = "created"
        elif kind != was:
            change = "kind_changed"
        elif stat.S_IMODE(a.st_mode) != stat.S_IMODE(b.st_mode) and (
            kind != "file" or _same_bytes(new_root / rel, old_root / rel)
        ):
            change = "mode_changed"
        else:
            change = "modified"
        out.append(
            ChangeEntry(
                path=rel,
                change=change,  # type: ignore[arg-type]
                kind=kind,
                was_kind=was,
                mode=_mode(a) if a is not None else None,
                was_mode=_mode(b) if b is not None else None,
                size=a.st_size if a is not None and kind == "file" else None,
                was_size=b.st_size if b is not None and was == "file" else None,
                target=os.readlink(new_root / rel) if kind == "link" else None,
            )
        )
    if learn is not None:
        # Taken after every stamp above; 0 (trust nothing) where fs_clock does not know the
        # filesystem: there a write need not move the ctime.
        dev = os.stat(new_root).st_dev
        known = fs_clock.granularity_ns(dev) is not None
        learn.line = fs_now_ns(new_root.parent) if known else 0
    return out


def overlaps(path: str, others: set[str]) -> bool:
    """Whether ``path`` is one of ``others``, inside one, or holds one."""
    if path in others:
        return True
    parts = path.split("/")
    if any("/".join(parts[:i]) in others for i in range(1, len(parts))):
        return True
    return any(o.startswith(path + "/") for o in others)


def real_parent(root: Path, rel: str) -> Path:
    """The directory that holds ``rel`` under ``root``, made where missing, every step a real
    directory (a link on the way is refused: a command may have planted one)."""
    here = root
    for part in rel.split("/")[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            # missing directory on the way: made here
            os.mkdir(here, 0o700)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{here} is not a directory (a link or file on the way)")
    return here


def replace_path(src_root: Path, dst_root: Path, rel: str) -> None:
    """Make ``rel`` in ``dst_root`` what it is in ``src_root`` (absent included): the new
    entry is copied (bits and times) into the staging directory first, then put in its
    place; the old one is deleted without following links. A copy that fails (a full disk)
    leaves the old entry as it was: deleting it first lost the tree's file when a flow-in's
    replay hit ENOSPC (tests/integration/test_workspace_disk_full.py), and the tree without
    it read as the agent deleting the person's file."""
    parent = real_parent(dst_root, rel)
    name = rel.split("/")[-1]
    dst = parent / name
    src = src_root / rel
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        # the source went away: nothing to keep
        delete_path(dst)
        return
    if not (stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        delete_path(dst)
        return  # fifos, sockets, devices: the syncs skip them too
    new = _staged(dst_root)
    try:
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), new)
        elif stat.S_ISDIR(st.st_mode):
            shutil.copytree(src, new, symlinks=True)
        else:
            shutil.copy2(src, new, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):
            bits = stat.S_IMODE(st.st_mode) & 0o777 | (0o700 if stat.S_ISDIR(st.st_mode) else 0)
            os.chmod(new, bits)
            os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
        if stat.S_ISDIR(st.st_mode) or (os.path.isdir(dst) and not os.path.islink(dst)):
            delete_path(dst)  # a directory is never renamed over: deleted, then replaced
        os.replace(new, dst)
    except BaseException:
        delete_path(new)
        raise


def _staged(dst_root: Path) -> Path:
    """A free name for a new entry in the workspace's staging directory (a sibling of
    ``dst_root``, one filesystem: the rename into place is atomic). It was a hidden sibling
    of the entry until a run killed mid-copy left `.more.py.sprawl-new-<pid>` in the agent's
    tree, where the next command saw it and `changes` listed it as the agent's. What dead
    processes left in staging is removed here; a live one's is its own (an entry whose pid
    was reused stays until that process ends: out of every tree, it costs only its bytes)."""
    staging = dst_root.parent / STAGING
    try:
        st = os.lstat(staging)
    except FileNotFoundError:
        # first replace in this workspace: made below
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        # A link (or file) put there is removed, never followed: the sweep below through a
        # link to another directory deleted every entry there (attack atkws).
        delete_path(staging)
    with contextlib.suppress(FileExistsError):  # a real directory already
        os.mkdir(staging, 0o700)
    for left in os.listdir(staging):
        pid = left.partition("-")[0]
        if pid.isdigit() and _alive(int(pid)):
            continue  # being written (a thread of this process, or another process)
        delete_path(staging / left)  # a killed run's
    return staging / f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:  # no such process: what it staged is left over
        return False
    except PermissionError:  # another account's process: alive, its entry not ours
        return True
    return True


def _agent_side(tree: Path, rel: str) -> bytes | str:
    """The bytes of the agent's ``rel`` read without following a link anywhere under ``tree``
    (the agent's commands wrote it: a link to a host secret must not bring the secret into a
    diff an MCP agent can ask for), or a note saying what stands there instead."""
    here = tree
    for part in rel.split("/")[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            # a missing directory on the way: the agent's side is absent
            return b""
        if stat.S_ISLNK(st.st_mode):
            return f"{here.relative_to(tree)} is a link to {os.readlink(here)!r} in the workspace"
        if not stat.S_ISDIR(st.st_mode):
            return b""
    path = here / rel.split("/")[-1]
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        # absent in the workspace: the agent deleted it
        return b""
    if stat.S_ISLNK(st.st_mode):
        return f"a link to {os.readlink(path)!r} in the workspace"
    if not stat.S_ISREG(st.st_mode):
        return b""
    fd = open_file(path)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def conflict_diff(workdir: Path, tree: Path, rel: str) -> str:
    """Unified diff from the person's file now to the agent's (text), or a one-line note."""
    try:
        mine = (workdir / rel).read_bytes() if (workdir / rel).is_file() else b""
        agent = _agent_side(tree, rel)
        if isinstance(agent, str):
            return f"conflict {rel}: the agent's side is {agent}; compare by hand\n"
        a, b = mine.decode(), agent.decode()
    except (OSError, UnicodeDecodeError):
        # unreadable: the message says to compare by hand
        return f"conflict {rel}: binary or unreadable on one side; compare by hand\n"
    lines = difflib.unified_diff(
        a.splitlines(keepends=True),
        b.splitlines(keepends=True),
        f"a/{rel} (the person's, now)",
        f"b/{rel} (the agent's, in the workspace)",
    )
    return "".join(lines)
