"""`image list` (local sprawl images per engine) and `image verify` (is the pinned ID of each
engine in that engine's local store?). Read-only; nothing is pulled."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sprawl_orch.config import Config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.images.engines import BUILD_FIRST, ImageEngine, LocalImage, engine

EngineFactory = Callable[[str], ImageEngine]
Status = Literal["present", "missing", "unpinned", "unreachable"]


@dataclass(frozen=True)
class EngineListing:
    engine: str
    reachable: bool
    reason: str  # why not reachable ("" when it is)
    images: tuple[LocalImage, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "reachable": self.reachable,
            "reason": self.reason,
            "images": [i.as_dict() for i in self.images],
        }


def list_images(
    engines: Sequence[str] = ENGINES, factory: EngineFactory = engine
) -> list[EngineListing]:
    listings: list[EngineListing] = []
    for name in engines:
        try:
            found = tuple(factory(name).sprawl_images())
        except SprawlError as err:
            if err.code is not ErrorCode.TOOL_UNAVAILABLE:
                raise
            listings.append(EngineListing(name, False, err.detail, ()))
            continue
        listings.append(EngineListing(name, True, "", found))
    return listings


@dataclass(frozen=True)
class PinCheck:
    engine: str
    used: bool  # `[sandbox.container] engine` lets the orchestrator pick this engine
    key: str | None  # where the pin is written, None when unpinned
    pinned: str | None
    status: Status
    detail: str
    recovery: str
    image: LocalImage | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "used": self.used,
            "key": self.key,
            "pinned": self.pinned,
            "status": self.status,
            "detail": self.detail,
            "recovery": self.recovery,
            "image": self.image.as_dict() if self.image else None,
        }


@dataclass(frozen=True)
class Verification:
    config: str  # the file read, or "(defaults)"
    checks: tuple[PinCheck, ...]
    arm: str = "auto"  # [sandbox] arm: native and copied_tree use no image at all

    @property
    def uses_images(self) -> bool:
        return self.arm in ("auto", "container")

    @property
    def ok(self) -> bool:
        """At least one usable engine has its pinned image, and no usable engine's pin is
        missing from it; or the configured arm uses no image (an outsider's native config
        got NOT OK and advice to build busybox: issue 27, item 12)."""
        if not self.uses_images:
            return True
        used = [c for c in self.checks if c.used]
        return any(c.status == "present" for c in used) and not any(
            c.status == "missing" for c in used
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "arm": self.arm,
            "ok": self.ok,
            "engines": [c.as_dict() for c in self.checks],
        }


def suggested_recipe(workdir: Path | None) -> str:
    """The recipe to suggest building: `python` for a tree that looks like a Python project
    (busybox has no interpreter for its tests), else the tiny `busybox`."""
    if workdir is not None and any((workdir / m).exists() for m in _PYTHON_MARKERS):
        return "python"
    return "busybox"


_PYTHON_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "tox.ini")


def _check(config: Config, name: str, factory: EngineFactory, recipe: str) -> PinCheck:
    container = config.sandbox.container
    build_first = BUILD_FIRST.replace("image build busybox", f"image build {recipe}")
    used = container.engine in ("auto", name) and config.sandbox.arm in ("auto", "container")
    pinned = container.image_for(name)
    own = getattr(container.images, name, None)
    key = (
        f"[sandbox.container.images] {name}"
        if own
        else "[sandbox.container] image"
        if pinned
        else None
    )
    if pinned is None:
        return PinCheck(
            name,
            used,
            None,
            None,
            "unpinned",
            f"the config pins no image for {name} (there is no default image)",
            f"{build_first} --engine {name}, then sprawl-orch image pin <ID> --engine {name}",
        )
    try:
        handle = factory(name)
        found = handle.resolve(pinned)
    except SprawlError as err:
        if err.code is not ErrorCode.TOOL_UNAVAILABLE:
            raise
        return PinCheck(name, used, key, pinned, "unreachable", err.detail, err.recovery)
    if found != pinned:
        return PinCheck(
            name,
            used,
            key,
            pinned,
            "missing",
            f"{pinned} ({key}) is not in {name}'s local images; sprawl-orch never pulls",
            f"{build_first} --engine {name}, then sprawl-orch image pin <ID> --engine {name}",
        )
    image = next(iter(handle.inspect([pinned])), None)
    recipe = image.labels.get("sprawl.recipe", "no sprawl.recipe label") if image else ""
    return PinCheck(
        name, used, key, pinned, "present", f"{name} has it locally ({recipe})", "", image
    )


def verify(
    config: Config,
    engines: Sequence[str] = ENGINES,
    factory: EngineFactory = engine,
    workdir: Path | None = None,
) -> Verification:
    source = str(config.source) if config.source else "(defaults)"
    recipe = suggested_recipe(workdir)
    checks = tuple(_check(config, name, factory, recipe) for name in engines)
    return Verification(source, checks, config.sandbox.arm)
