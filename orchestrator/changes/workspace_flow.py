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
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from sprawl_orch.changes.workspace_diff import diff, overlaps, replace_path, same_entry
from sprawl_orch.changes.workspace_state import BASE, BASES, THEIRS, TREE, scan_one


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


class Flow:
    """One flow-in of a workspace (its directory ``ws``): filled by the base sync's
    ``before`` calls, then :meth:`finish`."""

    def __init__(self, ws: Path, journal: Path | None = None) -> None:
        self.tree, self.base = ws / TREE, ws / BASE
        self.bases, self.theirs = ws / BASES, ws / THEIRS
        self.judged: dict[str, bool] = {}  # path the person changed -> the agent changed it too
        self.modes: dict[str, bool] = {}  # directory whose bits alone the person changed -> same
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
                    rel, mode_only, changed = json.loads(line)
                except ValueError:
                    continue  # the line the kill tore: its path is judged again by the sync
                (flow.modes if mode_only else flow.judged)[str(rel)] = bool(changed)
        return flow

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def before(self, rel: str, mode_only: bool) -> None:
        rel = rel.replace(os.sep, "/")
        self._judge(rel, mode_only)
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
            if os.path.lexists(str(on_way) + ".absent"):
                return
        kept = self.bases / rel
        if not os.path.lexists(kept) and not os.path.lexists(str(kept) + ".absent"):
            replace_path(self.base, self.bases, rel)  # absent: makes the parents
            if not os.path.lexists(self.base / rel):
                Path(str(kept) + ".absent").touch()

    def finish(self, conflicts: set[str]) -> tuple[list[str], list[str]]:
        """After the sync: (what flowed into ``tree``, the conflicts new now); ``conflicts``
        is updated in place."""
        agent = {p for p, changed in self.judged.items() if changed}
        flowed: list[str] = []
        new: list[str] = []
        done: list[str] = []
        for rel in sorted(self.judged):
            if any(rel.startswith(d + "/") for d in done):
                continue  # inside a directory replaced whole
            if overlaps(rel, agent):
                if same(self.tree, self.base, rel):
                    continue
                if rel not in conflicts:
                    new.append(rel)
                conflicts.add(rel)
                replace_path(self.base, self.theirs, rel)
                continue
            replace_path(self.base, self.tree, rel)
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
                new.extend(() if rel in conflicts else (rel,))
                conflicts.add(rel)
                continue
            # No command of the workspace runs (flow-in), yet a link planted earlier must
            # not redirect the chmod: the directory is opened without following one.
            fd = os.open(self.tree / rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.fchmod(fd, stat.S_IMODE(b.st_mode))
            finally:
                os.close(fd)
            flowed.append(rel)
        return flowed, new
