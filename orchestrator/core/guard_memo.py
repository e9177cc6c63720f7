"""The guards (credential_places.make_guard, copy_guard) built once per exec server, not once
per call (issue 26: a served call is a fresh fork, and building a guard joins every
account's home with every secret place -- hundreds of paths -- each time).

Kept in the served memo (served_memo.py) under a key that holds *everything* make_guard
reads, read again on every call: the account database's homes (pwd.getpwall, ~0.2 ms), the
caller's account home and $HOME, our places, and the real path of each of them (a home
that became a link to elsewhere is a new key). So a remembered guard is exactly the guard
make_guard would build now; only the joining and the building are skipped.

The value is the guard without what is derived from it (each home's SECRETS, RUNTIME):
small enough for the call's one message back to the server.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from pathlib import Path

from sprawl_orch.core import served_memo
from sprawl_orch.core.credential_places import (
    RUNTIME,
    SECRETS,
    SYSTEM_DIRS,
    Guard,
    make_guard,
)

KIND = "guard"


def _homes() -> list[str] | None:
    try:
        return [e.pw_dir for e in pwd.getpwall()]
    except OSError:
        # no readable account database: make_guard knows only the caller's homes either
        return None


def _own() -> str | None:
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except (KeyError, OSError):
        # no passwd entry for our uid: as make_guard, $HOME is the only home known
        return None


def _key(
    caller_home: str | None, places: tuple[str, ...], system: tuple[str, ...], grants: bool
) -> served_memo.Json:
    homes = _homes()
    own = _own()
    read = [h for h in (caller_home, own, *(homes or ()), *places) if h and h.startswith("/")]
    # every path make_guard resolves, with what it resolves to now: a link retargeted
    # between two calls (a home moved behind a link) is a new key, never a stale guard
    reals: list[served_memo.Json] = [[p, os.path.realpath(p)] for p in dict.fromkeys(read)]
    known: served_memo.Json = None if homes is None else list(homes)
    return [
        os.geteuid(),
        caller_home,
        own,
        known,
        reals,
        list(places),
        list(system),
        grants,
        list(RUNTIME),
        list(SECRETS),
    ]


def _pack(guard: Guard) -> served_memo.Json:
    return {
        "own": [str(p) for p in guard.own_homes],
        "others": [str(p) for p in guard.other_homes],
        "never": [str(p) for p in guard.never],
        "grants": guard.grants,
    }


def _unpack(value: served_memo.Json) -> Guard | None:
    if not isinstance(value, dict):
        return None
    own, others, never, grants = (value.get(k) for k in ("own", "others", "never", "grants"))
    if not (isinstance(own, list) and isinstance(others, list) and isinstance(never, list)):
        return None
    if not isinstance(grants, bool):
        return None
    paths = [*own, *others, *never]
    if not all(isinstance(p, str) for p in paths):
        return None
    guard = Guard(
        tuple(Path(str(p)) for p in own),
        tuple(Path(str(p)) for p in others),
        tuple(Path(str(p)) for p in never),
        grants,
    )
    guard.index()  # built here, in the server: every fork has it
    return guard


served_memo.decoder(KIND, _unpack)


def served_guard(
    caller_home: str | None, places: Iterable[Path], system: Iterable[str] = (), *, grants: bool
) -> Guard:
    """make_guard(caller_home, places, system, grants=grants), from the server's memo when
    nothing it reads has changed."""
    place_list = tuple(str(p) for p in places)
    system_list = tuple(system)
    key = _key(caller_home, place_list, system_list, grants)
    known = served_memo.recall_decoded(KIND, key)
    if isinstance(known, Guard):
        return known
    guard = make_guard(caller_home, [Path(p) for p in place_list], system_list, grants=grants)
    served_memo.learn(KIND, key, _pack(guard))
    return guard


def served_copy_guard(caller_home: str | None, places: tuple[Path, ...]) -> Guard:
    """credential_places.copy_guard, kept by the server."""
    return served_guard(caller_home, places, SYSTEM_DIRS, grants=False)
