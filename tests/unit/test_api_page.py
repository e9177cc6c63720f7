"""docs/api.md is generated from the public face's docstrings and must not drift (issue 28).

The face is `sprawl_orch.__all__`. For each name the page shows its signature and docstring;
for a class, also its own public methods and properties (not what pydantic or Exception
give every class) and a pydantic model's fields. Public functions carry docker-py's
sections: ``Args:`` where they take arguments, ``Returns:`` where they return something.
The page's ``python`` examples run in tests/integration/test_doc_blocks.py like every doc's.

After changing a docstring or a signature of the face, write the page anew:

    .venv/bin/python -m tests.unit.test_api_page
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pydantic

import sprawl_orch

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"
HEADER = """# The Python API

Generated from the docstrings of `sprawl_orch.__all__` by `python -m tests.unit.test_api_page`;
`tests/unit/test_api_page.py` fails when this page and the code differ, and the examples run in
`tests/integration/test_doc_blocks.py`. Everything not listed here is implementation: its names
may change without notice.
"""


def face() -> list[tuple[str, Any]]:
    return [(name, getattr(sprawl_orch, name)) for name in sprawl_orch.__all__]


def members(cls: type) -> Iterator[tuple[str, Any]]:
    """A class's own public methods and properties, in source order, `__init__` first when
    the class writes its own (pydantic models and enums don't have one worth showing)."""
    own = vars(cls)
    if "__init__" in own and not issubclass(cls, pydantic.BaseModel | enum.Enum):
        yield "__init__", own["__init__"]
    # ExecTool's apply/workspace and backlog methods live in mixins of ours (tool/*_api.py):
    # they are its face all the same; a base from outside (pydantic, enum) is not ours.
    mixins = [
        vars(base)
        for base in cls.__mro__[1:]
        if base.__module__.startswith("sprawl_orch.tool.") and base.__name__.endswith("Api")
    ]
    merged: dict[str, Any] = dict(own)
    for names in mixins:
        for name, value in names.items():
            merged.setdefault(name, value)
    for name, value in merged.items():
        if name.startswith("_"):
            continue
        if isinstance(value, property | classmethod | staticmethod) or inspect.isfunction(value):
            yield name, value


def _function(value: Any) -> Callable[..., Any] | None:
    if isinstance(value, property):
        return None
    if isinstance(value, classmethod | staticmethod):
        return value.__func__  # type: ignore[no-any-return]
    return value if callable(value) else None


def _type(annotation: Any) -> str:
    """A type as the code spells it: no quotes, no module paths."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:typing|sprawl_orch(?:\.\w+)*|pathlib|collections\.abc)\.", "", text)


def signature(name: str, value: Any) -> str:
    func = _function(value)
    if func is None:
        return f"{name}  (property)"
    sig = inspect.signature(func)
    shown = []
    star = False
    for param in sig.parameters.values():
        if param.name in ("self", "cls"):
            continue
        if param.kind is param.KEYWORD_ONLY and not star:
            shown.append("*")
        star = star or param.kind in (param.KEYWORD_ONLY, param.VAR_POSITIONAL)
        text = ("**" if param.kind is param.VAR_KEYWORD else "") + param.name
        if param.annotation is not param.empty:
            text += f": {_type(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        shown.append(text)
    returns = sig.return_annotation
    tail = "" if returns is sig.empty or func.__name__ == "__init__" else f" -> {_type(returns)}"
    line = f"{name}({', '.join(shown)}){tail}"
    if len(line) <= 100:
        return line
    return f"{name}(\n" + "".join(f"    {p},\n" for p in shown) + f"){tail}"


def fields(model: type[pydantic.BaseModel]) -> list[str]:
    return [
        f"{info.alias or name}: {_type(info.annotation)}"
        for name, info in model.model_fields.items()
        if not info.exclude
    ]


SECTION = re.compile(r"^(Args|Returns|Raises|Example):$")


def doc(value: Any) -> str:
    """The docstring as markdown: Args/Returns/Raises bodies in text blocks, an Example's
    body (a fenced python block) dedented so the page's fence is a real one."""
    text = inspect.getdoc(value if not isinstance(value, classmethod) else value.__func__)
    lines = (text or "").splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = SECTION.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        body = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        inner = textwrap.dedent("\n".join(body)).strip("\n")
        out += [f"**{match.group(1)}:**", ""]
        out += [inner] if match.group(1) == "Example" else ["```text", inner, "```"]
        out.append("")
    return "\n".join(out)


def section(name: str, value: Any) -> list[str]:
    out = [f"## {name}", ""]
    if inspect.isclass(value):
        out += [f"```text\nclass {name}\n```", "", doc(value), ""]
        if issubclass(value, enum.Enum):
            out += ["```text", *(f"{m.name} = {m.value!r}" for m in value), "```", ""]
        elif issubclass(value, pydantic.BaseModel):
            out += ["Fields:", "", "```text", *fields(value), "```", ""]
        for member, attr in members(value):
            label = name if member == "__init__" else f"{name}.{member}"
            out += [f"### {label}", "", f"```text\n{signature(label, attr)}\n```", ""]
            out += [doc(attr), ""]
    else:
        out += [f"```text\n{signature(name, value)}\n```", "", doc(value), ""]
    return out


def render() -> str:
    lines = [*HEADER.splitlines(), ""]
    for name, value in face():
        lines += section(name, value)
    text = "\n".join(line.rstrip() for line in lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip() + "\n"


def callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, value in face():
        if inspect.isclass(value):
            for member, attr in members(value):
                func = _function(attr)
                if func is not None:
                    yield f"{name}.{member}", func
        elif callable(value):
            yield name, value


def test_the_page_is_what_the_docstrings_say() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/api.md differs from the face's docstrings: python -m tests.unit.test_api_page"
    )


def test_public_functions_say_args_and_returns() -> None:
    missing = []
    for name, func in callables():
        text = inspect.getdoc(func) or ""
        sig = inspect.signature(func)
        takes = [p for p in sig.parameters if p not in ("self", "cls")]
        returns = sig.return_annotation not in ("None", None, inspect.Signature.empty)
        if not text:
            missing.append(f"{name}: no docstring")
        if takes and "Args:" not in text:
            missing.append(f"{name}: no Args:")
        if returns and not name.endswith("__init__") and "Returns:" not in text:
            missing.append(f"{name}: no Returns:")
    assert missing == [], "\n".join(missing)


def test_the_readers_and_builders_say_what_they_raise() -> None:
    for func in (
        sprawl_orch.load_config,
        sprawl_orch.parse_config,
        sprawl_orch.ExecTool.__init__,
        sprawl_orch.ExecTool.exec,
        sprawl_orch.Config,
    ):
        assert "Raises:" in (inspect.getdoc(func) or ""), func


def test_dir_lists_the_face() -> None:
    listed = set(dir(sprawl_orch))
    assert set(sprawl_orch.__all__) <= listed
    # ... and nothing of the implementation: no helper, no loaded sub-package.
    importlib.import_module("sprawl_orch.tool.exec_tool")  # puts sub-packages in the module

    extra = {n for n in dir(sprawl_orch) if not n.startswith("__")} - set(sprawl_orch.__all__)
    assert extra == set()


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
