"""The one table of protected paths (issue 22): what `apply` never writes unless a person names
it, because its content makes this machine run something without the person choosing to run
the project's code -- the next `git status`, `git commit`, opening the folder in an editor,
entering the directory, or a push.

Each row names a path shape (components matched at any depth, case-folded: a case-insensitive
filesystem, where `.GIT/hooks` is `.git/hooks`, or NTFS, which drops trailing dots and spaces
and knows `git~1`, must not be a way around it) and why it is here. docs/changes.md carries the
same table. Sources: git-config(1) and githooks(5) of git 2.39 (`git help --config`), the
always-denied lists of sandbox-runtime (DANGEROUS_FILES / DANGEROUS_DIRECTORIES: .git/hooks,
.git/config, .gitmodules, shell rc files, .vscode, .idea, .mcp.json, .ripgreprc) and Codex's
protected subpaths (`.git` as a directory or a `gitdir:` pointer file, `.codex`, `.agents`).

Rows with ``never`` are `.git` itself: its content is the repository (hooks, config, objects,
refs), and no flag applies it. A person removes any other default by its name
(`[apply] unprotect`), and adds gitignore-style globs (`[apply] protected`). On top, every path
*inside the tree* that the person's own effective git config points at (`core.hooksPath =
scripts/hooks`, an `include.path`, a filter/diff/merge driver's script, a `!` alias) is
protected: found by git_pointers.py at apply time.

Used by `changes` (each entry marked), `apply` (held unless named), serve/MCP (never applied);
other surfaces that bring changes back (workspaces) call ``Protection.reason``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

# Re-exported: the table's users read `.git`'s name and test from here (git_names.py is the
# leaf both this module and git_pointers.py stand on).
from sprawl_orch.core.git_names import GIT_DIR as GIT_DIR
from sprawl_orch.core.git_names import component as component
from sprawl_orch.core.git_names import components as components
from sprawl_orch.core.git_names import under_git as under_git

if TYPE_CHECKING:
    import pathspec


@dataclass(frozen=True)
class Row:
    name: str  # what `[apply] unprotect` names, and what a marked entry carries
    parts: tuple[str, ...]  # lower-case component patterns, matched at any depth
    why: str
    never: bool = False  # no flag applies it (`.git`)


PROTECTED_TABLE: tuple[Row, ...] = (
    Row(
        ".git",
        (".git",),
        "the repository itself, a directory or a `gitdir:` pointer file, at any depth (nested "
        "repositories, submodules): hooks run on commit/checkout/merge, config keys run "
        "commands on the next `git status` (core.fsmonitor) -- never applied",
        never=True,
    ),
    Row(
        "sprawl.toml",
        ("sprawl.toml",),
        "sprawl-orch's own config, read from the working directory by the next command: an "
        "applied one would choose its arm (`none`), env_passthrough, credentials and `[apply] "
        'unprotect` -- an agent widening its own sandbox (attack5 applied `arm = "none"`)',
    ),
    Row(
        ".gitmodules",
        (".gitmodules",),
        "submodule URLs and paths: what `git submodule "
        "update` fetches and checks out (sandbox-runtime denies it)",
    ),
    Row(
        ".gitattributes",
        (".gitattributes",),
        "chooses which filter (clean/smudge/process), "
        "diff (textconv/command) and merge drivers of the person's config run on which files",
    ),
    Row(
        ".gitconfig",
        (".gitconfig",),
        "a git config (core.sshCommand, aliases) once "
        "included or when the tree is a home directory (sandbox-runtime denies it)",
    ),
    Row(".envrc", (".envrc",), "direnv runs it on entering the directory"),
    Row(
        ".env",
        (".env",),
        "loaded into the environment unasked (direnv dotenv, mise, pipenv, "
        "editors' terminals): LD_PRELOAD, BASH_ENV, PROMPT_COMMAND run code",
    ),
    Row(".env.*", (".env.*",), "the same, per environment (.env.local, .env.development)"),
    Row(".direnv", (".direnv",), "direnv's layout directory, sourced by .envrc"),
    Row("mise.toml", ("*mise.toml",), "mise/rtx hooks and tasks run on entering the directory"),
    Row(".mise", (".mise",), "mise's per-project config directory"),
    Row(
        ".tool-versions",
        (".tool-versions",),
        "asdf/mise install and run the plugins it names on entering the directory",
    ),
    Row(
        ".vscode",
        (".vscode",),
        "VS Code tasks with runOn: folderOpen, settings naming "
        "interpreters, linters and terminal env (sandbox-runtime denies it)",
    ),
    Row(
        ".idea",
        (".idea",),
        "JetBrains run configurations and startup tasks (sandbox-runtime denies it)",
    ),
    Row(
        ".devcontainer",
        (".devcontainer",),
        "initializeCommand runs on the host when the folder is opened in a dev container",
    ),
    Row(".devcontainer.json", (".devcontainer.json",), "the same, as one file"),
    Row(".zed", (".zed",), "Zed tasks and language-server commands"),
    Row(".helix", (".helix",), "Helix languages.toml names language-server commands"),
    Row(".nvim.lua", (".nvim.lua",), "Neovim's exrc runs it on start in the directory"),
    Row(".nvimrc", (".nvimrc",), "Neovim/Vim exrc"),
    Row(".exrc", (".exrc",), "Vim/ex exrc"),
    Row(".dir-locals.el", (".dir-locals.el",), "Emacs directory variables (eval forms)"),
    Row(".dir-locals-2.el", (".dir-locals-2.el",), "Emacs directory variables (eval forms)"),
    Row(
        ".github/workflows",
        (".github", "workflows"),
        "GitHub Actions: run with the repository's secrets on the next push",
    ),
    Row(".github/actions", (".github", "actions"), "local actions the workflows run"),
    Row(".gitlab-ci.yml", (".gitlab-ci.yml",), "GitLab CI, run on the next push"),
    Row(".gitlab", (".gitlab",), "GitLab CI includes"),
    Row(".circleci", (".circleci",), "CircleCI, run on the next push"),
    Row(".travis.yml", (".travis.yml",), "Travis CI, run on the next push"),
    Row("azure-pipelines.yml", ("azure-pipelines*.yml",), "Azure Pipelines"),
    Row(".azure-pipelines", (".azure-pipelines",), "Azure Pipelines"),
    Row("Jenkinsfile", ("jenkinsfile",), "Jenkins pipelines"),
    Row(".buildkite", (".buildkite",), "Buildkite pipelines"),
    Row("bitbucket-pipelines.yml", ("bitbucket-pipelines.yml",), "Bitbucket Pipelines"),
    Row(".drone.yml", (".drone.yml",), "Drone CI"),
    Row(".woodpecker", (".woodpecker*",), "Woodpecker CI"),
    Row(
        ".pre-commit-config.yaml",
        (".pre-commit-config.yaml",),
        "pre-commit runs the hooks it names on the next `git commit` once installed",
    ),
    Row(".pre-commit-hooks.yaml", (".pre-commit-hooks.yaml",), "hooks this repo offers"),
    Row(".husky", (".husky",), "husky sets core.hooksPath here: its files are git hooks"),
    Row(".githooks", (".githooks",), "the usual core.hooksPath directory"),
    Row("lefthook.yml", ("*lefthook*.yml",), "lefthook's hooks, run on commit/push"),
    Row("lefthook.yaml", ("*lefthook*.yaml",), "lefthook's hooks, run on commit/push"),
    Row(".overcommit.yml", (".overcommit.yml",), "overcommit's hooks"),
    Row(
        ".config/git",
        (".config", "git"),
        "git's XDG global config, attributes and hooks when the tree is a home directory: "
        "core.fsmonitor there runs on every `git status` (attack5)",
    ),
    Row(
        ".ssh",
        (".ssh",),
        "ssh config (ProxyCommand, LocalCommand run on the next ssh/git push) and "
        "authorized_keys, when the tree is a home directory",
    ),
    Row(
        ".config/systemd",
        (".config", "systemd"),
        "user units started at login, when the tree is a home directory",
    ),
    Row(
        ".config/autostart",
        (".config", "autostart"),
        "desktop autostart entries run at login, when the tree is a home directory",
    ),
    Row(
        ".config/fish",
        (".config", "fish"),
        "fish start-up (config.fish, conf.d), when the tree is a home directory",
    ),
    Row(".bashrc", (".bashrc",), "shell start-up (sandbox-runtime denies it)"),
    Row(".bash_profile", (".bash_profile",), "shell start-up"),
    Row(".bash_login", (".bash_login",), "shell start-up"),
    Row(".bash_logout", (".bash_logout",), "shell exit"),
    Row(".profile", (".profile",), "shell start-up"),
    Row(".zshrc", (".zshrc",), "shell start-up"),
    Row(".zshenv", (".zshenv",), "every zsh, interactive or not"),
    Row(".zprofile", (".zprofile",), "shell start-up"),
    Row(".zlogin", (".zlogin",), "shell start-up"),
    Row(
        ".npmrc",
        (".npmrc",),
        "script-shell, git and node-options run programs on the next npm command",
    ),
    Row(".yarnrc", (".yarnrc",), "yarn-path replaces yarn itself"),
    Row(".yarnrc.yml", (".yarnrc.yml",), "yarnPath replaces yarn itself"),
    Row(".ripgreprc", (".ripgreprc",), "--pre runs a program per file (sandbox-runtime)"),
    Row(".mcp.json", (".mcp.json",), "MCP servers an agent harness starts (commands)"),
    Row(".claude", (".claude",), "Claude Code settings hooks and commands run commands"),
    Row(".codex", (".codex",), "Codex config (Codex protects it)"),
    Row(".agents", (".agents",), "agent skills and config (Codex protects it)"),
    Row(".cursor", (".cursor",), "Cursor MCP servers and rules"),
    Row(".gemini", (".gemini",), "Gemini CLI settings (MCP servers, tool commands)"),
)

ROWS = {row.name: row for row in PROTECTED_TABLE}
VENV = (
    "a Python virtual environment (its directory holds pyvenv.cfg): site-packages .pth files "
    "and bin/ scripts run on the next start of its interpreter"
)
# Under a `.git`, what is repository state (counted in one line by `changes`), not a setting
# that runs something (config, hooks, info/attributes: listed one by one).
_VCS_DIRS = frozenset({"objects", "refs", "logs", "rr-cache", "lfs", "reftable"})
_VCS_FILES = frozenset(
    {
        "index",
        "head",
        "orig_head",
        "fetch_head",
        "merge_head",
        "merge_msg",
        "merge_mode",
        "cherry_pick_head",
        "revert_head",
        "rebase_head",
        "auto_merge",
        "commit_editmsg",
        "packed-refs",
        "description",
        "shallow",
        "gitk.cache",
        "sequencer",
    }
)


def _component_re(pattern: str) -> str:
    """A component pattern of the table (`*` and `?` only) as a regex within one component."""
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in pattern)


def vcs_state(path: str) -> bool:
    """Repository state under a `.git` (objects, refs, index, logs...): counted, not listed."""
    parts = components(path)
    if GIT_DIR not in parts:
        return False
    rest = parts[len(parts) - 1 - parts[::-1].index(GIT_DIR) + 1 :]
    if not rest:
        return False
    return any(p in _VCS_DIRS for p in rest) or rest[-1] in _VCS_FILES or rest[-1].endswith(".lock")


@dataclass(frozen=True)
class Protection:
    """What is protected for one working directory: the table less ``unprotect``, the person's
    globs, and the in-tree paths their git config points at (``pointers``: path -> why)."""

    rows: tuple[Row, ...] = PROTECTED_TABLE
    globs: tuple[str, ...] = ()
    pointers: dict[str, str] = field(default_factory=dict)
    # The working directory, when known: a path inside a Python virtual environment kept in
    # it (a directory holding pyvenv.cfg, `.venv` by any name) is protected -- a `.pth` file
    # in its site-packages or a rewritten bin/ script runs on the next start of that
    # interpreter (the person's `.venv/bin/pytest`, their editor's language server), before
    # any project code is chosen (attack5's planted evil.pth ran).
    root: Path | None = None

    def reason(self, path: str) -> str | None:
        """Why ``path`` (relative, `/`-separated) is protected -- the row's name, or what
        points at it -- or None. ``describe`` gives the row's why."""
        parts = components(path)
        literal, patterned = self._index
        # The first row of the table that matches, as if each were tried in order: a
        # component looked up among the literal one-component rows, the few others matched.
        hits = [literal[p] for p in parts if p in literal]
        if patterned:
            joined = "/".join(parts)
            hits += [i for i, pattern in patterned if pattern.search(joined)]
        if hits:
            return self.rows[min(hits)].name
        if self.pointers:
            folded = "/".join(parts)
            for where, why in self.pointers.items():
                if folded == where or folded.startswith(where + "/"):
                    return why
        spec = self._spec
        if spec is not None and (spec.match_file(path) or spec.match_file("/".join(parts))):
            return "[apply] protected"
        if self.root is not None:
            raw = [p for p in path.split("/") if p not in ("", ".")]
            for i in range(1, len(raw)):
                if self._venv("/".join(raw[:i])):
                    return VENV
        return None

    def _venv(self, rel: str) -> bool:
        """Whether ``rel`` (a directory of the tree) holds a pyvenv.cfg, read without
        following a link (a link named pyvenv.cfg is the agent's, not a venv's)."""
        cache = self._venvs
        if rel not in cache:
            assert self.root is not None
            try:
                cache[rel] = stat.S_ISREG(os.lstat(self.root / rel / "pyvenv.cfg").st_mode)
            except OSError:
                # unreadable or absent pyvenv.cfg: not a venv (nothing marks it)
                cache[rel] = False
        return cache[rel]

    @cached_property
    def _venvs(self) -> dict[str, bool]:
        return {}

    def never(self, path: str) -> bool:
        return under_git(path)

    @cached_property
    def _index(self) -> tuple[dict[str, int], list[tuple[int, re.Pattern[str]]]]:
        """Literal one-component rows by name; the others as one regex each over the joined
        path (a set lookup and a few searches per path: `changes` marks every changed path,
        10 000 of them in the apply benchmark)."""
        literal: dict[str, int] = {}
        patterned: list[tuple[int, re.Pattern[str]]] = []
        for i, row in enumerate(self.rows):
            if len(row.parts) == 1 and not any(c in row.parts[0] for c in "*?["):
                literal.setdefault(row.parts[0], i)
            else:
                body = "/".join(_component_re(p) for p in row.parts)
                patterned.append((i, re.compile(f"(?:^|/){body}(?:/|$)")))
        return literal, patterned

    @cached_property
    def _spec(self) -> pathspec.GitIgnoreSpec | None:
        if not self.globs:
            return None
        import pathspec

        return pathspec.GitIgnoreSpec.from_lines(self.globs)


def describe(reason: str) -> str:
    """A marked entry's reason with the table's why (the name alone for the other sources)."""
    row = ROWS.get(reason)
    return f"{reason}: {row.why}" if row is not None else reason


def unknown_rows(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n not in ROWS]


def protection_for(
    globs: tuple[str, ...], unprotect: tuple[str, ...], workdir: Path | None
) -> Protection:
    """The protection of ``workdir`` (its git config's pointers read now, when given)."""
    rows = tuple(r for r in PROTECTED_TABLE if r.never or r.name not in unprotect)
    pointers: dict[str, str] = {}
    if workdir is not None:
        from sprawl_orch.core.git_pointers import pointers_into

        pointers = {"/".join(components(k)): v for k, v in pointers_into(workdir).items()}
    return Protection(rows, globs, pointers, workdir)


def unmatched_globs(protection: Protection, workdir: Path, paths: list[str]) -> list[str]:
    """The person's globs that name no default row and match nothing changed nor anything in
    the tree (a walk, skipping `.git`): accepted, but worth a warning (a typo protects
    nothing)."""
    if not protection.globs:
        return []
    import pathspec

    left = []
    for glob in protection.globs:
        if glob.strip("/").casefold() in {r.name.casefold() for r in PROTECTED_TABLE}:
            continue
        spec = pathspec.GitIgnoreSpec.from_lines([glob])
        if any(spec.match_file(p) for p in paths):
            continue
        if not _matches_in_tree(spec, workdir):
            left.append(glob)
    return left


def _matches_in_tree(spec: pathspec.GitIgnoreSpec, workdir: Path, limit: int = 200_000) -> bool:
    import os

    seen = 0
    for top, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if component(d) != GIT_DIR]
        rel = os.path.relpath(top, workdir)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        for name in dirs + files:
            seen += 1
            if spec.match_file(prefix + name) or seen > limit:
                return True  # past the limit: too large to say, so no warning
    return False
