"""sprawl-orch's own directories 0700 and files 0600, all through the state directory
(issue 30 break 6): kept-output/, outputs/, copies/ and changes/ were 0755 with 0644 files,
guarded only by the state root's 0700 -- while a root caller's sandbox uid holds a search
entry on that root (sandbox_uid.grant_search: it must pass to reach its copy), so a name
known or guessed under it was readable. Now no directory of ours lets anyone else list or
pass, and no file of ours lets anyone else read; the sandbox uid's entries stay search-only,
on the way to its own copy. A copy's *contents* keep the tree's modes: the command needs
them, and apply carries them back.

`Path.mkdir(mode=0o700, parents=True)` gives the mode to the leaf only (the parents get
0777 less the umask), hence `private_dirs`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import tempfile
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError

# Directly under the state directory; tightened when found open (made by an older version).
OWN_DIRS: tuple[str, ...] = ("kept-output", "outputs", "copies", "changes", "admission", "runtimes")


def private_dirs(path: Path) -> Path:
    """`mkdir -p` where every directory made is 0700."""
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)  # whatever the umask
    return path


def private_file(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """An fd for `path`, created 0600 (never following a link at the last name)."""
    return os.open(path, flags | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)


_ACL_XATTR = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 2, 4, 8, 16


def _open_to_others(path: Path, st: os.stat_result) -> bool:
    """Whether anyone but us, or more than the sandbox uid's search, gets into ``path``.
    With a POSIX ACL the group bits of the mode are the ACL's mask: a search entry of the
    sandbox uid (native_fallbacks/sandbox_uid.grant_search) shows as g+x there. Tightening
    that with a chmod masked the entry out while another process's bwrap was reaching its
    workspace's tree under the state directory: that bwrap failed (exit 1), a flake of two
    CLI processes in one workspace at once."""
    bits = stat.S_IMODE(st.st_mode)
    if bits & 0o007:
        return True
    if not bits & 0o070:
        return False
    try:
        raw = os.getxattr(path, _ACL_XATTR)
    except OSError:
        return True  # no ACL (or none readable): the group bits are the group's
    if len(raw) < 4 or (len(raw) - 4) % 8:
        return True  # not an ACL we can read: tightened
    for tag, perm, _ in struct.iter_unpack("<HHI", raw[4:]):
        if tag in (_ACL_GROUP_OBJ, _ACL_GROUP) and perm:
            return True
        if tag in (_ACL_USER, _ACL_MASK) and perm & ~0o1:
            return True  # more than search for a named user
    return False


def _tighten(path: Path, mode: int) -> None:
    st = os.lstat(path)
    if st.st_uid == os.geteuid() and _open_to_others(path, st):
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077 & 0o7777 | (mode & 0o700))


def prepare_state(state: Path) -> Path:
    """The state directory made 0700, or -- found -- tightened to 0700 when it is ours, and
    refused when it is not a directory of ours (another account's directory, or a shared
    one like /tmp, would hand our copies and output to whoever owns it)."""
    _way_is_ours(state)
    if not os.path.lexists(state):
        return private_dirs(state)
    try:
        st = os.stat(state)
    except OSError as err:
        raise _refuse(state, f"cannot be read: {err.strerror}") from err
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(state, "is not a directory")
    if st.st_uid != os.geteuid():
        raise _refuse(state, f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
    if _open_to_others(state, st):
        os.chmod(state, 0o700)
    for name in OWN_DIRS:
        sub = state / name
        # no such directory yet: nothing to tighten
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(sub).st_mode):
                _tighten(sub, 0o700)
    # no kept-output directory yet: nothing to tighten
    with contextlib.suppress(OSError):
        for entry in os.scandir(state / "kept-output"):
            if entry.is_file(follow_symlinks=False):
                _tighten(Path(entry.path), 0o600)
            elif entry.is_dir(follow_symlinks=False):
                _tighten(Path(entry.path), 0o700)
    return state


def _way_is_ours(state: Path) -> None:
    """Nobody else can swap the state directory, or the link to it, for one of theirs after
    it was checked (attack3: a link in /tmp owned by another account passed, being followed
    to a directory of ours -- and its owner may replace it at any time): a link on the way
    must be ours or root's, and no directory holding the state directory or its link may be
    writable by others unless sticky (then only its owner may rename what is in it)."""
    me = os.geteuid()
    for place in (state, Path(os.path.realpath(state))):
        with contextlib.suppress(FileNotFoundError):  # not made yet: no link to judge
            st = os.lstat(place)
            if stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
                raise _refuse(state, f"is a link owned by uid {st.st_uid}, who can repoint it")
        with contextlib.suppress(FileNotFoundError):  # private_dirs makes it 0700, ours
            up = os.stat(place.parent)
            if up.st_mode & 0o022 and not up.st_mode & stat.S_ISVTX and up.st_uid != me:
                raise _refuse(
                    state,
                    f"sits in {place.parent}, which others may write (mode "
                    f"{stat.S_IMODE(up.st_mode):o}, not sticky): they could put theirs there",
                )


def _refuse(state: Path, why: str) -> SprawlError:
    return SprawlError(
        ErrorCode.CONFIG_INVALID,
        "[state] dir",
        f"the state directory {state} {why}: it holds copies of your tree, command output "
        "and kept changes, which must be yours alone (mode 0700)",
        "set [state] dir to a directory of your own (it is made 0700 if missing), or "
        f"chown it to uid {os.geteuid()}",
    )


def ensure_private_file(directory: Path, name: str, want: str, mode: int, what: str) -> Path:
    """`directory/name` holding `want` with `mode`, written by atomic rename when absent,
    different or a link; `directory` must be this user's and writable by no one else, since
    an engine loads or runs what the file holds as its caller (the runsc wrapper, the seccomp
    profile). `what` names the file in the refusal."""
    target = directory / name
    try:
        st = target.lstat()
        if (
            stat.S_ISREG(st.st_mode)
            and stat.S_IMODE(st.st_mode) == mode
            and target.read_text(encoding="utf-8") == want
        ):
            return target
    except OSError:
        # absent or unreadable: written anew below (atomic rename), which says any real fault
        pass
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PermissionError(
            f"{directory} is not this user's private directory (owner {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): {what} there could be replaced by another user"
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(want)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def private_tmp() -> Path:
    """A private directory of this user under the temp dir (made 0700; refused when another
    account holds it, it is open to others, or it is a link)."""
    private = Path(tempfile.gettempdir()) / f"sprawl-orch-{os.geteuid()}"
    problem = private_dir(private, mode_mask=0o077)
    if problem is not None:
        raise OSError(problem)
    return private


def private_dir(path: Path, *, parents: bool = False, mode_mask: int = 0o022) -> str | None:
    """Make ``path`` a directory of this user that no other account can write (0700 when
    made), or say why it is not one. Never followed through a link: its last component is
    lstat-ed, so a link or a directory another account planted there first is refused,
    not used (issue 22: a machine-wide /tmp/sprawl-orch one account could hold against
    every other, root included)."""
    try:
        if parents:
            private_dirs(path.parent)  # every directory made 0700, not only the leaf
        os.mkdir(path, 0o700)
    except FileExistsError:
        # made by a racing call of ours: checked just below like any found one
        pass
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    try:
        st = os.lstat(path)
    except OSError as err:
        return f"{path}: {err.strerror or err}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link (never followed: another account may have planted it)"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return (
            f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): "
            "another account made it first"
        )
    if st.st_mode & mode_mask:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: other accounts can write it"
    return None
