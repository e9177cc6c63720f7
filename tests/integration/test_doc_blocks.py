"""Every code block of README.md and docs/*.md runs as written (issue #13).

A block's fence says what it is, and that decides how it is run:

- ``sh`` / ``bash``: run by bash -e in a scratch directory that looks like a clone (docs/,
  .ci/, and .venv pointing at this interpreter's environment), `sprawl-orch` on PATH. The
  steps that set up the machine or run the whole suite (apt-get, .ci/setup-engines, venv
  creation, pip install, pytest) are left out here -- they are what `.ci/run` itself
  does before these tests run -- and the test says which it left out;
- ``python``: run in a fresh interpreter in the same directory (the README's snippet twice:
  as is, and where its command is refused);
- ``toml``: must be a valid sprawl.toml (parse_config); ``json``: must parse;
- ``text``: output, a transcript or a synopsis: not code, not run.

A fence with another language (or none) fails the test: a new block has to say which it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
KINDS = {"sh", "bash", "python", "toml", "json", "text"}
# Steps .ci/run performs before the tests (the machine's setup, the suite itself).
SETUP = re.compile(r"\.ci/setup-engines|apt-get|-m venv|pip install|-m pytest")


def blocks() -> list[tuple[str, int, str, str]]:
    found = []
    for doc in DOCS:
        for n, match in enumerate(FENCE.finditer(doc.read_text(encoding="utf-8"))):
            found.append(
                (doc.relative_to(ROOT).as_posix(), n, match.group(1).strip(), match.group(2))
            )
    return found


BLOCKS = blocks()


def ids(block: tuple[str, int, str, str]) -> str:
    return f"{block[0]}#{block[1]}-{block[2] or 'none'}"


def without_setup(script: str) -> tuple[str, list[str]]:
    """The script with .ci/run's setup steps taken out of each `&&` chain, and those steps."""
    kept, left_out = [], []
    for line in script.splitlines():
        parts = line.split(" && ")
        run = [p for p in parts if not SETUP.search(p)]
        left_out += [p.strip() for p in parts if SETUP.search(p)]
        kept.append(" && ".join(run) if run else ":")
    return "\n".join(kept) + "\n", left_out


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A directory shaped like a fresh clone for the commands the docs show."""
    here = tmp_path / "clone"
    here.mkdir()
    shutil.copytree(ROOT / "docs", here / "docs")
    shutil.copytree(ROOT / ".ci", here / ".ci")
    # .venv/bin holds links to this environment's programs (a link to the whole environment
    # would make every copy of the clone hold it: E_COPY_BOUND, as it would for a person).
    bin_dir = here / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("sprawl-orch", "python", "python3"):
        (bin_dir / name).symlink_to(Path(sys.executable).parent / name)
    return here


def env_with_cli() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_every_block_says_what_it_is() -> None:
    unknown = [ids(b) for b in BLOCKS if b[2] not in KINDS]
    assert not unknown, f"fence these with one of {sorted(KINDS)}: {unknown}"
    assert len(BLOCKS) >= 20  # README and docs/ hold at least this many today


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] in ("sh", "bash")], ids=ids)
def test_shell_blocks_run(block: tuple[str, int, str, str], clone: Path) -> None:
    script, left_out = without_setup(block[3])
    ci_run = (ROOT / ".ci" / "run").read_text() + (ROOT / ".ci" / "setup-engines").read_text()
    for step in left_out:  # each left-out kind of step is one .ci/run really performs
        kind = SETUP.search(step)
        assert kind is not None and kind.group(0) in ci_run, step
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=clone,
        env=env_with_cli(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{ids(block)}\n{script}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "python"], ids=ids)
def test_python_blocks_run(block: tuple[str, int, str, str], clone: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", block[3]],
        cwd=clone,
        env=env_with_cli(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{ids(block)}\n{done.stdout}\n{done.stderr}"


def test_the_readmes_snippet_survives_a_refusal(clone: Path) -> None:
    snippet = next(b[3] for b in BLOCKS if b[0] == "README.md" and b[2] == "python")
    (clone / "sprawl.toml").write_text('[sandbox]\narm = "none"\n')  # every command refused
    done = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=clone,
        env=env_with_cli(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "E_SANDBOX_DENIED" in done.stdout  # the refusal is said, not a traceback


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "toml"], ids=ids)
def test_toml_blocks_are_valid_configs(block: tuple[str, int, str, str]) -> None:
    parse_config(tomllib.loads(block[3]))


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "json"], ids=ids)
def test_json_blocks_parse(block: tuple[str, int, str, str]) -> None:
    json.loads(block[3])
