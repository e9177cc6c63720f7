"""How a bad sprawl.toml value is told: E_CONFIG_INVALID naming the key as the file spells
it, the value found and what to do; and reading the file's text and TOML, refused the same way.

A leaf of config/: the sections (sections.py) raise through it when built directly, and the
loader (__init__.py) when reading a file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sprawl_orch.config.secrets import NOT_SHOWN
from sprawl_orch.core.errors import ConfigError, ErrorCode, SprawlError, os_errors

TAKE_DEFAULT = "or remove it to take the default"


class Refusal(ValueError):
    """A refused value whose fix is not "remove it to take the default" (refused)."""

    def __init__(self, msg: str, recovery: str) -> None:
        super().__init__(msg)
        self.recovery = recovery


def key_of(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if len(parts) > 1:
        return f"[{'.'.join(parts[:-1])}] {parts[-1]}"
    return parts[0] if parts else "(file)"


def explain(err: ValidationError, path: Path | None, at: tuple[str, ...] = ()) -> ConfigError:
    first = err.errors()[0]
    key = key_of((*at, *first["loc"]))
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "literal_error":
        expected = first.get("ctx", {}).get("expected", "")
        msg = f"accepted spellings: {expected}"
    elif first["type"] == "extra_forbidden":
        msg = "unknown key"
    cause = first.get("ctx", {}).get("error")
    recovery = cause.recovery if isinstance(cause, Refusal) else None
    found = first.get("input")
    if "secrets" in (*at, *first["loc"]):
        found = NOT_SHOWN  # someone may have written the value itself into that table
    return refused(key, found, msg, path, recovery)


def refused(
    key: str, found: object, msg: str, path: Path | str | None, recovery: str | None = None
) -> ConfigError:
    where = f" in {path}" if path else ""
    return ConfigError(
        ErrorCode.CONFIG_INVALID,
        subject=key,
        detail=f"{key} = {found!r}{where}: {msg}",
        recovery=recovery or f"fix {key}{where}, {TAKE_DEFAULT}",
        key=key,
        value=found,
        reason=msg,
        path=None if path is None else str(path),
    )


def read_config_text(path: Path) -> str:
    """The file's text; E_CONFIG_INVALID (never a traceback) when it can't be read or is
    not UTF-8, which TOML requires."""
    with os_errors(
        ErrorCode.CONFIG_INVALID,
        path,
        "cannot read the config file",
        "check the path given with --config",
    ):
        data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=f"not UTF-8 (TOML files must be): byte 0x{data[err.start]:02x} at line "
            f"{line}, column {column} cannot be decoded",
            recovery="save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8), or remove the "
            "character",
        ) from err


def read_toml(text: str, path: Path, consequence: str = "") -> dict[str, Any]:
    """The config's TOML as data; E_CONFIG_INVALID at the position of a syntax error.
    `consequence` says what did not happen because of it (e.g. "; nothing was written")."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=f"not valid TOML: {err}{consequence}",
            recovery="fix the TOML syntax at the position shown",
        ) from err
