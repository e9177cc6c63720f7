"""Which socket an engine was asked to use, and what to do about the error it met there.

An outsider's report (issue 27, item 7): a dead `DOCKER_HOST`, a socket path that does not
exist and a socket this user may not open all said "the docker daemon is not running …
apt-get install docker.io", on a machine with both engines installed, naming neither the
variable nor the path. Each of the three now names the address, where it came from, the error
and the fix for that error; a socket that does exist elsewhere is offered by name.
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd
import re
import stat
from dataclasses import dataclass

from sprawl_orch.config import ContainerConfig

# Where docker's daemon listens on the machines we know (Debian's docker.io; rootless docker;
# the project's own private dockerd from .ci/setup-engines): offered when the asked one fails.
_KNOWN_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/sprawl-orch/docker.sock",
)
_ADDRESS = re.compile(r"\b((?:unix|tcp|ssh|npipe|http|https)://[^\s:'\"]+(?::\d+)?)")


@dataclass(frozen=True)
class Endpoint:
    address: str  # e.g. unix:///var/run/docker.sock
    source: str  # "DOCKER_HOST", "[sandbox.container] docker_host" or "docker's default"

    @property
    def path(self) -> str | None:
        return self.address[len("unix://") :] if self.address.startswith("unix://") else None


def endpoint(engine: str, words: str, config: ContainerConfig) -> Endpoint:
    """The address the engine's words name (else the one it was given), and where that
    address came from."""
    variable = "DOCKER_HOST" if engine == "docker" else "CONTAINER_HOST"
    configured = config.docker_host if engine == "docker" else None
    from_env = os.environ.get(variable) or None
    found = _ADDRESS.search(words)
    address = found.group(1) if found else (configured or from_env)
    if address is None:
        default = "unix:///var/run/docker.sock" if engine == "docker" else "podman's socket"
        return Endpoint(default, f"{engine}'s default")
    if configured and address == configured:
        return Endpoint(address, "[sandbox.container] docker_host")
    if from_env and address == from_env:
        return Endpoint(address, variable)
    return Endpoint(address, f"{engine}'s default")


def _others(asked: str | None) -> list[str]:
    return [
        p
        for p in _KNOWN_SOCKETS
        if p != asked and os.path.exists(p) and stat.S_ISSOCK(os.stat(p).st_mode)
    ]


def _mcp_hint(where: Endpoint) -> str:
    # MCP clients start servers with a minimal environment (the official SDK passes only HOME,
    # PATH, SHELL, TERM, USER, LOGNAME unless told): a DOCKER_HOST set in the person's shell
    # never reaches a server started that way.
    if where.source.endswith("default"):
        return (
            "; under an MCP client or a service the environment may lack the DOCKER_HOST your "
            "shell has: set [sandbox.container] docker_host in sprawl.toml, or pass DOCKER_HOST "
            "in the client's env"
        )
    return ""


def _set_it(where: Endpoint, engine: str) -> str:
    if where.source.startswith("["):
        return "change [sandbox.container] docker_host in sprawl.toml"
    variable = "DOCKER_HOST" if engine == "docker" else "CONTAINER_HOST"
    return f"set {variable} (or [sandbox.container] docker_host)"


def no_socket(engine: str, words: str, config: ContainerConfig) -> tuple[str, str]:
    """(reason, recovery) when nothing answers at the asked address."""
    where = endpoint(engine, words, config)
    path = where.path
    low = words.lower()
    others = _others(path)
    offer = (
        f"; a socket exists at {others[0]}: {_set_it(where, engine)} to unix://{others[0]}"
        if others
        else ""
    )
    if path is not None and ("no such file" in low or not os.path.exists(path)):
        return (
            f"no {engine} socket at {path} (the address {where.address} comes from "
            f"{where.source}): {words}",
            f"start the {engine} daemon so it listens at {path} (systemctl start {engine}), or "
            f"{_set_it(where, engine)} to the socket a running daemon listens on"
            f"{offer}{_mcp_hint(where)}",
        )
    return (
        f"nothing answers at {where.address} (from {where.source}): the {engine} daemon there "
        f"is not running or refuses connections: {words}",
        f"start the daemon that should listen at {where.address}, or {_set_it(where, engine)} "
        f"to one that runs{offer}{_mcp_hint(where)}",
    )


def denied(engine: str, words: str, config: ContainerConfig) -> tuple[str, str]:
    """(reason, recovery) when this user may not open the asked socket."""
    where = endpoint(engine, words, config)
    user = getpass.getuser()
    owner = ""
    group = ""
    if where.path is not None:
        try:
            st = os.stat(where.path)
            group = grp.getgrgid(st.st_gid).gr_name
            owner = (
                f" (owner {pwd.getpwuid(st.st_uid).pw_name}:{group}, "
                f"mode {stat.S_IMODE(st.st_mode):04o})"
            )
        except (OSError, KeyError):
            # The socket vanished or its ids have no names: the engine's words still say it.
            owner = ""
    target = where.path or where.address
    join = (
        f"add {user} to the group {group} (usermod -aG {group} {user}, then log in again)"
        if group
        else f"give {user} access to {target}"
    )
    return (
        f"{user} may not use the {engine} socket {target}{owner}, from {where.source}: {words}",
        f'{join}, or use rootless podman ([sandbox.container] engine = "podman")',
    )
