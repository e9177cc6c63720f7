"""`image pin REF`: resolve a local tag or ID to its fixed ID and write it into sprawl.toml.

Where it goes:
- `--engine E`, or REF found in one engine only: `[sandbox.container.images] E = ID`;
- REF found in both engines as the same ID: `[sandbox.container] image = ID` (per-engine pins
  would shadow it, so they are removed, and the removal is reported);
- REF found in both as different IDs (a tag on images imported separately, the usual case):
  one per-engine pin each, because either ID alone is missing from the other engine.

The file keeps its comments and order (tomlkit); the new text is validated as a Config
before it replaces the old one (temp file + os.replace), and read back afterwards. Nothing
is pulled: resolution is `image inspect` on the local store.
"""

from __future__ import annotations

import copy
import errno
import os
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.items
from tomlkit.exceptions import TOMLKitError

from images.engines import BUILD_FIRST, ENGINES, engine
from orchestrator.config import Config, load_config, parse_config, read_config_text, read_toml
from orchestrator.errors import ErrorCode, SprawlError

Resolver = Callable[[str, str], str | None]  # (engine, ref) -> fixed ID, or None if not local


def engine_resolver(engine_name: str, ref: str) -> str | None:
    return engine(engine_name).resolve(ref)


@dataclass(frozen=True)
class PinResult:
    path: Path
    ref: str
    resolved: dict[str, str]  # engine -> ID where REF is local
    written: dict[str, str]  # "[sandbox.container] image" / "[sandbox.container.images] docker"
    removed: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    config: Config | None = None


def plan(
    ref: str, engine_name: str | None, resolver: Resolver, engines: Sequence[str] = ENGINES
) -> tuple[dict[str | None, str], dict[str, str], list[str]]:
    """({engine or None for the shared key: ID}, {engine: ID resolved}, notes)."""
    if engine_name is not None:
        engine(engine_name)  # refuses unknown names
        found = resolver(engine_name, ref)
        if found is None:
            raise _not_local(ref, [engine_name], [])
        return {engine_name: found}, {engine_name: found}, []
    resolved: dict[str, str] = {}
    notes: list[str] = []
    for name in engines:
        try:
            found = resolver(name, ref)
        except SprawlError as err:
            if err.code is not ErrorCode.TOOL_UNAVAILABLE:
                raise
            notes.append(f"{name} not asked: {err.detail}")
            continue
        if found is not None:
            resolved[name] = found
    if not resolved:
        raise _not_local(ref, list(engines), notes)
    if len(resolved) == len(engines) and len(set(resolved.values())) == 1:
        return {None: next(iter(resolved.values()))}, resolved, notes
    return dict(resolved.items()), resolved, notes


def _not_local(ref: str, engines: Sequence[str], notes: Sequence[str]) -> SprawlError:
    where = " or ".join(engines)
    extra = f" ({'; '.join(notes)})" if notes else ""
    hint = f" --engine {engines[0]}" if len(engines) == 1 else ""
    return SprawlError(
        ErrorCode.IMAGE_INVALID,
        subject=ref,
        detail=f"{ref} is not a local image in {where}{extra}; sprawl-orch resolves tags "
        "only against local images and never pulls",
        recovery=f"{BUILD_FIRST}{hint} (it prints the IDs), then pin the tag or ID it printed",
    )


def _key(engine_name: str | None) -> str:
    return (
        "[sandbox.container] image"
        if engine_name is None
        else (f"[sandbox.container.images] {engine_name}")
    )


def _table(parent: Any, name: str, fresh: list[Any]) -> Any:
    if name not in parent:
        created = tomlkit.table(is_super_table=True if name == "sandbox" else None)
        parent[name] = created
        fresh.append(parent[name])
    return parent[name]


def _apply(doc: Any, pins: dict[str | None, str], inline: bool) -> dict[str, str]:
    fresh: list[Any] = []
    container = _table(_table(doc, "sandbox", fresh), "container", fresh)
    removed: dict[str, str] = {}
    for engine_name, image_id in pins.items():
        if engine_name is None:
            container["image"] = image_id
            images = container.get("images")
            for name in ENGINES:
                if images is not None and name in images:
                    removed[_key(name)] = str(images[name])
                    del images[name]
            continue
        if "images" not in container:
            if inline:
                container["images"] = tomlkit.inline_table()
            else:
                _table(container, "images", fresh)
        container["images"][engine_name] = image_id
    # A new table ends with a blank line, so a table that follows keeps its separation.
    for table in fresh:
        if isinstance(table, tomlkit.items.Table) and not table.is_super_table() and any(
            not isinstance(v, tomlkit.items.Table) for v in table.value.values()
        ):
            table.add(tomlkit.nl())
    return removed


def _expected(data: dict[str, Any], pins: dict[str | None, str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    container = out.setdefault("sandbox", {}).setdefault("container", {})
    for engine_name, image_id in pins.items():
        if engine_name is None:
            container["image"] = image_id
            images = container.get("images", {})
            for name in ENGINES:
                images.pop(name, None)
        else:
            container.setdefault("images", {})[engine_name] = image_id
    return out


def render(text: str, pins: dict[str | None, str], path: Path) -> tuple[str, dict[str, str]]:
    """The config text with `pins` written in, comments and order kept; (text, removed)."""
    data = read_toml(text, path, "; nothing was written")
    want = _expected(data, pins)
    # A [sandbox.container] written as a table takes a [sandbox.container.images] table; a
    # dotted (container.engine = …) or inline one only keeps its shape with an inline table.
    for inline in (False, True):
        doc = tomlkit.parse(text)
        try:
            removed = _apply(doc, pins, inline)
        except (ValueError, TOMLKitError):
            continue  # e.g. "Inline tables cannot contain a table": try the other shape
        out = tomlkit.dumps(doc).rstrip() + "\n"
        if tomllib.loads(out) == want:
            return out, removed
    lines = "\n".join(f'{_key(e)} = "{i}"' for e, i in pins.items())
    raise SprawlError(
        ErrorCode.CONFIG_INVALID,
        subject=str(path),
        detail="the file's layout of [sandbox.container] can't take the pin without "
        "rewriting other keys; nothing was written",
        recovery=f"write it by hand: {lines}",
    )


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (temp file beside it + os.replace), keeping
    its mode. On any failure the original file is unchanged and the temp file is gone."""
    target = path.resolve() if path.is_symlink() else path
    tmp: str | None = None
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as err:
        code = errno.errorcode.get(err.errno or 0, "?")
        raise SprawlError(
            ErrorCode.STORAGE_FATAL,
            subject=str(path),
            detail=f"cannot write {target}: {err.strerror or err} ({code}); the file is unchanged",
            recovery=f"make {target.parent} and {target.name} writable (chattr -i, chmod), or "
            "pin into another file with --config",
        ) from err
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def pin(
    ref: str,
    config_path: Path,
    *,
    engine_name: str | None = None,
    resolver: Resolver = engine_resolver,
) -> PinResult:
    """Resolve `ref` locally and write its fixed ID into `config_path` (created if absent)."""
    pins, resolved, notes = plan(ref, engine_name, resolver)
    # Not UTF-8 or unreadable: E_CONFIG_INVALID before anything is written.
    text = read_config_text(config_path) if config_path.exists() else ""
    new_text, removed = render(text, pins, config_path)
    # Validate before replacing: a pin must never leave an invalid config behind.
    parse_config(tomllib.loads(new_text), config_path)
    write_atomic(config_path, new_text)
    config = load_config(config_path)
    return PinResult(
        path=config_path,
        ref=ref,
        resolved=resolved,
        written={_key(e): i for e, i in pins.items()},
        removed=removed,
        notes=tuple(notes),
        config=config,
    )
