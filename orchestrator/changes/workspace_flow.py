"""The person's edits flowing into a workspace (issue 23), judged path by path DURING the base
sync.

The base sync (copy/sync.py) calls :meth:`Flow.before` with each path just before it writes
the person's version over the base's: the base still holds the version the agent started
from, so whether the agent changed that path is an exact comparison of two entries (and of
what is under them), not a diff of the whole tree -- which had cost two walks of each tree on
every command. After the sync, :meth:`Flow.finish` brings each judged path the agent left
alone into ``tree``; one the agent changed too is a conflict (the agent's version stays, the
person's is kept under ``theirs/``), unless both now hold the same. A directory whose
permission bits alone changed on the person's side gets them in ``tree`` too, unless the
agent changed that directory's bits as well (then it is a conflict like any other).

A base sync that fails midway (the person's tree unreadable, a bound hit, a disk error) is
undone (:meth:`Flow.undo`): the workspace stays as it was before the command. Each path the
sync wrote is put back from where its old version is: ``tree`` for a path the agent left
alone (the two were equal, the judgement just proved it), ``undo/`` for one it changed (saved
there in :meth:`Flow.before`, before the sync overwrote it), the recorded bits for a
directory whose bits alone changed. Before, the failed sync deleted base, and the next
command made the workspace afresh: the agent's work was lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from sprawl_orch.changes.workspace_diff import (
    diff,
    overlaps,
    replace_path,
    same_entry,
)
from sprawl_orch.changes.workspace_merge import (
    ABSENT,
    Merge,
    fill_starts,
    forget_start,
    prune_emptied,
)
from sprawl_orch.changes.workspace_state import BASE, BASES, THEIRS, TREE, UNDO, scan_one
from sprawl_orch.changes.workspace_walk import Clean
from sprawl_orch.core.beneath import chmod_dir
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.removal import delete_path


def same(tree: Path, base: Path, rel: str) -> bool:
    """Whether ``rel`` is the same in both trees, with everything under it."""
    a = scan_one(tree, rel)
    b = scan_one(base, rel)
    if a is None or b is None:
        return a is None and b is None
    if not same_entry(tree, a, base, b, rel):
        return False
    if stat.S_ISDIR(a.st_mode):
        return not diff(tree / rel, base / rel)
    return True


def ended(tree: Path, base: Path, rel: str, bits_only: bool) -> bool:
    """Whether conflict ``rel`` is over: both sides hold the same again (for one on a
    directory's bits alone: two directories with the same bits)."""
    if not bits_only:
        return same(tree, base, rel)
    a, b = scan_one(tree, rel), scan_one(base, rel)
    if a is None or b is None or not stat.S_ISDIR(a.st_mode) or not stat.S_ISDIR(b.st_mode):
        return same(tree, base, rel)
    return stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode)


class Flow:
    """One flow-in of a workspace (its directory ``ws``): filled by the base sync's
    ``before`` calls, then :meth:`finish`."""

    def __init__(self, ws: Path, journal: Path | None = None) -> None:
        self.tree, self.base = ws / TREE, ws / BASE
        self.bases, self.theirs = ws / BASES, ws / THEIRS
        self.judged: dict[str, bool] = {}  # path the person changed -> the agent changed it too
        self.modes: dict[str, bool] = {}  # directory whose bits alone the person changed -> same
        self.merged: list[str] = []  # directories both made, merged by finish()
        self.unmade: list[str] = []  # directories the person deleted, merged by finish()
        self.undo_dir = ws / UNDO
        # The way back, in the order the sync wrote: (path, where its old version is: "tree",
        # "undo", or the directory's old bits). A path under one written whole is not listed.
        self._back: list[tuple[str, str | int]] = []
        # Each judgement is written down before the sync overwrites base there: a flow cut
        # short after the sync would otherwise leave the person's edit in base only, where
        # `changes` shows it as the agent's undoing and apply writes that over the person's.
        self._journal = (  # closed by close(), after the sync that feeds it
            open(journal, "a", encoding="utf-8") if journal is not None else None  # noqa: SIM115
        )

    @classmethod
    def resume(cls, ws: Path, journal: Path) -> Flow:
        """The judgements a flow cut short wrote down (finish them before a new flow)."""
        flow = cls(ws)
        with open(journal, encoding="utf-8") as lines:
            for line in lines:
                try:
                    rel, mode_only, changed, *_ = json.loads(line)
                except ValueError:
                    continue  # the line the kill tore: its path is judged again by the sync
                (flow.modes if mode_only else flow.judged)[str(rel)] = bool(changed)
        return flow

    def replay(self, conflicts: set[str], bits_only: set[str]) -> tuple[list[str], list[str]]:
        """Finish a flow cut short (:meth:`resume`). The sync may have died -- or failed, and
        its undo failed too (a full disk) -- while writing a path: base's entry there can be
        half-written or gone. A path the agent left alone is therefore put back in base from
        the tree (equal to base's old version: the judgement said so), never flowed from base
        into the tree: flowing a half-written base deleted the agent's tree file the person
        never deleted (tests/integration/test_workspace_disk_full.py). The next sync brings
        the person's version in whole. The agent's paths are finished as conflicts (their
        theirs/ version is rewritten by the next sync, which compares bytes again)."""
        agent = {p for p, changed in self.judged.items() if changed}
        back: list[str] = []
        for rel in sorted(p for p in self.judged if not overlaps(p, agent)):
            parts = rel.split("/")
            if any("/".join(parts[:i]) in self.judged for i in range(1, len(parts))):
                continue  # put back with the path above it
            back.append(rel)
        # Paths the tree lacks first: their deletion frees what the sync wrote (a whole new
        # 400 KB file in base) before a copy needs room; in name order, a copy of `big0`
        # came first and hit ENOSPC on a disk the deletion of `zbig` would have freed
        # (1 run in 30, test_workspace_disk_full.py).
        back.sort(key=lambda rel: os.path.lexists(self.tree / rel))
        for rel in back:
            replace_path(self.tree, self.base, rel)
        self.judged = {p: c for p, c in self.judged.items() if overlaps(p, agent)}
        return self.finish(conflicts, bits_only)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def before(self, rel: str, mode_only: bool) -> None:
        rel = rel.replace(os.sep, "/")
        self._judge(rel, mode_only)
        self._way_back(rel, mode_only)
        if self._journal is not None:
            done = self.modes[rel] if mode_only else self.judged[rel]
            self._journal.write(json.dumps([rel, mode_only, done]) + "\n")
            self._journal.flush()  # in the kernel before base changes: a kill loses none

    def _judge(self, rel: str, mode_only: bool) -> None:
        if mode_only:
            self.modes[rel] = self._agent_bits(rel)
            return
        parts = rel.split("/")
        above = [a for i in range(1, len(parts)) if (a := "/".join(parts[:i])) in self.judged]
        if above:  # under a path made or replaced by this sync: judged with it
            self.judged[rel] = self.judged[above[0]]
            return
        changed = self._agent_changed(rel)
        self.judged[rel] = changed
        if changed:
            # Only the three-way record of where the agent started; a failure here must not
            # fail the base sync (a failed sync deletes base, and with it the workspace's
            # knowledge of the person's tree).
            with contextlib.suppress(OSError):
                self._keep_base(rel)

    def _way_back(self, rel: str, mode_only: bool) -> None:
        """Note (and for a path the agent changed, save) base's ``rel`` before the sync
        overwrites it. Raising here fails the sync before it writes ``rel``: nothing of it
        to put back, so the note is only made once its saved copy is whole."""
        if mode_only:
            self._back.append((rel, stat.S_IMODE(os.lstat(self.base / rel).st_mode)))
            return
        parts = rel.split("/")
        if any("/".join(parts[:i]) in self.judged for i in range(1, len(parts))):
            return  # under a path this sync made or replaced: put back with it
        if not self.judged[rel]:
            self._back.append((rel, "tree"))  # equal to base's: the judgement just said so
            return
        self.undo_dir.mkdir(mode=0o700, exist_ok=True)
        replace_path(self.base, self.undo_dir, rel)  # absent: makes the parents
        if not os.path.lexists(self.base / rel):
            Path(str(self.undo_dir / rel) + ABSENT).touch()
        self._back.append((rel, "undo"))

    def undo(self) -> None:
        """Put base back as it was before this flow's sync (which failed): every path the
        sync wrote, newest first. ``tree`` is only read."""
        for rel, where in reversed(self._back):
            if isinstance(where, int):
                chmod_dir(self.base / rel, where)
            elif where == "tree":
                replace_path(self.tree, self.base, rel)
            elif os.path.lexists(str(self.undo_dir / rel) + ABSENT):
                delete_path(self.base / rel)
            else:
                replace_path(self.undo_dir, self.base, rel)
        self._back.clear()
        delete_path(self.undo_dir)

    def undone(self, clean_at: Path, name: str, err: SprawlError) -> SprawlError:
        """The base sync failed (``err``): put base back (:meth:`undo`), so the workspace is
        as it was before this command, drop the clean pairs of the paths it wrote (their base
        side was rewritten) and end the journal; ``err`` says so, its class and fields kept
        (a bound's numbers reach the result). ``tree`` and the conflicts were not touched."""
        try:
            self.undo()
            clean = Clean.load(clean_at)
            if clean.forget((*self.judged, *self.modes)):
                clean.save(clean_at)
            if self._journal is not None:
                os.unlink(self._journal.name)
        except OSError as also:
            err.detail += (
                f"; the person's edits could not flow into workspace {name!r}, and putting "
                f"its base back failed too ({also}). The agent's changes in {self.tree} are "
                "untouched; the next command finishes the flow-in"
            )
        else:
            err.detail += (
                f"; the person's edits did not flow into workspace {name!r}: it is kept as "
                "it was before this command (the agent's changes and the named conflicts "
                "untouched)"
            )
            err.recovery += "; then run the command again"
        err.args = (err.message(),)
        return err

    def _agent_changed(self, rel: str) -> bool:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            on_way = "/".join(parts[:i])
            st = scan_one(self.tree, on_way)
            if st is None or not stat.S_ISDIR(st.st_mode):
                return True  # the agent removed or replaced a directory on the way
        try:
            return not same(self.tree, self.base, rel)
        except OSError:
            # unreadable on one side: judged changed (a conflict keeps both versions)
            return True

    def _agent_bits(self, rel: str) -> bool:
        """Whether the agent changed directory ``rel``'s permission bits (or what it is)."""
        a, b = scan_one(self.tree, rel), scan_one(self.base, rel)
        if a is None or b is None or not stat.S_ISDIR(a.st_mode):
            return True
        return stat.S_IMODE(a.st_mode) != stat.S_IMODE(b.st_mode)

    def _keep_base(self, rel: str) -> None:
        """The base version of a path the agent changed, before base moves on (three-way)."""
        parts = rel.split("/")
        for i in range(1, len(parts)):  # an ancestor kept already holds this path's start
            on_way = self.bases / "/".join(parts[:i])
            if os.path.lexists(on_way) and not os.path.isdir(on_way):
                return
            if os.path.lexists(str(on_way) + ABSENT):
                return
        kept = self.bases / rel
        if os.path.lexists(str(kept) + ABSENT):
            return
        if not os.path.lexists(kept):
            replace_path(self.base, self.bases, rel)  # absent: makes the parents
            if not os.path.lexists(self.base / rel):
                Path(str(kept) + ABSENT).touch()
            return
        # A directory kept for paths under it (an earlier conflict there): the starts of its
        # other entries too, or a three-way merge of its deletion (workspace_merge.py) took
        # every entry not kept for one the agent made.
        fill_starts(self.base, self.bases, rel)

    def finish(
        self, conflicts: set[str], bits_only: set[str] | None = None
    ) -> tuple[list[str], list[str]]:
        """After the sync: (what flowed into ``tree``, the conflicts new now); ``conflicts``
        is updated in place, and ``bits_only``: the conflicts on a directory's own bits."""
        bits_only = bits_only if bits_only is not None else set()
        agent = {p for p, changed in self.judged.items() if changed}
        flowed: list[str] = []
        done: list[str] = []
        merge = Merge(self.tree, self.base, self.bases, self.theirs, conflicts, bits_only)
        merged = self.merged = merge.merged
        unmade = self.unmade = merge.unmade
        for rel in sorted(self.judged):
            if any(rel.startswith(d + "/") for d in (*done, *merged, *unmade)):
                continue  # inside a directory replaced whole, or merged
            if overlaps(rel, agent):
                if same(self.tree, self.base, rel):
                    continue
                if merge.both_made_dir(rel):
                    merge.merge(rel)  # a directory both made: its entries judged one by one
                    continue
                if merge.deleted_dir(rel):
                    merge.unmake(rel)  # the person deleted it: three-way, entry by entry
                    continue
                merge.conflict(rel)  # now a conflict on the whole entry
                continue
            replace_path(self.base, self.tree, rel)
            # Tree and base agree there now: a start kept for it (a directory kept whole
            # earlier) is older than both, and made it a conflict at a later deletion.
            forget_start(self.bases, rel, conflicts)
            flowed.append(rel)
            done.append(rel)
        for rel, agent_bits in sorted(self.modes.items()):
            if any(rel == d or rel.startswith(d + "/") for d in done):
                continue
            a, b = scan_one(self.tree, rel), scan_one(self.base, rel)
            if a is None or b is None or not stat.S_ISDIR(a.st_mode):
                continue  # the agent made it something else: judged with its path, if at all
            if stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode):
                continue
            if agent_bits:
                merge.bits_conflict(rel, stat.S_IMODE(b.st_mode))
                continue
            # No command of the workspace runs (flow-in), yet a link planted earlier must
            # not redirect the chmod: the directory is opened without following one.
            chmod_dir(self.tree / rel, stat.S_IMODE(b.st_mode))
            flowed.append(rel)
        return flowed + merge.flowed, merge.new


def take(ws: Path, rel: str, conflicts: list[str], bits_only: list[str]) -> list[str]:
    """`workspace take`: the person's version of conflict ``rel`` into workspace ``ws``'s tree;
    the conflicts left. One on a directory's bits alone takes only those bits: the agent's
    entries under it, and the other conflicts there (kept in theirs/ under it), stay."""
    tree, base, theirs = ws / TREE, ws / BASE, ws / THEIRS
    if rel in bits_only and _take_bits(tree, base, rel):
        with contextlib.suppress(OSError):  # not empty: other conflicts' versions, kept
            (theirs / rel).rmdir()
        return [c for c in conflicts if c != rel]
    rel = _take_whole(base, tree, rel)
    delete_path(theirs / rel)
    prune_emptied(tree, base, ws / BASES, [rel])  # a deleted directory it alone held
    left = [c for c in conflicts if not overlaps(c, {rel})]
    forget_start(ws / BASES, rel, set(left))
    return left


def _take_bits(tree: Path, base: Path, rel: str) -> bool:
    """Take the person's bits of directory ``rel`` into ``tree`` (a conflict on its bits
    alone: the agent's entries under it are not the conflict's, and stay); False when either
    side is no longer a directory (then the person's whole entry is taken)."""
    a, b = scan_one(tree, rel), scan_one(base, rel)
    if a is None or b is None or not stat.S_ISDIR(a.st_mode) or not stat.S_ISDIR(b.st_mode):
        return False
    # No command of the workspace need be stopped for it: the directory is opened without
    # following a link an agent's command may have put on its place since the lstat.
    chmod_dir(tree / rel, stat.S_IMODE(b.st_mode))
    return True


def _take_whole(base: Path, tree: Path, rel: str) -> str:
    """Take the person's whole entry ``rel`` into ``tree``; the path taken, which is a
    directory on the way where the agent made that a link or a file: the person's version
    needs the directory (a link is never written through; replace_path would refuse it)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        on_way = "/".join(parts[:i])
        st = scan_one(tree, on_way)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            rel = on_way
            break
    replace_path(base, tree, rel)
    return rel
