"""What is swapped where, as pure functions over bytes (tested without a network).

Headers only: a bound secret's placeholder in any request header's value becomes the value,
also inside `Basic` credentials (git and pip put `user:token` there, base64-encoded). The
URL, the query and the body are never rewritten: a placeholder there goes out as it is and is
counted. A header the config names (`header` + `format`, or `basic_user`) is set outright.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, quote_plus

from sprawl_orch.secrets.disguise import Disguise, Marked, held


@dataclass(frozen=True)
class Bound:
    """One secret as the proxy uses it for one run."""

    name: str
    placeholder: bytes
    value: bytes = field(repr=False)  # never in a repr, a log line or a traceback's locals
    header: bytes | None = None  # set outright on every request to a bound host
    format: str = "{value}"
    basic_user: bytes | None = None

    def forms(self) -> tuple[bytes, ...]:
        """The value as an echoing upstream could send it back: raw, and every credential
        form the proxy itself puts on the wire (scrubbed from responses)."""
        text = self.value.decode()
        # As servers quote it back: percent-encoded (a redirect's Location, a query) and JSON
        # with '/' escaped (PHP's json_encode); a value with '/', '+' or '=' (a standard
        # base64 key) came back so, unscrubbed (tests/secrets/test_attacks.py).
        out = [
            self.value,
            *{
                form
                for form in (
                    quote(text, safe="").encode(),
                    quote_plus(text, safe="").encode(),
                    self.value.replace(b"/", b"\\/"),
                )
                if form != self.value
            },
        ]
        if self.header is not None:
            out.append(self.format.format(value=self.value.decode()).encode())
        if self.basic_user is not None:
            out.append(base64.b64encode(self.basic_user + b":" + self.value))
        return tuple(out)


def _basic(value: bytes) -> bytes | None:
    scheme, _, blob = value.partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        return base64.b64decode(blob.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def holds(value: bytes, placeholder: bytes) -> bool:
    """Whether a header value carries `placeholder`, plainly or inside Basic credentials."""
    if placeholder in value:
        return True
    decoded = _basic(value)
    return decoded is not None and placeholder in decoded


def swap_value(value: bytes, secret: Bound) -> bytes:
    if secret.placeholder in value:
        return value.replace(secret.placeholder, secret.value)
    decoded = _basic(value)
    if decoded is not None and secret.placeholder in decoded:
        swapped = decoded.replace(secret.placeholder, secret.value)
        return value.partition(b" ")[0] + b" " + base64.b64encode(swapped)
    return value


def swap_headers(
    headers: Iterable[tuple[bytes, bytes]], bound: Iterable[Bound], echoes: dict[bytes, bytes]
) -> tuple[list[tuple[bytes, bytes]], set[str]]:
    """The headers with every bound placeholder swapped and configured headers set; the
    names of the secrets put in. `echoes` gets each header value sent -> the one the command
    wrote (and a Basic blob's likewise): what a response echoing it is scrubbed back to."""
    out = [(k.lower(), v) for k, v in headers]
    used: set[str] = set()
    for secret in bound:
        swapped = []
        placeholder = secret.placeholder
        for key, value in out:
            # swap_value's two tests written out, the call made only for a value that can
            # hold the placeholder (plainly, or in a `Basic` blob: _basic's scheme test): most
            # of a request's headers hold neither, a call and a partition each before.
            if placeholder not in value and value[:6].lower() != b"basic ":
                swapped.append((key, value))
                continue
            new = swap_value(value, secret)
            if new != value:
                used.add(secret.name)
                echoes[new] = value
                old_blob, new_blob = value.partition(b" ")[2], new.partition(b" ")[2]
                if old_blob and new_blob and len(new_blob) >= 8:
                    echoes[new_blob] = old_blob
            swapped.append((key, new))
        out = swapped
        if secret.header is not None:
            text = secret.format.format(value=secret.value.decode()).encode()
            out = [(k, v) for k, v in out if k != secret.header] + [(secret.header, text)]
            used.add(secret.name)
        if secret.basic_user is not None:
            blob = base64.b64encode(secret.basic_user + b":" + secret.value)
            out = [(k, v) for k, v in out if k != b"authorization"]
            out.append((b"authorization", b"Basic " + blob))
            used.add(secret.name)
    return out, used


class Scanner:
    """Finds needles in a stream cut anywhere (a needle split over two chunks is found), and
    optionally replaces each with its stand-in (same scan, for scrubbing a response); the
    disguises (disguise.py: the value escaped or in base64, matched by pattern) likewise."""

    def __init__(self, needles: dict[bytes, bytes], disguises: Sequence[Disguise] = ()) -> None:
        self.needles = {k: v for k, v in needles.items() if k}
        self.disguises = tuple(disguises)
        self.folds = any(d.fold for d in self.disguises)
        widest = [len(k) for k in self.needles] + [d.widest for d in self.disguises]
        self.keep = max(widest, default=1) - 1
        self.tail = b""
        self.found: set[bytes] = set()

    def feed(self, data: bytes) -> bytes:
        """Scrubbed bytes safe to pass on now (a possible needle's start is held back)."""
        text = self.tail + data
        for needle, stand_in in self.needles.items():
            if needle in text:
                self.found.add(needle)
                text = text.replace(needle, stand_in)
        # After the exact forms: the run's own blob goes back to the command's, as it was.
        # One lower() for every folding disguise's marker, made again after a replacement.
        lowered = text.lower() if self.folds else None
        for disguise in self.disguises:
            text, count = disguise.sub(text, lowered)
            if count:
                self.found.add(disguise.stand_in)
                lowered = text.lower() if self.folds else None
        if self.keep <= 0:
            self.tail = b""
            return text
        cut = max(len(text) - self.keep, 0)
        self.tail = text[cut:]
        return text[:cut]

    def end(self) -> bytes:
        rest, self.tail = self.tail, b""
        return rest


def scrub(data: bytes, needles: dict[bytes, bytes], disguises: Sequence[Disguise]) -> bytes:
    """One whole piece (a header, a reason phrase) scrubbed."""
    return scrub_found(data, needles, disguises)[0]


def scrub_found(
    data: bytes, needles: dict[bytes, bytes], disguises: Sequence[Disguise]
) -> tuple[bytes, bool]:
    """One whole piece scrubbed as Scanner.feed then end would (the same replacements in the
    same order), and whether anything was: without a Scanner made per piece, nor a tail held
    back and joined again (a whole answer's body and its head are each one piece;
    benchmarks/secrets_proxy.py)."""
    found = False
    for needle, stand_in in needles.items():
        if needle and needle in data:
            found = True
            data = data.replace(needle, stand_in)
    if isinstance(disguises, Marked) and disguises.none_in(data):
        return data, found  # every disguise's marker absent: the loop below would skip each
    lowered: bytes | None = None
    for disguise in disguises:
        # Disguise._absent's test written out here: a call per disguise and piece was most
        # of what scrubbing an answer's head cost (7 disguises for one secret).
        if len(data) < disguise.shortest:
            continue
        markers = disguise.markers
        if disguise.fold:
            if lowered is None:
                lowered = data.lower()
            if markers and not held(markers, lowered):
                continue
        elif markers and not held(markers, data):
            continue
        data, count = disguise.sub(data, lowered)
        if count:
            found = True
            lowered = None
    return data, found


def scrub_head(
    reason: bytes,
    headers: list[tuple[bytes, bytes]],
    needles: dict[bytes, bytes],
    disguises: Sequence[Disguise],
) -> tuple[bytes, list[tuple[bytes, bytes]], bool]:
    """A response's reason and headers scrubbed in one pass over them joined by NUL, split
    back after: scrubbed piece by piece (each form and disguise over each name and value),
    an echoing upstream's head cost 40 us of the request's path, against 6 for the joined
    head (benchmarks/secrets_proxy.py). No header holds a NUL (wire.py refuses one), nothing
    put in for a match holds one (a placeholder, base64 letters) and no pattern matches one,
    so a piece holding one, or a match across two pieces, changes the count of NULs: then
    each piece is scrubbed on its own, as before. Not LF: base64 in lines is matched across
    a line end (disguise._BREAK), and a blob ending a header name read on into the value.
    And whether anything was: an echo in a head is one, as in a body (it went uncounted in
    `echoes_scrubbed`, tests/secrets/test_attacks_scrub.py)."""
    pieces = [reason]
    for key, value in headers:
        pieces += (key, value)
    scrubbed, found = scrub_found(b"\0".join(pieces), needles, disguises)
    if not found:
        return reason, headers, False
    parts = scrubbed.split(b"\0")
    if len(parts) != len(pieces):
        each = [scrub_found(piece, needles, disguises) for piece in pieces]
        parts, found = [part for part, _ in each], any(hit for _, hit in each)
    return parts[0], list(zip(parts[1::2], parts[2::2], strict=True)), found
