"""`apply`: bring chosen kept changes of a finished command into the working directory (design §5).

Safe by construction:

- every path is checked against the working directory *before anything is written*: a path
  whose source changed since the command's sync (its stat stamp differs from the one taken
  before the sync, or, when that stamp was too young to trust, its bytes differ) is a
  **conflict**, refused and never overwritten; both stamps are named;
- every write goes through directory fds opened ``O_NOFOLLOW`` from the working directory down
  (beneath.py): a link on the way refuses the path, so nothing outside the tree is written and
  no link in the tree is written through or replaced; a link is applied as a link only if its
  target, resolved step by step through the tree (and through the links this same apply
  writes), stays inside it, never climbs with `..` after a name (`Y/../x` leaves the tree
  once `Y` is made a link to `.`) and never points at its own directory or above;
- each file is written as a temp file in its own directory, fsynced, renamed over the name and
  the directory fsynced: an interrupted apply leaves every file old or new, never torn. Temp
  names are journalled in the store first, and the next apply of the handle removes leftovers;
- permission bits are carried (set-uid/set-gid/sticky never; a mode change never on a file
  with hard links, whose other names may lie outside the tree); ownership is not: a replaced file
  keeps its owner, a new one gets its directory's (matters when apply runs as root).

The result lists what was applied, skipped (not chosen, or applied before) and refused.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_serializer

from sprawl_orch.changes import apply_protect as guarded
from sprawl_orch.changes.apply_check import Verdict, check_all
from sprawl_orch.changes.apply_protect import executable
from sprawl_orch.changes.apply_write import attempt, clear_journal, remove_entry, write_entry
from sprawl_orch.changes.changes import ChangeEntry, shown
from sprawl_orch.changes.store import Kept, finish_if_done, load, record_applied
from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.core.protected import protection_for, unmatched_globs


class ApplyItem(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    change: str
    why: str | None = None
    protected: bool = False  # a protected path (protected.py): held unless a person named it
    executable: bool = False  # a new executable file, or an execute bit added
    at_sync: dict[str, int] | None = None  # a conflict's source stamp when the sync read it
    now: dict[str, int] | None = None  # ... and in the working directory now

    @field_serializer("path", "why", when_used="json")
    def _shown(self, name: str | None) -> str | None:
        return shown(name)


class ApplyResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    handle: str
    workdir: str
    dry_run: bool
    applied: list[ApplyItem] = []  # dry run: what would be applied
    skipped: list[ApplyItem] = []
    refused: list[ApplyItem] = []
    # protected paths not applied: not named by a person, or under .git (never)
    held: list[ApplyItem] = []
    # what a person runs at a terminal to apply the held paths (None: nothing to name)
    command: str | None = None
    warnings: list[str] = []  # e.g. an [apply] protected glob that matches nothing
    diff: str | None = None  # dry run: protected paths first, then unified diff / summary
    finished: bool = False  # every change of the handle is now applied; its store is gone

    def as_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def _selected(
    entries: list[ChangeEntry], paths: Sequence[str] | None
) -> tuple[list[ChangeEntry], list[str]]:
    """The entries chosen by ``paths`` (a path chooses itself and everything beneath it; none:
    all), plus created directories they need; and the paths that chose nothing."""
    if not paths:
        return list(entries), []
    wanted = [p.strip("/") for p in paths]
    unknown = [
        p for p in wanted if not any(e.path == p or e.path.startswith(p + "/") for e in entries)
    ]
    chosen = {
        e.path for e in entries if any(e.path == p or e.path.startswith(p + "/") for p in wanted)
    }
    made_dirs = {
        e.path for e in entries if e.kind == "dir" and e.change in ("created", "kind_changed")
    }
    for path in list(chosen):
        parts = path.split("/")
        chosen.update(
            a for a in ("/".join(parts[:i]) for i in range(1, len(parts))) if a in made_dirs
        )
    return [e for e in entries if e.path in chosen], unknown


def apply(
    state: Path,
    handle: str,
    paths: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    workdir: Path | None = None,
    protected: Sequence[str] = (),
    protected_globs: Sequence[str] = (),
    unprotect: Sequence[str] = (),
    config_path: Path | None = None,
) -> ApplyResult:
    """Apply kept changes of ``handle`` (all, or ``paths``) to the working directory they were
    made from. ``workdir``, when given, must be that directory (a harness's guard).

    Protected paths (core/protected.py, plus ``protected_globs`` and less ``unprotect`` --
    `[apply]` of the config -- and the person's git config pointers) are held unless named
    in ``protected`` -- a parameter of its own, so that no
    list of paths chosen for other reasons releases one. ``.git`` is never applied.
    ``config_path`` goes into the command the answer gives for what was held."""
    kept = load(state, handle)
    root = kept.workdir
    if workdir is not None and Path(workdir).resolve() != root:
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            str(workdir),
            f"the changes of {handle} were made from {root}, not this directory",
            f"apply it from {root}, or pass that directory",
        )
    with os_errors(
        ErrorCode.STORAGE_FATAL,
        root,
        "cannot open the working directory",
        "check that it still exists",
    ):
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with open(kept.dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rules = (tuple(protected_globs), tuple(unprotect))
            return _apply_locked(kept, root_fd, paths, dry_run, protected, rules, config_path)
    finally:
        os.close(root_fd)


def _apply_locked(
    kept: Kept,
    root_fd: int,
    paths: Sequence[str] | None,
    dry_run: bool,
    protected: Sequence[str],
    rules: tuple[tuple[str, ...], tuple[str, ...]],
    config_path: Path | None,
) -> ApplyResult:
    kept = load(kept.dir.parent.parent, kept.handle)  # re-read under the lock
    guard = protection_for(*rules, kept.workdir)
    reason = guarded.reasons(kept.entries, guard)
    named = guarded.normalize(protected)
    guarded.check_named(named, kept.entries, reason)
    if paths and named:
        paths = [*paths, *named]  # naming a protected path chooses it too
    chosen, unknown = _selected(kept.entries, paths)
    chosen_paths = {e.path for e in chosen}
    skipped = [
        ApplyItem(path=e.path, change=e.change, why="not chosen")
        for e in kept.entries
        if e.path not in chosen_paths
    ]
    skipped += [
        ApplyItem(path=e.path, change=e.change, why="applied before")
        for e in chosen
        if e.path in kept.applied
    ]
    refused = [
        ApplyItem(path=p, change="none", why="not among the changes of this handle")
        for p in unknown
    ]
    parts = guarded.split([e for e in chosen if e.path not in kept.applied], named, reason)
    todo = parts.todo
    held = [
        ApplyItem(path=e.path, change=e.change, why=why, protected=True, executable=executable(e))
        for e, why in parts.held
    ]
    verdicts = check_all(kept, root_fd, todo)
    # Written by an earlier apply that was interrupted before it could record them.
    already = [e for e in todo if (v := verdicts[e.path]) is not None and v.already]
    ok = [e for e in todo if verdicts[e.path] is None]
    refused += [
        _refusal(e, v) for e in todo if (v := verdicts[e.path]) is not None and not v.already
    ]
    base: dict[str, Any] = {
        "handle": kept.handle,
        "workdir": str(kept.workdir),
        "dry_run": dry_run,
        "skipped": skipped,
        "held": held,
        "command": guarded.command_for(kept.handle, kept.workdir, parts.held, config_path),
        "warnings": [
            f"[apply] protected glob {g!r} matches no default row and nothing in the tree"
            for g in unmatched_globs(guard, kept.workdir, [e.path for e in kept.entries])
        ],
    }
    item = partial(_item, {e.path for e in parts.shown_first})
    if dry_run:
        from sprawl_orch.changes.apply_diff import diff_of

        first = parts.shown_first
        rest = [e for e in ok if e not in first]
        news = [e for e in [*ok, *(h for h, _ in parts.held)] if executable(e)]
        return ApplyResult(
            applied=[item(e) for e in ok],
            refused=refused,
            diff=guarded.banner(diff_of(kept, first), news) + diff_of(kept, rest),
            **base,
        )
    clear_journal(kept, root_fd)
    done = [ApplyItem(path=e.path, change=e.change, why="found already applied") for e in already]
    record_applied(kept, [e.path for e in already])
    failed: dict[str, str] = {}
    # rename() replaces a file or link in one step; only a directory on either side of a
    # kind change must be removed first.
    removals = [
        e
        for e in ok
        if e.change == "deleted" or (e.change == "kind_changed" and "dir" in (e.kind, e.was_kind))
    ]
    for e in sorted(removals, key=lambda e: e.path.split("/"), reverse=True):
        why = attempt(partial(remove_entry, root_fd, e))
        if why:
            failed[e.path] = why
        elif e.change == "deleted":
            record_applied(kept, [e.path])
    for e in ok:
        if e.path in failed or e.change == "deleted":
            continue
        why = attempt(partial(write_entry, kept, root_fd, e))
        if why:
            failed[e.path] = why
        else:
            record_applied(kept, [e.path])
    for e in ok:
        if e.path in failed:
            refused.append(ApplyItem(path=e.path, change=e.change, why=failed[e.path]))
        else:
            done.append(item(e))
    # Not only when this call wrote something: a SIGKILL between the last record_applied()
    # and drop() leaves every path "applied before", and only this call can finish the store
    # (the 50-kill chaos test met it once in about 20 runs).
    finished = finish_if_done(kept)
    return ApplyResult(applied=done, refused=refused, finished=finished, **base)


def _item(protected: set[str], e: ChangeEntry) -> ApplyItem:
    return ApplyItem(
        path=e.path, change=e.change, protected=e.path in protected, executable=executable(e)
    )


def _refusal(e: ChangeEntry, v: Verdict | None) -> ApplyItem:
    assert v is not None
    return ApplyItem(path=e.path, change=e.change, why=v.why, at_sync=v.at_sync, now=v.now)


Outcome = Literal["applied", "skipped", "refused"]
