"""Which images a Dockerfile needs from the engine's store (pure; no engine).

`docker build --pull=false` still pulls a base that isn't local (Docker 20.10: "Step 1/2 :
FROM alpine:3.19 … Get https://<the registry>/v2/"), so the builder checks every base
named here against the local store before it starts, and refuses instead.

Handled: parser directives (`# escape=`), comments, line continuations, global `ARG`s before
the first FROM (with `$VAR`, `${VAR}`, `${VAR:-word}`, `${VAR:+word}`), `--platform=…`,
multi-stage names (`FROM base AS build` then `FROM build`), `FROM scratch`, and
`COPY --from=<image>` (a stage name or index is not an image).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class BaseRef:
    """An image the build takes from the store: `ref` as written after ARG expansion."""

    ref: str
    line: int  # 1-based line of the instruction
    instruction: str  # "FROM" or "COPY --from"
    written: str  # the reference before expansion, e.g. "${BASE}"


class DockerfileError(ValueError):
    """A FROM line the parser can't turn into an image reference (line, message)."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text) with continuations joined and comments gone."""
    escape = "\\"
    raw = text.splitlines()
    start = 0
    # Parser directives are comment lines at the very top; only `escape` changes parsing.
    for start, line in enumerate(raw):  # noqa: B007 - start is used after the loop
        match = _DIRECTIVE.match(line.strip())
        if not match:
            break
        if match.group(1).lower() == "escape" and match.group(2) in ("\\", "`"):
            escape = match.group(2)
    else:
        start = len(raw)
    out: list[tuple[int, str]] = []
    buffer: list[str] = []
    first = 0
    for number, line in enumerate(raw[start:], start=start + 1):
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and buffer):
            continue  # comment and empty lines inside a continuation are dropped
        if not stripped:
            continue
        if not buffer:
            first = number
        if stripped.endswith(escape):
            buffer.append(stripped[: -len(escape)])
            continue
        buffer.append(stripped)
        out.append((first, " ".join(part.strip() for part in buffer)))
        buffer = []
    if buffer:
        out.append((first, " ".join(part.strip() for part in buffer)))
    return out


def _expand(word: str, args: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        value = args.get(name, "")
        if match.group(2) == "-":
            return value or match.group(3)
        if match.group(2) == "+":
            return match.group(3) if value else ""
        return value

    return _VAR.sub(one, word)


def _arg_defaults(rest: str, args: dict[str, str], overrides: Mapping[str, str]) -> None:
    for item in shlex.split(rest):
        name, sep, default = item.partition("=")
        if name in overrides:
            args[name] = overrides[name]
        elif sep:
            args[name] = _expand(default, args)
        else:
            args.setdefault(name, "")


def external_bases(text: str, build_args: Mapping[str, str] | None = None) -> list[BaseRef]:
    """Every image the build would take from the store, in order, without duplicates.

    Stage names, stage indexes and `scratch` are not images. Raises DockerfileError for a
    FROM whose image expands to nothing (an ARG without a value) or is missing.
    """
    overrides = dict(build_args or {})
    global_args: dict[str, str] = {}
    stages: list[str] = []
    found: list[BaseRef] = []
    seen: set[str] = set()
    saw_from = False

    def add(ref: BaseRef) -> None:
        if ref.ref not in seen:
            seen.add(ref.ref)
            found.append(ref)

    for number, line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "ARG" and not saw_from:
            _arg_defaults(rest, global_args, overrides)
        elif keyword == "FROM":
            saw_from = True
            words = [w for w in rest.split() if not w.startswith("--")]
            if not words:
                raise DockerfileError(number, "FROM names no image")
            written = words[0]
            ref = _expand(written, global_args)
            if not ref:
                raise DockerfileError(
                    number, f"FROM {written} expands to nothing (no ARG value for it)"
                )
            if len(words) >= 3 and words[1].lower() == "as":
                stages.append(words[2].lower())
            else:
                stages.append("")
            if ref.lower() == "scratch" or ref.lower() in stages[:-1]:
                continue
            add(BaseRef(ref, number, "FROM", written))
        elif keyword in ("COPY", "ADD"):
            for word in rest.split():
                if not word.startswith("--from="):
                    continue
                written = word.removeprefix("--from=")
                ref = _expand(written, global_args)
                if ref.isdigit() or ref.lower() in stages:
                    continue
                add(BaseRef(ref, number, "COPY --from", written))
    return found
