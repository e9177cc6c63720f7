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
import re
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.items
from tomlkit.exceptions import TOMLKitError

from sprawl_orch.config import Config, load_config, parse_config, read_config_text, read_toml
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ENGINES, IMAGE_ID
from sprawl_orch.images.engines import BUILD_FIRST, LocalImage, engine, fixed_id

Resolver = Callable[[str, str], str | None]  # (engine, ref) -> fixed ID, or None if not local
Describer = Callable[[str, str], LocalImage | None]  # (engine, ID) -> the image's own config


# A name that could also be the start of an image ID: both engines resolve it as the name
# (podman and docker look a name up before an ID prefix), so an ID prefix of another image
# was never considered; sha256:… and a whole ID are IDs only.
_SHORT_HEX = re.compile(r"[0-9a-f]{12,63}")


def engine_resolver(engine_name: str, ref: str) -> str | None:
    found = engine(engine_name).resolve(ref)
    if found is None or not _SHORT_HEX.fullmatch(ref):
        return found
    return _one_of_name_and_id(engine_name, ref, found)


def _one_of_name_and_id(engine_name: str, ref: str, found: str) -> str:
    """``ref`` is hex: the image named ``ref:latest`` and every image whose ID starts with
    ``ref`` are candidates; more than one is refused, naming each (issue 27, item 15: a pin
    resolves exactly the reference given). Met for real: ``localhost/923feb978a30:latest``
    on a debian image while a busybox's ID began 923feb978a30; podman pinned the debian."""
    local = engine(engine_name)
    by_name = local.resolve(f"{ref}:latest")
    listed = local.run(["images", "--all", "--no-trunc", "--quiet"])
    by_id = {fixed_id(i) for i in listed.stdout.split() if fixed_id(i)[7:].startswith(ref)}
    every = by_id | ({by_name} if by_name is not None else set()) | {found}
    if len(every) == 1:
        return found
    said = ([f"the image named {ref}:latest is {by_name}"] if by_name is not None else []) + [
        f"{i} has an ID starting with {ref}" for i in sorted(by_id)
    ]
    raise SprawlError(
        ErrorCode.IMAGE_INVALID,
        subject=f"{engine_name} {ref}",
        detail=f"{ref} names more than one local image in {engine_name}: {'; '.join(said)}",
        recovery="pin the whole ID (sha256:…) or the full name of the one you mean",
    )


def engine_describer(engine_name: str, image_id: str) -> LocalImage | None:
    try:
        return next(iter(engine(engine_name).inspect([image_id])), None)
    except SprawlError:
        return None  # the pin itself was resolved; its description is only a note


@dataclass(frozen=True)
class PinResult:
    path: Path
    ref: str
    resolved: dict[str, str]  # engine -> ID where REF is local
    written: dict[str, str]  # "[sandbox.container] image" / "[sandbox.container.images] docker"
    removed: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    config: Config | None = None
    # engine -> the pinned image's own PATH/user/workdir (also written as a comment on the pin)
    images: dict[str, LocalImage] = field(default_factory=dict)


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
    # Every engine is asked and says what it did (issue 27, item 15: docker was skipped
    # without a word while podman pinned a name the person never wrote).
    resolved: dict[str, str] = {}
    notes: list[str] = []
    refused: list[str] = []
    for name in engines:
        try:
            found = resolver(name, ref)
        except SprawlError as err:
            if err.code is ErrorCode.IMAGE_INVALID:  # ambiguous, or a short-name match only
                refused.append(f"{name}: {err.detail}")
                continue
            if err.code is not ErrorCode.TOOL_UNAVAILABLE:
                raise
            notes.append(f"{name} not asked: {err.detail}")
            continue
        if found is not None:
            resolved[name] = found
        else:
            notes.append(f"{name}: {ref} is not a local image there; nothing pinned for {name}")
    if refused:
        said = [f"{n}: {ref} is {i}" for n, i in resolved.items()] + notes
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=ref,
            detail="; ".join(refused)
            + (f" ({'; '.join(said)})" if said else "")
            + "; nothing was written",
            recovery="pin the full name (e.g. localhost/…) or the ID of the one you mean, "
            "with --engine for the engine it is in",
        )
    if not resolved:
        raise _not_local(ref, list(engines), [n for n in notes if " not asked: " in n])
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


def _note(parent: Any, key: str, comment: str | None) -> None:
    # A comment can't go inside an inline table; there the pin stays without its note.
    if comment and not isinstance(parent, tomlkit.items.InlineTable):
        parent.item(key).comment(comment)


def _apply(
    doc: Any, pins: dict[str | None, str], inline: bool, comments: dict[str | None, str]
) -> dict[str, str]:
    fresh: list[Any] = []
    container = _table(_table(doc, "sandbox", fresh), "container", fresh)
    removed: dict[str, str] = {}
    for engine_name, image_id in pins.items():
        if engine_name is None:
            container["image"] = image_id
            _note(container, "image", comments.get(None))
            images = container.get("images")
            for name in ENGINES:
                if images is not None and name in images:
                    removed[_key(name)] = str(images[name])
                    del images[name]
            continue
        shared = container.get("image")
        if isinstance(shared, str) and not IMAGE_ID.match(shared):
            # A tag there is refused whatever else holds (issue 27: the refusal of
            # `image = "busybox:latest"` says to pin it, and the pin must then fix the file).
            removed[_key(None)] = shared
            del container["image"]
        if "images" not in container:
            if inline:
                container["images"] = tomlkit.inline_table()
            else:
                _table(container, "images", fresh)
        container["images"][engine_name] = image_id
        _note(container["images"], engine_name, comments.get(engine_name))
    # A new table ends with a blank line, so a table that follows keeps its separation.
    for table in fresh:
        if (
            isinstance(table, tomlkit.items.Table)
            and not table.is_super_table()
            and any(not isinstance(v, tomlkit.items.Table) for v in table.value.values())
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
            if isinstance(container.get("image"), str) and not IMAGE_ID.match(container["image"]):
                del container["image"]  # as _apply: a tag there is replaced by the pin
            container.setdefault("images", {})[engine_name] = image_id
    return out


def render(
    text: str,
    pins: dict[str | None, str],
    path: Path,
    comments: dict[str | None, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """The config text with `pins` written in, comments and order kept; (text, removed).
    `comments`: a note written after each pin (the image's PATH/user/workdir)."""
    data = read_toml(text, path, "; nothing was written")
    want = _expected(data, pins)
    # A [sandbox.container] written as a table takes a [sandbox.container.images] table; a
    # dotted (container.engine = …) or inline one only keeps its shape with an inline table.
    for inline in (False, True):
        doc = tomlkit.parse(text)
        try:
            removed = _apply(doc, pins, inline, comments or {})
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
    describer: Describer | None = None,
) -> PinResult:
    """Resolve `ref` locally and write its fixed ID into `config_path` (created if absent),
    with the image's own PATH, user and working directory as a comment on the pin."""
    pins, resolved, notes = plan(ref, engine_name, resolver)
    describe = describer or (engine_describer if resolver is engine_resolver else None)
    images: dict[str, LocalImage] = {}
    for name, image_id in resolved.items():
        found = describe(name, image_id) if describe else None
        if found is not None:
            images[name] = found
    comments: dict[str | None, str] = {}
    for key in pins:
        described = images.get(key) if key else next(iter(images.values()), None)
        if described is not None:
            comments[key] = f"image's own {described.facts()}"
    # Not UTF-8 or unreadable: E_CONFIG_INVALID before anything is written.
    text = read_config_text(config_path) if config_path.exists() else ""
    new_text, removed = render(text, pins, config_path, comments)
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
        images=images,
    )
