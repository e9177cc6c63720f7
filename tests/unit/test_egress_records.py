"""A command's egress records are bounded (count and bytes) while every connection is still
counted, and the result says how many records it dropped."""

from __future__ import annotations

import socket

from sprawl_orch.egress import record
from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.record import Egress, Tally
from sprawl_orch.egress.rules import Rules
from tests.egress.upstream import connect_through


def _refused(host: str, reason: str = "not in the allow list") -> Egress:
    return Egress("connect", host, 443, False, reason, None, 0, 0, 0.001)


def test_records_past_the_count_are_counted_not_kept() -> None:
    tally = Tally.of(_refused(f"h{i}.example") for i in range(record.MAX_RECORDS + 7))
    assert len(tally.kept) == record.MAX_RECORDS and tally.dropped == 7
    assert tally.refused == record.MAX_RECORDS + 7
    said = tally.summary()
    assert f"{record.MAX_RECORDS + 7} refused" in said
    assert "7 connection record(s) not kept" in said


def test_records_past_the_bytes_are_counted_not_kept() -> None:
    long = "x" * 10_000  # a reason that quotes a long request target
    tally = Tally.of(_refused("a.example", long) for _ in range(100))
    assert tally.kept_bytes <= record.MAX_RECORD_BYTES
    assert 0 < len(tally.kept) < 100 and tally.dropped == 100 - len(tally.kept)


def test_allowed_hosts_in_the_summary_are_bounded() -> None:
    many = [
        Egress("connect", f"h{i}.example", 443, True, "tunnel closed", "203.0.113.9", 1, 2, 0.1)
        for i in range(record.MAX_SUMMARY_HOSTS + 5)
    ]
    said = Tally.of(many).summary()
    assert f"{record.MAX_SUMMARY_HOSTS + 5} connection(s) allowed" in said
    assert "and 5 more" in said and said.count(".example:443") == record.MAX_SUMMARY_HOSTS


def test_a_flood_through_the_real_proxy_keeps_the_first_records() -> None:
    proxy = EgressProxy(Rules.parse(("example.invalid",)))
    proxy.start()
    listener = socket.create_server(("127.0.0.1", 0))
    address = listener.getsockname()
    proxy.serve(listener)
    try:
        for i in range(record.MAX_RECORDS + 3):
            status, sock = connect_through(address, f"h{i}.unlisted.test:443")
            sock.close()
            assert status == 403
    finally:
        proxy.close()
    kept = proxy.records()
    assert len(kept) == record.MAX_RECORDS and kept[0].host == "h0.unlisted.test"
    tally = proxy.tally()
    assert tally.refused == record.MAX_RECORDS + 3 and tally.dropped == 3
