"""A workspace's changes brought into the person's tree through the normal apply (issue 23).

workspace.py's ``Workspace.apply`` takes the workspace's lock, lets the person's edits flow in
and lists the agent's changes; this module keeps them as a change set and runs apply.py on
it: its conflict checks (the person's stamps as the base sync read them) and its path rules.
A named conflict is held back unless its path is chosen by name, and then only where the
surface lets a person consent (``conflicts_by_name``: never serve or mcp, attack6).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.apply import ApplyItem, ApplyResult
from sprawl_orch.changes.apply import apply as apply_kept
from sprawl_orch.changes.apply_protect import quote
from sprawl_orch.changes.changes import ChangeEntry
from sprawl_orch.changes.store import drop_handle
from sprawl_orch.changes.store import keep as keep_changes
from sprawl_orch.changes.workspace_diff import conflict_diff, overlaps
from sprawl_orch.changes.workspace_state import BASE, STAMPS, THEIRS, TREE, Place
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.core.errors import SprawlError


def apply_entries(
    place: Place,
    entries: Sequence[ChangeEntry],
    conflicts: Sequence[str],
    paths: Sequence[str] | None,
    *,
    dry_run: bool,
    protected: Sequence[str],
    protected_globs: Sequence[str],
    unprotect: Sequence[str],
    conflicts_by_name: bool,
    bits_only: Sequence[str] = (),
) -> ApplyResult:
    """Apply ``entries`` (the workspace's changes; all, or ``paths``) to the working
    directory; each overlapping a named conflict is refused with where the person's version
    is kept, unless chosen by name and ``conflicts_by_name``. Call under the workspace's
    lock. A conflict in ``bits_only`` (a directory's own bits) holds that directory's
    entry alone: the agent's changes under it are not the conflict's."""
    tree = place.dir / TREE
    chosen = {p.strip("/") for p in paths or ()}
    bits = set(bits_only)
    named = set(conflicts) - bits
    # A directory that only holds conflicts (the person deleted it, the agent changed
    # entries in it: workspace_merge.py) comes with a conflict under it chosen by name, as
    # its parent; chosen alone it is held: applying it brought back a directory the person
    # deleted, and nothing of the agent's.
    holders = {e.path for e in entries if _holds(e, named)}
    wanted = chosen & {e.path for e in entries} - holders
    carried = {h for h in holders if any(c.startswith(h + "/") for c in wanted)}
    consent = (chosen - holders) | carried if conflicts_by_name else set()
    held = [
        e.path
        for e in entries
        if (overlaps(e.path, named) or e.path in bits) and e.path not in consent
    ]
    todo = [e for e in entries if e.path not in held]
    record = _change_record(place)
    handle = f"ws-{place.name}-{secrets.token_hex(4)}"
    # A chosen path held as a conflict is answered once, as the conflict below (apply would
    # add "not among the changes" for it); choosing only held paths applies nothing.
    asked = sorted({p for p in chosen if p not in held} | carried)
    kept = keep_changes(place.state, handle, place.workdir, tree, record, todo, budget=1 << 62)
    if not kept.kept or (chosen and not asked):
        result = ApplyResult(handle=handle, workdir=str(place.workdir), dry_run=dry_run)
    else:
        result = apply_kept(
            place.state,
            handle,
            asked or None,
            dry_run=dry_run,
            protected=protected,
            protected_globs=protected_globs,
            unprotect=unprotect,
        )
        # an applied handle left behind is swept by the store's budget
        with contextlib.suppress(SprawlError, OSError):
            drop_handle(place.state, handle)
    refused = [
        *result.refused,
        *(
            _held(p, place.dir / THEIRS / p, sorted(c for c in named if c.startswith(p + "/")))
            if p in holders
            else _held(p, place.dir / THEIRS / p, [])
            for p in held
            if not paths or overlaps(p, chosen)
        ),
    ]
    update: dict[str, object] = {"refused": refused}
    if result.command:
        # The handle applied through is dropped just above: the person names the
        # workspace instead (same -C, --config and --protected words), on every surface.
        tail = " " + quote(handle)
        if result.command.endswith(tail):
            update["command"] = result.command[: -len(tail)] + " --workspace " + quote(place.name)
    if dry_run and held:
        # A person merging by hand needs the agent's side of each held conflict.
        shown_held = [p for p in held if not paths or overlaps(p, chosen)]
        extra = "".join(conflict_diff(place.workdir, tree, p) for p in shown_held)
        update["diff"] = (result.diff or "") + extra or None
    return result.model_copy(update=update)


def _change_record(place: Place) -> change_record.SyncRecord:
    """The person's stamps as the last base sync read them (apply's conflict check), and
    the base's bytes' hashes for files too young to trust by stamp."""
    sync = copy_stamps.load(place.dir / STAMPS)
    record = change_record.SyncRecord(sync=sync)
    if sync is not None:
        record.source_line_ns = sync.started_ns - sync.granularity_ns
        record.source_dirs = change_record.source_dirs(sync, place.workdir)
        for rel in sync.paths:
            f = sync.file(rel)
            if f is not None and f.source[2] >= record.source_line_ns:
                digest = change_record.sha256_of(place.dir / BASE / rel)
                if digest is not None:
                    record.hashes[rel.replace(os.sep, "/")] = digest
    return record


def _holds(entry: ChangeEntry, named: set[str]) -> bool:
    """Whether ``entry`` is a directory the person's tree lacks that holds a named conflict
    without being one or inside one (a directory whose bits the agent changed stays a
    change of its own, applied when chosen)."""
    if entry.change != "created" or entry.kind != "dir":
        return False
    path = entry.path
    parts = path.split("/")
    inside = any("/".join(parts[:i]) in named for i in range(1, len(parts) + 1))
    return not inside and any(c.startswith(path + "/") for c in named)


def _held(path: str, theirs: Path, under: list[str]) -> ApplyItem:
    if under:
        return ApplyItem(
            path=path,
            change="conflict",
            why=f"it holds the conflicts {', '.join(under)} (the person deleted or changed "
            "what the agent changed there); choose those by name to apply the agent's "
            "version, with this directory, or take the person's: "
            "sprawl-orch workspace take NAME PATH",
        )
    return ApplyItem(
        path=path,
        change="conflict",
        why=f"both the agent and the person changed it; the person's version is kept at "
        f"{theirs}. Choose the path by name to apply the agent's version over it, or take "
        "the person's: sprawl-orch workspace take NAME PATH",
    )
