"""The child's environment: a floor plus declared names, nothing else (SPEC §8).

Values never leave this module's return value: results and the ledger record
the sorted names only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

FLOOR: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "TZ")


def child_env(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
    """Exactly the floor and the passthrough names that are set; unset names are
    omitted, never passed as empty strings."""
    names = dict.fromkeys((*FLOOR, *passthrough))
    return {name: environ[name] for name in names if name in environ}


def env_names(env: Mapping[str, str]) -> list[str]:
    return sorted(env)
