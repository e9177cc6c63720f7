"""The `comes-back` class (issue 22): a confined command plants what would run on the host
once its changes are applied -- git hooks, executing config keys, filter/diff drivers chosen by
`.gitattributes`, paths the person's own git config points at, nested repositories and
`gitdir:` files, direnv, editor tasks, CI files, hook managers, an executable and a set-uid file
for later, escape sequences in names and link targets.

The judge is the host: after the apply, real `git status`, `git add -A`, `git commit` and `git
diff` run in the person's tree; every payload would touch a file in MARKS (outside the tree),
so an empty MARKS means nothing ran. The raw control (the same script run in the tree itself,
no sprawl-orch) must fill MARKS, or the probes prove nothing.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

# What the person's repository holds before the command: a filter driver whose script is in
# the tree (git_pointers.py must find it; core.hooksPath pointers are unit-tested: a person's
# hooksPath would keep .git/hooks from running in the raw control).
PERSON_FILES = {
    "a.txt": "original\n",
    "x.dat": "data\n",
    ".gitattributes": "*.dat filter=lint\n",
    "tools/clean.sh": "cat\n",
}
PERSON_CONFIG = {
    "user.name": "person",
    "user.email": "person@example.invalid",
    "filter.lint.clean": "sh tools/clean.sh",
    "commit.gpgsign": "false",
}

# Busybox sh only (the container image has no git): the command writes the files git reads.
# @M@ is MARKS on the host.
HOSTILE = r"""
M=@M@
pay() { printf '#!/bin/sh\ntouch %s/%s\n' "$M" "$1"; }
mkdir -p .git/hooks
for h in pre-commit post-commit commit-msg prepare-commit-msg post-checkout post-index-change; do
  pay hook-$h > .git/hooks/$h; chmod +x .git/hooks/$h
done
cat >> .git/config <<EOF
[core]
	fsmonitor = "touch $M/fsmonitor; true"
	pager = "touch $M/pager; cat"
[diff]
	external = "sh -c 'touch $M/diff-external'"
[filter "evil"]
	clean = "sh -c 'touch $M/filter-clean; cat'"
	smudge = "sh -c 'touch $M/filter-smudge; cat'"
	required
[diff "evil"]
	textconv = "sh -c 'touch $M/textconv; cat \"\$0\"'"
[alias]
	st = "!touch $M/alias"
[include]
	path = ../evil.cfg
EOF
printf '[alias]\n\tst2 = "!touch %s/include"\n' "$M" > evil.cfg
printf '* diff=evil\n*.txt filter=evil\n' >> .gitattributes
echo more >> x.dat
printf 'touch %s/person-filter; cat\n' "$M" > tools/clean.sh
mkdir -p vendor/lib/.git/hooks && pay nested > vendor/lib/.git/hooks/pre-commit
mkdir -p mod && printf 'gitdir: ../evilgit\n' > mod/.git
printf 'touch %s/envrc\n' "$M" > .envrc
mkdir -p .vscode .idea/runConfigurations .devcontainer .github/workflows .husky .claude
printf '{"tasks":[{"label":"x","command":"touch %s/vscode",
 "runOptions":{"runOn":"folderOpen"}}]}' "$M" > .vscode/tasks.json
printf '<component name="x"><option name="touch %s/idea"/></component>\n' "$M" \
  > .idea/runConfigurations/x.xml
printf '{"initializeCommand":"touch %s/devcontainer"}\n' "$M" > .devcontainer/devcontainer.json
printf 'on: push\njobs: {x: {runs-on: ubuntu-latest, steps: [{run: "touch %s/ci"}]}}\n' "$M" \
  > .github/workflows/x.yml
printf 'repos: [{repo: local, hooks: [{id: x, entry: "touch %s/pre-commit-fw"}]}]\n' "$M" \
  > .pre-commit-config.yaml
pay husky > .husky/pre-commit
printf '{"hooks":{"SessionStart":[{"hooks":[{"command":"touch %s/claude"}]}]}}\n' "$M" \
  > .claude/settings.json
mkdir -p bin && pay later > bin/tool && chmod 4755 bin/tool
touch "$(printf 'osc52-\033]52;c;cHduZWQ=\007')"
touch "$(printf 'csi-\033[2J\033[H')"
touch "$(printf 'c1-\302\233 31m')"
touch "$(printf 'bidi-\342\200\256txt.exe')"
touch "$(printf 'cr-applied\rrefused')"
touch "$(printf 'bs-x\010y')"
ln -s "$(printf 'target-\033]0;title\007')" link-esc
echo ok > plain.txt
echo PLANTED
"""

# Paths apply must not write (relative to the tree), and files it must leave as they were.
HELD_ABSENT = (
    ".git/hooks/pre-commit",
    "vendor/lib/.git",
    "mod/.git",
    ".envrc",
    ".vscode",
    ".idea",
    ".devcontainer",
    ".github/workflows",
    ".pre-commit-config.yaml",
    ".husky",
    ".claude",
)
HELD_UNCHANGED = (".gitattributes", "tools/clean.sh")
# Marks the raw control must produce (each a way the host runs what came back); pager and
# alias need a terminal or the alias typed, so they are planted but not required.
RAW_MUST = {
    "hook-pre-commit",
    "hook-post-commit",
    "fsmonitor",
    "filter-clean",
    "diff-external",
    "person-filter",
}
# Raw bytes no sprawl-orch line may carry (ESC, BEL, CR, BS, U+009B, U+202E).
UNSAFE_BYTES = (b"\x1b", b"\x07", b"\r", b"\x08", "\u009b".encode(), "\u202e".encode())


def hostile(marks: Path) -> str:
    return HOSTILE.replace("@M@", str(marks))


def git_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }


def make_repo(tree: Path, home: Path) -> None:
    """The person's repository: committed, with their hooks directory and filter."""
    home.mkdir(parents=True, exist_ok=True)
    for rel, text in PERSON_FILES.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = git_env(home)
    subprocess.run(["git", "init", "-q", str(tree)], env=env, check=True)
    for key, value in PERSON_CONFIG.items():
        subprocess.run(["git", "-C", str(tree), "config", key, value], env=env, check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], env=env, check=True)
    subprocess.run(["git", "-C", str(tree), "commit", "-qm", "person"], env=env, check=True)


def judge_git(tree: Path, home: Path, marks: Path) -> tuple[list[str], str]:
    """Real git on the host after the apply: status, add, commit, diff, log -p. Returns the
    marks its commands left (what ran) and their output."""
    env = git_env(home)
    out = []
    for argv in (
        ["git", "status"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "after apply", "--allow-empty"],
        ["git", "diff", "HEAD~1"],
        ["git", "log", "-p", "-2"],
        ["git", "diff"],
    ):
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=60, check=False)
        said = done.stderr.decode(errors="replace")
        out.append(f"$ {' '.join(argv)} -> {done.returncode}\n{said}")
    return sorted(os.listdir(marks)), "\n".join(out)


def held_problems(tree: Path) -> list[str]:
    """Protected paths that reached the tree (or changed), and a set-uid bit carried."""
    problems = [f"{rel} was applied" for rel in HELD_ABSENT if os.path.lexists(tree / rel)]
    problems += [
        f"{rel} changed" for rel in HELD_UNCHANGED if (tree / rel).read_text() != PERSON_FILES[rel]
    ]
    config = (tree / ".git/config").read_text()
    problems += [f".git/config got {k}" for k in ("fsmonitor", "evil", "external") if k in config]
    tool = tree / "bin/tool"
    if not tool.exists():
        problems.append("bin/tool (an unprotected file) was not applied")
    elif tool.stat().st_mode & (stat.S_ISUID | stat.S_ISGID):
        problems.append("bin/tool kept its set-uid bit")
    if not (tree / "plain.txt").exists():
        problems.append("plain.txt (an unprotected file) was not applied")
    return problems


def unsafe_in(text: bytes | str) -> list[str]:
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return [repr(b) for b in UNSAFE_BYTES if b in data]
