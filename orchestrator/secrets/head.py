"""An intercepted answer's head scrubbed and written in one pass (benchmarks/secrets_proxy.py),
beside the way it replaces (swap.scrub_head, then the headers zipped, filtered and written
again by wire.response_head), which stays for every head this one declines;
tests/unit/test_secrets_head_once.py holds the two to the same bytes and the same count.

The reason and the headers are joined into one text as they will be written, a NUL between a
name and its value and \\x01 between fields, the framing headers (scanned, as before, never
sent) after a \\x02; scrubbed once; then the separators become `: ` and CRLF. None of them is
in a name or a value (llhttp refuses control characters there; a reason holding one declines),
none is put in for a match (a placeholder, its escapes, base64 letters) and no pattern matches
one, so a match across two pieces changes a separator's count: then it declines, as
swap.scrub_head falls back to each piece. And before the body is read: the line written after
the body only gets its framing headers (the head's work was on the answer's path after the
body came, while the upstream's body was still on its way it is off it).
"""

from __future__ import annotations

from collections.abc import Sequence

from sprawl_orch.secrets import wire
from sprawl_orch.secrets.disguise import Disguise
from sprawl_orch.secrets.swap import scrub_found, scrub_head


def answer(
    event: wire.Head, drop: frozenset[bytes], forms: dict[bytes, bytes], hidden: Sequence[Disguise]
) -> tuple[bytes, bool] | None:
    """The answer's status line and headers but those named in `drop`, scrubbed, each line
    ended but the last (the caller puts its framing headers and the empty line after), and
    whether the scrub found anything (in a dropped header too); None for a compressed answer
    (a Content-Encoding other than identity, on any of its lines). wire.Malformed for a head
    that would hold a line end of its own."""
    if any(k == b"content-encoding" for k, _ in event.special):
        return _parsed(event, drop, forms, hidden)  # rare: its check reads the scrubbed value
    return one_pass(event.status, event.reason, event.headers, drop, forms, hidden) or _parsed(
        event, drop, forms, hidden
    )


def one_pass(
    status: int,
    reason: bytes,
    headers: list[tuple[bytes, bytes]],
    drop: frozenset[bytes],
    forms: dict[bytes, bytes],
    hidden: Sequence[Disguise],
) -> tuple[bytes, bool] | None:
    """answer's head from one scrub of one text; None where it declines (above)."""
    if b"\x01" in reason or b"\x02" in reason:
        return None
    kept = [k + b"\0" + v for k, v in headers if k not in drop]
    gone = [k + b"\0" + v for k, v in headers if k in drop]
    text = b"\x01".join([reason, *kept]) + b"\x02" + b"\x01".join(gone)
    scrubbed, found = scrub_found(text, forms, hidden)
    if found and (
        scrubbed.count(b"\0") != len(headers)
        or scrubbed.count(b"\x01") != text.count(b"\x01")
        or scrubbed.count(b"\x02") != 1
    ):
        return None
    fields = scrubbed.partition(b"\x02")[0].replace(b"\0", b": ").replace(b"\x01", b"\r\n")
    out = b"HTTP/1.1 %d " % status + fields
    # As wire._lines: only its lines' ends (none inside a field or the reason; else declined,
    # and the parsed way refuses it as before).
    if out.count(b"\r") != len(kept) or out.count(b"\n") != len(kept) or b"\0" in out:
        return None
    return out, found


def _parsed(
    event: wire.Head, drop: frozenset[bytes], forms: dict[bytes, bytes], hidden: Sequence[Disguise]
) -> tuple[bytes, bool] | None:
    reason, scrubbed, in_head = scrub_head(event.reason, event.headers, forms, hidden)
    headers = []
    for (key, _), (name, value) in zip(event.headers, scrubbed, strict=True):
        if key in drop:
            continue
        if name == b"content-encoding" and value.strip().lower() not in (b"identity", b""):
            # Every Content-Encoding line, not the last one only (a second `identity` line
            # hid a gzip body), on every response: a stored echo comes back to a request
            # that carried no value.
            return None
        headers.append((name, value))
    # The empty line cut: the caller's framing headers go before it.
    return wire.response_head(event.status, reason, headers)[:-4], in_head
