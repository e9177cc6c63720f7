"""What the command sees of the host inside bwrap: an explicit, read-only view.

Why an explicit view and not the whole machine with socket places masked: a unix socket
can be bound in *any* directory a process can write (the engines' sockets under /run,
/var/run, /var/lib; an ssh-agent under /tmp; a docker desktop socket under ~/.docker;
nix's daemon socket under /nix/var; a world-writable project directory), so a mask list is
never complete, and one forgotten directory owns the host (issue 11: `--ro-bind / /`
reached dockerd). The view binds only places that hold programs and their data, never
runtime state:

- system: /usr, /bin, /sbin, /lib*, /etc, /opt, and the nix/guix stores (the store only:
  /nix/var holds nix's daemon socket). Top-level links (merged /usr) stay links.
- not bound: /home, /root, /var, /run, /tmp, /srv, /mnt, /media, /sys, /boot -- /tmp,
  /var/tmp, /run, /dev/shm and $HOME are fresh tmpfs (bwrap.py), /var/run a link to /run.
- tools, each bind passed through the guard first (core/credential_places.py: never a home, never a
  place of credentials or state, never runtime places, judged on real paths with the
  *caller's* homes as reference -- issue 30 bound ~/.cargo, ~/.local and ~/.ssh from PATH
  and a tree's pyvenv.cfg): each absolute entry of the command's PATH outside the system
  view; for `ROOT/bin` or `ROOT/shims` the root when the guard allows it (nvm's
  versions/node/vX, linuxbrew), else the entry alone (~/.cargo/bin: ~/.cargo holds
  credentials.toml; ~/.local/bin: ~/.local holds keyrings and sprawl-orch's state) plus
  the install prefix of each link in it (pipx's venvs) and, for a cargo bin, rustup's
  ~/.rustup; for pyenv its code and the selected versions only (view_tools.py); the base
  interpreter of each virtualenv at the top of the tree, checked against where its
  interpreter really lives (view_tools.py).

Everything is read-only. The seccomp filter (seccomp_filter.py) stands behind the view:
a socket that still lies in a bound directory cannot be connected, because no AF_UNIX
socket can be created.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.core.credential_places import Guard, make_guard
from sprawl_orch.native_fallbacks.view_tools import (
    TOOL_DIR_NAMES,
    pyenv_parts,
    pyenv_root,
    venv_base,
)

SYSTEM: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/gnu/store",
)
LINKS_SCANNED = 512


@dataclass(frozen=True)
class View:
    binds: tuple[str, ...]  # host paths bound read-only at the same path
    links: tuple[tuple[str, str], ...]  # (target, path): top-level symlinks recreated

    def covers(self, path: str) -> bool:
        return any(_under(path, b) for b in self.binds)

    def seen_at(self, real: str) -> tuple[tuple[str, str], ...]:
        """(path inside, the bind's real source) for every place the host file whose real
        path is `real` appears: a bind shows its source's real directory at the bind's own
        path (/opt a link to /data/opt shows /data/opt/token at /opt/token)."""
        out = []
        for bind in self.binds:
            source = os.path.realpath(bind)
            if _under(real, source):
                out.append((bind.rstrip("/") + real[len(source.rstrip("/")) :], source))
        return tuple(dict.fromkeys(out))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def system_view(root: str = "/") -> View:
    """The system part: what exists of SYSTEM under `root` (tests pass a fake root)."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for name in SYSTEM:
        here = os.path.join(root, name.lstrip("/"))
        try:
            if os.path.islink(here) and name.count("/") == 1:
                links.append((os.readlink(here), name))
            elif os.path.isdir(here):
                binds.append(os.path.realpath(here) if root == "/" else name)
        except OSError:
            continue
    return View(tuple(binds), tuple(links))


def _prefix_of(target: Path) -> Path:
    """The install prefix of a program: PREFIX for PREFIX/bin/prog."""
    return target.parent.parent if target.parent.name in TOOL_DIR_NAMES else target.parent


def _linked_prefixes(
    bin_dir: Path, guard: Guard, covered: tuple[str, ...], read: Read | None = None
) -> Iterable[Path]:
    _note(read, str(bin_dir))
    try:
        entries = list(os.scandir(bin_dir))[:LINKS_SCANNED]
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            _note_hops(read, entry.path)
            target = Path(os.path.realpath(entry.path))
            prefix = _prefix_of(target)
            _note_way(read, str(prefix))
            _note(read, str(target.parent))
            if target.parent == bin_dir or _covered(str(prefix), covered):
                continue  # /usr/bin's links into /usr: nothing to judge or bind
            if not _prefix_root(prefix, guard):
                prefix = target.parent
            if bind_rule_holds(prefix, PREFIX, guard):
                yield prefix


def _prefix_root(root: Path, guard: Guard) -> bool:
    """May `root` be bound whole as a tool's install prefix? Not when it sits directly in a
    home (~/.pulumi for ~/.pulumi/bin holds credentials.json, ~/.fly its config.yml with the
    token) unless it is laid out as an install prefix, with lib/ or libexec/ beside bin/
    (~/miniconda3: its python needs lib/); a tool dir there (bin, shims) is always fine."""
    if root.name in TOOL_DIR_NAMES or not guard.home_child(root):
        return True
    return (root / "lib").is_dir() or (root / "libexec").is_dir()


@dataclass(frozen=True)
class PathPart:
    binds: tuple[Path, ...]
    pyenv_roots: tuple[Path, ...]  # their selected versions depend on the tree: per command
    venvs: tuple[Path, ...]  # PATH entries that are a venv's bin: checked per command


def _covered(path: str, binds: tuple[str, ...]) -> bool:
    return any(_under(path, b) for b in binds)


def path_tools(
    path_env: str,
    guard: Guard,
    covered: tuple[str, ...] = (),
    *,
    read: Read | None = None,
    rules: list[tuple[Path, str]] | None = None,
) -> PathPart:
    """What the programs on PATH need (absolute entries only: a relative entry means the
    working directory, which is the copy), each judged on its real path by the guard.
    `read` collects a stamp of every directory looked at, taken before it is read, and
    `rules` each bind with the rule that let it in (view_memo.py: the server's memo)."""
    out: list[Path] = []
    roots: list[Path] = []
    venvs: list[Path] = []

    def add(path: Path, rule: str) -> None:
        out.append(path)
        if rules is not None:
            rules.append((path, rule))

    for entry in path_env.split(os.pathsep):
        if not entry.startswith("/"):
            continue
        _note_way(read, os.path.normpath(entry))
        _note_hops(read, entry)
        if not os.path.isdir(entry):
            continue
        real = Path(os.path.realpath(entry))
        _note_way(read, str(real))
        if not bind_rule_holds(real, ENTRY, guard):
            continue  # ~/.kaggle on PATH is no tool's directory; ~/bin is
        for pyenv_code in (real.parent, real.parent.parent.parent):
            _note(read, str(pyenv_code / "libexec"))  # where pyenv_root looks
        pyenv = pyenv_root(real)
        if pyenv is not None:
            add(real, ENTRY)
            roots.append(pyenv)
            continue
        root = real.parent if real.name in TOOL_DIR_NAMES else real
        if root != real and not bind_rule_holds(root, PREFIX, guard):
            root = real
        add(root, ENTRY if root == real else PREFIX)
        if root == real:
            for prefix in _linked_prefixes(real, guard, covered, read):
                add(prefix, PREFIX)
            if real.name == "bin" and real.parent.name == ".cargo":
                rustup = real.parent.parent / ".rustup"
                if guard.allows(rustup):
                    add(rustup, PLAIN)
        if (root / "pyvenv.cfg").is_file():
            venvs.append(root)
    return PathPart(tuple(out), tuple(dict.fromkeys(roots)), tuple(venvs))


# The rules a bind of the PATH part passed (view_memo.py judges a remembered bind again by
# its own): a PATH entry itself; an install prefix (a home's child only when laid out as
# one); anything else the guard allows (rustup's ~/.rustup beside ~/.cargo/bin).
ENTRY, PREFIX, PLAIN = "entry", "prefix", "plain"


def bind_rule_holds(path: Path, rule: str, guard: Guard) -> bool:
    if not guard.allows(path):
        return False
    if rule == ENTRY:
        return not guard.home_child(path) or path.name in TOOL_DIR_NAMES
    if rule == PREFIX:
        return _prefix_root(path, guard)
    return rule == PLAIN


Stamp = list[int] | None
Read = dict[str, Stamp]


def stamp(directory: str) -> Stamp:
    """(dev, ino, mtime_ns, ctime_ns, mode) of what `directory` names now, None if nothing:
    an entry added, removed or retargeted in it moves its mtime and ctime; a chmod its
    ctime (which no one can set back)."""
    try:
        st = os.stat(directory)
    except OSError:
        return None  # absent now: its appearance is a change
    return [st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _note(read: Read | None, directory: str) -> None:
    if read is not None and directory not in read:
        read[directory] = stamp(directory)


def _note_way(read: Read | None, path: str) -> None:
    """`path` and every directory above it (a component turned into a link is a change in
    its parent)."""
    if read is None:
        return
    while True:
        _note(read, path)
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _note_hops(read: Read | None, path: str) -> None:
    """The way to every hop of the link chain at `path` (a link retargeted anywhere along
    it changes a directory noted here)."""
    if read is None:
        return
    for _ in range(40):  # the kernel's own limit of links followed
        try:
            target = os.readlink(path)
        except OSError:
            return  # not a link (or gone): the chain ends here, its way is noted
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
        _note_way(read, os.path.dirname(path))


def tree_venvs(workdir: Path) -> list[Path]:
    """The virtualenvs at the top of the tree (.venv, venv, env, ...) and the tree itself."""
    candidates = [workdir]
    with contextlib.suppress(OSError):
        candidates += [Path(e.path) for e in os.scandir(workdir) if e.is_dir(follow_symlinks=False)]
    return [c for c in candidates if (c / "pyvenv.cfg").is_file()]


def _minimal(paths: Iterable[Path], base: View, inside: str, hidden: str) -> tuple[str, ...]:
    """Existing directories (and pyenv's version file) not already covered, parents
    before children, no duplicates; none inside the working directory (the copy is
    mounted there), none that would show `hidden` (the copy's own host path, next to
    other copies)."""
    kept: list[str] = []
    for p in sorted({str(p) for p in paths}, key=lambda s: (s.count("/"), s)):
        if p == "/" or base.covers(p) or any(_under(p, k) for k in kept):
            continue
        if _under(p, inside) or _under(hidden, p) or not os.path.exists(p):
            continue
        kept.append(p)
    return tuple(kept)


def default_guard(base: View) -> Guard:
    """The guard when the arm names none: the caller's own homes, no places of ours."""
    return make_guard(os.environ.get("HOME"), (), base.binds)


def command_view(
    env: Mapping[str, str],
    workdir: Path,
    copy: Path,
    base: View | None = None,
    guard: Guard | None = None,
    part_of: Callable[[str, Guard, tuple[str, ...]], PathPart] = path_tools,
) -> View:
    """The whole view for one command: system + PATH tools + the tree's venv interpreters.
    The PATH part comes from `part_of`: the arms pass view_memo.served_path_part (kept by the
    exec server; passed in, as view_memo builds on this module); the tree is looked at every
    time (a venv or a .python-version can appear between two commands). Nothing at or
    around the working directory is bound: the copy is mounted there. Raises
    E_SANDBOX_DENIED for a venv whose pyvenv.cfg lies (view_tools.py)."""
    base = base or system_view()
    guard = guard or default_guard(base)
    part = part_of(env.get("PATH", ""), guard, base.binds)
    tools = list(part.binds)
    for root in part.pyenv_roots:
        tools += pyenv_parts(root, workdir, env, guard)
    for venv in (*part.venvs, *tree_venvs(workdir)):
        prefix = venv_base(venv, guard, base.covers)
        if prefix is not None:
            tools.append(prefix)
    extra = _minimal(tools, base, str(workdir), str(copy))
    view = View(base.binds + extra, base.links)
    return View(view.binds, view.links + _path_aliases(env.get("PATH", ""), view, workdir))


def _path_aliases(path_env: str, view: View, workdir: Path) -> tuple[tuple[str, str], ...]:
    """A PATH entry reached through a link (~/.nix-profile/bin -> /nix/store/...) is bound at
    its real path; the entry itself is recreated as a link to it, or PATH lookups inside would
    miss it."""
    out: list[tuple[str, str]] = []
    for entry in path_env.split(os.pathsep):
        if not entry.startswith("/") or view.covers(entry) or _under(entry, str(workdir)):
            continue
        if any(_under(entry, link) for _, link in view.links):
            continue  # through a link the view already recreates (/bin -> usr/bin)
        real = os.path.realpath(entry)
        if real != os.path.normpath(entry) and view.covers(real) and os.path.isdir(real):
            out.append((real, os.path.normpath(entry)))
    return tuple(dict.fromkeys(out))
