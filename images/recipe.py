"""Image recipes: readable TOML files, parsed and checked.

The built-in ones live in `images/recipes/`; an admin's own is any file given with
`--recipe FILE` (kept outside the installed package, so an upgrade doesn't lose it). A recipe
says what goes into the rootfs, the labels and the import-time changes; the code in
`rootfs.py` and `build.py` only carries them out.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
)

from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors

RECIPES_DIR = Path(__file__).with_name("recipes")
RECIPE_NAMES: tuple[str, ...] = ("busybox", "debian", "python")
# Debian policy §5.6.1: lower case letters, digits, + - . ; at least two characters, starting
# with a letter or digit. Anything else (a comma above all) would change debootstrap's
# comma-joined --include list.
PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _modes(value: dict[str, str]) -> dict[str, str]:
    for path, mode in value.items():
        if not path.startswith("/") or not re.fullmatch(r"[0-7]{3,4}", mode):
            raise ValueError(f"{path} = {mode!r}: want an absolute path and an octal mode")
    return value


def check_packages(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not PACKAGE.match(name):
            raise ValueError(
                f"{name!r} is not a Debian package name (lower case letters, digits, + - .)"
            )
    return names


class RecipeHead(_Strict):
    name: str
    description: str
    tag: str


class BusyboxRootfs(_Strict):
    busybox: Path
    applet_dir: str = "/bin"
    dirs: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    mtime: int = Field(default=0, ge=0)

    _dirs = field_validator("dirs")(_modes)


class DebianRootfs(_Strict):
    suite: str
    mirror: str
    variant: str = "minbase"
    include: tuple[str, ...] = ()
    dirs: dict[str, str] = Field(default_factory=dict)
    remove: tuple[str, ...] = ()

    _dirs = field_validator("dirs")(_modes)
    _include = field_validator("include")(check_packages)


class ImageChanges(_Strict):
    changes: tuple[str, ...] = ()


def _rootfs_kind(value: Any) -> str:
    # A `busybox` key makes a busybox rootfs; anything else is checked as debootstrap's, so
    # an error names the keys of the kind the admin meant, not of both.
    has = value.get("busybox") if isinstance(value, dict) else getattr(value, "busybox", None)
    return "busybox" if has is not None else "debian"


class Recipe(_Strict):
    recipe: RecipeHead
    rootfs: Annotated[
        Annotated[BusyboxRootfs, Tag("busybox")] | Annotated[DebianRootfs, Tag("debian")],
        Discriminator(_rootfs_kind),
    ]
    image: ImageChanges = ImageChanges()
    labels: dict[str, str] = Field(default_factory=dict)
    source: Path = Field(exclude=True)

    @property
    def name(self) -> str:
        return self.recipe.name

    def tag_for(self, **values: str) -> str:
        return self.recipe.tag.format(**values)


def _where(loc: tuple[int | str, ...]) -> str:
    # pydantic names the union tag ("rootfs.debian.include.0"); an admin thinks in TOML keys:
    # rootfs.include[0].
    parts: list[str] = []
    for index, part in enumerate(loc):
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part}]"]
        elif not (index == 1 and loc[0] == "rootfs"):
            parts.append(part)
    return ".".join(parts) or "(top level)"


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        message = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"key {_where(tuple(e['loc']))}: {message}")
    return "; ".join(lines)


def recipe_path(name: str, directory: Path = RECIPES_DIR) -> Path:
    path = directory / f"{name}.toml"
    if name not in RECIPE_NAMES or not path.is_file():
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=f"recipe {name}",
            detail=f"no recipe {name!r} (known: {', '.join(RECIPE_NAMES)}) in {directory}",
            recovery="use one of the known recipes, --recipe FILE for your own recipe, or "
            "--dockerfile PATH",
        )
    return path


def load_recipe(name: str, directory: Path = RECIPES_DIR) -> Recipe:
    """Read the built-in recipe `<directory>/<name>.toml`."""
    return read_recipe(recipe_path(name, directory))


def read_recipe(path: Path) -> Recipe:
    """Read a recipe file; E_CONFIG_INVALID names the file and each bad key."""
    fix = f"fix {path} (compare with images/recipes/ in the sprawl-orch source tree)"
    try:
        with os_errors(
            ErrorCode.CONFIG_INVALID,
            path,
            "the recipe can't be read",
            "check the path given with --recipe",
        ):
            data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=f"the recipe is not valid TOML: {err}",
            recovery=fix,
        ) from err
    try:
        return Recipe.model_validate({**data, "source": path})
    except ValidationError as err:
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            subject=str(path),
            detail=_explain(err),
            recovery=fix,
        ) from err
