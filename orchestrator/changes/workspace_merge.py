"""A directory both sides made, or one the person deleted, merged entry by entry at a flow-in
(issue 23).

The person made directory ``d`` on the host while the agent made ``d`` in its workspace: the
flow-in judged ``d`` as one path the agent changed (base had nothing there), so the whole of
the person's ``d`` was a conflict, ``changes`` listed the person's files in it as the agent's
deletions, and an apply of them would have deleted the person's files the agent never saw.

A directory is its entries: when both sides now hold a real directory where the agent started
from nothing (``bases/<d>.absent``), ``d`` itself is no conflict. Each of the person's entries
the agent has no entry for flows into ``tree``; one both hold the same is settled; one that
differs is a conflict of its own (the person's version kept under ``theirs/``, the agent's
start recorded as absent for the three-way diff); a directory under it both made is merged the
same way. Entries only the agent made stay the agent's. Differing bits of ``d`` itself are a
conflict on its bits alone.

The person deleted directory ``d`` in which the agent changed something: judged whole, ``d``
was one conflict and every entry of the agent's ``d`` was listed as created by the agent --
the person's deleted files among them, which ``apply d/b`` brought back. It is merged
three-way (:meth:`Merge.unmake`) against the agent's start, ``bases/d`` (the person's ``d``
as of the last flow-in): an entry equal to its start is the person's deletion and goes from
``tree``; one the agent changed or made is a conflict of its own, the person's version
absent. The starts of the settled entries are forgotten once the flow is saved
(:func:`forget_starts`). ``d`` made again later (or made a file, then a directory again) is
merged like a directory both made, three-way where the agent's start of an entry is kept: the
side still equal to it changed nothing there, and the other side's version stands.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes.workspace_diff import overlaps, real_parent, replace_path, same_entry
from sprawl_orch.changes.workspace_state import scan_one
from sprawl_orch.core.beneath import chmod_dir
from sprawl_orch.core.removal import delete_path

ABSENT = ".absent"


@dataclass
class Merge:
    """Where a flow-in's merges write: the workspace's trees, and the flow's running lists
    (what flowed into ``tree``, conflicts new now, all conflicts, those on bits alone)."""

    tree: Path
    base: Path
    bases: Path
    theirs: Path
    conflicts: set[str]
    bits_only: set[str]
    flowed: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # markers dropped once the flow is saved
    unmade: list[str] = field(default_factory=list)  # deleted directories merged three-way

    def both_made_dir(self, rel: str) -> bool:
        """Whether ``rel`` is a real directory in both trees where the agent started from
        nothing: a directory each side made, merged rather than judged whole."""
        a, b = scan_one(self.tree, rel), scan_one(self.base, rel)
        if a is None or b is None or not stat.S_ISDIR(a.st_mode) or not stat.S_ISDIR(b.st_mode):
            return False
        # Or from a directory base then lacked (the person deleted it, :meth:`unmake`, and
        # makes it anew): judged whole, the person's new files were listed as the agent's
        # deletions, and applying the conflict by name deleted them.
        return os.path.lexists(str(self.bases / rel) + ABSENT) or real_dirs(self.bases, rel)

    def merge(self, rel: str) -> None:
        """Merge directory ``rel`` (:meth:`both_made_dir` said so) entry by entry. Every
        step can be done again, and the marker that makes ``rel`` a both-made directory
        stays until the flow is written down (:func:`drop_markers`): a flow SIGKILLed
        mid-merge, or after it but before the workspace's conflicts were saved, is replayed
        from its journal, and with the marker gone the replay judged ``rel`` whole -- one
        conflict holding the agent's new files back, and the person's entries not merged
        yet listed as the agent's deletions."""
        if rel in self.conflicts and rel not in self.bits_only:
            # named whole by an earlier flow (the person's entry was then a file): over now
            self.conflicts.discard(rel)
            delete_path(self.theirs / rel)
        self._entries(rel)
        self._bits(rel)
        self.merged.append(rel)

    def _entries(self, rel: str) -> None:
        for name in sorted(os.listdir(self.base / rel)):
            sub = f"{rel}/{name}"
            a, b = scan_one(self.tree, sub), scan_one(self.base, sub)
            if b is None:
                continue  # gone from base since it was listed: nothing of the person's
            # The agent's start, where it had one (a directory made again: bases/ holds it):
            # the side still equal to it changed nothing, the other side's version stands.
            k = self._start(sub)
            if a is None:
                if k is not None and same_entry(self.base, b, self.bases, k, sub):
                    continue  # the agent deleted it, the person left it as it was
                if k is not None:
                    self._conflict(sub)
                    continue
                replace_path(self.base, self.tree, sub)
                self.flowed.append(sub)
            elif stat.S_ISDIR(a.st_mode) and stat.S_ISDIR(b.st_mode):
                self._entries(sub)  # made on both sides too
                self._bits(sub)
            elif same_entry(self.tree, a, self.base, b, sub):
                continue
            elif k is not None and same_entry(self.tree, a, self.bases, k, sub):
                replace_path(self.base, self.tree, sub)  # the agent left it as it started
                self.flowed.append(sub)
            elif k is None or not same_entry(self.base, b, self.bases, k, sub):
                self._conflict(sub)  # else the person left it as it was: the agent's stands

    def _start(self, rel: str) -> os.stat_result | None:
        """The agent's start of ``rel`` kept in bases/ (None: none kept, or it had none)."""
        if os.path.lexists(str(self.bases / rel) + ABSENT) or not real_dirs(
            self.bases, rel.rpartition("/")[0]
        ):
            return None
        return scan_one(self.bases, rel)

    def deleted_dir(self, rel: str) -> bool:
        """Whether the person deleted directory ``rel`` that the agent holds as a real
        directory and started from one (``bases/<rel>``): merged three-way, not judged whole."""
        if scan_one(self.base, rel) is not None or not real_dirs(self.tree, rel):
            return False
        if not real_dirs(self.bases, rel) or os.path.lexists(str(self.bases / rel) + ABSENT):
            return False
        # A directory whose bits the agent changed is its change, judged whole: and one it
        # made unreadable (chmod 000) is never listed.
        return same_bits(scan_one(self.tree, rel), scan_one(self.bases, rel))

    def unmake(self, rel: str) -> None:
        """Merge the person's deletion of directory ``rel`` (:meth:`deleted_dir`) against the
        agent's start, entry by entry: one equal to its start is the person's deletion (gone
        from ``tree``), one the agent changed or made is a conflict of its own (the person's
        version: absent). Judged whole, every entry of the agent's ``rel`` was listed as made
        by the agent, and ``apply d/b`` brought a file the person deleted back. Every step can
        be done again: the starts stay until the flow is saved (:func:`forget_starts`)."""
        if rel in self.conflicts:  # named whole by an earlier flow: judged entry by entry now
            self.conflicts.discard(rel)
            self.bits_only.discard(rel)
            delete_path(self.theirs / rel)
        self._unmake(rel)
        self.unmade.append(rel)

    def _unmake(self, rel: str) -> None:
        for name in sorted(os.listdir(self.tree / rel)):
            sub = f"{rel}/{name}"
            a, k = scan_one(self.tree, sub), scan_one(self.bases, sub)
            if a is None:
                continue  # gone since it was listed
            if k is None or os.path.lexists(str(self.bases / sub) + ABSENT):
                self._conflict(sub)  # the agent made it
            elif stat.S_ISDIR(a.st_mode) and stat.S_ISDIR(k.st_mode) and same_bits(a, k):
                self._unmake(sub)
            elif same_entry(self.tree, a, self.bases, k, sub):
                delete_path(self.tree / sub)  # the person's deletion
                self.flowed.append(sub)
            else:
                self.conflict(sub)
        if not os.listdir(self.tree / rel):  # nothing of the agent's left in it
            os.rmdir(self.tree / rel)
            # named once, not each entry (a result listed every file of a big directory)
            self.flowed[:] = [f for f in self.flowed if not f.startswith(rel + "/")]
            self.flowed.append(rel)

    def conflict(self, rel: str) -> None:
        """A conflict on the whole entry ``rel``: the agent's version stays in ``tree``, the
        person's is kept under ``theirs/`` (a conflict on its bits alone becomes this)."""
        if rel not in self.conflicts:
            self.new.append(rel)
        self.conflicts.add(rel)
        self.bits_only.discard(rel)
        replace_path(self.base, self.theirs, rel)

    def bits_conflict(self, rel: str, bits: int) -> None:
        """A conflict on directory ``rel``'s own bits (the person's are ``bits``); one already
        named on the whole entry stays that."""
        if rel not in self.conflicts:
            self.new.append(rel)
            self.bits_only.add(rel)
        self.conflicts.add(rel)
        if rel in self.bits_only:
            keep_bits(self.theirs, rel, bits)

    def _conflict(self, rel: str) -> None:
        self.conflict(rel)
        kept = self.bases / rel
        if not os.path.lexists(kept):  # the agent started this entry from nothing
            os.makedirs(kept.parent, 0o700, exist_ok=True)
            Path(str(kept) + ABSENT).touch()

    def _bits(self, rel: str) -> None:
        a, b = scan_one(self.tree, rel), scan_one(self.base, rel)
        if a is None or b is None or stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode):
            return
        self.bits_conflict(rel, stat.S_IMODE(b.st_mode))


def settled(
    bases: Path, merged: list[str], unmade: list[str], over: set[str], conflicts: set[str]
) -> None:
    """After the flow is saved and its journal gone: the markers of the directories both
    made (:func:`drop_markers`), the starts of the settled entries of those the person
    deleted (:func:`forget_starts`), and of the conflicts ``over`` (:func:`forget_start`;
    one on a directory's bits alone is not among them: starts under it stay)."""
    drop_markers(bases, merged)
    forget_starts(bases, unmade, conflicts)
    for rel in sorted(over):
        forget_start(bases, rel, conflicts)


def drop_markers(bases: Path, merged: list[str]) -> None:
    """After the flow is saved and its journal gone: the agent's start in each merged
    directory is per entry now. A kill before this leaves a marker behind, which only makes
    the directory merged again should the person make it anew (never a loss)."""
    for rel in merged:
        with contextlib.suppress(FileNotFoundError):  # dropped already, or made a conflict
            os.unlink(str(bases / rel) + ABSENT)


def fill_starts(base: Path, bases: Path, rel: str) -> None:
    """Keep base's version of every entry under directory ``rel`` whose start ``bases/``
    lacks (one kept already is the older start: it stays)."""
    if not real_dirs(base, rel) or not real_dirs(bases, rel):
        return
    # made for the paths under it (real_parent: 0700), its own start is base's
    chmod_dir(bases / rel, stat.S_IMODE(os.lstat(base / rel).st_mode))
    for name in sorted(os.listdir(base / rel)):
        sub = f"{rel}/{name}"
        if os.path.lexists(str(bases / sub) + ABSENT):
            continue
        if not os.path.lexists(bases / sub):
            replace_path(base, bases, sub)
        else:
            fill_starts(base, bases, sub)


def same_bits(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode)


def real_dirs(root: Path, rel: str) -> bool:
    """Whether ``rel`` and every directory on the way to it are real directories under
    ``root`` (a link an agent's command put on the way is never walked through)."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        st = scan_one(root, "/".join(parts[:i]))
        if st is None or not stat.S_ISDIR(st.st_mode):
            return False
    return True


def forget_starts(bases: Path, unmade: list[str], conflicts: set[str]) -> None:
    """After the flow is saved: in each directory the person deleted (:meth:`Merge.unmake`),
    forget the agent's start of every entry that is no conflict now -- the person's deleted
    entries, settled -- so a later flow never takes them for the agent's start again. A kill
    before this leaves starts behind that only a deleted entry could match."""
    for rel in unmade:
        _forget(bases, rel, conflicts)


def forget_start(bases: Path, rel: str, conflicts: set[str]) -> None:
    """Conflict ``rel`` is over (taken, or both sides the same again): tree and base agree
    there, so its start is base's from now on. Kept, an old start made a file the agent left
    alone since a conflict again when the person deleted its directory. One another
    conflict needs (under it, or above it) stays."""
    if not overlaps(rel, conflicts - {rel}):
        delete_path(bases / rel)
        with contextlib.suppress(FileNotFoundError):  # only an entry the agent made has one
            os.unlink(str(bases / rel) + ABSENT)


def _forget(bases: Path, rel: str, conflicts: set[str]) -> None:
    if not overlaps(rel, conflicts):
        delete_path(bases / rel)
        with contextlib.suppress(FileNotFoundError):  # only an entry the agent made has one
            os.unlink(str(bases / rel) + ABSENT)
        return
    if rel in conflicts or not real_dirs(bases, rel):
        return  # the conflict's own start, kept whole
    for name in sorted(os.listdir(bases / rel)):
        if not name.endswith(ABSENT):
            _forget(bases, f"{rel}/{name}", conflicts)
        elif not os.path.lexists(bases / rel / name[: -len(ABSENT)]):
            _forget(bases, f"{rel}/{name[: -len(ABSENT)]}", conflicts)


def prune_emptied(tree: Path, base: Path, bases: Path, ended: list[str]) -> None:
    """After each conflict of ``ended`` ended (taken, or both sides the same again), maybe
    with the person's deletion: the empty directories above it that the person deleted
    (absent in base, the agent's start a directory) go too; left, `changes` listed them as
    made by the agent and a plain apply brought the person's deleted directory back."""
    for rel in ended:
        _prune(tree, base, bases, rel)


def _prune(tree: Path, base: Path, bases: Path, rel: str) -> None:
    parts = rel.split("/")
    for i in range(len(parts) - 1, 0, -1):
        up = "/".join(parts[:i])
        if scan_one(base, up) is not None or not real_dirs(bases, up):
            return
        if not real_dirs(tree, up) or os.listdir(tree / up):
            return
        a, k = scan_one(tree, up), scan_one(bases, up)
        if a is None or k is None or stat.S_IMODE(a.st_mode) != stat.S_IMODE(k.st_mode):
            return  # its bits are the agent's: its own change
        os.rmdir(tree / up)


def keep_bits(theirs: Path, rel: str, bits: int) -> None:
    """The person's version of a conflict on directory ``rel``'s own bits: a directory
    ``theirs/rel`` with those bits (what the base holds: the sync gives every directory u+rwx).
    Other conflicts' versions kept inside it stay."""
    st = scan_one(theirs, rel)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        delete_path(theirs / rel)
        st = None
    if st is None:
        os.mkdir(real_parent(theirs, rel) / rel.split("/")[-1], 0o700)
    chmod_dir(theirs / rel, bits)
