"""The protected-path table (protected.py), the person's git-config pointers (git_pointers.py),
`[apply] protected/unprotect`, and the table in docs/changes.md naming every row."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.git_pointers import EXECUTING_KEYS, pointers_into
from sprawl_orch.core.protected import (
    PROTECTED_TABLE,
    Protection,
    protection_for,
    unmatched_globs,
    vcs_state,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "row"),
    [
        (".git/hooks/pre-commit", ".git"),
        (".git/config", ".git"),
        (".git", ".git"),  # a gitdir: pointer file
        ("vendor/lib/.git/hooks/post-checkout", ".git"),  # nested repository, any depth
        ("mod/.git", ".git"),
        (".GIT/hooks/pre-commit", ".git"),  # a case-insensitive filesystem
        (".git./config", ".git"),  # NTFS drops trailing dots
        ("GIT~1/config", ".git"),  # NTFS short name
        (".gitmodules", ".gitmodules"),
        ("sprawl.toml", "sprawl.toml"),  # the next command's own config (its arm)
        ("sub/SPRAWL.TOML", "sprawl.toml"),  # `exec -C sub` reads it there
        ("sub/.gitattributes", ".gitattributes"),
        (".envrc", ".envrc"),
        (".vscode/tasks.json", ".vscode"),
        (".idea/runConfigurations/x.xml", ".idea"),
        (".devcontainer/devcontainer.json", ".devcontainer"),
        (".github/workflows/ci.yml", ".github/workflows"),
        (".gitlab-ci.yml", ".gitlab-ci.yml"),
        (".pre-commit-config.yaml", ".pre-commit-config.yaml"),
        (".husky/pre-commit", ".husky"),
        (".bashrc", ".bashrc"),
        (".mcp.json", ".mcp.json"),
        (".claude/settings.json", ".claude"),
    ],
)
def test_the_table_protects(path: str, row: str) -> None:
    assert Protection().reason(path) == row


@pytest.mark.parametrize(
    "path", ["src/a.py", "README", "git/x", ".github/README.md", "dotgit/.gitx", "my.git/x"]
)
def test_ordinary_paths_are_not_protected(path: str) -> None:
    assert Protection().reason(path) is None


def test_vcs_state_is_counted_and_settings_are_listed() -> None:
    for path in (".git/objects/ab/cdef", ".git/index", ".git/refs/heads/main", ".git/HEAD"):
        assert vcs_state(path), path
    for path in (".git/config", ".git/hooks/pre-commit", ".git/info/attributes", "a/.gitx"):
        assert not vcs_state(path), path


def test_unprotect_removes_a_row_by_name_and_never_git() -> None:
    config = parse_config({"apply": {"unprotect": [".vscode"], "protected": ["secrets/**"]}})
    guard = protection_for(config.apply.protected, config.apply.unprotect, None)
    assert guard.reason(".vscode/settings.json") is None
    assert guard.reason(".idea/x") == ".idea"
    assert guard.reason("secrets/deploy.sh") == "[apply] protected"
    with pytest.raises(SprawlError, match="never applied"):
        parse_config({"apply": {"unprotect": [".git"]}})
    with pytest.raises(SprawlError, match="no such row") as err:
        parse_config({"apply": {"unprotect": [".vscodes"]}})
    assert ".vscode" in err.value.detail  # the names are listed


def test_a_glob_matching_nothing_is_accepted_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "run.sh").write_text("")
    guard = Protection(globs=("tools/*.sh", "nothing-*", ".vscode"))
    assert unmatched_globs(guard, tmp_path, ["src/a.py"]) == ["nothing-*"]


def git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True)


def test_the_persons_git_config_points_are_protected(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    git(tree, "config", "core.hooksPath", "scripts/hooks")
    git(tree, "config", "filter.lint.clean", "sh ./tools/clean.sh --fast")
    git(tree, "config", "diff.img.textconv", str(tree / "bin" / "conv"))
    git(tree, "config", "alias.up", "!sh scripts/up.sh")
    git(tree, "config", "alias.st", "status")  # not a `!` alias: runs nothing of the tree
    git(tree, "config", "core.pager", "less -R")  # a program on PATH
    git(tree, "config", "include.path", "../team.gitconfig")  # relative to .git/config
    found = pointers_into(tree)
    assert set(found) == {
        "scripts/hooks",
        "tools/clean.sh",
        "bin/conv",
        "scripts/up.sh",
        "team.gitconfig",
    }, found
    guard = protection_for((), (), tree)
    assert guard.reason("scripts/hooks/pre-commit") is not None
    assert "core.hookspath" in (guard.reason("scripts/hooks/pre-commit") or "")
    assert guard.reason("scripts/other.sh") is None


def test_no_repository_no_pointers(tmp_path: Path) -> None:
    assert pointers_into(tmp_path) == {}


def test_docs_carry_every_row_and_key() -> None:
    doc = (ROOT / "docs" / "changes.md").read_text()
    section = doc.split("## Protected paths", 1)[1]
    names = set(re.findall(r"^\| `([^`]+)` \|", section, re.M))
    assert {row.name for row in PROTECTED_TABLE} <= names, {r.name for r in PROTECTED_TABLE} - names
    for key, _kind, _why in EXECUTING_KEYS:
        assert f"`{key}`" in section, key
