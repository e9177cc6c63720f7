"""The interpreters the native view binds beyond the system: a virtualenv's base interpreter
and pyenv's parts. Both are named by files an attacker can write (`pyvenv.cfg`,
`.python-version` in a cloned tree), so what they name is checked against where the
interpreter really is and passed through the guard (core/credential_places.py) before it is bound.

- A venv's `home` must be the directory its interpreter really lives in (the realpath of
  the venv's `bin/python`): issue 30's `home = ~/.ssh` bound ~/.ssh with no interpreter in
  sight. A venv whose `home` says otherwise is refused, naming both, and so is one whose
  interpreter lies where the guard never binds (its prefix, else its bin directory).
- pyenv (a PATH entry ROOT/shims, ROOT/bin or ROOT/plugins/NAME/shims beside
  ROOT/libexec/pyenv): its code (libexec, bin, shims, pyenv.d, plugins), the global
  `version` file, and only the *selected* versions -- the names in $PYENV_VERSION, the
  tree's `.python-version` and ROOT/version -- each one a directory under ROOT/versions
  (`../../.ssh` resolves outside and is dropped). Not the whole root: src/, cache/ and
  whatever else a person keeps there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from sprawl_orch.core.credential_places import Guard
from sprawl_orch.core.errors import ErrorCode, SprawlError

TOOL_DIR_NAMES = frozenset({"bin", "sbin", "shims"})
PYENV_CODE: tuple[str, ...] = ("libexec", "bin", "shims", "pyenv.d", "plugins")
VERSION_NAMES_MAX = 8
VERSION_FILE_BYTES = 4096
# What a venv's bin/python really is: python3.12, python3.13t, pypy3.10, graalpy
INTERPRETER = re.compile(r"(python|pypy|graalpy)[0-9.]*[a-z]?")


def _real(p: str | Path) -> Path:
    return Path(os.path.realpath(p))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def venv_home(venv: Path) -> str | None:
    """The `home = ...` of `venv/pyvenv.cfg` when it is absolute, else None."""
    try:
        with open(venv / "pyvenv.cfg", "rb") as f:
            text = f.read(VERSION_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        # no readable pyvenv.cfg: not a venv whose home the view must show
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip().startswith("/"):
            return value.strip()
    return None


def _interpreter(venv: Path) -> Path | None:
    for name in ("python3", "python"):
        link = venv / "bin" / name
        if os.path.lexists(link):
            return link
    return None


def _interpreter_or_refuse(venv: Path, link: Path, real: Path) -> None:
    if not INTERPRETER.fullmatch(real.name) or not os.access(real, os.X_OK):
        # `home` agreeing with the link proves nothing when the link may name any file: a
        # tree's bin/python3 -> ~/.kaggle/kaggle.json with home = ~/.kaggle bound ~/.kaggle
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            str(link),
            f"the virtualenv {venv}'s interpreter {link} is {real}, which is not a Python "
            "interpreter (an executable named python*, pypy* or graalpy*): its directory "
            "would be bound into the sandbox",
            f"recreate the virtualenv (python -m venv --clear {venv.name})",
        )


def venv_base(
    venv: Path, guard: Guard, covered: Callable[[str], bool] | None = None
) -> Path | None:
    """The directory to bind for `venv`'s base interpreter, None when there is none to bind
    (no pyvenv.cfg `home`, no interpreter, one that does not exist). Raises
    E_SANDBOX_DENIED when `home` is not where the interpreter lives, or lies where the
    view never reaches. `covered(path)`: already in the view (the system's /usr)."""
    home = venv_home(venv)
    link = _interpreter(venv) if home is not None else None
    if home is None or link is None:
        return None
    real = _real(link)
    if not real.is_file():
        return None  # a stale venv (made on another machine): nothing to bind, nothing runs
    home_real = _real(home)
    if home_real != real.parent:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            str(venv / "pyvenv.cfg"),
            f"the virtualenv {venv} says home = {home} ({home_real}), but its interpreter "
            f"{link} really lives in {real.parent} ({real}): a pyvenv.cfg that names another "
            "directory would widen what the sandbox reads",
            f"recreate the virtualenv (python -m venv --clear {venv.name}), or fix its "
            f"pyvenv.cfg to home = {real.parent}",
        )
    if covered is not None and covered(str(home_real)):
        return None
    prefix = home_real.parent if home_real.name in TOOL_DIR_NAMES else home_real
    for candidate in (prefix, home_real):
        if guard.allows(candidate):
            _interpreter_or_refuse(venv, link, real)
            return candidate
    raise SprawlError(
        ErrorCode.SANDBOX_DENIED,
        str(venv / "pyvenv.cfg"),
        f"the virtualenv {venv}'s interpreter {real} lies where the sandbox never reads: "
        f"{guard.refusal(home_real)}",
        "make the virtualenv from an interpreter outside home directories' credential and "
        "state places (a pyenv version, /usr/bin/python3)",
    )


def pyenv_root(entry: Path) -> Path | None:
    """The pyenv root a PATH entry (real path) belongs to, if it is one of pyenv's."""
    candidates = [entry.parent]
    if entry.parent.parent.name == "plugins":
        candidates.append(entry.parent.parent.parent)
    for root in candidates:
        if entry.name in TOOL_DIR_NAMES and (root / "libexec" / "pyenv").is_file():
            return root
    return None


def _names(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out += [w for w in line.split() if not w.startswith("#")]
    return out[:VERSION_NAMES_MAX]


def _read_names(path: Path) -> list[str]:
    if path.is_symlink():
        return []  # the tree's own file, not one it points at
    try:
        with open(path, "rb") as f:
            return _names(f.read(VERSION_FILE_BYTES).decode("utf-8", errors="replace"))
    except OSError:
        # unreadable: no names from it (the view shows less, never more)
        return []


def selected_versions(root: Path, workdir: Path, env: Mapping[str, str]) -> list[str]:
    """The version names pyenv would pick from inside the sandbox: $PYENV_VERSION, the
    tree's .python-version (the copy is at the working directory), the global file."""
    names = _names(env.get("PYENV_VERSION", "").replace(":", " "))
    names += _read_names(workdir / ".python-version")
    names += _read_names(root / "version")
    return list(dict.fromkeys(n for n in names if n != "system"))[:VERSION_NAMES_MAX]


def pyenv_parts(root: Path, workdir: Path, env: Mapping[str, str], guard: Guard) -> Iterable[Path]:
    if not guard.allows(root / "libexec"):
        return
    for name in PYENV_CODE:
        if (root / name).is_dir() and guard.allows(root / name):
            yield root / name
    if (root / "version").is_file():
        yield root / "version"
    versions = _real(root / "versions")
    for name in selected_versions(root, workdir, env):
        real = _real(versions / name)
        if real.is_dir() and _under(real, versions) and real != versions and guard.allows(real):
            yield real
