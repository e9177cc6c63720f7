"""The Debian mirror this machine's apt already uses, for the debootstrap recipes.

Recipes once named one mirror host; an admin's machine names its own in apt's sources (a
company mirror, a caching proxy, a snapshot), and a machine that reaches only that one could
not build (issue 27, item 17). `mirror = "apt"` in a recipe (the built-in ones) means: the
first enabled `deb` source in /etc/apt/sources.list and sources.list.d/*.list (one-line
format) and sources.list.d/*.sources (deb822, apt ≥ 1.1) that serves the suite asked for; a
Debian archive (its path ends in /debian) serves every suite, so it answers when no source
names the suite itself. `--mirror URL` overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

APT = Path("/etc/apt")


@dataclass(frozen=True)
class Source:
    uri: str
    suites: tuple[str, ...]
    origin: str  # the file it came from


def _one_line(path: Path, text: str) -> list[Source]:
    found: list[Source] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "deb":
            continue
        rest = words[1:]
        if rest[0].startswith("["):  # options: [arch=amd64 signed-by=…]
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2:
            found.append(Source(rest[0], (rest[1],), str(path)))
    return found


def _deb822(path: Path, text: str) -> list[Source]:
    found: list[Source] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:  # a continuation line
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        found += [Source(uri, suites, str(path)) for uri in fields.get("uris", "").split()]
    return found


def sources(apt: Path = APT) -> list[Source]:
    """Every enabled `deb` source, in apt's own order (sources.list, then the directory)."""
    paths = [apt / "sources.list"]
    parts = apt / "sources.list.d"
    if parts.is_dir():
        paths += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    found: list[Source] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue  # apt skips what it can't read the same way
        found += _deb822(path, text) if path.suffix == ".sources" else _one_line(path, text)
    return found


def debian_mirror(suite: str, apt: Path = APT) -> str | None:
    """The mirror URI to debootstrap `suite` from, or None when apt names none."""
    every = [s for s in sources(apt) if s.uri.startswith(("http://", "https://", "file:/"))]
    for source in every:
        if suite in source.suites:
            return source.uri
    for source in every:
        if source.uri.rstrip("/").endswith("/debian"):
            return source.uri
    return None
