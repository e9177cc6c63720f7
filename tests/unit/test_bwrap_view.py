"""The explicit view: what of the host bwrap binds read-only, and what never -- whatever PATH,
the tree's pyvenv.cfg or .python-version say (issue 30)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sprawl_orch.core.credential_places import Guard, make_guard
from sprawl_orch.core.errors import SprawlError
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
        ".pyenv/libexec",
        ".pyenv/src",
        ".pyenv/versions/3.11/bin",
        ".pyenv/versions/3.12/bin",
        ".local/bin",
        ".local/state/sprawl-orch/kept-output",
        ".cargo/bin",
        ".rustup/toolchains",
        ".local/pipx/venvs/tool/bin",
        ".nvm/versions/node/v20/bin",
        ".ssh",
        ".config/gh",
    ):
        (home / d).mkdir(parents=True)
    (home / ".pyenv" / "libexec" / "pyenv").write_text("#!/bin/sh\n")
    (home / ".pyenv" / "version").write_text("3.11\n")
    for v in ("3.11", "3.12"):
        (home / ".pyenv" / "versions" / v / "bin" / "python3").write_text("")
        (home / ".pyenv" / "versions" / v / "bin" / "python3").chmod(0o755)
    (home / ".cargo" / "credentials.toml").write_text("token")
    (home / ".ssh" / "id_ed25519").write_text("key")
    (home / ".local" / "bin" / "tool").symlink_to(home / ".local/pipx/venvs/tool/bin/tool")
    (home / ".cargo" / "bin" / "cargo").symlink_to("rustup")
    return home


def guard_for(home: Path, *, others: tuple[Path, ...] = (), grants: bool = True) -> Guard:
    """The caller's home and its state dir; /tmp (where tmp_path is) not a runtime place."""
    state = home / ".local" / "state" / "sprawl-orch"
    accounts = [str(home), *map(str, others)]
    return make_guard(str(home), [state], grants=grants, runtime=(), accounts=accounts)


def binds(path: str, home: Path, **kw: object) -> set[str]:
    return {str(p) for p in path_tools(path, guard_for(home, **kw)).binds}  # type: ignore[arg-type]


def view_of(home: Path, tree: Path, path: str, guard: Guard | None = None) -> View:
    env = {"HOME": "/tmp", "PATH": path}  # the command's HOME: never the reference
    return command_view(env, tree, tree.parent / "copy", BASE, guard or guard_for(home))


def test_cargo_and_local_bin_dirs_only_never_their_roots(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    path = os.pathsep.join(str(home / d) for d in (".local/bin", ".cargo/bin"))
    found = binds(path, home)
    assert str(home / ".local" / "bin") in found
    assert str(home / ".local" / "pipx" / "venvs" / "tool") in found  # a link's prefix
    assert str(home / ".cargo" / "bin") in found and str(home / ".rustup") in found
    assert str(home / ".cargo") not in found  # credentials.toml lives there
    assert str(home / ".local") not in found  # keyrings and sprawl-orch's state
    assert str(home) not in found and str(tmp_path) not in found


def test_a_plain_tool_root_is_still_bound_whole(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    assert str(home / ".nvm/versions/node/v20") in binds(
        str(home / ".nvm/versions/node/v20/bin"), home
    )


@pytest.mark.parametrize(
    "entry",
    [
        ".ssh",
        ".config/gh",
        ".local/state/sprawl-orch/kept-output",
        "",  # $HOME itself
        ".local/bin/../../.ssh",  # `..` in the entry
        "../home/.ssh",  # `..` at the top
    ],
)
def test_path_never_binds_homes_credentials_or_our_state(tmp_path: Path, entry: str) -> None:
    home = make_home(tmp_path)
    assert binds(f"{home}/{entry}", home) == set()


def test_a_path_entry_linking_to_a_secret_or_home_is_judged_by_its_target(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "bin").symlink_to(home)
    (tmp_path / "keys").symlink_to(home / ".ssh")
    assert binds(f"{tmp_path}/tools/bin{os.pathsep}{tmp_path}/keys", home) == set()


def test_relative_and_runtime_entries_are_ignored(tmp_path: Path) -> None:
    assert path_tools(f".{os.pathsep}bin{os.pathsep}", make_guard("/root", ())).binds == ()
    guard = make_guard("/root", ())
    assert path_tools(f"/tmp{os.pathsep}/run{os.pathsep}/var/lib", guard).binds == ()


def test_another_accounts_closed_home_is_never_opened_to_the_sandbox_uid(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    other = tmp_path / "bob"
    (other / "tools" / "bin").mkdir(parents=True)
    other.chmod(0o700)
    try:
        entry = str(other / "tools" / "bin")
        assert binds(entry, home, others=(other,)) == set()  # root caller: ACL would open it
        why = guard_for(home, others=(other,)).refusal(other / "tools")
        assert why is not None and "not open to everyone" in why
        # a non-root caller reaches it anyway: bound, but a home's child only by its bin
        # unless laid out as a prefix (attack3: ~/.pulumi/bin bound ~/.pulumi's credentials)
        assert str(other / "tools" / "bin") in binds(entry, home, others=(other,), grants=False)
        (other / "tools" / "lib").mkdir()
        assert str(other / "tools") in binds(entry, home, others=(other,), grants=False)
        # the caller's own home is closed too (0700 /root), and its tools still bound
        assert str(home / ".nvm/versions/node/v20") in binds(
            str(home / ".nvm/versions/node/v20/bin"), home
        )
    finally:
        other.chmod(0o755)


def make_venv(tree: Path, name: str, home_line: str, interpreter: Path | None) -> Path:
    venv = tree / name
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {home_line}\nversion = 3.11\n")
    if interpreter is not None:
        (venv / "bin" / "python3").symlink_to(interpreter)
    return venv


def test_the_trees_venv_interpreter_is_bound_and_nothing_inside_the_tree(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    prefix = home / ".pyenv" / "versions" / "3.11"
    make_venv(tree, ".venv", f"{prefix}/bin", prefix / "bin" / "python3")
    view = view_of(home, tree, f"{tree}/.venv/bin{os.pathsep}/usr/bin")
    assert str(prefix) in view.binds
    assert not any(b == str(tree) or b.startswith(f"{tree}/") for b in view.binds)


def test_a_venv_home_reached_through_a_link_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    prefix = home / ".pyenv" / "versions" / "3.11"
    (tmp_path / "py").symlink_to(prefix)
    make_venv(tree, ".venv", f"{tmp_path}/py/bin", prefix / "bin" / "python3")
    assert str(prefix) in view_of(home, tree, "/usr/bin").binds


@pytest.mark.parametrize("target", [".ssh", ".local/state/sprawl-orch/kept-output", "/home"])
def test_a_venv_whose_home_is_not_its_interpreters_is_refused(tmp_path: Path, target: str) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    named = target if target.startswith("/") else f"{home}/{target}"
    make_venv(tree, ".venv", named, home / ".pyenv" / "versions" / "3.11" / "bin" / "python3")
    with pytest.raises(SprawlError) as err:
        view_of(home, tree, "/usr/bin")
    assert err.value.code.value == "E_SANDBOX_DENIED"
    assert named in err.value.detail and str(home / ".pyenv/versions/3.11/bin") in err.value.detail


def test_a_venv_agreeing_with_a_planted_interpreter_in_a_secret_place_is_refused(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    # home and the link agree: both lie, and the place is one the view never shows
    make_venv(tree, "venv", str(home / ".ssh"), home / ".ssh" / "id_ed25519")
    with pytest.raises(SprawlError) as err:
        view_of(home, tree, "/usr/bin")
    assert "never reads" in err.value.detail
    # no interpreter at all: nothing to bind, nothing refused, nothing widened
    (tree / "venv" / "bin" / "python3").unlink()
    assert view_of(home, tree, "/usr/bin").binds == BASE.binds


def test_pyenv_binds_its_code_and_the_selected_versions_only(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    root = home / ".pyenv"
    view = view_of(home, tree, str(root / "shims"))
    assert {str(root / d) for d in ("libexec", "shims", "version", "versions/3.11")} <= set(
        view.binds
    )
    assert not view.covers(str(root / "versions" / "3.12")) and not view.covers(str(root / "src"))
    assert str(root) not in view.binds
    (tree / ".python-version").write_text("3.12\n../../.ssh\n../../../home\n")
    view = view_of(home, tree, str(root / "shims"))
    assert view.covers(str(root / "versions" / "3.12"))
    assert not view.covers(str(home / ".ssh")) and not view.covers(str(home))


def test_a_path_entry_through_a_link_is_recreated_as_that_link(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    profile = tmp_path / "home" / ".nix-profile"
    profile.symlink_to(home / ".nvm" / "versions" / "node" / "v20")
    base = View(binds=("/usr",), links=(("usr/bin", "/bin"),))
    env = {"HOME": str(home), "PATH": f"{profile}/bin{os.pathsep}/bin"}
    view = command_view(env, tmp_path / "tree", tmp_path / "copy", base, guard_for(home))
    real = str(home / ".nvm" / "versions" / "node" / "v20" / "bin")
    assert view.covers(real)
    assert (real, f"{profile}/bin") in view.links
    assert not any(path == "/bin" for _, path in view.links[1:])  # /bin is a link already


def test_a_bind_that_would_show_the_copys_neighbours_is_left_out(tmp_path: Path) -> None:
    state = tmp_path / "opt-state"
    (state / "bin").mkdir(parents=True)
    env = {"HOME": "/nonexistent", "PATH": str(state / "bin")}
    guard = make_guard("/nonexistent", [], runtime=(), accounts=[])
    view = command_view(env, tmp_path / "tree", state / "copies" / "c1", BASE, guard)
    assert str(state) not in view.binds
    assert view.binds == BASE.binds


def test_the_state_directory_is_never_bound_whatever_path_says(tmp_path: Path) -> None:
    state = tmp_path / "somewhere" / "state"
    (state / "bin").mkdir(parents=True)
    guard = make_guard("/nonexistent", [state], runtime=(), accounts=[])
    assert path_tools(str(state / "bin"), guard).binds == ()
    assert path_tools(str(state.parent), guard).binds == ()  # holds it


def test_a_tools_root_directly_in_a_home_is_bound_by_its_bin_only(tmp_path: Path) -> None:
    """attack3: ~/.pulumi/bin on PATH bound ~/.pulumi (credentials.json); ~/.kaggle on PATH
    bound kaggle.json -- names the guard's SECRETS list does not hold."""
    home = make_home(tmp_path)
    for d in (".pulumi/bin", ".kaggle", "miniconda3/bin", "miniconda3/lib", "bin"):
        (home / d).mkdir(parents=True, exist_ok=True)
    (home / ".pulumi" / "credentials.json").write_text("token")
    (home / ".local" / "bin" / "pulumi").symlink_to(home / ".pulumi/bin/pulumi")
    assert binds(str(home / ".pulumi/bin"), home) == {str(home / ".pulumi/bin")}
    assert binds(str(home / ".kaggle"), home) == set()
    assert str(home / ".pulumi") not in binds(str(home / ".local/bin"), home)
    assert binds(str(home / "miniconda3/bin"), home) == {str(home / "miniconda3")}
    assert binds(str(home / "bin"), home) == {str(home / "bin")}


def test_a_venv_whose_python_is_no_interpreter_is_refused(tmp_path: Path) -> None:
    """attack3: bin/python3 -> ~/.kaggle/kaggle.json with home = ~/.kaggle agreed with
    itself and bound ~/.kaggle."""
    home = make_home(tmp_path)
    (home / ".kaggle").mkdir()
    (home / ".kaggle" / "kaggle.json").write_text("token")
    tree = tmp_path / "tree"
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "pyvenv.cfg").write_text(f"home = {home / '.kaggle'}\n")
    (tree / ".venv" / "bin" / "python3").symlink_to(home / ".kaggle" / "kaggle.json")
    with pytest.raises(SprawlError) as err:
        command_view({"PATH": ""}, tree, tmp_path / "copy", BASE, guard_for(home))
    assert "not a Python interpreter" in str(err.value)


def test_a_host_file_is_seen_at_each_bind_that_shows_its_directory(tmp_path: Path) -> None:
    """A bind shows its source's real directory at its own path: a secret's file under a
    linked /opt is seen at /opt/..., the path bwrap masks (integration:
    test_secret_file_view.py)."""
    real = tmp_path / "data" / "opt"
    (real / "app").mkdir(parents=True)
    (tmp_path / "opt").symlink_to(real)
    token = str(real / "app" / "token")
    view = View(binds=(str(tmp_path / "opt"), str(real)), links=())
    assert view.seen_at(token) == (
        (str(tmp_path / "opt" / "app" / "token"), str(real)),
        (token, str(real)),
    )
    assert View(binds=(str(tmp_path / "other"),), links=()).seen_at(token) == ()


def test_a_mask_is_kept_where_the_sandbox_uid_passes_and_dropped_where_it_cannot(
    tmp_path: Path,
) -> None:
    """bwrap_masks: a directory the uid cannot search drops the mask (it failed bwrap's
    setup); one on the way to another bind counts as passable (an ACL grants it there)."""
    from sprawl_orch.native_fallbacks.bwrap_masks import masks_for

    opt = tmp_path / "opt"
    (opt / "closed").mkdir(parents=True, mode=0o700)
    (opt / "tools" / "bin").mkdir(parents=True)
    (opt / "tools").chmod(0o700)
    (opt / "open").mkdir()
    for d in ("closed", "tools", "open"):
        (opt / d / "token").write_text("v")
    view = View(binds=(str(opt), str(opt / "tools" / "bin")), links=())
    uid = 65000  # no owner here: only the mode's "other" bits (or a grant) let it pass
    hidden = [str(opt / d / "token") for d in ("closed", "tools", "open")]
    assert masks_for(view, hidden, uid) == (
        str(opt / "tools" / "token"),
        str(opt / "open" / "token"),
    )
