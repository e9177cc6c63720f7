"""The state directory is ours alone (issue 30 break 6): every directory sprawl-orch makes
in it 0700 and every file 0600 -- kept output, outputs, copies, changes, the ledger -- a
pre-existing open state directory tightened, one of another account refused. A copy's
contents keep the tree's modes (the command needs them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.private import prepare_state
from sprawl_orch.runs.results import OUTPUT_CAP
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config


def _open_entries(state: Path) -> list[str]:
    """Every path of ours in `state` that someone else could list, pass or read."""
    bad: list[str] = []
    for top, dirs, files in os.walk(state):
        here = Path(top)
        if here.parent.parent.name == "copies":  # a copy slot: the tree's own modes
            dirs[:] = []
            continue
        for name in (*dirs, *files):
            st = os.lstat(here / name)
            if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                continue
            if stat.S_IMODE(st.st_mode) & 0o077:
                bad.append(f"{here / name} {stat.S_IMODE(st.st_mode):o}")
    return bad


def test_everything_sprawl_orch_keeps_is_private(tmp_path: Path, tree: Path) -> None:
    old = os.umask(0o022)  # the usual umask: what made 0755 and 0644 before
    try:
        config = make_config(tmp_path, arm="copied_tree")
        with ExecTool(config, tree) as tool:
            big = tool.exec(f"head -c {OUTPUT_CAP * 2} /dev/zero; echo x > new.txt", shell=True)
            assert big.outcome == "settled", big
            assert big.changes is not None and big.changes.handle is not None
    finally:
        os.umask(old)
    state = tmp_path / "state"
    assert any((state / "kept-output").iterdir()), "nothing was kept: the test proves nothing"
    assert (state / "ledger.jsonl").exists() and (state / "copies").is_dir()
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert _open_entries(state) == []


def test_an_open_state_directory_is_tightened(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "kept-output").mkdir(parents=True)
    state.chmod(0o755)
    (state / "kept-output").chmod(0o755)
    (state / "kept-output" / "old.out").write_text("kept by an older version\n")
    (state / "kept-output" / "old.out").chmod(0o644)
    prepare_state(state)
    assert _open_entries(state) == []
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700


def test_a_state_directory_of_another_account_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a directory to another account here")
    state = tmp_path / "theirs"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(SprawlError) as err:
        prepare_state(state)
    assert err.value.code.value == "E_CONFIG_INVALID"
    assert "uid 65534" in err.value.detail and str(state) in err.value.detail
    (tmp_path / "file").write_text("")
    with pytest.raises(SprawlError):
        prepare_state(tmp_path / "file")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a link to another uid")
def test_a_state_link_another_account_owns_is_refused(tmp_path: Path) -> None:
    """attack3: `[state] dir = /tmp/x` where /tmp/x is another account's link to a directory
    of ours passed (stat follows the link); its owner can repoint it at any time."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, 65534, 65534)
    with pytest.raises(SprawlError) as err:
        prepare_state(link)
    assert "link owned by uid 65534" in err.value.detail


def test_a_state_directory_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    if os.geteuid() == 0:
        os.chown(shared, 65534, 65534)
    with pytest.raises(SprawlError) as err:
        prepare_state(shared / "state")
    assert "others may write" in err.value.detail
    shared.chmod(0o1777)  # sticky: only the state directory's owner may rename it
    assert prepare_state(shared / "state") == shared / "state"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can set an ACL for another uid")
def test_the_sandbox_uids_search_entry_survives_another_process_start(tmp_path: Path) -> None:
    """A root caller's workspace tree lives under the state directory, reached by the
    sandbox uid through its search entry (g+x in the mode: the ACL mask). Every new CLI
    process prepares the state directory; its chmod 0700 masked the entry out while another
    process's bwrap was on its way to the tree -- that bwrap failed with exit 1 (the flake
    of two CLI processes in one workspace at once). A truly open one is still tightened."""
    from sprawl_orch.native_fallbacks.sandbox_uid import (
        RANGE_START,
        _acl_of,
        can_search,
        grant_search,
    )

    state = prepare_state(tmp_path / "state")
    (state / "workspaces" / "key" / "w" / "tree").mkdir(parents=True, mode=0o700)
    (state / "outputs").mkdir(mode=0o700)
    uid = RANGE_START + 78
    try:
        grant_search(state / "workspaces" / "key" / "w" / "tree", uid, state / "outputs")
    except SprawlError as err:
        pytest.skip(f"no POSIX ACLs on this filesystem: {err.detail}")

    def searchable(p: Path) -> bool:
        st = os.stat(p)
        return can_search(st, _acl_of(str(p), st), uid)

    assert searchable(state) and searchable(state / "outputs")
    prepare_state(state)  # what the second CLI process does while the first starts bwrap
    assert searchable(state) and searchable(state / "outputs")
    assert stat.S_IMODE(os.stat(state).st_mode) & 0o007 == 0
    # More than the search entry (the owning group given r-x): tightened as ever.
    state.chmod(0o750)
    prepare_state(state)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700 and not searchable(state)
