"""The places whose content no command may get, whatever PATH, the tree or the command say
(issue 30): what the native view never binds, and what the copy never follows a link of the
tree into (copy_refusal). In core/ so both native_fallbacks/ and copy/ judge by one table.

The view's tool part is derived from inputs an attacker holds: the caller's PATH (an agent
sets it), the tree's `pyvenv.cfg` and `.python-version` (a cloned repository carries them).
Issue 30 bound `/root/.cargo` (credentials.toml) from `/root/.cargo/bin` on PATH, `~/.ssh`
from a venv's `home = ~/.ssh`, and sprawl-orch's own state (other working directories'
kept output) from `~/.local/bin`. So every candidate bind passes this guard, judged on its
real path (links resolved: a PATH entry that links to $HOME is $HOME):

- never `/` or a top-level directory (/home lists every account, /tmp every socket);
- never a home directory (the caller's -- from the account database *and* the caller's
  $HOME, never the command's, which is /tmp -- and every account's), nor an ancestor of one;
- never a place holding credentials or state, nor anything under or above it: each home's
  SECRETS (~/.ssh, ~/.aws, ~/.config, keyrings, ~/.local/state, ~/.cargo/credentials*, ...),
  the runtime places (RUNTIME: /tmp, /run, /var/lib ... hold sockets and other users'
  files) and sprawl-orch's own places (the state directory, the scratch directory);
- for a root caller, outside the caller's own homes only where every directory on the way
  is already searchable by everyone: the sandbox uid is given search (an ACL entry) on the
  way to each bind, and that must never open a 0700 directory (another account's home, a
  closed /srv/private) that was closed to it. Inside the caller's homes it must pass
  (pyenv lives in /root, 0700), and there the secret places above are never bound.
"""

from __future__ import annotations

import bisect
import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Relative to every home: credentials, keyrings, histories, sprawl-orch's own state. Whole
# ~/.config and ~/.cache: gh, gcloud, rclone, sprawl-orch keep tokens there, pip's cache holds
# authenticated responses -- no tool needs either to *run*.
SECRETS: tuple[str, ...] = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config",
    ".cache",
    ".docker",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".yarnrc",
    ".gem/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".local/share/keyrings",
    ".local/share/gnome-keyring",
    ".local/state",
    ".password-store",
    ".vault-token",
    ".pgpass",
    ".m2",
    ".gradle",
    ".terraform.d",
    ".boto",
    ".s3cfg",
    ".oci",
    ".pki",
    ".mozilla",
    ".claude",
    ".codex",
    ".bash_history",
    ".zsh_history",
    ".python_history",
)
# Runtime state, sockets, other users' files: never bound, even below (PATH=/tmp/x/bin).
RUNTIME: tuple[str, ...] = (
    "/tmp",
    "/var/tmp",
    "/dev",
    "/run",
    "/var/run",
    "/proc",
    "/sys",
    "/var/lib",
    "/var/spool",
    "/var/mail",
    "/var/log",
    "/var/backups",
    "/var/cache",
    "/boot",
)


def _under(path: str, root: str) -> bool:
    # strings, not Path.parents: a view's first build judges every link of every PATH
    # directory against every home's secret places (thousands of checks)
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class Guard:
    own_homes: tuple[Path, ...]  # the caller's (account and $HOME), real paths
    other_homes: tuple[Path, ...]  # every other account's
    never: tuple[Path, ...]  # SECRETS of every home, RUNTIME, sprawl-orch's places
    # A root caller's sandbox uid is given search on the way to each bind (sandbox_uid.py);
    # a non-root caller's bwrap binds as the caller, who can reach nothing more through it.
    grants: bool = True

    def __hash__(self) -> int:
        # _by_name's cache hashes the guard on every lookup: a view's build asks hundreds of
        # times, and hashing ~600 paths each time was most of the guard's cost (issue 26)
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.own_homes, self.other_homes, self.never, self.grants))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Guard):
            return NotImplemented
        return (self.own_homes, self.other_homes, self.never, self.grants) == (
            other.own_homes,
            other.other_homes,
            other.never,
            other.grants,
        )

    def index(self) -> tuple[tuple[str, ...], frozenset[str], list[str]]:
        """(homes, never, never sorted) as strings, built once per guard: _by_name asks
        "is any of them at, above or below this path" for every candidate bind, and ~600
        string comparisons each time were most of a view's cost (issue 26)."""
        built = self.__dict__.get("_index")
        if built is None:
            homes = tuple(str(h) for h in (*self.own_homes, *self.other_homes))
            never = [str(p) for p in self.never]
            built = (homes, frozenset(never), sorted(never))
            object.__setattr__(self, "_index", built)
        return built

    def refusal(self, where: Path) -> str | None:
        """Why `where` (a real, absolute path) may not be bound, or None. The rules on the
        path's name are remembered; the way's modes are looked at every time (a chmod can
        close a directory between two commands)."""
        why = _by_name(self, where)
        if why is not None:
            return why
        ours = any(_under(str(where), str(h)) for h in self.own_homes)
        if self.grants and not ours and not _public_way(where):
            return f"{where} is outside your home and not open to everyone on the way"
        return None

    def allows(self, path: Path) -> bool:
        return self.refusal(path) is None

    def home_child(self, path: Path) -> bool:
        """`path` sits directly in a home (~/.pulumi, ~/.kaggle): where tools keep their
        credentials beside their bin (pulumi's credentials.json, flyctl's config.yml), under
        names no list of SECRETS can keep up with (attack3 bound both from PATH)."""
        return path.parent in self.own_homes or path.parent in self.other_homes


@lru_cache(maxsize=4096)
def _by_name(guard: Guard, where: Path) -> str | None:
    if len(where.parts) <= 2:
        return f"{where} is / or a top-level directory"
    path = str(where)
    homes, never, ordered = guard.index()
    for home in homes:
        if _under(home, path):
            return f"{path} is a home directory ({home}) or holds one"
    if _near(path, never, ordered):
        # the first in the guard's own order, as ever: the message names the same place
        for place in map(str, guard.never):
            if _under(path, place) or _under(place, path):
                return f"{path} is or holds {place} (credentials, state or runtime files)"
    return None


def _near(path: str, never: frozenset[str], ordered: list[str]) -> bool:
    """Some place of `never` is `path`, above it or below it (_under either way)."""
    up = path
    while True:
        if up in never:
            return True
        parent = os.path.dirname(up)
        if parent == up:
            break
        up = parent
    below = path.rstrip("/") + "/"
    at = bisect.bisect_left(ordered, below)
    return at < len(ordered) and ordered[at].startswith(below)


def _public_way(path: Path) -> bool:
    """Every directory from / down to `path` searchable by everyone (mode o+x)."""
    for d in (*reversed(path.parents), path):
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            # a directory we can't stat is not known passable: answer no, the safe side
            return False
    return True


def _real(p: str | Path) -> Path:
    return Path(os.path.realpath(p))


def _account_homes() -> list[str]:
    try:
        return [e.pw_dir for e in pwd.getpwall()]
    except OSError:
        # no readable account database: only the caller's homes are known
        return []


def own_account_home() -> str | None:
    """The home of the account we run as, from the account database (None: no entry)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except (KeyError, OSError):
        # no passwd entry for our uid: $HOME is the only home known
        return None


def make_guard(
    caller_home: str | None,
    places: Iterable[Path],
    system: Iterable[str] = (),
    *,
    grants: bool = True,
    runtime: Iterable[str] = RUNTIME,
    accounts: Iterable[str] | None = None,
) -> Guard:
    """`caller_home`: the caller's $HOME (the process's, not the command's); `places`:
    sprawl-orch's own (state, scratch); `system`: the system view's binds (an account whose
    home is /bin or /usr/sbin does not make /usr unbindable). `runtime`, `accounts` (the
    account database's homes): tests pass their own."""
    sys_binds = [Path(s) for s in system]
    own = {_real(h) for h in (caller_home, own_account_home()) if h and h.startswith("/")}
    others: set[Path] = set()
    for h in _account_homes() if accounts is None else accounts:
        if not h.startswith("/"):
            continue
        real = _real(h)
        if len(real.parts) <= 1 or any(_under(str(real), str(s)) for s in sys_binds) or real in own:
            continue
        others.add(real)
    never = [Path(r) for r in runtime]
    for home in (*own, *others):
        never += [home / s for s in SECRETS]
    never += [_real(p) for p in places]
    return Guard(tuple(sorted(own)), tuple(sorted(others)), tuple(dict.fromkeys(never)), grants)


# Where a system's programs and libraries live: accounts whose home is one of them (Debian's
# `bin` has /bin, `daemon` /usr/sbin, `games` /usr/games) do not make them another's home.
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@lru_cache(maxsize=16)
def copy_guard(caller_home: str | None, places: tuple[Path, ...]) -> Guard:
    """The guard of the synced copy: the caller's homes, the accounts' homes, the runtime
    places and sprawl-orch's `places` (state and scratch directories). `grants` off: the
    copy gives no search to anyone; copy_refusal asks for readable-by-everyone itself."""
    return make_guard(caller_home, places, SYSTEM_DIRS, grants=False)


def copy_refusal(
    guard: Guard, path: str, st: os.stat_result, *, resolved: bool = False
) -> str | None:
    """Why the content reached by following `path` (a link of the tree out of it, or an entry
    below one; `st` what it leads to) may not be copied, or None. Issue 30: a cloned tree's
    `k -> /root/.ssh/id_ed25519` put the caller's key into the copy the command reads -- as
    the sandbox uid or a container's user, which could never have read it. So, judged on the
    real path: never a place the view guard refuses (credentials, homes or above, runtime
    places, sprawl-orch's own); never inside another account's home; and outside the
    caller's own homes only what everyone may read (/etc/shadow is root's: a root caller's
    sync reads it, the sandbox uid may not). `.venv/bin/python -> /usr/bin/python3.11` and
    pyenv's versions in the caller's home pass. `resolved`: `path` is already the kernel's
    path of the file `st` describes (copy/source.py reads it from the open fd): resolving it
    again could name another file than the one held (a link flipped meanwhile)."""
    real = Path(path if resolved else os.path.realpath(path))
    why = _by_name(guard, real)
    if why is not None:
        return why
    where = str(real)
    for home in guard.other_homes:
        if _under(where, str(home)):
            return f"{where} is in another account's home ({home})"
    if any(_under(where, str(h)) for h in guard.own_homes):
        return None
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    if st.st_mode & need != need or not _public_way(real.parent):
        return f"{where} is not readable by everyone (mode {stat.S_IMODE(st.st_mode):o})"
    return None
