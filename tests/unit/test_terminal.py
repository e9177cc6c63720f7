"""Terminal safety (issue 22, orchestrator/terminal.py): attacker-chosen text in sprawl-orch's
own lines is shown escaped; JSON keeps the data exact; the command a person is given pastes
back to the very name; the command's own output stays byte-exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sprawl_orch.changes.apply_protect import quote
from sprawl_orch.core.terminal import json_safe, line_safe, safe

HOSTILE = [
    "osc52-\x1b]52;c;cHduZWQ=\x07",
    "csi-\x1b[2J\x1b[H",
    "c1-\u009b31m",
    "bidi-\u202etxt.exe",
    "cr-applied\rrefused",
    "bs-x\x08y",
    "nul-\x00-del-\x7f",
    "ls-\u2028",
]
RAW = ("\x1b", "\x07", "\r", "\x08", "\x00", "\x7f", "\u009b", "\u202e", "\u2028")


@pytest.mark.parametrize("text", HOSTILE)
def test_control_characters_are_shown_escaped(text: str) -> None:
    out = safe(text)
    assert not any(ch in out for ch in RAW), repr(out)
    assert out.isprintable()


def test_escapes_are_readable() -> None:
    assert safe("a\x1b[31mb") == "a\\e[31mb"
    assert safe("x\u009by") == "x\\x9by"
    assert safe("x\u202ey") == "x\\u202ey"
    assert safe("\udcff") == "\\xff"  # a byte that is not UTF-8 (os.fsdecode's surrogate)
    assert safe("plain café ✓") == "plain café ✓"


def test_a_diff_line_keeps_tabs_and_its_newline() -> None:
    assert line_safe("+a\tb\x1b[2J\n") == "+a\tb\\e[2J\n"


def test_json_keeps_the_data_and_escapes_c1_and_bidi() -> None:
    data = {"path": "".join(HOSTILE)}
    text = json_safe(json.dumps(data, ensure_ascii=False))
    assert not any(ch in text for ch in RAW)
    assert json.loads(text) == data


@pytest.mark.parametrize("text", [*HOSTILE[:-2], "it's \\ fine"])
def test_the_command_given_pastes_back_exactly(text: str) -> None:
    word = quote(text)
    assert not any(ch in word for ch in RAW)
    back = subprocess.run(
        ["bash", "-c", f"printf %s {word}"], capture_output=True, check=True
    ).stdout
    assert back == text.encode()


def test_the_commands_own_output_stays_byte_exact(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\n[state]\ndir = "{tmp_path / "state"}"\n'
    )
    payload = "\x1b]52;c;cHduZWQ=\x07\u009b\u202e\r\n"
    done = subprocess.run(
        [
            *(sys.executable, "-c", "from sprawl_orch.cli import main; main()", "exec"),
            *("-C", str(tree), "--config", str(tmp_path / "sprawl.toml"), "--shell"),
            f"printf '{payload}'; touch \"$(printf 'n\\033[2Jx')\"",
        ],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == payload.encode()  # the command's output: untouched
    said = done.stderr.decode()  # sprawl-orch's lines: statement, changes
    assert "sprawl-orch:" in said and not any(ch in said for ch in RAW)
