"""How a path's components name `.git`: the leaf both the protected-path table (protected.py)
and the git-config pointers (git_pointers.py) read. protected.py calls git_pointers.py, so the
two could not share these by importing each other (the circles test caught it)."""

from __future__ import annotations

GIT_DIR = ".git"


def component(name: str) -> str:
    """A component as a case-insensitive or NTFS filesystem may read it: `.GIT`, `.git.`,
    `.git ` and the short name `GIT~1` all reach `.git` there."""
    folded = name.casefold().rstrip(" .")
    if folded == "git~1":
        return GIT_DIR
    return folded or name


def components(path: str) -> list[str]:
    return [component(p) for p in path.split("/") if p not in ("", ".")]


def under_git(path: str) -> bool:
    """Whether a path is `.git` (a directory or a gitdir: file) or beneath one, at any depth."""
    return GIT_DIR in components(path)
