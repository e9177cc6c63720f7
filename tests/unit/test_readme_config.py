"""The README's configuration block against the config models (issue 27, item 18): every key
the models accept is in the block under its table (set, or commented where it has no default),
every key in the block is one the models accept, and every value set there is the default.

A key added to a model without its line in the README fails here; so does a default changed
in one place only. Tables of named entries (`[sandbox.secrets.NAME]`) are written with NAME.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sprawl_orch.config import Config, parse_config

README = Path(__file__).resolve().parents[2] / "README.md"
_TABLE = re.compile(r"^#?\s*\[([a-z_.A-Z]+)\]")
_KEY = re.compile(r"^#?\s?([a-z_]+)\s*=")


def block() -> str:
    text = README.read_text()
    start = text.index("## Configuration")
    body = text[start:]
    open_at = body.index("```toml\n") + len("```toml\n")
    return body[open_at : body.index("```", open_at)]


def readme_keys(named: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """The keys the block shows; a table of named entries (`[sandbox.secrets.GH_PAT]`, its
    parent in `named`) counts as `[sandbox.secrets.NAME]`."""
    table = ""
    keys: set[str] = set()
    for line in block().splitlines():
        head = _TABLE.match(line)
        if head:
            table = head.group(1)
            parent, _, _ = table.rpartition(".")
            if parent in named:
                table = f"{parent}.NAME"
            keys.add(table)
            continue
        key = _KEY.match(line)
        if key and not line.startswith(" "):
            keys.add(f"{table}.{key.group(1)}" if table else key.group(1))
    return keys


def _named_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a `dict[str, Model]` field (tables of named entries), if that is one."""
    args = getattr(annotation, "__args__", ())
    if getattr(annotation, "__origin__", None) is dict and len(args) == 2:
        value = args[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value
    return None


def model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = field.alias or name
        dotted = f"{prefix}.{key}" if prefix else key
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys.add(dotted)
            keys |= model_keys(annotation, dotted)
        elif (named := _named_model(annotation)) is not None:
            keys.add(f"{dotted}.NAME")
            keys |= model_keys(named, f"{dotted}.NAME")
        else:
            keys.add(dotted)
    return keys


def test_every_model_key_is_in_the_readme_and_only_those() -> None:
    models = model_keys(Config)
    named = {k.removesuffix(".NAME") for k in models if k.endswith(".NAME")}
    readme = readme_keys(named) - named
    assert sorted(models - readme) == [], "keys the README's configuration block lacks"
    assert sorted(readme - models) == [], "keys in the README the models don't accept"


def test_the_values_set_in_the_block_are_the_defaults_and_parse() -> None:
    lines = [line for line in block().splitlines() if "NAME" not in line]
    text = "\n".join(lines)
    data = tomllib.loads(text)
    parse_config(data)  # every value set there is one the models accept
    defaults = Config().model_dump(by_alias=True)

    def walk(node: dict[str, Any], default: dict[str, Any], at: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and isinstance(default.get(key), dict):
                walk(value, default[key], f"{at}{key}.")
                continue
            if key == "image" and at == "sandbox.container.":
                continue  # an example of the shape (there is no default image)
            want = default.get(key)
            got = list(value) if isinstance(value, list) else value
            want = list(want) if isinstance(want, tuple) else want
            assert got == want, f"{at}{key}: README says {value!r}, the default is {want!r}"

    walk(data, defaults, "")
