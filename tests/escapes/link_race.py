"""A host process that flips an entry of the person's tree while sprawl-orch syncs it (the race
class of test_link_races.py, and benchmarks/link_race.py).

The last attacker of round 33 flipped a tree link `k` between an allowed file and a secret
outside the allowed set while syncs ran: the sync judged the link by one resolution (stat,
then realpath) and copied through another (open by path), and 1 920 of 50 546 API syncs and
5 of 162 `exec -- cat k` commands carried the secret. Who can do that: a host account that
may write the person's tree but not read the secret (a group-writable tree).

Shapes (``MODES``), each flipping `k` as fast as the flipper can:

- ``link``: `k` a link to an allowed file, then to the secret file;
- ``dirlink``: `k` a link to an allowed directory, then to the secret's directory (the
  secret under the same name as an allowed file there);
- ``swap``: `k` an ordinary file of the tree, then a link to the secret (an in-tree entry
  the walk sees as a plain file by its directory entry);
- ``dirswap``: `k` an ordinary directory of the tree, then a link to the secret's directory.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MODES = ("link", "dirlink", "swap", "dirswap")
ALLOWED_DIR = "/usr/share/common-licenses"
ALLOWED_NAME = "Apache-2.0"

# The flipper: each step makes the next shape under a temporary name and renames it over
# `k` (atomic for files and links); a real directory cannot be renamed over a link, so the
# dirswap shape removes the link first (the sync then sometimes sees no `k`: gone since
# listed, which it must also survive).
FLIP = r"""
import os, sys
mode, k, allowed, secret, stash = sys.argv[1:6]
tmp = k + ".flip"
def link(to):
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(to, tmp)
    os.replace(tmp, k)
first = True
while True:
    if mode in ("link", "dirlink"):
        link(allowed)
        link(secret)
    elif mode == "swap":
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.link(stash, tmp)
        os.replace(tmp, k)
        link(secret)
    else:
        os.unlink(k)
        os.rename(stash, k)
        os.rename(k, stash)
        os.symlink(secret, k)
    if first:  # one whole flip done: the race is on
        first = False
        print("flipping", flush=True)
"""


@dataclass(frozen=True)
class Scene:
    tree: Path
    token: str  # the secret's content: found anywhere in a copy or an output, it leaked
    secret_dir: Path


def plant_secret(home: Path) -> tuple[Path, str]:
    """A secret the copy guard refuses: under the caller's ~/.config, readable by its owner
    only, named like the allowed file so a flipped directory link finds it too."""
    token = f"SECRET-{secrets.token_hex(8)}"
    where = home / ".config" / f"sprawl-race-{secrets.token_hex(4)}"
    where.mkdir(parents=True, mode=0o700)
    (where / ALLOWED_NAME).write_text(token + "\n")
    (where / ALLOWED_NAME).chmod(0o600)
    return where, token


def make_tree(tree: Path, mode: str, secret_dir: Path) -> tuple[str, str, str]:
    """The tree around `k`; returns the flipper's (allowed, secret, stash) arguments."""
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "README").write_text("a tree\n")
    allowed_file = os.path.join(ALLOWED_DIR, ALLOWED_NAME)
    secret_file = str(secret_dir / ALLOWED_NAME)
    k = tree / "k"
    if mode == "link":
        k.symlink_to(allowed_file)
        return allowed_file, secret_file, ""
    if mode == "dirlink":
        k.symlink_to(ALLOWED_DIR)
        return ALLOWED_DIR, str(secret_dir), ""
    if mode == "swap":
        stash = tree / "plain"
        stash.write_text("plain bytes of the tree\n")
        os.link(stash, k)
        return "", secret_file, str(stash)
    stash = tree / "plain-dir"
    stash.mkdir()
    (stash / ALLOWED_NAME).write_text("plain bytes of the tree\n")
    k.symlink_to(secret_dir)
    return "", str(secret_dir), str(stash)


@contextmanager
def flipping(tree: Path, mode: str, secret_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    allowed, secret, stash = make_tree(tree, mode, secret_dir)
    argv = [sys.executable, "-c", FLIP, mode, str(tree / "k"), allowed, secret, stash]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        started = proc.stdout.readline()
        if started != b"flipping\n":
            raise RuntimeError(f"the flipper did not start: {started!r}, exit {proc.poll()}")
        yield proc
        if proc.poll() is not None:  # it died midway: what ran after proves nothing
            raise RuntimeError(f"the flipper ended early with {proc.returncode}")
    finally:
        proc.kill()  # the flipper this context started, by its own handle
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def leaked(root: Path, token: str) -> list[str]:
    """Every file under `root` (not following links) whose bytes hold `token`."""
    found = []
    needle = token.encode()
    for here, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(here, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link (kept as a link) or a fifo: no copied bytes
            try:
                if needle in os.read(fd, 1 << 20):
                    found.append(os.path.relpath(path, root))
            finally:
                os.close(fd)
    return found
