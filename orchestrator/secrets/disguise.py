"""The value as servers write it back, matched by pattern rather than listed: each byte not
a letter or digit escaped any common way (percent with either hex case, once or encoded
again; JSON's \\uXXXX, \\xHH, a backslash before it, each escaped again; HTML's &#NN; /
&#xHH; / an HTML5 name), any letter case; and base64 at each of the three alignments a
prefix can give it.

A list of exact forms missed each framework that escapes otherwise (tests/secrets/
test_attacks_forms.py): ASP.NET Core's JSON writes '+' as \\u002B, Go's html/template as &#43;,
Python's quote() keeps '/', Go's PathEscape keeps '+' and '=', hex may be lower-case, an error
page may shout the value in capitals. And a Basic blob is `base64(user:value)`: the run knew
only the blobs it sent itself, so a stored echo of another command's (or the caller's own git)
request came back one `base64 -d` away. Where the value sits in base64's 3-byte groups depends
on the prefix's length mod 3, and for each of the three the characters that encode only the
value's bits are fixed whatever the prefix; the one or two characters that mix the prefix's
bits with the value's are matched by the set of letters with those value bits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from html.entities import html5


# HTML5's names for ASCII characters other than letters and digits (`&sol;`, `&lowbar;`,
# `&plus;`, `&equals;`, `&colon;`, ...; several for some). PHP's htmlentities with ENT_HTML5
# writes each so: a debug page escaping the request's headers that way gave the command the
# value through html.unescape (tests/secrets/test_attacks_wrapped.py).
def _html5_names() -> dict[int, tuple[bytes, ...]]:
    out: dict[int, tuple[bytes, ...]] = {}
    for name, char in html5.items():
        if name.endswith(";") and len(char) == 1 and char.isascii() and not char.isalnum():
            out[ord(char)] = (*out.get(ord(char), ()), b"&" + name.encode())
    return out


_NAMED = _html5_names()
# The longest one byte of the value becomes: `&#x0000HH;` (HTML allows leading zeros; four
# are what real escapers write at most) or its longest HTML5 name (`&DiacriticalGrave;`);
# `\\\\u00HH` and `%2525HH` are shorter.
_WIDEST = 10


def _widest(byte: int) -> int:
    return max([_WIDEST, *map(len, _NAMED.get(byte, ()))])


_STD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_URL = _STD[:62] + b"-_"
# Fewer base64 letters than this fixed by the value alone would match unrelated base64 (an
# image inlined in JSON) too often to be worth scrubbing.
_MIN_CORE = 8
# A marker shorter than this is found in most bodies: the pattern then runs everywhere.
_MIN_MARKER = 4


def _escapes_of(char: bytes) -> bytes:
    r"""A standard base64 letter that is not a letter or digit, as servers escape it around the
    blob: PHP's json_encode writes '/' as \/, ASP.NET Core's JSON '+' as \u002B, a URL's query
    %2B / %2F, HTML &#43; (escaped()'s forms for one byte). The pattern matched only the
    literal letter: a stored Basic blob of a value with '?', '>' or '~' (whose base64 holds
    '+' or '/') came back so escaped, unscrubbed (tests/secrets/test_attacks_scrub.py)."""
    hx = b"".join(b"[%c%c]" % (c, bytes([c]).upper()[0]) for c in b"%02x" % char[0])
    forms = [
        rb"(?:\\{1,4})?" + re.escape(char),
        b"%(?:25){0,2}" + hx,
        rb"\\{1,4}[uU]00" + hx,
        rb"\\{1,4}[xX]" + hx,
        b"&#0{0,4}%d;" % char[0],
        b"&#[xX]0{0,4}" + hx + b";",
        *_NAMED[char[0]],  # &plus; &sol;
    ]
    return b"(?:" + b"|".join(forms) + b")"


# What each may be written as (the standard alphabet's: '-' and '_' are never escaped), and
# the longest of those (four backslashes and u002B, or &#x00002B;): what a stream holds back.
_ESCAPED = {c: _escapes_of(c) for c in (b"+", b"/")}
_WIDEST_LETTER = 10


@dataclass(frozen=True, slots=True)
class Disguise:
    """One compiled pattern, what a match becomes, and the longest match (a stream holds back
    that many bytes minus one). `markers`: pieces every match holds one of as it is (lower-cased
    first when `fold`): the pattern runs only where one is there. A pattern run on every byte
    of a body scanned 21 MB/s against 3 GB/s for the exact forms; with the marker, a body
    without the value costs one `in` (one `lower()` besides for the escaped form)."""

    pattern: re.Pattern[bytes]
    stand_in: bytes
    widest: int
    # Pieces of which every match holds at least one as it is: one for the escaped form; the
    # base64 core cut in pieces (a line end may cut one of them, never all: _markers_of).
    markers: tuple[bytes, ...] = ()
    fold: bool = False
    # base64 only: its letters, the bits of the first matched letter that are the prefix's
    # (kept, so `user:` still decodes), and the padding the stand-in needs at the blob's end.
    alphabet: bytes = b""
    prefix_bits: int = 0
    padding: int = 0
    # The shortest text a match can be: a shorter piece (a URL path, most headers, a small
    # body's read) is skipped before the marker is looked for, one len() instead of a lower().
    shortest: int = 0

    def sub(self, data: bytes, lowered: bytes | None = None) -> tuple[bytes, int]:
        """`data` with every match replaced, and how many; `lowered`: `data.lower()` when
        the caller has it (one lower() for all of a run's disguises, not one each)."""
        if self._absent(data, lowered):
            return data, 0
        return self.pattern.subn(self._swap if self.alphabet else self.stand_in, data)

    def found_in(self, data: bytes, lowered: bytes | None = None) -> bool:
        if self._absent(data, lowered):
            return False
        return self.pattern.search(data) is not None

    def _absent(self, data: bytes, lowered: bytes | None) -> bool:
        """Too short, or the marker is not there: no match can be."""
        if len(data) < self.shortest:
            return True
        if not self.markers:
            return False
        if self.fold:
            return not held(self.markers, data.lower() if lowered is None else lowered)
        return not held(self.markers, data)

    def _swap(self, match: re.Match[bytes]) -> bytes:
        out = bytearray(self.stand_in)
        if self.prefix_bits:
            theirs = self.alphabet.index(_letter_of(match.group("first")))
            out[0] = self.alphabet[(theirs & self.prefix_bits) | self.alphabet.index(out[:1])]
        if match.group("end") is not None:  # the value ended the blob: the stand-in's padding
            out += b"=" * self.padding
        return bytes(out)


class Marked(tuple[Disguise, ...]):
    """A run's disguises, in order, with their markers gathered once: a text that holds none
    of them (most answers' heads and bodies) is told apart in one `in` per distinct marker,
    not a turn of swap.scrub_found's loop per disguise (7 for one secret; the base64 ones at
    the standard and the URL-safe alphabet share a marker unless it holds '-' or '_')."""

    plain: tuple[bytes, ...]
    folded: tuple[bytes, ...]
    marked: bool

    def __new__(cls, disguises: Iterable[Disguise]) -> Marked:
        self = super().__new__(cls, disguises)
        self.plain = tuple(dict.fromkeys(m for d in self if not d.fold for m in d.markers))
        self.folded = tuple(dict.fromkeys(m for d in self if d.fold for m in d.markers))
        # A disguise without a marker runs its pattern on every text: no shortcut then.
        self.marked = all(d.markers for d in self)
        return self

    def none_in(self, data: bytes) -> bool:
        """Whether no disguise can match `data`: each one's marker is absent (as each
        Disguise._absent would say, over `data` as it is, before any replacement)."""
        if not self.marked:
            return False
        for marker in self.plain:
            if marker in data:
                return False
        if self.folded:
            lowered = data.lower()
            for marker in self.folded:
                if marker in lowered:
                    return False
        return True


def held(markers: tuple[bytes, ...], data: bytes) -> bool:
    """Whether any of `markers` is in `data` (a loop: any() over a generator costs a frame
    per call, on every answer's head and body)."""
    for marker in markers:  # noqa: SIM110
        if marker in data:
            return True
    return False


def _escaped_byte(byte: int) -> bytes:
    if bytes([byte]).isalnum():
        # No escaper writes a letter or a digit otherwise (percent-encoding leaves them
        # unreserved, JSON and HTML have no need): kept literal, they give the marker.
        return re.escape(bytes([byte]))
    hx = b"%02x" % byte
    # Up to four backslashes: an escape escaped again (a stored echo served as a JSON string
    # inside JSON: PHP's \/ became \\\/, \u002B became \\u002B).
    slashes = rb"\\{1,4}"
    forms = [
        b"(?:" + slashes + b")?" + re.escape(bytes([byte])),  # as is, or backslash-escaped
        b"%(?:25){0,2}" + hx,  # percent-encoding, up to thrice (either hex case: see below)
        slashes + b"u00" + hx,  # JSON, JavaScript
        slashes + b"x" + hx,  # JavaScript, Python reprs
        b"&#0{0,4}" + str(byte).encode() + b";",  # HTML decimal
        b"&#x0{0,4}" + b"%x" % byte + b";",  # HTML hexadecimal
    ]
    if byte == ord(" "):
        forms.append(rb"\+")  # a query's form encoding
    forms += [re.escape(name) for name in _NAMED.get(byte, ())]  # &amp;, &sol;, &lowbar; ...
    return b"(?:" + b"|".join(forms) + b")"


def escaped(value: bytes, stand_in: bytes) -> Disguise:
    """The value with any of its bytes escaped any of the ways above, in any letter case."""
    body = b"".join(_escaped_byte(b) for b in value)
    runs = re.findall(rb"[A-Za-z0-9]+", value)
    marker = max(runs, key=len, default=b"").lower()
    return Disguise(
        re.compile(body, re.IGNORECASE),
        stand_in,
        # What a stream holds back: a letter or digit is one byte, only the rest widen (a
        # token of letters and a few '-' holds back little more than the exact forms did).
        sum(1 if bytes([b]).isalnum() else _widest(b) for b in value),
        markers=(marker,) if len(marker) >= _MIN_MARKER else (),
        fold=True,
        # Every byte's shortest form is itself (a letter, or the byte without a backslash).
        shortest=len(value),
    )


def _letters(data: bytes, start: int, end: int, alphabet: bytes, exact: bool) -> list[bytes]:
    """The base64 letters covering bits [start, end) of `data`: exact where all six bits are in
    the range, else the class of letters that agree on the bits that are."""
    number, total = int.from_bytes(data, "big"), 8 * len(data)
    out: list[bytes] = []
    for first in range(start // 6 * 6, end, 6):
        six = (number >> (total - first - 6)) & 63
        lo, hi = max(first, start), min(first + 6, end)
        if lo == first and hi == first + 6:
            letter = alphabet[six : six + 1]
            out.append(letter if exact else _ESCAPED.get(letter, re.escape(letter)))
            continue
        mask = sum(1 << (first + 5 - bit) for bit in range(lo, hi))
        if exact:  # the stand-in: the known bits, zeros elsewhere
            out.append(alphabet[six & mask : (six & mask) + 1])
            continue
        same = bytes(alphabet[k] for k in range(64) if k & mask == six & mask)
        rest = [_ESCAPED[bytes([c])] for c in same if bytes([c]) in _ESCAPED]
        out.append(b"(?:" + b"|".join([b"[" + re.escape(same) + b"]", *rest]) + b")")
    return out


def _letter_of(text: bytes) -> bytes:
    """The base64 letter a matched letter stands for: itself, or the '+' or '/' it escapes."""
    if len(text) == 1:
        return text
    low = text.lower()
    return b"+" if low.endswith((b"+", b"2b", b"2b;", b"43;")) else b"/"


# Base64 as encoders write it in lines: Ruby's Base64.encode64 every 60 letters, PEM and
# OpenSSL 64, MIME and Python's encodebytes 76, each line ended by LF or CRLF, written `\n` in
# a JSON string (escaped again inside JSON, `\\n`). A line end between two of the value's
# letters hid it from a pattern of contiguous letters, and `base64 -d` skips it
# (tests/secrets/test_attacks_wrapped.py). _LINE: the shortest line those write.
_BREAK = rb"(?:\r?\n|(?:\\{1,2}r)?\\{1,2}n)?"
_WIDEST_BREAK = 6
_LINE = 60


def _markers_of(core: bytes) -> tuple[bytes, ...]:
    """Pieces of the letters the value alone fixes (`core`), none holding a letter a server
    escapes ('+' and '/' may come back as %2B, \\/, ...: a marker holding one was absent from
    the escaped blob, and the pattern never ran), one more than the line ends the core's
    letters can hold: a line end cuts at most one piece, so every match holds one whole.
    () when the pieces would be shorter than _MIN_MARKER (the pattern runs on every text)."""
    need = len(core) // _LINE + 2
    pieces = sorted(re.split(rb"[+/]", core), key=len, reverse=True)
    while len(pieces[:need]) < need or len(pieces[need - 1]) < _MIN_MARKER:
        longest = pieces.pop(0)
        if len(longest) < 2 * _MIN_MARKER:
            return ()
        half = len(longest) // 2
        pieces = sorted([*pieces, longest[:half], longest[half:]], key=len, reverse=True)
    return tuple(pieces[:need])


def in_base64(value: bytes, stand_in: bytes) -> list[Disguise]:
    """The value inside any base64 text (standard or URL-safe, any prefix and suffix):
    six patterns, each replaced by the stand-in encoded at the same alignment."""
    out: list[Disguise] = []
    for alphabet in (_STD, _URL):
        for shift in range(3):
            start = 8 * shift
            pad = b"\0" * shift
            letters = _letters(
                pad + value + b"\0\0", start, start + 8 * len(value), alphabet, False
            )
            known = _letters(pad + value + b"\0\0", start, start + 8 * len(value), alphabet, True)
            mixed = [part.startswith(b"(?:[") for part in letters]  # shares bits with the prefix
            if mixed.count(False) < _MIN_CORE:
                continue
            instead = b"".join(
                _letters(pad + stand_in + b"\0\0", start, start + 8 * len(stand_in), alphabet, True)
            )
            core = b"".join(k for k, m in zip(known, mixed, strict=True) if not m)
            # Then its padding, and whether the blob ends there: no letter follows, nor one
            # on the next line unless padding ended it.
            letter = b"[" + re.escape(alphabet) + b"]"
            after = b"(?P<pad>=*)(?P<end>(?!" + letter + b"|(?<!=)" + _BREAK[:-1] + letter + b"))?"
            pattern = re.compile(
                b"(?P<first>" + letters[0] + b")" + _BREAK + _BREAK.join(letters[1:]) + after
            )
            if any(d.pattern == pattern for d in out):  # no '+' or '/' in it: both alike
                continue
            out.append(
                Disguise(
                    pattern,
                    instead,
                    # An escaped '+' or '/' is up to ten characters, any other letter one; a
                    # line end after each.
                    sum(_WIDEST_LETTER if b"|" in part else 1 for part in letters)
                    + _WIDEST_BREAK * (len(letters) - 1)
                    + 2,
                    markers=_markers_of(core),
                    alphabet=alphabet,
                    prefix_bits=(0xFC0 >> (8 * shift % 6)) & 63 if shift else 0,
                    padding=-(shift + len(stand_in)) % 3,
                    shortest=len(letters),  # one character each; the padding may be none
                )
            )
    return out


def disguises(value: bytes, stand_in: bytes) -> list[Disguise]:
    return [escaped(value, stand_in), *in_base64(value, stand_in)]
