"""native_fallbacks/view_memo.py: the PATH part of the bwrap view kept by the exec server is
rebuilt when any directory it read changed (a link added, retargeted, an mtime set back), and
a remembered bind is judged again on every use -- a bind that now leads into a credential
place is never bound, whatever the stamps say."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.core import served_memo
from sprawl_orch.native_fallbacks import view_memo
from sprawl_orch.native_fallbacks.bwrap_view import path_tools, stamp
from tests.unit.test_bwrap_view import guard_for, make_home


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    served_memo._memo.clear()
    yield
    served_memo._memo.clear()


def served(path: str, home: Path) -> set[str]:
    return {str(p) for p in view_memo.served_path_part(path, guard_for(home), ()).binds}


def remembered() -> dict[str, served_memo.Json]:
    [value] = [v for s, v in served_memo._memo.items() if view_memo.KIND in s]
    assert isinstance(value, dict)
    return value


def tool_dir(home: Path) -> Path:
    """~/tools/bin on PATH: no lib/ beside it, so the dir alone and its links' prefixes."""
    bin_dir = home / "tools" / "bin"
    bin_dir.mkdir(parents=True)
    gadget = home / "opt" / "gadget" / "bin"
    gadget.mkdir(parents=True)
    (gadget / "gadget").write_text("#!/bin/sh\n")
    (home / "opt" / "gadget" / "lib").mkdir()
    (home / ".aws" / "bin").mkdir(parents=True)
    (home / ".aws" / "bin" / "gadget").write_text("#!/bin/sh\n")
    return bin_dir


def test_a_remembered_part_is_the_built_one_and_is_used(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    path = os.pathsep.join(str(home / d) for d in (".local/bin", ".cargo/bin", ".pyenv/shims"))
    built = path_tools(path, guard_for(home))
    first = view_memo.served_path_part(path, guard_for(home), ())
    assert first == built
    value = remembered()
    # the second call answers from the memo (the venv list planted here comes back)
    value["venvs"] = [str(home / "planted")]
    second = view_memo.served_path_part(path, guard_for(home), ())
    assert second.binds == built.binds and second.venvs == (home / "planted",)


def test_a_link_added_between_two_calls_is_judged_never_missed_nor_bound_if_refused(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    bin_dir = tool_dir(home)
    assert served(str(bin_dir), home) == {str(bin_dir)}
    (bin_dir / "gadget").symlink_to(home / "opt" / "gadget" / "bin" / "gadget")
    (bin_dir / "key").symlink_to(home / ".ssh" / "id_ed25519")
    found = served(str(bin_dir), home)
    assert str(home / "opt" / "gadget") in found  # the new link is seen
    assert not any(p.startswith(str(home / ".ssh")) for p in found)


def test_a_link_retargeted_in_place_into_a_secret_place_is_dropped(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    bin_dir = tool_dir(home)
    (bin_dir / "gadget").symlink_to(home / "opt" / "gadget" / "bin" / "gadget")
    assert str(home / "opt" / "gadget") in served(str(bin_dir), home)
    (bin_dir / "gadget.new").symlink_to(home / ".aws" / "bin" / "gadget")
    os.replace(bin_dir / "gadget.new", bin_dir / "gadget")
    found = served(str(bin_dir), home)
    assert found == {str(bin_dir)}  # ~/.aws refused, ~/opt/gadget no longer linked


def test_an_mtime_set_back_does_not_hide_a_new_link(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    bin_dir = tool_dir(home)
    before = os.stat(bin_dir)
    assert served(str(bin_dir), home) == {str(bin_dir)}
    (bin_dir / "gadget").symlink_to(home / "opt" / "gadget" / "bin" / "gadget")
    os.utime(bin_dir, ns=(before.st_atime_ns, before.st_mtime_ns))  # ctime moves anyway
    assert str(home / "opt" / "gadget") in served(str(bin_dir), home)


def test_a_remembered_bind_now_a_link_to_a_secret_is_not_bound_whatever_the_stamps(
    tmp_path: Path,
) -> None:
    """The second layer: stamps that missed a change (forged here to match) still never bind
    a remembered place that now leads somewhere the guard refuses."""
    home = make_home(tmp_path)
    pkg = home / "pkg"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "lib").mkdir()  # laid out as an install prefix: ~/pkg is bound whole
    path = str(pkg / "bin")
    assert str(pkg) in served(path, home)
    shutil.rmtree(pkg)
    (home / ".ssh" / "bin").mkdir()
    (home / ".ssh" / "lib").mkdir()
    pkg.symlink_to(home / ".ssh")
    value = remembered()
    stamps = value["stamps"]
    assert isinstance(stamps, list)
    value["stamps"] = [[d[0], stamp(d[0])] for d in stamps if isinstance(d, list)]
    found = served(path, home)
    assert str(pkg) not in found
    assert not any(p.startswith(str(home / ".ssh")) for p in found)


def test_a_remembered_bind_the_guard_refuses_now_is_rebuilt(tmp_path: Path) -> None:
    """~/pkg was bound whole for its lib/; with lib/ gone it is a home's child like ~/.fly
    (credentials beside bin/): judged again by its own rule, even with forged stamps."""
    home = make_home(tmp_path)
    pkg = home / "pkg"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "lib").mkdir()
    assert str(pkg) in served(str(pkg / "bin"), home)
    (pkg / "lib").rmdir()
    value = remembered()
    stamps = value["stamps"]
    assert isinstance(stamps, list)
    value["stamps"] = [[d[0], stamp(d[0])] for d in stamps if isinstance(d, list)]
    assert served(str(pkg / "bin"), home) == {str(pkg / "bin")}
