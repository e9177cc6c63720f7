"""The child's environment: a floor plus declared names, nothing else (design §8).

Values never leave this module's return value: results and the ledger record
the sorted names only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.private import private_dirs

FLOOR: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "TZ")
# Arms whose /tmp is a private tmpfs inside the sandbox, writable by the command's user:
# HOME there is writable and goes with the command (a container's root is read-only, so
# the image's HOME -- /nonexistent, / -- is not).
TMPFS_HOME: frozenset[ArmName] = frozenset({ArmName.CONTAINER, ArmName.LINUX_NAMESPACES})


def child_env(environ: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
    """Exactly the floor and the passthrough names that are set; unset names are
    omitted, never passed as empty strings."""
    names = dict.fromkeys((*FLOOR, *passthrough))
    return {name: environ[name] for name in names if name in environ}


def env_names(env: Mapping[str, str]) -> list[str]:
    return sorted(env)


def with_home(env: Mapping[str, str], arm: ArmName, outputs: Path) -> dict[str, str]:
    """The child's env with a HOME it can write, inside its sandbox: /tmp where the arm
    gives a private tmpfs, else a fresh directory of its own beside its output files
    (removed with them). Every arm, so `mkdir ~/.cache` works wherever the command runs;
    HOME from [sandbox] env_passthrough would name a host directory, so the arm's wins."""
    if arm in TMPFS_HOME:
        home = "/tmp"
    else:
        private = outputs / "home"
        private_dirs(private)
        home = str(private)
    return {**env, "HOME": home}
