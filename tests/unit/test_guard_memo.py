"""core/guard_memo.py: a guard kept by the exec server is the guard make_guard builds now --
a changed $HOME, a home that now leads elsewhere, other places of ours are a new key."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.core import guard_memo, served_memo
from sprawl_orch.core.credential_places import SYSTEM_DIRS, Guard, _by_name, _under, make_guard


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    served_memo._memo.clear()
    served_memo._decoded.clear()
    served_memo._learned.clear()
    yield
    served_memo._memo.clear()
    served_memo._decoded.clear()


def kept() -> list[served_memo.Json]:
    return [v for s, v in served_memo._memo.items() if f'["{guard_memo.KIND}",' in s]


def test_a_kept_guard_is_the_built_one_and_is_used(tmp_path: Path) -> None:
    state = tmp_path / "state"
    built = make_guard(str(tmp_path), [state], SYSTEM_DIRS, grants=False)
    first = guard_memo.served_copy_guard(str(tmp_path), (state,))
    assert first == built and kept() == [True]  # only the key travels
    second = guard_memo.served_copy_guard(str(tmp_path), (state,))
    assert second == built and guard_memo.served_copy_guard(str(tmp_path), (state,)) is second


def test_a_forged_guard_sent_to_the_server_is_never_used(tmp_path: Path) -> None:
    """A batch forged on the call's channel names a real key with an empty guard: the server
    builds the guard itself from the key's inputs, the forged value is never read."""
    guard_memo.served_copy_guard(str(tmp_path), (tmp_path / "state",))
    [slot] = [s for s in served_memo._learned if f'["{guard_memo.KIND}",' in s]
    served_memo._learned[slot] = {"own": [], "others": [], "never": [], "grants": False}
    learned, teach = served_memo.channel()
    try:
        served_memo.send_learned(teach)
        os.close(teach)
        served_memo._memo.clear()
        served_memo._decoded.clear()
        served_memo.take_learned(learned)
    finally:
        os.close(learned)
    guard = guard_memo.served_copy_guard(str(tmp_path), (tmp_path / "state",))
    assert guard == make_guard(str(tmp_path), [tmp_path / "state"], SYSTEM_DIRS, grants=False)
    assert guard.never and _by_name(guard, tmp_path / ".ssh") is not None


def test_a_home_retargeted_between_two_calls_is_a_new_guard(tmp_path: Path) -> None:
    one, two, home = tmp_path / "one", tmp_path / "two", tmp_path / "home"
    one.mkdir()
    two.mkdir()
    home.symlink_to(one)
    first = guard_memo.served_guard(str(home), (), grants=True)
    assert one in first.own_homes and (one / ".ssh") in first.never
    home.unlink()
    home.symlink_to(two)  # $HOME unchanged as a string, leads elsewhere now
    second = guard_memo.served_guard(str(home), (), grants=True)
    assert two in second.own_homes and (two / ".ssh") in second.never
    assert one not in second.own_homes
    assert second == make_guard(str(home), (), grants=True)


def test_another_home_or_other_places_are_another_guard(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    first = guard_memo.served_guard(str(a), (tmp_path / "s1",), grants=True)
    assert guard_memo.served_guard(str(b), (tmp_path / "s1",), grants=True).own_homes != (
        first.own_homes
    )
    other = guard_memo.served_guard(str(a), (tmp_path / "s2",), grants=True)
    assert (tmp_path / "s2") in other.never and (tmp_path / "s1") not in other.never
    assert guard_memo.served_guard(str(a), (tmp_path / "s1",), grants=False).grants is False


def _by_name_as_ever(guard: Guard, where: Path) -> str | None:
    """credential_places._by_name before its index: every home, every place, in order."""
    if len(where.parts) <= 2:
        return f"{where} is / or a top-level directory"
    path = str(where)
    for home in (*guard.own_homes, *guard.other_homes):
        if _under(str(home), path):
            return f"{path} is a home directory ({home}) or holds one"
    for place in map(str, guard.never):
        if _under(path, place) or _under(place, path):
            return f"{path} is or holds {place} (credentials, state or runtime files)"
    return None


def test_the_indexed_judgement_is_the_judgement_as_ever(tmp_path: Path) -> None:
    home = tmp_path / "home"
    guard = make_guard(str(home), [tmp_path / "state"], accounts=[str(home), "/srv/bob"])
    paths = {Path("/"), Path("/usr"), Path("/usr/bin"), Path("/run/user/0"), Path("/srv")}
    paths |= {Path("/srv/bob/.sshx"), Path("/srv/bob/.ssh2/k"), Path("/srv/bobby/bin")}
    paths |= {tmp_path, tmp_path / "stat", tmp_path / "state" / "x", home.parent}
    for place in guard.never:
        paths |= {place, place.parent, place / "below", Path(str(place) + "x")}
    for path in sorted(paths):
        assert _by_name(guard, path) == _by_name_as_ever(guard, path), path


def test_a_taught_guard_is_decoded_by_the_server_before_any_fork(tmp_path: Path) -> None:
    guard_memo.served_copy_guard(str(tmp_path), (tmp_path / "state",))
    learned, teach = served_memo.channel()
    gc.unfreeze()
    try:
        served_memo.send_learned(teach)
        os.close(teach)
        served_memo._memo.clear()  # the server's memory: not this call's
        served_memo._decoded.clear()
        served_memo.take_learned(learned)
        # out of the collector's reach: no fork's full collection walks (and copies) it
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        os.close(learned)
    [guard] = [g for s, g in served_memo._decoded.items() if guard_memo.KIND in s]
    assert isinstance(guard, Guard) and "_index" in guard.__dict__
    assert guard_memo.served_copy_guard(str(tmp_path), (tmp_path / "state",)) is guard


def test_the_landlock_arm_takes_its_guard_from_the_memo_as_bwrap_does(tmp_path: Path) -> None:
    """LandlockArm built its guard per call (make_guard); it asks the memo now, under the same
    key as bwrap's: what it gets equals what make_guard builds now, and a kept one is reused."""
    from sprawl_orch.native_fallbacks.landlock import LandlockArm
    from sprawl_orch.runs.yielding import Yielders

    places = (tmp_path / "state",)

    def arm() -> LandlockArm:
        return LandlockArm(Yielders(None, None, None), caller_home=str(tmp_path), places=places)

    first = arm()
    assert len(kept()) == 1  # learned, for the server to build
    second, third = arm(), arm()
    assert second._guard is third._guard  # the kept guard, decoded once
    built = make_guard(str(tmp_path), places, first._system.binds, grants=first.user is not None)
    assert second._guard == built == first._guard
