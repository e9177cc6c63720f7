"""What a link of the tree out of it may bring into the copy (core.credential_places.
copy_refusal, design §5; issue 30: `k -> ~/.ssh/id_ed25519` put the key into the copy)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sprawl_orch.copy.sync import sync
from sprawl_orch.core.credential_places import copy_guard, make_guard

PYTHON = os.path.realpath(shutil.which("python3") or sys.executable)


def test_common_links_out_of_the_tree_still_bring_their_content(tmp_path: Path) -> None:
    src, copy = tmp_path / "src", tmp_path / "copy"
    (src / ".venv" / "bin").mkdir(parents=True)
    (src / ".venv" / "bin" / "python").symlink_to(PYTHON)
    (src / "licenses").symlink_to("/usr/share/common-licenses")
    guard = copy_guard(str(Path.home()), (tmp_path / "state",))
    work = sync(src, copy, guard=guard)
    assert work.refused_links == ()
    assert (copy / ".venv" / "bin" / "python").read_bytes() == Path(PYTHON).read_bytes()
    assert (copy / "licenses").is_dir() == Path("/usr/share/common-licenses").is_dir()


def test_a_link_to_credentials_is_left_out_and_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("KEY")
    (home / ".pyenv" / "versions").mkdir(parents=True)
    (home / ".pyenv" / "versions" / "python").write_text("interp")
    other = tmp_path / "bob"
    other.mkdir()
    (other / "notes").write_text("bob's")
    state = tmp_path / "state"
    state.mkdir()
    (state / "ledger.jsonl").write_text("{}")
    src, copy = tmp_path / "src", tmp_path / "copy"
    src.mkdir()
    (src / "k").symlink_to(home / ".ssh" / "id_ed25519")
    (src / "ssh").symlink_to(home / ".ssh")
    (src / "py").symlink_to(home / ".pyenv" / "versions" / "python")
    (src / "bob").symlink_to(other / "notes")
    (src / "ledger").symlink_to(state / "ledger.jsonl")
    # runtime=(): the test's homes are under /tmp, which the real table refuses as a whole
    guard = make_guard(str(home), (state,), runtime=(), accounts=[str(other)], grants=False)
    work = sync(src, copy, guard=guard)
    assert sorted(os.listdir(copy)) == ["py"], "only the interpreter in the caller's home"
    refused = dict(r.split(": ", 1) for r in work.refused_links)
    assert sorted(refused) == ["bob", "k", "ledger", "ssh"]
    assert "another account's home" in refused["bob"]
    assert ".ssh" in refused["k"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's sync can read /etc/shadow")
def test_root_s_shadow_is_not_readable_by_everyone(tmp_path: Path) -> None:
    src, copy = tmp_path / "src", tmp_path / "copy"
    src.mkdir()
    (src / "k").symlink_to("/etc/shadow")
    work = sync(src, copy, guard=copy_guard(str(Path.home()), ()))
    assert not (copy / "k").exists()
    assert work.refused_links == ("k: /etc/shadow is not readable by everyone (mode 640)",)
