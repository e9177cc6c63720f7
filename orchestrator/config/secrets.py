"""`[sandbox.secrets.NAME]`: a secret bound to its hosts. Checked twice: the table's shape when
the config is parsed (here), and the value's presence when a tool starts with the caller's
environment (`specs_of`). A refusal never quotes a secret table's input: someone may have put
the value itself in it."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from sprawl_orch.core.environment import BUNDLE_VARIABLES, FLOOR
from sprawl_orch.core.errors import ConfigError, ErrorCode
from sprawl_orch.egress.rules import Rules, parse_entry

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an HTTP header name (RFC 9110 token)
_VALUE_KEYS = ("value", "secret", "token", "password")
NOT_SHOWN = "(not shown: a secret's table)"
# Names sprawl-orch itself sets in the command's environment (egress/plan.py: the proxy and the
# CA bundle; HOME, PATH): a secret named so would be overwritten, or would redirect them.
RESERVED = frozenset(
    {
        *(
            n
            for base in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
            for n in (base, base.upper())
        ),
        "npm_config_proxy",
        "npm_config_https_proxy",
        *BUNDLE_VARIABLES,
        "HOME",
        "PATH",
    }
)


class SecretConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Host names (optionally :port) the value may reach; each must be in [sandbox.network] allow.
    hosts: tuple[str, ...] = ()
    # Where the value comes from: the caller's environment variable (default: the secret's
    # own name) or a file; never the config.
    env: str | None = None
    file: Path | None = None
    # Set outright on every request to a bound host: `header` with `format` ("Bearer {value}"),
    # or Basic credentials `basic_user:value`. Neither: the placeholder is swapped wherever
    # the command put it in a request header (Basic credentials included).
    header: str | None = None
    format: str = "{value}"
    basic_user: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_value(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _VALUE_KEYS:
                if key in data:
                    raise ValueError(
                        f"`{key}`: a secret's value never goes in sprawl.toml; it comes from "
                        "the caller's environment (`env = \"VAR\"`, default: the secret's "
                        'name) or a file (`file = "/path"`) — remove it, and rotate that '
                        "credential if the file was ever shared"
                    )
        return data

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        if not hosts:
            raise ValueError("a secret with no hosts reaches nowhere; list the hosts it is for")
        for host in hosts:
            if parse_entry(host).wildcard:
                raise ValueError(f"{host!r}: a secret is bound to named hosts, not a wildcard")
        return hosts

    @field_validator("env")
    @classmethod
    def _env(cls, name: str | None) -> str | None:
        if name is not None and not _NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        return name

    @field_validator("header")
    @classmethod
    def _header(cls, name: str | None) -> str | None:
        if name is not None and not _TOKEN.match(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        return name

    @field_validator("format")
    @classmethod
    def _format(cls, text: str) -> str:
        rest = text.replace("{value}", "", 1)
        if "{value}" not in text or "{" in rest or "}" in rest:
            raise ValueError(f"{text!r} must hold `{{value}}` once and no other braces")
        if any(c in text for c in "\r\n\0"):
            raise ValueError("a header format cannot hold CR, LF or NUL")
        return text

    @model_validator(mode="after")
    def _one_way(self) -> SecretConfig:
        if not self.hosts:  # `hosts` left out (a default is not validated by _hosts)
            raise ValueError("a secret with no hosts reaches nowhere; list the hosts it is for")
        if self.header is not None and self.basic_user is not None:
            raise ValueError("`header` and `basic_user` both set: choose one way to send it")
        if self.env is not None and self.file is not None:
            raise ValueError("`env` and `file` both set: the value comes from one place")
        return self


def _refuse(name: str, key: str, found: object, why: str, recovery: str) -> ConfigError:
    at = f"[sandbox.secrets.{name}] {key}"
    return ConfigError(
        ErrorCode.CONFIG_INVALID,
        subject=at,
        detail=f"{at} = {found!r}: {why}",
        recovery=recovery,
        key=at,
        value=found,
        reason=why,
    )


def check_secrets(
    secrets: Mapping[str, SecretConfig],
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    passed: tuple[str, ...],
) -> None:
    """Across tables: the name, its hosts against the allow-list, collisions with names
    passed in plain (env_passthrough, credentials)."""
    if not secrets:
        return
    rules = Rules.parse(allow, deny)
    for name, secret in secrets.items():
        if not _NAME.match(name):
            raise _refuse(name, "(name)", name, "not an environment variable name", "rename it")
        if name in RESERVED:
            raise _refuse(
                name,
                "(name)",
                name,
                "sprawl-orch sets this variable itself (the proxy, the CA bundle, HOME, PATH)",
                "name the secret after the variable the tool reads its token from",
            )
        for source in {name, secret.env or name}:
            if source in FLOOR and source != name:
                # `env = "TZ"`: every command's environment carries the caller's $TZ (the
                # floor), so the command read the value in plain (tests/secrets/
                # test_attacks_config.py). A secret *named* TZ only replaces it.
                raise _refuse(
                    name,
                    "env",
                    source,
                    f"every command's environment gets ${source} as it is (the floor: "
                    f"{', '.join(FLOOR)}): the command would see the value",
                    "keep the value in a variable of its own and name that in `env`",
                )
            if source in passed:
                raise _refuse(
                    name,
                    "(name)",
                    source,
                    f"{source} is also in env_passthrough or credentials, which pass it in "
                    "plain: the command would see the value",
                    f"remove {source} from [sandbox] env_passthrough / credentials",
                )
        for host in secret.hosts:
            entry = parse_entry(host)
            port = entry.port or 443
            why = rules.decide(entry.host, port)
            if why is not None:
                raise _refuse(
                    name,
                    "hosts",
                    host,
                    f"{entry.host}:{port} {why} ([sandbox.network] allow)",
                    f"add {host!r} to [sandbox.network] allow, or remove it from the secret",
                )


def refuse_files_in_tree(secrets: Mapping[str, SecretConfig], workdir: Path) -> None:
    """E_CONFIG_INVALID for a `file` the command can reach: inside the tree (the copy carries
    it in: `cat .secrets/gh` printed the value), or through a link in it (the command
    retargets the link, and the next tool reads and sends whatever file of the person's it
    chose). Checked on the path as written and on its real path, before any value is read."""
    tree = (os.path.abspath(workdir), os.path.realpath(workdir))
    for name, secret in secrets.items():
        if secret.file is None:
            continue
        written = os.path.abspath(os.path.expanduser(secret.file))
        for path in (written, os.path.realpath(written)):
            if any(path == t or path.startswith(t.rstrip(os.sep) + os.sep) for t in tree):
                raise _refuse(
                    name,
                    "file",
                    str(secret.file),
                    f"is inside the working directory {tree[1]}, which the commands run in a "
                    "copy of: they would read the value from it",
                    "keep the value's file outside the working directory (e.g. ~/.config, "
                    "mode 0600), or read it from the environment",
                )


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # Dropped here, never chained: it carries the whole file.
        return None


# The most a value's file may hold: a request head past 64 KiB is refused on the intercepted
# path anyway (secrets/wire.py HEAD_LIMIT), so no longer value could ever be sent.
MAX_VALUE_FILE = 64 * 1024


def _read_file(name: str, file: Path) -> bytes:
    """The file's bytes, or E_CONFIG_INVALID: read whole with read_bytes, a FIFO with no writer
    blocked the tool's start for ever and /dev/zero ate memory until the process died
    (tests/secrets/test_attacks_config.py). Opened without blocking (a FIFO's open waits for a
    writer), a regular file only, its size checked before a byte is read."""

    def refuse(why: str) -> ConfigError:
        return _refuse(
            name,
            "file",
            str(file),
            why,
            "keep the value in a regular file (mode 0600) of one line, or read it from the "
            "environment instead",
        )

    try:
        fd = os.open(
            os.path.expanduser(file), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        )
    except OSError as err:
        raise refuse(f"cannot be read: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("is not a regular file (a pipe or a device may never end)")
        if st.st_size > MAX_VALUE_FILE:
            raise refuse(f"is {st.st_size} bytes, over {MAX_VALUE_FILE}")
        data = b""
        while len(data) <= MAX_VALUE_FILE:
            more = os.read(fd, MAX_VALUE_FILE + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as err:
        raise refuse(f"cannot be read: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_VALUE_FILE:  # grew between fstat and read
        raise refuse(f"is over {MAX_VALUE_FILE} bytes")
    return data


def read_values(secrets: Mapping[str, SecretConfig], environ: Mapping[str, str]) -> dict[str, str]:
    """Each secret's value from the caller's environment or its file; E_CONFIG_INVALID naming
    the variable or file that is missing (never a value)."""
    out: dict[str, str] = {}
    for name, secret in secrets.items():
        if secret.file is not None:
            data = _read_file(name, secret.file)
            # Decoded outside any `except`: a UnicodeDecodeError holds the whole file (its
            # `object`, its args), and raising in its handler would chain it to the refusal.
            text = _utf8(data)
            if text is None:
                raise _refuse(
                    name,
                    "file",
                    str(secret.file),
                    "is not UTF-8 text (its content is not shown)",
                    "store the value as UTF-8 on one line",
                )
            value = text.strip()
        else:
            source = secret.env or name
            found = environ.get(source)
            if not found:
                raise _refuse(
                    name,
                    "env",
                    source,
                    f"${source} is not set (or empty) in sprawl-orch's environment",
                    f"export {source} before starting sprawl-orch, or remove the secret",
                )
            value = found
        if any(c in value for c in "\r\n\0"):
            raise _refuse(
                name,
                "env" if secret.file is None else "file",
                NOT_SHOWN,
                "the value holds CR, LF or NUL, which no header can carry",
                "store the value on one line",
            )
        out[name] = value
    return out
