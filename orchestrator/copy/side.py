"""What the walk (copy/walk.py) works with: the copy side's protocol, what a sync did, and the
source's listing. Split from walk.py (#28: files under ~400 lines) along its seam: these are the
walk's interfaces, the walk is the rules."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Protocol, TypeVar

import pydantic

from sprawl_orch.copy.fileops import Kind, Source

# Links are kept as links where the copy side can make them; Windows needs a privilege for it.
LINKS_KEPT = os.name != "nt"
PROGRESS_EVERY = 512  # files between two progress reports
Progress = Callable[[int, int, bool], None]
"""Told (files, bytes, done) counted so far: every PROGRESS_EVERY files of a sync with
``done=False``, and once with ``done=True`` when the sync ends, however it ends."""


class FileWork(pydantic.BaseModel, frozen=True):
    """What one sync did (copy_sync's docstring says exactly what each count counts) and the
    ``[sandbox.copy] exclude`` patterns it left out, named in every result."""

    created: int
    rewritten: int
    removed: int
    walked: int
    excluded: tuple[str, ...] = ()
    # Entries reached through a link out of the tree that were left out, each "path: why"
    # (core.credential_places.copy_refusal: credentials, homes, runtime or state places).
    refused_links: tuple[str, ...] = ()
    # Entries the copy does not hold, each "path: why": fifos, sockets, devices and links that
    # lead nowhere (issue 27: a fifo used to be skipped without a word). At most SKIPPED_NAMED,
    # then one "… and N more".
    skipped: tuple[str, ...] = ()


H = TypeVar("H")


class CopySide(Protocol[H]):
    """Every operation of a sync on the copy side; ``H`` is an open copy directory. Entries are
    never followed: ``Kind`` is what the entry itself is (copy_fileops.Kind)."""

    def open_parent(self, path: str) -> H: ...
    def open_root(self, name: str, parent: H) -> H: ...
    def close(self, handle: H) -> None: ...
    def kinds(self, handle: H) -> dict[str, Kind]: ...
    def lookup(self, name: str, parent: H) -> Kind | None: ...
    def lstat(self, name: str, parent: H) -> os.stat_result | None: ...
    def remove(self, name: str, parent: H, kind: Kind) -> int: ...
    def mkdir(self, name: str, parent: H) -> None: ...
    def open_dir(self, name: str, parent: H) -> H: ...
    def set_dir_mode(self, handle: H, mode: int) -> None: ...
    def set_dir_times(self, handle: H, atime_ns: int, mtime_ns: int) -> None: ...
    def set_link_times(self, name: str, parent: H, atime_ns: int, mtime_ns: int) -> None: ...
    def readlink(self, name: str, parent: H) -> str | None: ...
    def symlink(self, target: str, name: str, parent: H) -> None: ...
    def same_bytes(self, src: Source, name: str, parent: H, size: int, mode: int) -> bool: ...
    def copy_file(
        self, src: Source, name: str, parent: H, mode: int, budget: int
    ) -> tuple[int, os.stat_result]: ...


def special_why(mode: int) -> str:
    """Why an entry that is neither a file nor a directory is not copied."""
    what = (
        "a fifo (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISBLK(mode) or stat.S_ISCHR(mode)
        else "not a file, directory or link"
    )
    # Its content exists only while a process serves it: there is nothing to copy.
    return f"{what}: only files, directories and links are copied"
