"""What the sync judges is what it copies (copy/source.py): a tree entry flipped between the
judgement and the copy, at exactly that moment (a hook runs the flip), never brings what the
judgement refused. Stop 33's last attacker flipped `k` by a racing process and got a secret
into 1 920 of 50 546 syncs; tests/escapes/test_link_races.py races for real. On the code
before copy/source.py each of these copied the secret."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.copy import walk as copy_walk
from sprawl_orch.copy.fileops import FdCopy
from sprawl_orch.copy.source import SourceFile
from sprawl_orch.copy.sync import sync
from sprawl_orch.core.credential_places import Guard, make_guard
from tests.escapes.link_race import ALLOWED_DIR, ALLOWED_NAME

ALLOWED = os.path.join(ALLOWED_DIR, ALLOWED_NAME)
SECRET = "SECRET-of-the-caller"


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, Path, Path, Guard]:
    if not os.path.isfile(ALLOWED):
        pytest.fail(f"{ALLOWED} is missing: base-files ships it on every Debian")
    home = tmp_path / "home"
    secret_dir = home / ".config" / "tok"
    secret_dir.mkdir(parents=True)
    (secret_dir / ALLOWED_NAME).write_text(SECRET)
    src = tmp_path / "src"
    src.mkdir()
    # runtime=(): the test's home is under /tmp, which the real table refuses as a whole
    guard = make_guard(str(home), (tmp_path / "state",), runtime=(), accounts=[], grants=False)
    return src, tmp_path / "copy", secret_dir, guard


def flip(link: Path, to: str) -> None:
    tmp = link.with_name(link.name + ".flip")
    tmp.symlink_to(to)
    os.replace(tmp, link)


def secrets_in(root: Path) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and SECRET in p.read_text(errors="replace")
    ]


def once(action: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            action()

    return run


def test_a_link_flipped_after_the_guard_judged_it_is_not_followed_again(
    scene: tuple[Path, Path, Path, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, secret_dir, guard = scene
    (src / "k").symlink_to(ALLOWED)
    real = copy_walk.copy_refusal
    flipper = once(lambda: flip(src / "k", str(secret_dir / ALLOWED_NAME)))

    def judged_then_flipped(*args: Any, **kwargs: Any) -> str | None:
        why = real(*args, **kwargs)
        flipper()  # the racing process wins: `k` now leads to the secret
        return why

    monkeypatch.setattr(copy_walk, "copy_refusal", judged_then_flipped)
    work = sync(src, copy, guard=guard)
    assert secrets_in(copy) == []
    assert (copy / "k").read_bytes() == Path(ALLOWED).read_bytes(), work


def test_a_plain_file_swapped_for_a_link_before_it_is_copied_is_judged_afresh(
    scene: tuple[Path, Path, Path, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, copy, secret_dir, guard = scene
    (src / "k").write_text("plain")
    real = SourceFile.open
    flipper = once(lambda: flip(src / "k", str(secret_dir / ALLOWED_NAME)))

    def swapped_then_opened(self: SourceFile) -> tuple[int, os.stat_result]:
        # Judged as a plain file of the tree; a link to the secret now, just before the
        # walk opens it to hand it to a copy worker (copy/pool.py).
        flipper()
        return real(self)

    monkeypatch.setattr(SourceFile, "open", swapped_then_opened)
    work = sync(src, copy, guard=guard)
    assert secrets_in(copy) == []
    assert not (copy / "k").exists()
    assert [r.split(": ", 1)[0] for r in work.refused_links] == ["k"], work


def test_a_resync_byte_compare_reads_only_the_judged_file(
    scene: tuple[Path, Path, Path, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resync's compare reads the source too: flipped after the judgement, it must not
    read (and so answer about) the secret."""
    src, copy, secret_dir, guard = scene
    (src / "k").symlink_to(ALLOWED)
    sync(src, copy, guard=guard)
    opened: list[str] = []
    real_open = os.open

    def watching(path: Any, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, *args, **kwargs)
        where = os.readlink(f"/proc/self/fd/{fd}")
        opened.append(where)
        return fd

    real = copy_walk.copy_refusal
    flipper = once(lambda: flip(src / "k", str(secret_dir / ALLOWED_NAME)))

    def judged_then_flipped(*args: Any, **kwargs: Any) -> str | None:
        why = real(*args, **kwargs)
        flipper()
        return why

    monkeypatch.setattr(copy_walk, "copy_refusal", judged_then_flipped)
    monkeypatch.setattr(os, "open", watching)
    sync(src, copy, guard=guard)
    monkeypatch.undo()
    assert str(secret_dir / ALLOWED_NAME) not in opened
    assert secrets_in(copy) == []


def test_a_directory_swapped_for_a_link_while_its_entries_are_copied(
    scene: tuple[Path, Path, Path, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`d` is a plain directory of the tree when listed; before its entries are copied it
    becomes a link to the secret's directory (same names). Its entries are opened through
    the directory held open, never through the path `d/…` again."""
    src, copy, secret_dir, guard = scene
    (src / "d").mkdir()
    (src / "d" / ALLOWED_NAME).write_text("plain")
    real = FdCopy.mkdir

    def swap() -> None:
        os.rename(src / "d", src / "d.away")
        (src / "d").symlink_to(secret_dir)

    flipper = once(swap)

    def mkdir_then_swapped(self: FdCopy, name: str, parent: int) -> None:
        real(self, name, parent)
        if name == "d":
            flipper()

    monkeypatch.setattr(FdCopy, "mkdir", mkdir_then_swapped)
    sync(src, copy, guard=guard)
    assert secrets_in(copy) == []
    assert (copy / "d" / ALLOWED_NAME).read_text() == "plain"
