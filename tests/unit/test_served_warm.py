"""The exec server's table of kept warm containers (core/served_warm.py), with real sockets:
a kept container's owner is a connection, and the server closing it is what makes the
guardian remove the container -- so each rule below is checked as "the peer sees EOF"."""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Iterator

import pytest

from sprawl_orch.core import served_warm


@pytest.fixture(autouse=True)
def table() -> Iterator[None]:
    served_warm.close_all()
    yield
    served_warm.close_all()
    served_warm._call_end = None


def _owner() -> tuple[socket.socket, socket.socket]:
    """(the guardian's end, the owning connection a call hands the server)."""
    guardian, link = socket.socketpair()
    return guardian, link


def _eof(guardian: socket.socket) -> bool:
    ready, _, _ = select.select([guardian], [], [], 0.5)
    return bool(ready) and guardian.recv(1) == b""


def _call(pid: int, *steps: tuple[str, ...], link: socket.socket | None = None) -> None:
    """What a call `pid` says, in order, then its end as the server sees it."""
    server_end, call_end = served_warm.channel()
    served_warm.in_call(call_end)
    try:
        for step in steps:
            if step[0] == "hold":
                assert link is not None
                served_warm.hold(step[1], "key", link.fileno())
                link.close()  # the call's own copy: the one in flight keeps it open
            elif step[0] == "take":
                served_warm.take(step[1])
            elif step[0] == "back":
                served_warm.back(step[1], int(step[2]), {"session": "s"})
            elif step[0] == "drop":
                served_warm.drop(step[1])
    finally:
        os.close(call_end)
        served_warm._call_end = None
    served_warm.take_messages(server_end, pid)
    os.close(server_end)


def test_a_container_given_back_is_kept_and_offered() -> None:
    guardian, link = _owner()
    _call(101, ("hold", "c1"), ("back", "c1", "1"), link=link)
    assert not _eof(guardian), "kept: its owner stays open"
    assert [n for n, _ in served_warm.offers("key")] == ["c1"]
    assert served_warm.kept["c1"].generation == 1


def test_a_call_that_died_holding_a_new_one_drops_it() -> None:
    guardian, link = _owner()
    _call(102, ("hold", "c2"), link=link)  # never said `back`: killed mid-command
    assert _eof(guardian), "the guardian sees EOF and removes the container"
    assert "c2" not in served_warm.kept


def test_a_call_that_took_a_kept_one_and_died_drops_it() -> None:
    guardian, link = _owner()
    _call(103, ("hold", "c3"), ("back", "c3", "1"), link=link)
    _call(104, ("take", "c3"))
    assert _eof(guardian)
    assert served_warm.offers("key") == []


def test_only_the_holder_gives_it_back() -> None:
    guardian, link = _owner()
    _call(105, ("hold", "c4"), ("back", "c4", "1"), link=link)
    # a call that never took it says `back` with another generation: not taken for it (a
    # call forked before would otherwise find `clean 9` as the table's word)
    _call(106, ("back", "c4", "9"))
    assert not _eof(guardian)
    assert served_warm.kept["c4"].generation == 1


def test_drop_and_the_servers_end_close_the_owner() -> None:
    dropped, link = _owner()
    _call(107, ("hold", "c5"), ("back", "c5", "1"), link=link)
    _call(108, ("take", "c5"), ("drop", "c5"))
    assert _eof(dropped)
    kept, link = _owner()
    _call(109, ("hold", "c6"), ("back", "c6", "1"), link=link)
    served_warm.close_all()
    assert _eof(kept)


def test_at_most_four_idle_per_key_the_oldest_go() -> None:
    owners = []
    for n in range(6):
        guardian, link = _owner()
        owners.append(guardian)
        _call(200 + n, ("hold", f"k{n}"), ("back", f"k{n}", "1"), link=link)
    assert [_eof(g) for g in owners] == [True, True, False, False, False, False]
    assert sorted(n for n, _ in served_warm.offers("key")) == ["k2", "k3", "k4", "k5"]


def test_a_message_that_is_not_ours_keeps_nothing_and_closes_its_descriptor() -> None:
    guardian, link = _owner()
    server_end, call_end = served_warm.channel()
    socket.send_fds(socket.socket(fileno=call_end), [b"not json"], [link.fileno()])
    link.close()
    served_warm.take_messages(server_end, 300)
    os.close(server_end)
    assert _eof(guardian)
    assert served_warm.kept == {}


def test_a_spare_lets_go_of_the_owners_and_adopts_only_its_own_table() -> None:
    """A spare closes its inherited owners at once (the guardian sees EOF when the server
    closes its own), takes the handed ones back only into the table it was forked with,
    and drops a table that is not that one whole, closing what it was handed."""
    guardian, link = _owner()
    served_warm.kept["a"] = served_warm.Kept(os.dup(link.fileno()), "k", {"x": 1})
    link.close()
    inherited = os.dup(served_warm.kept["a"].fd)  # the server's own copy
    served_warm.let_go_inherited()
    assert served_warm.kept["a"].fd == -1 and "a" in served_warm.kept
    os.close(inherited)  # the server lets it go: no copy is left in the spare
    assert _eof(guardian)

    first, second = socket.socketpair()
    served_warm.adopt(["a"], [first.detach()])
    assert served_warm.kept["a"].fd >= 0
    os.close(served_warm.kept.pop("a").fd)
    assert second.recv(1) == b""

    served_warm.kept["b"] = served_warm.Kept(-1, "k", {"x": 1})
    third, fourth = socket.socketpair()
    served_warm.adopt(["c"], [third.detach()])  # not the table it was forked with
    assert served_warm.kept == {}
    assert fourth.recv(1) == b""  # what it was handed is closed
