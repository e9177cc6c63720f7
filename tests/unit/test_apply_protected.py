"""`apply` and protected paths (issue 22) with real commands on the copied tree: held unless
named, `.git` never, bad names refused before any write, the dry run's banner and new
executables, serve refusing an agent's consent, and what `changes` marks and counts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.serve.server import Server
from sprawl_orch.serve.wire import ErrorResponse, parse
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

HOSTILE = (
    "mkdir -p .git/hooks .vscode bin && printf '#!/bin/sh\\n' > .git/hooks/pre-commit"
    " && chmod +x .git/hooks/pre-commit && echo '[core] fsmonitor = x' >> .git/config"
    " && echo '{}' > .vscode/tasks.json && echo ok > plain.txt"
    " && printf '#!/bin/sh\\n' > bin/tool && chmod 4755 bin/tool && chmod +x README"
)


@pytest.fixture
def repo(tree: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    return tree


def run_hostile(tmp_path: Path, repo: Path, offerings: Offerings) -> tuple[ExecTool, str]:
    tool = ExecTool(make_config(tmp_path, arm="copied_tree"), repo, offerings=offerings)
    result = tool.exec(HOSTILE, shell=True)
    assert result.exit_code == 0, result.stderr
    assert result.changes is not None and result.changes.handle is not None
    return tool, result.changes.handle


def test_changes_marks_protected_paths_and_counts_vcs_state(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    tool, _ = run_hostile(tmp_path, repo, offerings)
    with tool:
        line = "git add -A && git -c user.name=a -c user.email=a@b commit -qm x"
        result = tool.exec(line, shell=True)
    assert result.changes is not None
    assert result.changes.vcs_state > 0  # objects, refs, index: one count
    listed = {e.path for e in result.changes.paths}
    assert not any("/objects/" in p or p.endswith("/index") for p in listed), listed


def test_protected_paths_are_held_unless_named(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    tool, handle = run_hostile(tmp_path, repo, offerings)
    with tool:
        first = tool.apply(handle)
        assert {i.path for i in first.applied} >= {"plain.txt", "bin/tool", "bin", "README"}
        assert {i.path for i in first.held} == {
            ".git/config",
            ".git/hooks/pre-commit",
            ".vscode",
            ".vscode/tasks.json",
        }
        assert not (repo / ".vscode").exists() and not (repo / ".git/hooks/pre-commit").exists()
        assert "fsmonitor" not in (repo / ".git/config").read_text()
        assert first.command is not None and "--protected .vscode" in first.command
        assert not first.finished
        # a person names it (the Python API's own keyword): applied; .git still never
        second = tool.apply(handle, protected=[".vscode"])
        assert {i.path for i in second.applied} == {".vscode", ".vscode/tasks.json"}
        assert all(i.protected for i in second.applied)
        assert (repo / ".vscode" / "tasks.json").exists()
        assert second.finished  # what is left is under .git: never applied, not waited for
    assert not (repo / ".git/hooks/pre-commit").exists()
    assert not (repo / "bin/tool").stat().st_mode & 0o6000  # set-uid never carried


def test_paths_alone_never_release_a_protected_path(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    tool, handle = run_hostile(tmp_path, repo, offerings)
    with tool:
        answer = tool.apply(handle, [".vscode/tasks.json"])
    assert answer.applied == []
    assert {i.path for i in answer.held} == {".vscode", ".vscode/tasks.json"}
    assert not (repo / ".vscode").exists()


@pytest.mark.parametrize(
    ("named", "said"),
    [
        (".git/hooks/pre-commit", "never applied"),
        (".git", "never applied"),
        ("nothere", "not among the changes"),
        ("plain.txt", "not protected"),
        (".vscode/*", "never a glob"),
    ],
)
def test_bad_protected_names_are_refused_before_any_write(
    tmp_path: Path, repo: Path, offerings: Offerings, named: str, said: str
) -> None:
    tool, handle = run_hostile(tmp_path, repo, offerings)
    with tool, pytest.raises(SprawlError, match=said) as err:
        tool.apply(handle, protected=[named])
    assert err.value.code.value == "E_BAD_REQUEST"
    assert not (repo / "plain.txt").exists()  # nothing was applied


def test_the_dry_run_shows_protected_paths_first_and_new_executables(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    tool, handle = run_hostile(tmp_path, repo, offerings)
    with tool:
        dry = tool.apply(handle, dry_run=True)
    assert dry.diff is not None
    assert dry.diff.startswith("######## PROTECTED")
    banner, rest = dry.diff.split("######## end of protected paths ########\n", 1)
    assert "b/.vscode/tasks.json" in banner and "b/.git/hooks/pre-commit" in banner
    assert "plain.txt" not in banner and "b/plain.txt" in rest
    executables = rest.split("######## NEW EXECUTABLES", 1)[1].split("diff --sprawl", 1)[0]
    assert "bin/tool mode 4755 (set-uid" in executables
    assert "README mode 0755" in executables  # an execute bit added
    assert ".git/hooks/pre-commit mode 0755" in executables
    assert not (repo / "plain.txt").exists()


def test_serve_never_applies_protected_paths_and_says_the_command(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    tool, handle = run_hostile(tmp_path, repo, offerings)
    tool.close()
    refused = parse(json.dumps({"id": 1, "op": "apply", "handle": handle, "protected": ["x"]}))
    assert isinstance(refused, ErrorResponse)
    assert "an agent cannot consent for the person" in refused.error.detail
    server = Server(make_config(tmp_path, arm="copied_tree"), repo, None, offerings=offerings)
    try:
        request = parse(json.dumps({"id": 2, "op": "apply", "handle": handle}))
        assert not isinstance(request, ErrorResponse)
        answer = server.dispatch(request).result().model_dump(mode="json")
    finally:
        server.close()
    result = answer["result"]
    assert {i["path"] for i in result["held"]} >= {".vscode/tasks.json", ".git/config"}
    assert "sprawl-orch apply -C" in result["command"]
    assert "--protected .vscode" in result["command"]
    assert not (repo / ".vscode").exists() and (repo / "plain.txt").exists()


def test_git_stays_writable_in_the_copy_and_nothing_of_it_comes_back(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """The evidence for keeping `.git` writable inside the copy (docs/changes.md): an agent's
    `git commit` there works; a hook it plants is gone at the next command's sync (the copy
    is put back to the person's tree, .git included); the person's repository is untouched."""
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "p"], check=True)
    head = (repo / ".git" / "HEAD").read_text()
    before = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout
    with ExecTool(make_config(tmp_path, arm="copied_tree"), repo, offerings=offerings) as tool:
        first = tool.exec(
            "git add -A && git -c user.name=a -c user.email=a@b commit -qm agent"
            " && printf '#!/bin/sh\\nexit 1\\n' > .git/hooks/pre-commit"
            " && chmod +x .git/hooks/pre-commit && git rev-parse HEAD",
            shell=True,
        )
        assert first.exit_code == 0, first.stderr
        assert first.stdout.strip() != before.strip()  # the agent committed in its copy
        second = tool.exec("test -e .git/hooks/pre-commit; echo $?; git rev-parse HEAD", shell=True)
        assert second.stdout.split()[0] == "1", second.stdout  # the planted hook is gone
        assert second.stdout.split()[1] == before.strip()  # the copy's HEAD is the person's
        assert first.changes is not None and first.changes.handle is not None
        tool.apply(first.changes.handle)
    assert (repo / ".git" / "HEAD").read_text() == head
    after = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before and not (repo / ".git" / "hooks" / "pre-commit").exists()
