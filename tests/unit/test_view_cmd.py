"""`sprawl-orch view --shells` through click's CliRunner, over a real ledger file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch.cli import main
from sprawl_orch.runs.ledger import Ledger

FFFD = "\ufffd"


def _ledger(path: Path) -> Ledger:
    ledger = Ledger(path)
    shell = {
        "arm": "copied_tree",
        "outcome": "settled",
        "shell": True,
        "stdout": "",
        "stderr": "",
        "env": ["PATH"],
    }
    for fields in (
        {"interpreter": "sh", "exit_code": 127, "stderr": "sh: 1: nope: not found"},
        {"interpreter": "sh", "exit_code": 2, "stderr": "sh: 1: Syntax error: end of file"},
        {"interpreter": "sh", "exit_code": 0},
        {"interpreter": "sh", "exit_code": 0},
        {"interpreter": "pwsh", "exit_code": 1, "stderr": "ParserError"},
        {"interpreter": "cmd", "exit_code": 1, "stdout": FFFD},
        {"interpreter": "cmd", "exit_code": 0},
        {"exit_code": 1, "stderr": FFFD},  # before `interpreter`: counted as "system"
        {"interpreter": "sh", "outcome": "backgrounded", "exit_code": None, "handle": "h"},
        {"interpreter": None, "shell": False, "exit_code": 127},  # the program arm
    ):
        ledger.append({**shell, **fields})
    return ledger


def _invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    done = runner.invoke(main, ["view", *args], env={"COLUMNS": "200", **(env or {})})
    return done.exit_code, done.stdout, done.stderr


def test_json_is_one_line_per_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    with path.open("ab") as handle:
        handle.write(b'{"torn": ')  # a writer that died mid-line
    code, out, err = _invoke("--shells", "--json", "--ledger", str(path))
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [
        {
            "interpreter": "cmd",
            "calls": 2,
            "command_not_found": 0,
            "syntax": 0,
            "encoding": 1,
            "share_failed": 0.5,
        },
        {
            "interpreter": "pwsh",
            "calls": 1,
            "command_not_found": 0,
            "syntax": 1,
            "encoding": 0,
            "share_failed": 1.0,
        },
        {
            "interpreter": "sh",
            "calls": 4,
            "command_not_found": 1,
            "syntax": 1,
            "encoding": 0,
            "share_failed": 0.5,
        },
        {
            "interpreter": "system",
            "calls": 1,
            "command_not_found": 0,
            "syntax": 0,
            "encoding": 1,
            "share_failed": 1.0,
        },
    ]
    assert "1 torn or invalid line(s)" in err


def test_table_has_the_columns_counts_and_caption(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _ledger(path)
    code, out, err = _invoke("--shells", "--ledger", str(path))
    assert code == 0, err
    for header in (
        "interpreter",
        "calls",
        "command_not_found",
        "syntax",
        "encoding",
        "share failed",
    ):
        assert header in out
    sh_row = next(line for line in out.splitlines() if " sh " in line)
    assert [cell.strip() for cell in sh_row.split("│")[1:-1]] == ["sh", "4", "1", "1", "0", "50.0%"]
    flat = " ".join(out.split())
    assert 'cmd\'s syntax errors on a non-English Windows fall into "unclassified"' in flat
    assert err == ""


def test_default_ledger_comes_from_state_config(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.jsonl"
    _ledger(path)
    config = tmp_path / "sprawl.toml"
    config.write_text(f'[state]\nledger = "{path}"\n', encoding="utf-8")
    code, out, err = _invoke("--shells", "--json", "--config", str(config))
    assert code == 0, err
    assert [json.loads(line)["interpreter"] for line in out.splitlines()] == [
        "cmd",
        "pwsh",
        "sh",
        "system",
    ]


def test_default_ledger_under_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ledger(tmp_path / "xdg" / "sprawl-orch" / "ledger.jsonl")
    monkeypatch.chdir(tmp_path)  # no sprawl.toml here: all defaults
    code, out, err = _invoke("--shells", "--json", env={"XDG_STATE_HOME": str(tmp_path / "xdg")})
    assert code == 0, err
    assert len(out.splitlines()) == 4


def test_empty_or_missing_ledger_prints_no_rows(tmp_path: Path) -> None:
    code, out, err = _invoke("--shells", "--json", "--ledger", str(tmp_path / "none.jsonl"))
    assert (code, out, err) == (0, "", "")


def test_a_view_must_be_chosen(tmp_path: Path) -> None:
    code, _out, err = _invoke("--ledger", str(tmp_path / "x.jsonl"))
    assert code == 2
    assert "choose a view: --shells" in err


def test_bad_config_is_reported_not_raised(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text('[state]\nledgr = "x"\n', encoding="utf-8")
    code, _out, err = _invoke("--shells", "--config", str(config))
    assert code == 125  # a refusal, as on every subcommand (cli/common.py)
    assert "E_CONFIG_INVALID" in err


def test_view_is_registered_in_the_main_group() -> None:
    code, out, _err = _invoke("--help")
    assert code == 0
    assert "--shells" in out
    done = CliRunner().invoke(main, ["--help"])
    assert "view" in done.stdout
