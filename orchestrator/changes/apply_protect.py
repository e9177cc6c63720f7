"""Protected paths in `apply` (issue 22): which chosen changes are held back, which a person
released by naming them, the refusal of a bad name, the dry run's banner, the command a person
runs to apply what was held, and the new executables named.

A protected path (protected.py) is applied only when the caller names it in a parameter of its
own (CLI ``--protected PATH``, ``apply(..., protected=[...])``): a file, or a directory meaning
everything beneath it, never a glob. serve and MCP never pass one -- an agent cannot consent
for the person -- so there they are always held, with the CLI command that applies them.
Anything under a `.git` is never applied, named or not.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.protected import Protection, describe, under_git
from sprawl_orch.core.terminal import safe

NEVER = (
    "under .git: the repository's hooks, config and state are never applied (they would run "
    "on the next git command); recreate what you need by hand"
)
BANNER = (
    "######## PROTECTED: applying these would make this machine run something "
    "(git hooks/config, editor tasks, shell/direnv start-up, CI) ########\n"
)
BANNER_END = "######## end of protected paths ########\n"
EXEC_BANNER = "######## NEW EXECUTABLES (created, or an execute bit added) ########\n"


@dataclass
class Split:
    todo: list[ChangeEntry] = field(default_factory=list)
    held: list[tuple[ChangeEntry, str]] = field(default_factory=list)  # (entry, why)
    shown_first: list[ChangeEntry] = field(default_factory=list)  # every protected one chosen


def _beneath(path: str, name: str) -> bool:
    return path == name or path.startswith(name + "/")


def normalize(named: Sequence[str]) -> list[str]:
    out = []
    for n in named:
        if any(c in n for c in "*?[") and n not in ("", "/"):
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                safe(n),
                "--protected names a path (a file, or a directory for everything beneath "
                "it), never a glob",
                "name each protected path as the dry run lists it",
            )
        out.append(n.strip("/"))
    return out


def check_named(
    named: list[str], entries: list[ChangeEntry], reason: dict[str, str | None]
) -> None:
    """Refuse (before any write) a named path under `.git`, not among the handle's changes,
    or naming nothing protected."""
    for n in named:
        if not n or under_git(n):
            raise SprawlError(ErrorCode.BAD_REQUEST, safe(n or "/"), NEVER, "leave it out")
        mine = [e for e in entries if _beneath(e.path, n)]
        if not mine:
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                safe(n),
                "--protected names a path that is not among the changes of this handle",
                "name a protected path as the dry run lists it (apply --dry-run HANDLE)",
            )
        if not any(reason[e.path] for e in mine):
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                safe(n),
                "--protected names a path that is not protected (it is applied without it)",
                "leave it out of --protected; name it as a PATH to choose it",
            )


def split(entries: list[ChangeEntry], named: list[str], reason: dict[str, str | None]) -> Split:
    out = Split()
    for e in entries:
        why = reason[e.path]
        if why is None:
            out.todo.append(e)
            continue
        out.shown_first.append(e)
        if under_git(e.path):
            out.held.append((e, NEVER))
        elif any(_beneath(e.path, n) for n in named):
            out.todo.append(e)
        else:
            out.held.append(
                (e, f"protected ({describe(why)}); a person applies it with --protected PATH")
            )
    return out


def reasons(entries: list[ChangeEntry], protection: Protection) -> dict[str, str | None]:
    return {e.path: e.protected or protection.reason(e.path) for e in entries}


def executable(e: ChangeEntry) -> bool:
    """A file the change makes executable: created with an x bit, or an x bit added."""
    if e.kind != "file" or e.change == "deleted" or not e.mode:
        return False
    now = int(e.mode, 8) & 0o111
    was = int(e.was_mode, 8) & 0o111 if e.was_mode and e.was_kind == "file" else 0
    return bool(now & ~was)


def setuid(e: ChangeEntry) -> bool:
    return bool(e.mode and int(e.mode, 8) & (stat.S_ISUID | stat.S_ISGID))


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def quote(word: str) -> str:
    """A shell word that pastes back to ``word`` and carries no control character: bash's
    ``$'...'`` with escapes when it holds one, else shlex.quote."""
    if not _UNSAFE.search(word):
        return shlex.quote(word)
    body = "".join(
        f"\\x{ord(c):02x}"  # bash reads \xNN as a byte: only for ASCII
        if ord(c) < 0x80 and _UNSAFE.match(c)
        else (f"\\u{ord(c):04x}" if _UNSAFE.match(c) else ("\\" + c if c in "\\'" else c))
        for c in word
    )
    return f"$'{body}'"


def command_for(
    handle: str, workdir: Path, held: list[tuple[ChangeEntry, str]], config: Path | None
) -> str | None:
    """The CLI command a person runs to apply what was held (never `.git`), or None."""
    names: list[str] = []
    for e, _why in sorted(held, key=lambda h: h[0].path):
        if under_git(e.path) or any(_beneath(e.path, n) for n in names):
            continue
        names.append(e.path)
    if not names:
        return None
    words = ["sprawl-orch", "apply", "-C", str(workdir)]
    if config is not None:
        words += ["--config", os.path.abspath(config)]
    for n in names:
        words += ["--protected", n]
    words.append(handle)
    return " ".join(quote(w) for w in words)


def banner(diff_first: str, executables: list[ChangeEntry]) -> str:
    text = f"{BANNER}{diff_first}{BANNER_END}" if diff_first else ""
    if executables:
        text += EXEC_BANNER + "".join(
            f"# {safe(e.path)} mode {e.mode}"
            + (" (set-uid/set-gid: never carried)" if setuid(e) else "")
            + "\n"
            for e in executables
        )
    return text
