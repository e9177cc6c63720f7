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
- tools: each absolute entry of the command's PATH outside the system view, and the
  interpreters of the tree's virtualenvs (`pyvenv.cfg`'s `home`), which live under $HOME
  with pyenv, nvm, linuxbrew. A PATH entry `ROOT/bin` or `ROOT/shims` binds ROOT (a tool
  manager's root: pyenv's shims run ROOT/libexec/pyenv and ROOT/versions/...), except
  where ROOT mixes tools with secrets or state -- $HOME itself, ~/.local (keyrings,
  state: sprawl-orch's own copies), ~/.cargo (credentials.toml): there only the bin
  directory is bound, plus the install prefix of each link in it (pipx's venvs) and,
  for ~/.cargo/bin, rustup's toolchains. Never $HOME or an ancestor of it.

Everything is read-only. The seccomp filter (seccomp_filter.py) stands behind the view:
a socket that still lies in a bound directory cannot be connected, because no AF_UNIX
socket can be created.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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
TOOL_DIR_NAMES = frozenset({"bin", "sbin", "shims"})
# Relative to $HOME: roots that hold secrets or state next to their bin directory.
MIXED_ROOTS: tuple[str, ...] = (".local", ".cargo")
LINKS_SCANNED = 512


@dataclass(frozen=True)
class View:
    binds: tuple[str, ...]  # host paths bound read-only at the same path
    links: tuple[tuple[str, str], ...]  # (target, path): top-level symlinks recreated

    def covers(self, path: str) -> bool:
        return any(_under(path, b) for b in self.binds)


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


def _bindable(root: Path, home: Path) -> bool:
    """Not /, not a top-level directory, not $HOME or above it, not a mixed root."""
    if len(root.parts) <= 2 or root == home or _under(str(home), str(root)):
        return False
    return not any(root == home / mixed for mixed in MIXED_ROOTS)


def _tool_root(real: Path, home: Path) -> Path:
    if real.name in TOOL_DIR_NAMES and _bindable(real.parent, home):
        return real.parent
    return real


def _prefix_of(target: Path) -> Path:
    """The install prefix of a program: PREFIX for PREFIX/bin/prog."""
    return target.parent.parent if target.parent.name in TOOL_DIR_NAMES else target.parent


def _linked_prefixes(bin_dir: Path, home: Path) -> Iterable[Path]:
    try:
        entries = list(os.scandir(bin_dir))[:LINKS_SCANNED]
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            target = Path(os.path.realpath(entry.path))
            prefix = _prefix_of(target)
            if target.parent != bin_dir and _bindable(prefix, home):
                yield prefix


def venv_home_prefix(venv: Path) -> Path | None:
    """The base interpreter's prefix recorded in `venv/pyvenv.cfg` (`home = PREFIX/bin`)."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip().startswith("/"):
            home = Path(os.path.realpath(value.strip()))
            return home.parent if home.name in TOOL_DIR_NAMES else home
    return None


def path_tools(path_env: str, home: Path) -> list[Path]:
    """Directories to bind for the programs on PATH (absolute entries only: a relative
    entry means the working directory, which is the copy)."""
    out: list[Path] = []
    for entry in path_env.split(os.pathsep):
        if not entry.startswith("/") or not os.path.isdir(entry):
            continue
        real = Path(os.path.realpath(entry))
        root = _tool_root(real, home)
        out.append(root)
        if root == real:
            out.extend(_linked_prefixes(real, home))
            if real == home / ".cargo" / "bin":
                out.append(home / ".rustup")
        venv = venv_home_prefix(root)
        if venv is not None:
            out.append(venv)
    return out


def tree_venvs(workdir: Path) -> list[Path]:
    """The base interpreters of virtualenvs at the top of the tree (.venv, venv, env, ...)."""
    out: list[Path] = []
    candidates = [workdir]
    with contextlib.suppress(OSError):
        candidates += [Path(e.path) for e in os.scandir(workdir) if e.is_dir(follow_symlinks=False)]
    for venv in candidates:
        prefix = venv_home_prefix(venv)
        if prefix is not None:
            out.append(prefix)
    return out


def _minimal(paths: Iterable[Path], base: View, inside: str, hidden: str) -> tuple[str, ...]:
    """Existing directories not already covered, parents before children, no duplicates;
    none inside the working directory (the copy is mounted there), none that would show
    `hidden` (the copy's own host path, next to other copies)."""
    kept: list[str] = []
    for p in sorted({str(p) for p in paths}, key=lambda s: (s.count("/"), s)):
        if p == "/" or base.covers(p) or any(_under(p, k) for k in kept):
            continue
        if _under(p, inside) or _under(hidden, p) or not os.path.isdir(p):
            continue
        kept.append(p)
    return tuple(kept)


@lru_cache(maxsize=16)
def _path_part(path_env: str, home: str) -> tuple[Path, ...]:
    return tuple(path_tools(path_env, Path(home)))


def command_view(
    env: Mapping[str, str], workdir: Path, copy: Path, base: View | None = None
) -> View:
    """The whole view for one command: system + PATH tools + the tree's venv interpreters.
    The PATH part is cached per (PATH, HOME); the tree is looked at every time (a venv can
    appear between two commands). Nothing at or around the working directory is bound:
    the copy is mounted there."""
    base = base or system_view()
    home = env.get("HOME") or "/nonexistent"
    tools = [*_path_part(env.get("PATH", ""), home), *tree_venvs(workdir)]
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
