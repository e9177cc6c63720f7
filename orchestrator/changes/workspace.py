"""Workspaces (issue 23): a persistent copy that keeps an agent's changes across its commands.

A plain command runs in a copy reset to the person's tree each time. A workspace, keyed by
(working directory, name), keeps what the agent's commands changed until it is applied or
discarded, while the person's own edits keep flowing in. Layout under
``<state>/workspaces/<key of the working directory>/<name>/``::

    tree/          the agent's copy: commands run here
    base/          the person's tree as of the last flow-in (a synced copy, stamps beside it)
    base.stamps    base's stamp record: the person's stamps apply checks against
    bases/         the base version of every path the agent changed (three-way, kept until
                   applied or discarded; absent there = the path did not exist)
    theirs/        the person's version of every conflicting path
    meta.json      working directory, name, conflicts
    lock           flock(2)ed while the workspace's state changes
    running/       one flock(2)ed file per command running in it

Before each command (:meth:`Workspace.refresh`), with no other command of the workspace
running: A = the paths where ``tree`` differs from ``base`` (the agent's changes); base is
synced to the person's tree, listing the paths that changed (P). For each path of P: if it
overlaps no path of A, the person's version flows into ``tree``; if the agent's version equals
the person's, nothing is to do; else it is a **conflict**: the agent's version stays, the
person's is saved under ``theirs/`` and the result names it. While a command of the workspace
runs, nothing flows in and the result says so (a server started in the background must not
see its files change under it).

``changes`` is the difference between ``tree`` and ``base`` (= the person's tree as of the
last flow-in). ``apply`` keeps it as a change set and runs the normal apply (apply.py) on it:
its conflict checks (the person's stamps as the base sync read them) and whatever path rules
it holds; a named conflict is only applied when its path is chosen by name. Workspaces are
never evicted for the copy budget; a workspace over it refuses the next command.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import stat
import time
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.changes import record as change_record
from sprawl_orch.changes.apply import ApplyItem, ApplyResult
from sprawl_orch.changes.apply import apply as apply_kept
from sprawl_orch.changes.apply_protect import quote
from sprawl_orch.changes.changes import ChangeEntry, Changes
from sprawl_orch.changes.store import drop_handle
from sprawl_orch.changes.store import keep as keep_changes
from sprawl_orch.changes.workspace_diff import (
    Clean,
    conflict_diff,
    diff,
    overlaps,
    replace_path,
    same_entry,
    scan,
)
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.bounds import Bounds, Excludes
from sprawl_orch.copy.sync import delete_path, sync_with_record
from sprawl_orch.core.credential_places import Guard, copy_guard
from sprawl_orch.core.errors import ErrorCode, SprawlError

CLEAN = "clean.json"  # workspace_diff.Clean: equal file pairs of tree and base, by stamp
TREE, BASE, STAMPS, BASES, THEIRS, META, LOCK, RUNNING = (
    "tree",
    "base",
    "base.stamps",
    "bases",
    "theirs",
    "meta.json",
    "lock",
    "running",
)
MAX_NAME = 64
NAME_MAX = 255  # bytes of one path component on Linux filesystems
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def check_name(name: str) -> str:
    """``name`` if it can name a workspace, else E_CONFIG_INVALID saying what is wrong."""
    why = None
    if not name:
        why = "is empty"
    elif len(name) > MAX_NAME:
        why = f"is {len(name)} characters long (at most {MAX_NAME})"
    elif "/" in name or "\\" in name:
        why = "holds a path separator"
    elif name in (".", "..") or ".." in name:
        why = "holds '..'"
    elif any(unicodedata.category(c) in _UNSEEN for c in name):
        # C1 controls, bidi overrides, zero-width and line separators display as something
        # else (or as nothing); a lone surrogate can't be encoded as a file name at all.
        why = "holds a control, format or separator character"
    elif len(name.encode("utf-8")) > NAME_MAX:
        # 64 four-byte characters are 256 bytes: mkdir would fail with ENAMETOOLONG
        why = f"is {len(name.encode('utf-8'))} bytes long in UTF-8 (at most {NAME_MAX})"
    elif name.startswith("."):
        why = "starts with '.'"
    if why is not None:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            repr(name),
            f"not a workspace name: it {why}",
            "name a workspace with letters, digits, '-', '_' or '.', e.g. --workspace fix-1",
        )
    return name


def workdir_key(workdir: Path) -> str:
    real = os.path.realpath(workdir)
    return hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def workspaces_root(state: Path) -> Path:
    return state / "workspaces"


@dataclass
class Refresh:
    """What happened before a command: whether the workspace was made now, what flowed in
    from the person's tree, which conflicts are named, and whether the flow was held back."""

    created: bool = False
    flowed_in: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    new_conflicts: list[str] = field(default_factory=list)
    held_back: bool = False
    note: str | None = None


@dataclass
class WorkspaceView:
    """`workspace show`: the agent's changes against the person's tree, and the conflicts."""

    name: str
    workdir: str
    path: str
    changes: list[ChangeEntry]
    conflicts: dict[str, str]  # path -> where the person's version is kept
    running: int


def _locked_by_other(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # no lock file: no command of this workspace holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # held by a live command: that is the answer
        return True
    finally:
        os.close(fd)
    return False


class Workspace:
    """One workspace; all state is on disk, so several processes may hold one (each change
    of the state is under ``lock``)."""

    def __init__(
        self,
        state: Path,
        workdir: Path,
        name: str,
        bounds: Bounds | None = None,
        excludes: Excludes | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.name = check_name(name)
        self.state = Path(state)
        # What a link of the tree out of it may bring (design §5, issue 30): a workspace's
        # base and tree are copies like any other; the exec tool passes its own guard, the
        # CLI's workspace commands get one from the state directory and $HOME.
        self.guard = guard or copy_guard(os.environ.get("HOME"), (self.state,))
        self.workdir = Path(os.path.realpath(workdir))
        self.dir = workspaces_root(self.state) / workdir_key(self.workdir) / name
        self.bounds = bounds or Bounds()
        self.excludes = excludes or Excludes()
        # The last Clean read or recorded by this object (a command's refresh, then its
        # changes): read from disk once per object.
        self._clean: Clean | None = None

    @property
    def tree(self) -> Path:
        return self.dir / TREE

    @property
    def base(self) -> Path:
        return self.dir / BASE

    def exists(self) -> bool:
        return (self.dir / META).is_file() and self.tree.is_dir() and self.base.is_dir()

    # --- state ----------------------------------------------------------------------------

    def _meta(self) -> dict[str, object]:
        try:
            data = json.loads((self.dir / META).read_text())
        except (OSError, ValueError):
            # no or torn meta: a workspace not made yet (save writes it whole)
            return {}
        return data if isinstance(data, dict) else {}

    def conflicts(self) -> list[str]:
        found = self._meta().get("conflicts", [])
        return sorted(str(p) for p in found) if isinstance(found, list) else []

    def _save(self, conflicts: Sequence[str]) -> None:
        data = {"workdir": str(self.workdir), "name": self.name, "conflicts": sorted(conflicts)}
        tmp = self.dir / (META + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.dir / META)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.dir / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def running(self) -> int:
        """How many commands of this workspace run now (their lock files are held)."""
        # no running/ directory: no command has started here
        with contextlib.suppress(FileNotFoundError):
            return sum(_locked_by_other(p) for p in (self.dir / RUNNING).iterdir())
        return 0

    @contextlib.contextmanager
    def command(self, expect: bool = False) -> Iterator[Refresh]:
        """Around one command: refresh (unless others run), then mark it running until the
        block ends. ``expect``: the caller ran commands in it before (a session): a missing
        workspace is then reported as gone instead of made afresh."""
        with self._lock():
            refresh = self._refresh_locked(expect)
            (self.dir / RUNNING).mkdir(exist_ok=True, mode=0o700)
            mark = self.dir / RUNNING / secrets.token_hex(8)
            fd = os.open(mark, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield refresh
        finally:
            # the mark may be gone with a discarded workspace
            with contextlib.suppress(OSError):
                mark.unlink()
            os.close(fd)

    def refresh(self, expect: bool = False) -> Refresh:
        with self._lock():
            return self._refresh_locked(expect)

    def _refused_workdir(self) -> SprawlError:
        return SprawlError(
            ErrorCode.STORAGE_FATAL,
            str(self.workdir),
            f"the working directory of workspace {self.name!r} is missing or not a directory "
            f"(moved or deleted); the workspace is kept at {self.dir}",
            f"restore the directory, or drop the workspace: sprawl-orch workspace discard "
            f"{self.name}",
        )

    def _refresh_locked(self, expect: bool) -> Refresh:
        if not self.workdir.is_dir():
            raise self._refused_workdir()
        if not self.exists():
            if expect:
                raise SprawlError(
                    ErrorCode.STORAGE_FATAL,
                    self.name,
                    f"workspace {self.name!r} is gone: its state directory {self.dir} was "
                    "deleted or damaged since the last command; the agent's changes in it "
                    "are lost",
                    "run the command again to start the workspace afresh from the person's tree",
                )
            return self._create()
        if self.running():
            return Refresh(
                conflicts=self.conflicts(),
                held_back=True,
                note="the person's edits were held back: another command of this workspace "
                "is running; they flow in before the next command that starts alone",
            )
        return self._flow_in()

    def _sync_base(self, touched: list[str] | None) -> copy_stamps.SyncRecord:
        _, record = sync_with_record(
            self.workdir,
            self.base,
            self.bounds,
            record=self.dir / STAMPS,
            excludes=self.excludes,
            touched=touched,
            guard=self.guard,
        )
        return record

    def _create(self) -> Refresh:
        for sub in (TREE, BASE, BASES, THEIRS, RUNNING, CLEAN):
            delete_path(self.dir / sub)
        self._clean = None
        self._sync_base(None)
        # From base, not the working directory: an edit between the two syncs would
        # otherwise look like the agent's.
        sync_with_record(self.base, self.tree, self.bounds, guard=self.guard)
        (self.dir / BASES).mkdir(mode=0o700)
        (self.dir / THEIRS).mkdir(mode=0o700)
        self._save([])
        self._diff(learn=True)
        return Refresh(created=True)

    def _flow_in(self) -> Refresh:
        # Learned here (no command runs: _refresh_locked checked) and again after the flow
        # only if the flow wrote anything.
        agent = {e.path for e in self._diff(learn=True)}
        for rel in agent:  # the base version of each changed path, before base moves on
            kept = self.dir / BASES / rel
            if not os.path.lexists(kept) and not os.path.lexists(str(kept) + ".absent"):
                replace_path(self.base, self.dir / BASES, rel)  # absent: makes the parents
                if not os.path.lexists(self.base / rel):
                    Path(str(kept) + ".absent").touch()
        touched: list[str] = []
        self._sync_base(touched)
        person = sorted({p.replace(os.sep, "/") for p in touched})
        conflicts = set(self.conflicts())
        new: list[str] = []
        flowed: list[str] = []
        done: list[str] = []
        for rel in person:
            if any(rel.startswith(d + "/") for d in done):
                continue  # inside a directory replaced whole
            if overlaps(rel, agent):
                if self._same(rel):
                    continue
                if rel not in conflicts:
                    new.append(rel)
                conflicts.add(rel)
                replace_path(self.base, self.dir / THEIRS, rel)
                continue
            replace_path(self.base, self.tree, rel)
            flowed.append(rel)
            done.append(rel)
        # A conflict ends once both sides hold the same again.
        conflicts = {c for c in conflicts if not self._same(c)}
        self._save(sorted(conflicts))
        if touched:
            self._diff(learn=True)  # stamps after the flow, for the next comparison
        return Refresh(flowed_in=flowed, conflicts=sorted(conflicts), new_conflicts=new)

    def _diff(self, learn: bool) -> list[ChangeEntry]:
        """tree against base, bytes skipped where the last recorded stamps vouch; ``learn``
        (only with no command of the workspace running): record this comparison's."""
        path = self.dir / CLEAN
        clean = self._clean
        if clean is None:
            try:
                clean = Clean.load(path.read_text())
            except OSError:
                # no clean record: every path is compared by bytes
                clean = Clean()
        if not learn:
            self._clean = clean
            return diff(self.tree, self.base, clean)
        fresh = Clean()
        found = diff(self.tree, self.base, clean, fresh)
        tmp = path.with_name(CLEAN + ".tmp")
        tmp.write_text(fresh.dump())
        os.replace(tmp, path)
        self._clean = fresh
        return found

    def _same(self, rel: str) -> bool:
        a = scan_one(self.tree, rel)
        b = scan_one(self.base, rel)
        if a is None or b is None:
            return a is None and b is None
        if not same_entry(self.tree, a, self.base, b, rel):
            return False
        if os.path.isdir(self.tree / rel) and not os.path.islink(self.tree / rel):
            return not diff(self.tree / rel, self.base / rel)
        return True

    # --- what the agent did, and what to do with it ---------------------------------------

    def show(self) -> WorkspaceView:
        if not self.exists():
            raise self.gone()
        conflicts = self.conflicts()
        return WorkspaceView(
            self.name,
            str(self.workdir),
            str(self.tree),
            self._diff(learn=False),
            {c: str(self.dir / THEIRS / c) for c in conflicts},
            self.running(),
        )

    def gone(self) -> SprawlError:
        return SprawlError(
            ErrorCode.UNKNOWN_HANDLE,
            self.name,
            f"no workspace {self.name!r} for {self.workdir} (none was made, or its state "
            f"directory {self.dir} was deleted)",
            "list them with: sprawl-orch workspace list",
        )

    def changes(self) -> Changes:
        view = self.show()
        return Changes.of(view.changes, handle=None)

    def apply(
        self,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        protected: Sequence[str] = (),
        protected_globs: Sequence[str] = (),
        unprotect: Sequence[str] = (),
        conflicts_by_name: bool = True,
    ) -> ApplyResult:
        """Bring the agent's changes (all, or ``paths``) into the person's tree through the
        normal apply, under its rules: a named conflict is held back unless its path is
        chosen by name (and ``conflicts_by_name``), and a protected path (core/protected.py)
        unless a person names it in ``protected``. serve and mcp pass neither: an agent can't
        consent for the person -- naming a conflict there wrote the agent's version over the
        person's edit, and a discard then removed the person's only other copy (attack6)."""
        if not self.workdir.is_dir():
            raise self._refused_workdir()
        with self._lock():
            if not self.exists():
                raise self.gone()
            if not self.running():
                self._flow_in()  # apply against the person's tree as it is now
            entries = self._diff(learn=False)
            chosen = {p.strip("/") for p in paths or ()}
            held = [
                e.path
                for e in entries
                if overlaps(e.path, set(self.conflicts()))
                and (e.path not in chosen or not conflicts_by_name)
            ]
            todo = [e for e in entries if e.path not in held]
            record = self._change_record()
            handle = f"ws-{self.name}-{secrets.token_hex(4)}"
            kept = keep_changes(
                self.state, handle, self.workdir, self.tree, record, todo, budget=1 << 62
            )
            if not kept.kept:
                result = ApplyResult(handle=handle, workdir=str(self.workdir), dry_run=dry_run)
            else:
                result = apply_kept(
                    self.state,
                    handle,
                    list(chosen) or None,
                    dry_run=dry_run,
                    protected=protected,
                    protected_globs=protected_globs,
                    unprotect=unprotect,
                )
                # an applied handle left behind is swept by the store's budget
                with contextlib.suppress(SprawlError, OSError):
                    drop_handle(self.state, handle)
            refused = [
                *result.refused,
                *(
                    _held(p, self.dir / THEIRS / p)
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
                    update["command"] = (
                        result.command[: -len(tail)] + " --workspace " + quote(self.name)
                    )
            if dry_run and held:
                # A person merging by hand needs the agent's side of each held conflict.
                shown_held = [p for p in held if not paths or overlaps(p, chosen)]
                extra = "".join(conflict_diff(self.workdir, self.tree, p) for p in shown_held)
                update["diff"] = (result.diff or "") + extra or None
            result = result.model_copy(update=update)
            if not dry_run and not self.running():
                self._flow_in()  # what was applied is now in the person's tree: base too
            return result

    def _change_record(self) -> change_record.SyncRecord:
        """The person's stamps as the last base sync read them (apply's conflict check), and
        the base's bytes' hashes for files too young to trust by stamp."""
        sync = copy_stamps.load(self.dir / STAMPS)
        record = change_record.SyncRecord(sync=sync)
        if sync is not None:
            record.source_line_ns = sync.started_ns - sync.granularity_ns
            record.source_dirs = change_record.source_dirs(sync, self.workdir)
            for rel in sync.paths:
                f = sync.file(rel)
                if f is not None and f.source[2] >= record.source_line_ns:
                    digest = change_record.sha256_of(self.base / rel)
                    if digest is not None:
                        record.hashes[rel.replace(os.sep, "/")] = digest
        return record

    def take(self, rel: str) -> None:
        """Take the person's version of ``rel`` into the workspace (ends its conflict)."""
        rel = rel.strip("/")
        with self._lock():
            if not self.exists():
                raise self.gone()
            if rel not in self.conflicts():
                raise SprawlError(
                    ErrorCode.BAD_REQUEST,
                    rel,
                    f"not a conflict of workspace {self.name!r}",
                    f"see them with: sprawl-orch workspace show {self.name}",
                )
            # The agent may have made a directory on the way a link or a file: the person's
            # version needs the directory, so the person's whole entry there is taken (a
            # link is never written through; replace_path would refuse it).
            parts = rel.split("/")
            for i in range(1, len(parts)):
                on_way = "/".join(parts[:i])
                st = scan_one(self.tree, on_way)
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    rel = on_way
                    break
            replace_path(self.base, self.tree, rel)
            delete_path(self.dir / THEIRS / rel)
            self._save([c for c in self.conflicts() if not overlaps(c, {rel})])

    def discard(self) -> None:
        """Drop the workspace: the next command in it starts from the person's tree."""
        with self._lock():
            if not self.exists():
                raise self.gone()
            for sub in (TREE, BASE, BASES, THEIRS, RUNNING):
                delete_path(self.dir / sub)
            copy_stamps.forget(self.dir / STAMPS)
            for name in (META, META + ".tmp", CLEAN, CLEAN + ".tmp"):
                # already gone: discard is idempotent
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / name).unlink()
        # another command's lock or entry keeps the directory: left
        with contextlib.suppress(OSError):
            (self.dir / LOCK).unlink()
            self.dir.rmdir()
            self.dir.parent.rmdir()

    def size(self) -> int:
        return sum(st.st_size for st in scan(self.dir).values() if not _isdir(st))


def _isdir(st: os.stat_result) -> bool:
    return (st.st_mode & 0o170000) == 0o040000


def scan_one(root: Path, rel: str) -> os.stat_result | None:
    try:
        return os.lstat(root / rel)
    except (FileNotFoundError, NotADirectoryError):
        # absent on this side: None is the answer
        return None


def _held(path: str, theirs: Path) -> ApplyItem:
    return ApplyItem(
        path=path,
        change="conflict",
        why=f"both the agent and the person changed it; the person's version is kept at "
        f"{theirs}. Choose the path by name to apply the agent's version over it, or take "
        "the person's: sprawl-orch workspace take NAME PATH",
    )


def listing(state: Path) -> list[dict[str, object]]:
    """Every workspace under ``state``: name, working directory, conflicts, bytes."""
    out: list[dict[str, object]] = []
    root = workspaces_root(state)
    # no workspaces directory: none to list
    with contextlib.suppress(FileNotFoundError):
        for group in sorted(root.iterdir()):
            for ws in sorted(group.iterdir()) if group.is_dir() else ():
                try:
                    meta = json.loads((ws / META).read_text())
                except (OSError, ValueError):
                    # a half-made workspace without meta is not listed
                    continue
                out.append(
                    {
                        "name": meta.get("name", ws.name),
                        "workdir": meta.get("workdir", "?"),
                        "conflicts": meta.get("conflicts", []),
                        "modified": time.strftime(
                            "%Y-%m-%d %H:%M:%S", time.localtime((ws / META).stat().st_mtime)
                        ),
                    }
                )
    return out
