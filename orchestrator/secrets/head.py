"""Heads on the intercepted path in one pass each (benchmarks/secrets_proxy.py).

A request to a host with one bound secret (most): its headers walked once, hop-by-hop ones
skipped, the placeholder replaced in each value that holds it (recorded as swap.swap_headers
records it), Expect and what makes an answer unscannable left out, written as they go, the
configured headers and `accept-encoding: identity` last. It declines (the parsed way: the
hop-by-hop filter, swap.swap_headers, the filters, wire.request_head) where that way does more
than this: two bound secrets, a `basic ` value (a blob may hide the placeholder), a header the
config sets (replaced), a line that would not be one.

An answer's head scrubbed and written in one pass, beside the way it replaces
(swap.scrub_head, then the headers zipped, filtered and written again by wire.response_head),
which stays for every head this one declines. tests/unit/test_secrets_head_once.py holds each
shortcut to the way it replaces: the same bytes, the same counts.

The reason and the headers are joined into one text as they will be written, a NUL between a
name and its value and \\x01 between fields, the framing headers (scanned, as before, never
sent) after a \\x02; scrubbed once; then the separators become `: ` and CRLF. None of them is
in a name or a value (llhttp refuses control characters there; a reason holding one declines),
none is put in for a match (a placeholder, its escapes, base64 letters) and no pattern matches
one, so a match across two pieces changes a separator's count: then it declines, as
swap.scrub_head falls back to each piece. It runs before the body is read: after the body
only the framing headers are added (the head was written after the body came, on the
answer's path; now it is written while the body is still on its way).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from sprawl_orch.secrets import wire
from sprawl_orch.secrets.disguise import Disguise
from sprawl_orch.secrets.swap import Bound, scrub_found, scrub_head


class Requests:
    """One connection's bound secrets as a request's one pass uses them (made once)."""

    def __init__(
        self, bound: tuple[Bound, ...], skipped: frozenset[bytes], silent: frozenset[bytes]
    ) -> None:
        self.secret = bound[0] if len(bound) == 1 else None
        self.skipped = skipped  # never swapped nor sent (hop-by-hop)
        self.silent = silent  # swapped (counted) but not sent
        extra: list[tuple[bytes, bytes]] = []
        self.names: frozenset[bytes] = frozenset()
        self.used: set[str] = set()
        if self.secret is not None:
            secret = self.secret
            # In swap_headers' order: the configured header, then Basic (replacing an
            # Authorization the header put).
            if secret.header is not None:
                text = secret.format.format(value=secret.value.decode()).encode()
                extra.append((secret.header, text))
            if secret.basic_user is not None:
                blob = base64.b64encode(secret.basic_user + b":" + secret.value)
                extra = [(k, v) for k, v in extra if k != b"authorization"]
                extra.append((b"authorization", b"Basic " + blob))
            self.names = frozenset(k for k, _ in extra)
            self.used = {secret.name} if extra else set()
        extra.append((b"accept-encoding", b"identity"))
        self.tail = b"".join([k + b": " + v + b"\r\n" for k, v in extra]) + b"\r\n"
        self.extra = len(extra)

    def head(self, request: wire.Head, echoes: dict[bytes, bytes]) -> tuple[bytes, set[str]] | None:
        """The request's head to send and the secrets put in, or None (the parsed way);
        `echoes` gets what swap_headers would have given it."""
        secret = self.secret
        if secret is None:
            return None
        placeholder, value = secret.placeholder, secret.value
        skipped, silent, names = self.skipped, self.silent, self.names
        lines = [b"%s %s HTTP/1.1\r\n" % (request.method, request.target)]
        mine: dict[bytes, bytes] = {}
        for key, text in request.headers:
            if key in skipped:
                continue
            if key in names or not key:
                return None
            if placeholder in text:
                new = text.replace(placeholder, value)
                if new != text:
                    mine[new] = text
                    old_blob, new_blob = text.partition(b" ")[2], new.partition(b" ")[2]
                    if old_blob and new_blob and len(new_blob) >= 8:
                        mine[new_blob] = old_blob
                    text = new
            elif text[:6].lower() == b"basic ":
                return None
            if key not in silent:
                lines += (key, b": ", text, b"\r\n")
        lines.append(self.tail)
        out = b"".join(lines)
        # As wire._lines: only its lines' ends (none inside a value; else the parsed way
        # refuses it).
        ends = (len(lines) - 2) // 4 + self.extra + 2
        if out.count(b"\r") != ends or out.count(b"\n") != ends or b"\0" in out:
            return None
        echoes.update(mine)
        return out, ({secret.name} | self.used) if mine else self.used


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
    if 0 in reason or 1 in reason or 2 in reason:
        # NUL too: llhttp lets one through in a reason; joined, it became `: ` and went out,
        # where wire.response_head refuses it (atkpass); the parsed way refuses it still.
        # Bytes as ints: `b"\x01" in` took ~150 ns each (a buffer taken per test), these ~14.
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
