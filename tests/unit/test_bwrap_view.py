"""The explicit view: what of the host bwrap binds read-only, and what never."""

from __future__ import annotations

import os
from pathlib import Path

from sprawl_orch.native_fallbacks.bwrap_view import View, command_view, path_tools, system_view

BASE = View(binds=("/usr", "/etc"), links=())


def test_system_view_keeps_top_level_links_as_links(tmp_path: Path) -> None:
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "run").mkdir()  # never in the view
    view = system_view(str(tmp_path))
    assert view.binds == ("/usr", "/etc")
    assert view.links == (("usr/bin", "/bin"),)


def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for d in (
        ".pyenv/shims",
        ".pyenv/versions/3.11/bin",
        ".local/bin",
        ".cargo/bin",
        ".local/pipx/venvs/tool/bin",
        ".ssh",
    ):
        (home / d).mkdir(parents=True)
    (home / ".cargo" / "credentials.toml").write_text("token")
    (home / ".local" / "bin" / "tool").symlink_to(home / ".local/pipx/venvs/tool/bin/tool")
    (home / ".cargo" / "bin" / "cargo").symlink_to("rustup")
    return home


def test_a_tool_managers_root_is_bound_but_never_home_or_a_mixed_root(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    path = os.pathsep.join(str(home / d) for d in (".pyenv/shims", ".local/bin", ".cargo/bin"))
    found = {str(p) for p in path_tools(path, home)}
    assert str(home / ".pyenv") in found  # shims need libexec and versions
    assert str(home / ".local" / "bin") in found  # only the bin of a mixed root
    assert str(home / ".local" / "pipx" / "venvs" / "tool") in found  # a link's prefix
    assert str(home / ".cargo" / "bin") in found
    assert str(home / ".cargo") not in found  # credentials.toml lives there
    assert str(home / ".local") not in found
    assert str(home) not in found and str(tmp_path) not in found


def test_relative_path_entries_are_ignored(tmp_path: Path) -> None:
    assert path_tools(f".{os.pathsep}bin", tmp_path) == []


def test_the_trees_venv_interpreter_is_bound_and_nothing_inside_the_tree(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    (tree / ".venv" / "bin").mkdir(parents=True)
    prefix = home / ".pyenv" / "versions" / "3.11"
    (tree / ".venv" / "pyvenv.cfg").write_text(f"home = {prefix}/bin\nversion = 3.11\n")
    env = {"HOME": str(home), "PATH": f"{tree}/.venv/bin{os.pathsep}/usr/bin"}
    view = command_view(env, tree, tmp_path / "state" / "copy", BASE)
    assert str(prefix) in view.binds
    assert not any(b == str(tree) or b.startswith(f"{tree}/") for b in view.binds)


def test_a_bind_that_would_show_the_copys_neighbours_is_left_out(tmp_path: Path) -> None:
    state = tmp_path / "opt-state"
    (state / "bin").mkdir(parents=True)
    env = {"HOME": "/nonexistent", "PATH": str(state / "bin")}
    view = command_view(env, tmp_path / "tree", state / "copies" / "c1", BASE)
    assert str(state) not in view.binds
    assert view.binds == BASE.binds


def test_a_path_entry_through_a_link_is_recreated_as_that_link(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    profile = tmp_path / "home" / ".nix-profile"
    profile.symlink_to(home / ".pyenv" / "versions" / "3.11")
    base = View(binds=("/usr",), links=(("usr/bin", "/bin"),))
    env = {"HOME": str(home), "PATH": f"{profile}/bin{os.pathsep}/bin"}
    view = command_view(env, tmp_path / "tree", tmp_path / "copy", base)
    real = str(home / ".pyenv" / "versions" / "3.11" / "bin")
    assert view.covers(real)
    assert (real, f"{profile}/bin") in view.links
    assert not any(path == "/bin" for _, path in view.links[1:])  # /bin is a link already
