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


# The environment of what sprawl-orch itself runs on the host around a command (bwrap, nice,
# ionice, the cgroup gate's /bin/sh, an engine CLI): chosen here, never the command's. Issue 30:
# with the command's env, `env_passthrough = ["LD_PRELOAD"]` loaded a library from the tree
# into bwrap on the host before any namespace existed. Every program is named by absolute
# path; PATH is for what those programs look up themselves (bwrap's none, podman's runtimes).
# Variables that name a CA bundle, as the host sets them (SSL_CERT_FILE is OpenSSL's; the
# others are what requests, pip, curl, git and node read instead of it): egress sets them to
# its bundle, and config refuses a secret named like one (config/secrets.py).
BUNDLE_VARIABLES: tuple[str, ...] = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
)
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def host_side_env(**extra: str) -> dict[str, str]:
    """The wrappers' own environment: a fixed PATH, C messages, and `extra` (the engine's
    connection, HOME for its config) -- no name of the caller's or the command's."""
    return {"PATH": HOST_PATH, "LC_ALL": "C", **extra}


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
