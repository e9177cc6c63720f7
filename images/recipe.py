"""Image recipes: the readable TOML files in `images/recipes/`, parsed and checked.

A recipe says what goes into the rootfs, the labels and the import-time changes; the code
in `rootfs.py` and `build.py` only carries them out.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import ErrorCode, SprawlError

RECIPES_DIR = Path(__file__).with_name("recipes")
RECIPE_NAMES: tuple[str, ...] = ("busybox", "debian")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _modes(value: dict[str, str]) -> dict[str, str]:
    for path, mode in value.items():
        if not path.startswith("/") or not re.fullmatch(r"[0-7]{3,4}", mode):
            raise ValueError(f"{path} = {mode!r}: want an absolute path and an octal mode")
    return value


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


class ImageChanges(_Strict):
    changes: tuple[str, ...] = ()


class Recipe(_Strict):
    recipe: RecipeHead
    rootfs: BusyboxRootfs | DebianRootfs
    image: ImageChanges = ImageChanges()
    labels: dict[str, str] = Field(default_factory=dict)
    source: Path = Field(exclude=True)

    @property
    def name(self) -> str:
        return self.recipe.name

    def tag_for(self, **values: str) -> str:
        return self.recipe.tag.format(**values)


def load_recipe(name: str, directory: Path = RECIPES_DIR) -> Recipe:
    """Read `<directory>/<name>.toml`; E_IMAGE_INVALID names the file and the bad key."""
    path = directory / f"{name}.toml"
    if name not in RECIPE_NAMES or not path.is_file():
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=f"recipe {name}",
            detail=f"no recipe {name!r} (known: {', '.join(RECIPE_NAMES)}) in {directory}",
            recovery="use one of the known recipes, or --dockerfile PATH for your own image",
        )
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return Recipe.model_validate({**data, "source": path})
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as err:
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=str(path),
            detail=f"the recipe can't be read: {err}",
            recovery=f"fix {path} (compare with the file in the sprawl-orch source tree)",
        ) from err
