"""The Debian mirror the recipes take from apt's own sources (issue 27, item 17): both formats,
disabled entries and files, options, continuation lines; no host is named in a recipe."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sprawl_orch.images.apt_sources import debian_mirror, sources

RECIPES = Path(__file__).resolve().parents[2] / "images" / "recipes"


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def test_deb822_source_serving_the_suite(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {
            "sources.list.d/debian.sources": (
                "Types: deb\n# a comment\nURIs: http://cache.corp.example/debian\n"
                "Suites: bookworm bookworm-updates\nComponents: main\n\n"
                "Types: deb\nURIs: http://cache.corp.example/debian-security\n"
                "Suites: bookworm-security\n"
            ),
            "sources.list.d/vendor.list.disabled": (
                "deb http://elsewhere.example/debian bookworm main\n"
            ),
        },
    )
    assert debian_mirror("bookworm", apt) == "http://cache.corp.example/debian"
    assert [s.uri for s in sources(apt)] == [
        "http://cache.corp.example/debian",
        "http://cache.corp.example/debian-security",
    ]


def test_one_line_format_with_options_and_disabled_stanzas(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {
            "sources.list": (
                "# deb http://commented.example/debian bookworm main\n"
                "deb-src http://src.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/k.gpg] http://mirror.corp.example/debian trixie main\n"
            ),
            "sources.list.d/off.sources": (
                "Types: deb\nEnabled: no\nURIs: http://off.example/debian\nSuites: bookworm\n"
            ),
        },
    )
    # No source names bookworm: a Debian archive serves every suite.
    assert debian_mirror("bookworm", apt) == "http://mirror.corp.example/debian"
    assert debian_mirror("trixie", apt) == "http://mirror.corp.example/debian"


def test_no_debian_source_is_none(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list": "deb http://archive.ubuntu.example/ubuntu noble main\n"})
    assert debian_mirror("bookworm", apt) is None


def test_the_built_in_recipes_name_no_host() -> None:
    for recipe in RECIPES.glob("*.toml"):
        rootfs = tomllib.loads(recipe.read_text()).get("rootfs", {})
        if "mirror" in rootfs:
            assert rootfs["mirror"] == "apt", recipe
