"""The PATH part of the bwrap view (bwrap_view.path_tools) kept by the exec server across
calls (issue 26: it resolves every link of every PATH directory -- hundreds of realpath
calls -- and a served call is a fresh fork, so a per-process cache was lost each time).

Kept in the served memo (core/served_memo.py) under (PATH, the guard, the system binds),
with a stamp -- (dev, ino, mtime_ns, ctime_ns, mode) -- of every directory the build read:
each PATH entry, the real path of each, every directory on the way to them, each scanned
directory, the directory of every hop of every link in it and of where it ends. A link
added or retargeted in place changes its directory's mtime and ctime (ctime cannot be set
back by anyone: `touch` moves it), a chmod on the way changes a ctime: a stamp that differs
is a rebuild, judged by the guard as today.

And whatever the stamps say, every bind of a remembered part is judged again on every use
(a few stats): still its own real path (bwrap binds what a path leads to *now*, and the
guard judges real paths), and allowed by the guard by the same rule that let it in. A
remembered part never binds what the guard would refuse now.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.core.credential_places import Guard
from sprawl_orch.native_fallbacks.bwrap_view import (
    PathPart,
    Read,
    bind_rule_holds,
    path_tools,
    stamp,
)

KIND = "bwrap-path-part"


def _guard_id(guard: Guard) -> str:
    # what the guard judges by, whole, as a digest: the guard's paths are ~15 KB of JSON and
    # the call's batch back to the server is bounded (served_memo.BATCH_LIMIT)
    whole = [
        [str(p) for p in guard.own_homes],
        [str(p) for p in guard.other_homes],
        [str(p) for p in guard.never],
        guard.grants,
    ]
    return hashlib.sha256(json.dumps(whole).encode()).hexdigest()


def _valid(value: object, guard: Guard) -> PathPart | None:
    if not isinstance(value, dict):
        return None
    stamps, binds = value.get("stamps"), value.get("binds")
    roots, venvs = value.get("pyenv_roots"), value.get("venvs")
    if not (isinstance(stamps, list) and isinstance(binds, list)):
        return None
    if not (isinstance(roots, list) and isinstance(venvs, list)):
        return None
    for each in stamps:
        if not (isinstance(each, list) and len(each) == 2 and isinstance(each[0], str)):
            return None
        if stamp(each[0]) != each[1]:
            return None  # a directory the build read has changed: build again
    paths: list[Path] = []
    for each in binds:
        if not (isinstance(each, list) and len(each) == 2):
            return None
        where, rule = each
        if not (isinstance(where, str) and isinstance(rule, str)):
            return None
        if os.path.realpath(where) != where:
            return None  # now a link or under one: bwrap would bind what it leads to
        if not bind_rule_holds(Path(where), rule, guard):
            return None  # the guard refuses it now (a chmod, a new lib/): build again
        paths.append(Path(where))
    if not all(isinstance(p, str) for p in (*roots, *venvs)):
        return None
    return PathPart(
        tuple(paths),
        tuple(Path(str(p)) for p in roots),
        tuple(Path(str(p)) for p in venvs),
    )


def served_path_part(path_env: str, guard: Guard, covered: tuple[str, ...]) -> PathPart:
    """path_tools(path_env, guard, covered), from the server's memo while every directory it
    read is unchanged and the guard still allows every bind."""
    key: served_memo.Json = [path_env, _guard_id(guard), list(covered)]
    known = _valid(served_memo.recall(KIND, key), guard)
    if known is not None:
        return known
    read: Read = {}
    rules: list[tuple[Path, str]] = []
    part = path_tools(path_env, guard, covered, read=read, rules=rules)
    value: served_memo.Json = {
        "stamps": [[d, list(s) if s is not None else None] for d, s in sorted(read.items())],
        "binds": [[str(p), rule] for p, rule in rules],
        "pyenv_roots": [str(p) for p in part.pyenv_roots],
        "venvs": [str(p) for p in part.venvs],
    }
    served_memo.learn(KIND, key, value)
    return part
