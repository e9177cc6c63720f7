"""Attacks on issue 22's claim -- after `apply` of a handle a hostile command made, the
person's next command runs nothing the agent planted -- for what the table's names alone miss:
sprawl-orch's own config in the tree (the next command's sandbox), a git hook that is a symlink
into the tree, a bare repository planted in a subdirectory (git finds it from there), and a
virtual environment kept in the tree. Each is judged on the host after a real apply: what the
person's next git/python runs, or what the next command's config says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.config import load_config
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CEILING_DIRECTORIES": "/",
}


def _git(repo: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=p", "-c", "user.email=p@q", *args],
        cwd=cwd or repo,
        env=GIT_ENV,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture
def repo(tree: Path) -> Path:
    _git(tree, "init", "-q", str(tree), cwd=tree)
    return tree


def _apply_all(tmp_path: Path, repo: Path, offerings: Offerings, line: str) -> set[str]:
    """Run ``line`` confined, apply everything as an agent would (no --protected): held paths."""
    tool = ExecTool(make_config(tmp_path, arm="copied_tree"), repo, offerings=offerings)
    with tool:
        result = tool.exec(line, shell=True)
        assert result.exit_code == 0, result.stderr
        assert result.changes is not None and result.changes.handle is not None
        applied = tool.apply(result.changes.handle)
    return {i.path for i in applied.held}


def test_sprawl_toml_cannot_widen_the_next_commands_sandbox(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """sprawl.toml in the tree is the next command's config (`load_config` reads ./sprawl.toml):
    an applied one would choose `arm = "none"`, pass secrets through, unprotect `.envrc`."""
    line = (
        'printf \'[sandbox]\\narm = "none"\\n[apply]\\nunprotect = [".envrc"]\\n\''
        " > sprawl.toml && echo ok > plain.txt"
    )
    held = _apply_all(tmp_path, repo, offerings, line)
    assert "sprawl.toml" in held
    assert (repo / "plain.txt").exists()
    assert load_config(None, cwd=repo).sandbox.arm != "none"


def test_a_hook_symlinked_into_the_tree_is_held(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """A common setup: `.git/hooks/pre-commit -> ../../scripts/pre-commit`. The agent rewrites
    the in-tree script; the person's next `git commit` runs it, as with core.hooksPath."""
    (repo / "scripts").mkdir()
    (repo / "scripts" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / "scripts" / "pre-commit").chmod(0o755)
    (repo / ".git" / "hooks").mkdir(exist_ok=True)
    (repo / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit")
    mark = tmp_path / "hook-ran"
    line = f"printf '#!/bin/sh\\necho x > {mark}\\n' > scripts/pre-commit"
    held = _apply_all(tmp_path, repo, offerings, line)
    assert "scripts/pre-commit" in held
    (repo / "f").write_text("x")
    _git(repo, "add", "f")
    _git(repo, "commit", "-qm", "x")
    assert not mark.exists()


def test_a_bare_repository_planted_in_a_subdirectory_runs_nothing(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """git, started in `evil/`, takes `evil/` itself for a git directory when it holds HEAD,
    objects/ and refs/ (safe.bareRepository defaults to `all`), and a git-aware shell prompt
    or editor runs git there on entering it. No `.git` is anywhere in its paths, so nothing is
    held -- the claim holds because git 2.39 refuses a work tree for a bare directory it found
    implicitly ("must be run in a work tree"): core.fsmonitor never runs on status/diff.
    A git that honoured it would break this test."""
    mark = tmp_path / "fsmonitor-ran"
    line = (
        "mkdir -p evil/objects evil/refs && echo 'ref: refs/heads/main' > evil/HEAD"
        f" && printf '[core]\\nbare = false\\nworktree = .\\nfsmonitor = \"echo x > {mark}\"\\n'"
        " > evil/config"
    )
    _apply_all(tmp_path, repo, offerings, line)
    _git(repo, "status", cwd=repo / "evil")
    _git(repo, "diff", cwd=repo / "evil")
    assert not mark.exists()


def test_a_virtual_environment_in_the_tree_runs_nothing_planted(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """`.venv` inside the tree (the usual layout, this project's own): a `.pth` file the agent
    adds to its site-packages runs on every start of that interpreter -- the person's next
    `.venv/bin/pytest`, their editor's language server -- before any project code is chosen."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    rel = site.relative_to(repo)
    mark = tmp_path / "pth-ran"
    line = f'echo \'import os; open("{mark}", "w")\' > {rel}/evil.pth'
    _apply_all(tmp_path, repo, offerings, line)
    subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", "pass"], check=True)
    assert not mark.exists()


@pytest.mark.parametrize(
    "how",
    [
        # a link the command makes to .git, written through: the copy records the real path
        "ln -s .git x && mkdir -p x/hooks && {plant} x/hooks/pre-commit && chmod +x x/hooks/*",
        # a file made elsewhere, then renamed into .git/hooks
        "{plant} hook && chmod +x hook && mkdir -p .git/hooks && mv hook .git/hooks/pre-commit",
        # a hard link from a plain name to the hook: its plain name is applied, not the hook
        "mkdir -p .git/hooks && {plant} .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"
        " && ln .git/hooks/pre-commit plain",
        # a case-folded spelling: on this case-sensitive disk a second directory, held anyway
        "mkdir -p .GIT/hooks && {plant} .GIT/hooks/pre-commit && chmod +x .GIT/hooks/*",
    ],
)
def test_hooks_reached_sideways_run_nothing(
    tmp_path: Path, repo: Path, offerings: Offerings, how: str
) -> None:
    mark = tmp_path / "hook-ran"
    plant = f"printf '#!/bin/sh\\necho x > {mark}\\n' >"
    _apply_all(tmp_path, repo, offerings, how.format(plant=plant))
    (repo / "f").write_text("x")
    _git(repo, "add", "f")
    done = _git(repo, "commit", "-qm", "x")
    _git(repo, "status")
    assert done.returncode == 0, done.stderr
    assert not mark.exists()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize(
    "name",
    [
        "--config=/tmp/evil.toml/.envrc",  # an option of its own, if unquoted or unconsumed
        "-C/.envrc",
        "--dry-run/.envrc",
        "$(touch {mark})/.envrc",  # command substitution, if double-quoted
        "`touch {mark}`/.envrc",
        "a\x1b]52;c;aGk=\x07b/.envrc",  # OSC 52: a clipboard write, if printed raw
        "x\n--drop/.envrc",  # a new line: a second command, if pasted raw
        "a'b\\c/.envrc",
    ],
)
def test_the_printed_command_pastes_back_to_exactly_the_held_path(
    tmp_path: Path, name: str
) -> None:
    """The command `apply` prints for held paths, pasted into bash as a person would: it runs
    nothing else, carries no control character to the terminal, and click reads back exactly
    the held path as `--protected` and the handle as the handle."""
    from sprawl_orch.changes.apply_protect import command_for
    from sprawl_orch.changes.changes import ChangeEntry
    from sprawl_orch.cli.apply_cmd import apply_command

    mark = tmp_path / "pasted-ran"
    name = name.format(mark=mark)
    entry = ChangeEntry.model_construct(path=name, change="created", kind="file")
    cmd = command_for("H123", tmp_path, [(entry, "held")], None)
    assert cmd is not None
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in cmd), repr(cmd)
    echo = 'sprawl-orch(){ for a in "$@"; do printf \'%s\\0\' "$a"; done; }; '
    out = subprocess.run(["bash", "-c", echo + cmd], capture_output=True, check=True).stdout
    words = [w.decode() for w in out.split(b"\0")[:-1]]
    assert words[0] == "apply"
    ctx = apply_command.make_context("apply", words[1:], resilient_parsing=True)
    assert ctx.params["protected"] == (name,)
    assert ctx.params["handle"] == "H123"
    assert not ctx.params["dry_run"] and not ctx.params["drop"]
    assert not mark.exists()


def test_a_git_directory_kept_in_the_tree_under_another_name_is_held(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    """The `.bare` layout (`git init --separate-git-dir=.bare`, or `git clone --bare . .bare`
    with a `.git` file saying `gitdir: ./.bare`, worktrees beside it): the repository's config
    and hooks live in the tree under a name no table row knows. A planted core.fsmonitor there
    runs on the person's next `git status`."""
    _git(tree, "init", "-q", "--separate-git-dir", str(tree / ".bare"), str(tree), cwd=tree)
    mark = tmp_path / "fsmonitor-ran"
    line = f"printf '[core]\\n\\tfsmonitor = \"echo x > {mark}\"\\n' >> .bare/config"
    held = _apply_all(tmp_path, tree, offerings, line)
    assert ".bare/config" in held
    (tree / "f").write_text("x")
    _git(tree, "add", "f")
    _git(tree, "status")
    assert not mark.exists()


def test_a_home_directory_trees_xdg_git_config_is_held(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """The table holds `.gitconfig` and the shell rc files for a tree that is a home
    directory; git reads `$XDG_CONFIG_HOME/git/config` (`~/.config/git/config`) as the global
    config just the same: a core.fsmonitor there runs on every `git status`."""
    mark = tmp_path / "xdg-ran"
    line = (
        "mkdir -p .config/git && printf '[core]\\n\\tfsmonitor = \"echo x > "
        f"{mark}\"\\n' > .config/git/config && mkdir -p .ssh"
        f" && printf 'Host *\\n  ProxyCommand sh -c \"echo x > {mark}\"\\n' > .ssh/config"
    )
    held = _apply_all(tmp_path, repo, offerings, line)
    assert {".config/git/config", ".ssh/config"} <= held
    home = {**GIT_ENV, "HOME": str(repo)}
    subprocess.run(["git", "status"], cwd=repo, env=home, capture_output=True, check=False)
    assert not mark.exists()


def test_the_dry_run_a_person_reviews_carries_no_control_sequence(
    tmp_path: Path, repo: Path, offerings: Offerings
) -> None:
    """A person reads the dry run before naming a protected path: content that erases lines
    (CR, CSI 2K, backspace), writes the clipboard (OSC 52) or reorders text (bidi, C1 CSI
    U+009B) would hide what `.envrc` really runs. Names, link targets and content: escaped."""
    line = (
        "printf 'echo safe\\r\\033[2Kcurl x|sh\\n\\033]52;c;aGk=\\007\\302\\233\\342\\200\\256"
        "\\010\\n' > .envrc && mkdir -p \"$(printf 'd\\033[31m')\" && "
        "printf 'x\\033]52;c;aGk=\\007' > \"$(printf 'd\\033[31m')/.envrc\""
        " && ln -s \"$(printf 'a\\033]0;t\\007')\" link"
    )
    tool = ExecTool(make_config(tmp_path, arm="copied_tree"), repo, offerings=offerings)
    with tool:
        result = tool.exec(line, shell=True)
        assert result.exit_code == 0, result.stderr
        assert result.changes is not None and result.changes.handle is not None
        dry = tool.apply(result.changes.handle, dry_run=True)
    assert dry.diff is not None and "curl x|sh" in dry.diff
    bad = [c for c in dry.diff if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    assert not bad, [hex(ord(c)) for c in bad]
    assert "\u202e" not in dry.diff
    assert dry.command is not None and "\x1b" not in dry.command


def test_hooks_path_is_read_from_the_top_of_the_work_tree_not_the_working_directory(
    tmp_path: Path, offerings: Offerings
) -> None:
    """sprawl-orch run in a subdirectory of the repository (`-C sub`): git resolves a relative
    core.hooksPath (and filter scripts) from the top of the work tree, so `sub/hooks` is the
    working directory's `hooks/` -- which the agent fills."""
    top = tmp_path / "top"
    sub = top / "sub"
    sub.mkdir(parents=True)
    _git(top, "init", "-q", str(top), cwd=top)
    _git(top, "config", "core.hooksPath", "sub/hooks")
    mark = tmp_path / "hook-ran"
    line = f"mkdir -p hooks && printf '#!/bin/sh\\necho x > {mark}\\n' > hooks/pre-commit"
    held = _apply_all(tmp_path, sub, offerings, line + " && chmod +x hooks/pre-commit")
    assert "hooks/pre-commit" in held
    (top / "f").write_text("x")
    _git(top, "add", "f")
    _git(top, "commit", "-qm", "x")
    assert not mark.exists()
