"""The root caller's sandbox uid: chosen outside every account and subordinate range, and
given search (only) on the way to its copy through a named POSIX ACL entry."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.native_fallbacks.sandbox_uid import (
    ACL_MASK,
    ACL_USER,
    RANGE_START,
    can_search,
    choose_uid,
    grant_search,
    with_search,
)


def test_the_uid_skips_accounts_groups_and_subordinate_ranges() -> None:
    passwd = f"root:x:0:0::/root:/bin/sh\nodd:x:{RANGE_START}:5::/:/bin/sh\n"
    group = f"g:x:{RANGE_START + 1}:\n"
    subuid = f"containers:{RANGE_START + 2}:3\n"
    assert choose_uid(passwd, group, [subuid, ""]) == RANGE_START + 5


def test_no_free_uid_is_a_clear_refusal() -> None:
    with pytest.raises(SprawlError) as raised:
        choose_uid("", "", [f"all:{RANGE_START}:65536\n"])
    assert "subuid" in raised.value.detail


def test_a_named_entry_grants_search_without_widening_the_group_class() -> None:
    st = os.stat_result((stat.S_IFDIR | 0o750, 0, 0, 0, 0, 7, 0, 0, 0, 0))
    base = [(1, 7, 0xFFFFFFFF), (4, 5, 0xFFFFFFFF), (32, 0, 0xFFFFFFFF)]
    assert not can_search(st, base, 4242)
    acl = with_search(base, 4242)
    assert (ACL_USER, 1, 4242) in acl
    assert (ACL_MASK, 5, 0xFFFFFFFF) in acl  # group_obj's r-x: the group class unchanged
    assert can_search(st, acl, 4242)
    assert not can_search(st, acl, 4243)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can set an ACL for another uid")
def test_grant_search_opens_the_way_for_that_uid_only(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a").chmod(0o700)
    uid = RANGE_START + 77
    try:
        assert grant_search(deep, uid) >= 1
    except SprawlError as err:
        pytest.skip(f"no POSIX ACLs on this filesystem: {err.detail}")
    assert grant_search(deep, uid) == 0  # idempotent
    (tmp_path / "a").chmod(0o700)  # a chmod rewrites the mask: our entry is masked out
    assert grant_search(deep, uid) == 1  # seen (ctime moved) and granted again
    mode = stat.S_IMODE((tmp_path / "a").stat().st_mode)
    assert mode & 0o007 == 0  # nothing for others
    assert os.system(f"setpriv --reuid={uid} --regid={uid} --clear-groups test -d {deep}") == 0
    assert (
        os.system(
            f"setpriv --reuid={uid} --regid={uid} --clear-groups "
            f"ls {tmp_path / 'a'} >/dev/null 2>&1"
        )
        != 0
    )  # search, not read
    other = uid + 1
    assert os.system(f"setpriv --reuid={other} --regid={other} --clear-groups test -d {deep}") != 0
