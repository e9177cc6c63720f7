"""The in-tree paths the person's own effective git config points at (issue 22): a hooks
directory (`core.hooksPath = scripts/hooks`), an included config, a filter/diff/merge driver's
script, a `!` alias's program. A command that rewrites one of them runs on the next `git
status`/`commit`/`diff` as surely as a planted `.git/hooks/pre-commit`, so each is protected
(protected.py) like the table's rows.

Read with the person's git (`git config --list --show-origin`): system, global, the
repository's and its includes, exactly what their next git command reads. The repository
config is read even when the tree belongs to another user (`safe.directory` given on the
command line, a protected scope): a root apply in a user's tree must still see it. No git, or
no repository: no pointers (the table still holds).

The keys are git 2.39's that run something or say where something to run is
(`git help --config`, git-config(1), githooks(5)).
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from sprawl_orch.core.git_names import under_git

# (key pattern over the lower-cased key, how its value names something to run)
#   path: the whole value is a path; command: a command line (its words with a "/" are paths)
EXECUTING_KEYS: tuple[tuple[str, str, str], ...] = (
    ("core.fsmonitor", "path", "a hook command run by every status/diff/commit"),
    ("core.hookspath", "path", "where every hook is looked up"),
    ("core.sshcommand", "command", "run for every fetch/push over ssh"),
    ("core.editor", "command", "run by commit, tag, rebase -i"),
    ("core.pager", "command", "run for every paged output"),
    ("core.askpass", "command", "run to ask for a password"),
    ("core.gitproxy", "command", "run to connect over git://"),
    ("core.alternaterefscommand", "command", "run on fetch/push with alternates"),
    ("core.attributesfile", "path", "attributes choosing filter/diff/merge drivers"),
    ("sequence.editor", "command", "run by rebase -i"),
    ("diff.external", "command", "run by every git diff"),
    ("diff.*.command", "command", "a diff driver"),
    ("diff.*.textconv", "command", "a diff driver's text conversion"),
    ("merge.*.driver", "command", "a merge driver"),
    ("filter.*.clean", "command", "run on add/status/diff of matching files"),
    ("filter.*.smudge", "command", "run on checkout of matching files"),
    ("filter.*.process", "command", "a long-running filter"),
    ("credential.helper", "command", "run for every authenticated fetch/push"),
    ("credential.*.helper", "command", "run for authenticated fetch/push"),
    ("include.path", "path", "an included config"),
    ("includeif.*.path", "path", "a conditionally included config"),
    ("alias.*", "alias", "a `!` alias runs a shell command"),
    ("pager.*", "command", "a per-command pager"),
    ("gpg.program", "command", "run to sign/verify"),
    ("gpg.*.program", "command", "run to sign/verify"),
    ("gpg.ssh.defaultkeycommand", "command", "run to find a signing key"),
    ("uploadpack.packobjectshook", "command", "run by upload-pack"),
    ("remote.*.uploadpack", "command", "run for fetch"),
    ("remote.*.receivepack", "command", "run for push"),
    ("interactive.difffilter", "command", "run by add -p"),
    ("hook.*.command", "command", "a configured hook"),
    ("submodule.*.update", "alias", "`!command` runs on submodule update"),
    ("browser.*.cmd", "command", "run by help/instaweb"),
    ("browser.*.path", "path", "run by help/instaweb"),
    ("man.*.cmd", "command", "run by help"),
    ("man.*.path", "path", "run by help"),
    ("difftool.*.cmd", "command", "a difftool"),
    ("difftool.*.path", "path", "a difftool"),
    ("mergetool.*.cmd", "command", "a mergetool"),
    ("mergetool.*.path", "path", "a mergetool"),
    ("guitool.*.cmd", "command", "a gui tool"),
    ("sendemail.tocmd", "command", "run by send-email"),
    ("sendemail.cccmd", "command", "run by send-email"),
    ("sendemail.smtpserver", "path", "a sendmail program when a path"),
)

_BOOL = {"true", "false", "yes", "no", "on", "off", "1", "0", ""}


def kind_of_key(key: str) -> tuple[str, str] | None:
    low = key.lower()
    for pattern, kind, why in EXECUTING_KEYS:
        if fnmatch.fnmatchcase(low, pattern):
            return kind, why
    return None


def _config_list(workdir: Path) -> list[tuple[str, str, str]]:
    """(origin, key, value) of every effective config entry; [] without git."""
    git = shutil.which("git")
    if git is None:
        return []
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    try:
        out = subprocess.run(
            [git, "-c", "safe.directory=*", "config", "--list", "--show-origin", "--null"],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        # no git, or a hung one: no config pointers to protect beyond the table
        return []
    fields = out.split(b"\0")
    entries = []
    for origin, item in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = item.partition(b"\n")
        entries.append((os.fsdecode(origin), os.fsdecode(key), os.fsdecode(value)))
    return entries


def _words(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _candidates(kind: str, value: str) -> list[str]:
    value = value.strip()
    if kind == "alias":
        if not value.startswith("!"):
            return []
        kind, value = "command", value[1:]
    if kind == "path":
        return [] if value.lower() in _BOOL else [value]
    return [w.lstrip("!") for w in _words(value) if "/" in w and not w.startswith("-")]


def _inside(workdir: Path, base: Path, word: str) -> str | None:
    """``word`` as a path relative to ``workdir``, when it lies inside it."""
    path = Path(os.path.expanduser(word.split("=", 1)[-1]))
    full = os.path.normpath(path if path.is_absolute() else base / path)
    for root in {os.path.normpath(workdir), os.path.realpath(workdir)}:
        rel = os.path.relpath(full, root)
        if rel not in (".", "..") and not rel.startswith("../") and not os.path.isabs(rel):
            return rel.replace(os.sep, "/")
    return None


def _git_out(workdir: Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    try:
        done = subprocess.run(
            [git, "-c", "safe.directory=*", *args],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git, or a hung one: the table still holds
    return os.fsdecode(done.stdout).rstrip("\n") if done.returncode == 0 else None


def hook_links_into(workdir: Path) -> dict[str, str]:
    """In-tree path -> why, for each hook of the repository's hooks directory that is a
    symlink resolving into ``workdir`` -- the usual way to share hooks (`ln -s
    ../../scripts/pre-commit .git/hooks/pre-commit`): the in-tree script is the hook, as with
    core.hooksPath (attack5: an agent rewrote scripts/pre-commit and `git commit` ran it)."""
    hooks = _git_out(workdir, "rev-parse", "--path-format=absolute", "--git-path", "hooks")
    if not hooks:
        return {}
    found: dict[str, str] = {}
    try:
        names = os.listdir(hooks)
    except OSError:
        return {}
    for name in names:
        link = os.path.join(hooks, name)
        if not os.path.islink(link):
            continue
        rel = _inside(workdir, workdir, os.path.realpath(link))
        if rel:
            found.setdefault(rel, f"the git hook {name} is a symlink to it")
    return found


def git_dirs_into(workdir: Path) -> dict[str, str]:
    """The repository's own git directory and common directory, when they lie inside the
    tree under a name that is not `.git` -- the `.bare` layout (`gitdir: ./.bare`, worktrees
    beside it): its config and hooks run on the next git command as `.git`'s do (attack5
    planted core.fsmonitor in `.bare/config` and the next `git status` ran it)."""
    found: dict[str, str] = {}
    for flag in ("--absolute-git-dir", "--git-common-dir"):
        where = _git_out(workdir, "rev-parse", "--path-format=absolute", flag)
        rel = _inside(workdir, workdir, where) if where else None
        if rel and not under_git(rel):  # `.git` itself is the table's, never applied
            found.setdefault(rel, "the repository's git directory (hooks, config, state)")
    return found


def pointers_into(workdir: Path) -> dict[str, str]:
    """In-tree path (relative, `/`-separated) -> why, for every executing key of the effective
    config whose value names a path inside ``workdir``."""
    found: dict[str, str] = {}
    # git runs hooks, filters and drivers from the top of the work tree, so a relative value
    # is read from there -- not from a working directory in a subdirectory of it (attack5:
    # core.hooksPath = sub/hooks, sprawl-orch run in sub/, hooks/pre-commit applied and run)
    shown_top = _git_out(workdir, "rev-parse", "--show-toplevel")
    top = Path(shown_top) if shown_top else workdir
    for origin, key, value in _config_list(workdir):
        kind = kind_of_key(key)
        if kind is None:
            continue
        where = top
        if kind[0] == "path" and origin.startswith("file:") and "include" in key.lower():
            # relative to the including file (git names one under the repository relatively,
            # from the top of the work tree even when run in a subdirectory)
            where = (top / origin[len("file:") :]).parent
        for word in _candidates(kind[0], value):
            rel = _inside(workdir, where, word)
            if rel:
                found.setdefault(rel, f"git config {key} ({kind[1]}) points here")
    for rel, why in {**git_dirs_into(workdir), **hook_links_into(workdir)}.items():
        found.setdefault(rel, why)
    return found
