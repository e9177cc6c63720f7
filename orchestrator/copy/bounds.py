"""The synced copy's bounds and excludes, and what a refusal tells the person (design §5).

Bounds are counted on the source side: files (every non-directory entry copied, links kept as
links included), bytes in regular files, and depth. Over one, the sync refuses with
E_COPY_BOUND; the refusal says which bound, the number reached, the largest top-level entries
of the working directory (``.venv 160 MB (11 791 files)``) and the ``[sandbox.copy]`` key to
raise -- or an exclude to add.

Excludes are gitignore-style patterns (pathspec's GitIgnoreSpec: the git rules, including
"a directory's pattern ends with /" and "!" negation), explicit and opt-in: there is no default
list, and every result names them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec

MAX_FILES = 100_000
MAX_BYTES = 256 * 1024 * 1024
MAX_DEPTH = 64
TOP_ENTRIES = 3
_SIZE_WALK_LIMIT = 2_000_000  # entries: sizing the top level must not take longer than a sync


@dataclass(frozen=True)
class Bounds:
    """Source-side limits of a sync (design §5).

    ``[sandbox.copy] max_files / max_bytes / max_depth``."""

    files: int = MAX_FILES
    bytes: int = MAX_BYTES
    depth: int = MAX_DEPTH


class Excludes:
    """``[sandbox.copy] exclude``: gitignore-style patterns matched against paths relative to
    the working directory ('/'-separated, a directory with a trailing '/')."""

    def __init__(self, patterns: tuple[str, ...] = ()) -> None:
        self.patterns = tuple(patterns)
        self._spec = compile_excludes(self.patterns) if self.patterns else None

    def __bool__(self) -> bool:
        return self._spec is not None

    def match(self, rel: str, is_dir: bool) -> bool:
        if self._spec is None:
            return False
        path = rel.replace(os.sep, "/")
        return self._spec.match_file(path + "/" if is_dir else path)


def compile_excludes(patterns: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    """The patterns as one GitIgnoreSpec; ValueError names a pattern pathspec cannot read."""
    import pathspec  # here, not at import: a CLI call without excludes never pays for it

    for pattern in patterns:
        if not pattern.strip() or "\0" in pattern:
            raise ValueError(f"exclude pattern {pattern!r} is empty or holds NUL")
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except Exception as err:  # pathspec raises several kinds for a bad pattern
            raise ValueError(f"exclude pattern {pattern!r} is not gitignore syntax: {err}") from err
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def count_files(root: str, excludes: Excludes, limit: int) -> int:
    """The regular files under ``root`` the sync would certainly count, up to ``limit + 1``.

    Issue 27: the file bound used to refuse only after copying 100 001 files (52-146 s by
    arm), while the byte bound refused in 0.5 s. This count lists directories and reads each
    entry's type from the listing (no stat, no file opened) and stops one past ``limit``. It
    counts only what every sync counts -- regular files in real directories of the tree, not
    excluded -- never links or what they lead to (those may be kept, refused or dangle), so a
    count over ``limit`` is a refusal the sync would reach anyway; a count within it proves
    nothing and the walk still counts as it copies. An unreadable directory is passed over
    here: the walk refuses it with its own error.
    """
    count = 0
    stack = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    sub = rel + os.sep + entry.name if rel else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        if not excludes.match(sub, True):
                            stack.append((entry.path, sub))
                    elif entry.is_file(follow_symlinks=False) and not excludes.match(sub, False):
                        count += 1
                        if count > limit:
                            return count
        except OSError:  # unreadable or gone: the walk meets it and says why (SourceUnreadable)
            continue
    return count


def human(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            digits = 0 if size >= 10 * scale else 1
            return f"{size / scale:.{digits}f} {unit}"
    return f"{size} B"


def _size(path: str, budget: list[int]) -> tuple[int, int]:
    """(bytes, files) under ``path``, links not followed; stops when ``budget[0]`` runs out."""
    total = files = 0
    stack = [path]
    while stack and budget[0] > 0:
        here = stack.pop()
        try:
            st = os.lstat(here)
        except OSError:
            continue
        budget[0] -= 1
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(here) as it:
                    stack.extend(e.path for e in it)
            except OSError:
                continue
        else:
            files += 1
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total, files


def largest_entries(root: str, excludes: Excludes, count: int = TOP_ENTRIES) -> str:
    """``.venv 160 MB (11 791 files), node_modules 90 MB (…)``: the biggest top-level entries,
    sized without following links (what a person would exclude or clean)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return ""
    budget = [_SIZE_WALK_LIMIT]
    sizes: list[tuple[int, int, str]] = []
    for name in names:
        path = os.path.join(root, name)
        if excludes.match(name, os.path.isdir(path)):
            continue
        size, files = _size(path, budget)
        sizes.append((size, files, name))
    sizes.sort(reverse=True)
    shown = [
        f"{name} {human(size)} ({files:,} file{'s' if files != 1 else ''})"
        for size, files, name in sizes[:count]
    ]
    more = " (sizing stopped early: a very large tree)" if budget[0] <= 0 else ""
    return ", ".join(shown) + more


def bound_key(which: str, value: int) -> str:
    return f"[sandbox.copy] max_{which} = {value}"


RECOVERY = (
    "raise {key} in sprawl.toml, add what the command does not need to [sandbox.copy] exclude "
    '(gitignore-style patterns), run in a smaller directory, or use where = "host"'
)
