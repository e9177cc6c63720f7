"""apply's writes into the working directory (apply.py says why each is safe): every path
through directory fds opened O_NOFOLLOW from the top (core/beneath.py), a file written as a
journalled temp file, fsynced and renamed over its name, a removal refused when the directory
holds entries the command did not delete.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from contextlib import suppress

from sprawl_orch.changes.apply_check import shared_inode
from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.changes.store import Kept
from sprawl_orch.core.beneath import NotBeneath, open_dir, open_dir_beneath, open_file, parts_of

TEMP_PREFIX = ".sprawl-apply-"


def attempt(step: Callable[[], None]) -> str | None:
    try:
        step()
    except NotBeneath as err:
        return f"not written: {err}"
    except OSError as err:
        return f"not written: {err.strerror or err}"
    return None


def _parent(root_fd: int, rel: str) -> tuple[int, str]:
    parts = parts_of(rel)
    return open_dir_beneath(root_fd, parts[:-1]), parts[-1]


def remove_entry(root_fd: int, e: ChangeEntry) -> None:
    fd, name = _parent(root_fd, e.path)
    try:
        if e.was_kind == "dir":
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as err:
                if err.errno == 39:  # ENOTEMPTY
                    raise NotBeneath(
                        f"{e.path} holds entries the command did not delete "
                        "(added to the working directory since)"
                    ) from err
                raise
        else:
            os.unlink(name, dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)


def _journal(kept: Kept, rel_tmp: str) -> None:
    with open(kept.dir / "journal", "a", errors="surrogateescape") as f:
        f.write(rel_tmp + "\n")
        f.flush()
        os.fsync(f.fileno())


def clear_journal(kept: Kept, root_fd: int) -> None:
    """Remove temp files an interrupted apply left (only our own, by their journalled names)."""
    journal = kept.dir / "journal"
    try:
        names = journal.read_text(errors="surrogateescape").splitlines()
    except FileNotFoundError:
        return
    for rel in names:
        if not rel or not rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            continue
        with suppress(OSError, NotBeneath):
            fd, name = _parent(root_fd, rel)
            try:
                if not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)
    journal.unlink()


def _owner_for(fd: int, name: str, parent_fd: int) -> tuple[int, int] | None:
    """Ownership is not carried: a replaced entry keeps its owner, a new one its directory's."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        st = os.fstat(parent_fd)
    return st.st_uid, st.st_gid


def write_entry(kept: Kept, root_fd: int, e: ChangeEntry) -> None:
    parts = parts_of(e.path)
    mode = int(e.mode or "0644", 8) & 0o777
    if e.kind == "dir" and e.change != "mode_changed":
        fd = open_dir_beneath(root_fd, parts[:-1])
        try:
            os.mkdir(parts[-1], 0o700, dir_fd=fd)
            made = open_dir(parts[-1], fd)
            try:
                os.fchmod(made, mode)
            finally:
                os.close(made)
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    fd, name = _parent(root_fd, e.path)
    try:
        if e.change == "mode_changed":
            target = open_file(name, dir_fd=fd)
            try:
                links = os.fstat(target).st_nlink
                if links > 1 and not stat.S_ISDIR(os.fstat(target).st_mode):
                    raise NotBeneath(shared_inode(links))  # linked since the check
                os.fchmod(target, mode)
                os.fsync(target)
            finally:
                os.close(target)
            return
        owner = _owner_for(fd, name, fd)
        tmp = f"{TEMP_PREFIX}{secrets.token_hex(6)}"
        rel_dir = "/".join(parts[:-1])
        _journal(kept, f"{rel_dir}/{tmp}" if rel_dir else tmp)
        if e.kind == "link":
            assert e.target is not None
            os.symlink(e.target, tmp, dir_fd=fd)
        else:
            _write_file(kept, e, fd, tmp, mode, owner)
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(
    kept: Kept, e: ChangeEntry, dir_fd: int, tmp: str, mode: int, owner: tuple[int, int] | None
) -> None:
    blob = kept.blob(e.path)
    assert blob is not None
    out = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        with open(blob, "rb") as src:
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        if owner is not None:
            os.fchown(out, *owner)
        os.fchmod(out, mode)
        os.fsync(out)
    finally:
        os.close(out)
