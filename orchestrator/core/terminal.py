"""Text a command chose, made safe for the person's terminal (issue 22).

A file name, a link target, a config value, an error a command provoked: any of them may hold
ESC (CSI/OSC sequences: recolour, retitle, OSC 52 writes the clipboard, OSC 8 hides a link),
the single-byte CSI U+009B, CR or backspace (overwrite what was printed: a refusal turned into
"applied"), or a bidi override (U+202E shows `exe.txt` for `txt.exe`). sprawl-orch's own lines
(statement, changes, apply, dry-run headers, refusals) pass such text through ``shown``, which
writes each as a visible backslash escape. The command's own output is never touched: it is
byte-exact by contract, like `docker run`'s.

JSON escapes C0 itself but leaves U+0080-U+009F and the bidi controls as they are (a
terminal still acts on U+009B); ``json_safe`` writes those as ``\\uXXXX``, which decodes to
the very same string: the data is exact, only the bytes on the wire change.
"""

from __future__ import annotations

import re

# C0 but TAB and LF are handled below; DEL; C1; bidi embeddings/overrides/isolates and marks;
# line/paragraph separators (a new line to a terminal-ish viewer).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_UNSAFE_IN_JSON = re.compile(f"[\\x7f-\\x9f{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\x1b": "\\e"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str | None) -> str | None:
    """``text`` with every control character shown as a backslash escape, and bytes that are
    not UTF-8 (kept by os.fsdecode as surrogates) as ``\\xNN``."""
    if text is None:
        return None
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _UNSAFE.sub(_escape, text)


def safe(text: str) -> str:
    """``shown`` for a value known not to be None."""
    out = shown(text)
    assert out is not None
    return out


def line_safe(text: str) -> str:
    """One line of a diff body: its content shown safely, a final newline and TABs kept."""
    body, nl = (text[:-1], "\n") if text.endswith("\n") else (text, "")
    return "\t".join(safe(part) for part in body.split("\t")) + nl


def json_safe(text: str) -> str:
    """A JSON document with C1 controls and bidi marks written as ``\\uXXXX`` (they only occur
    inside strings, where that escape means the same character)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)
