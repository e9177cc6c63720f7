"""FailureClass.of and ShellTally: every rule of seed D30, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from sprawl_orch.runs.outcome import SH_FAMILY, FailureClass, ShellTally

CNF = FailureClass.COMMAND_NOT_FOUND
SYN = FailureClass.SYNTAX
ENC = FailureClass.ENCODING
FFFD = "\ufffd"

# (id, interpreter, exit_code, stdout, stderr, expected)
CASES: list[tuple[str, str, int | None, str, str, FailureClass | None]] = [
    # exit 0 is never classified, whatever the output says
    ("exit0-sh-fffd", "sh", 0, FFFD, FFFD, None),
    ("exit0-cmd-syntax-text", "cmd", 0, "", "The syntax of the command is incorrect.", None),
    ("exit0-pwsh-ids", "pwsh", 0, "", "CommandNotFoundException ParserError", None),
    ("exit0-bash-syntax", "bash", 0, "", "syntax error", None),
    # no exit code: nothing finished to judge
    ("none-sh-fffd", "sh", None, FFFD, "", None),
    ("none-pwsh-id", "pwsh", None, "", "CommandNotFoundException", None),
    ("none-cmd-text", "cmd", None, "", "was unexpected at this time.", None),
    # cmd
    ("cmd-9009", "cmd", 9009, "", "'nope' is not recognized", CNF),
    ("cmd-unexpected", "cmd", 255, "", "( was unexpected at this time.", SYN),
    ("cmd-incorrect", "cmd", 1, "", "The syntax of the command is incorrect.", SYN),
    ("cmd-text-on-stdout-only", "cmd", 1, "was unexpected at this time.", "", None),
    (
        "cmd-german-syntax",
        "cmd",
        255,
        "",
        '"(" ist syntaktisch an dieser Stelle nicht verarbeitbar.',
        None,
    ),
    ("cmd-127-is-not-cmd-rule", "cmd", 127, "", "", None),
    ("cmd-9009-beats-fffd", "cmd", 9009, FFFD, FFFD, CNF),
    ("cmd-text-beats-fffd", "cmd", 1, FFFD, "The syntax of the command is incorrect.", SYN),
    ("cmd-cp936-fffd", "cmd", 1, "", "\ufffd\ufffd\ufffd\ufffd", ENC),
    ("cmd-plain-failure", "cmd", 1, "", "Access is denied.", None),
    # sh family: exit code first
    ("sh-127", "sh", 127, "", "sh: 1: nope: not found", CNF),
    ("bash-127", "bash", 127, "", "bash: nope: command not found", CNF),
    ("sh-127-without-text", "sh", 127, "", "", CNF),
    ("sh-2-syntax", "sh", 2, "", 'sh: 1: Syntax error: "then" unexpected', SYN),
    ("bash-2-syntax", "bash", 2, "", "bash: -c: line 1: syntax error near `then'", SYN),
    ("dash-2-syntax-capital", "dash", 2, "", "dash: 1: Syntax error: end of file", SYN),
    ("busybox-2-syntax", "busybox", 2, "", 'sh: syntax error: unexpected "then"', SYN),
    ("sh-2-without-syntax-text", "sh", 2, "", "ls: cannot access 'x'", None),
    ("sh-2-syntax-on-stdout-only", "sh", 2, "syntax error", "", None),
    ("sh-1-syntax-text", "bash", 1, "", "syntax error", None),
    ("zsh-parse-error", "zsh", 1, "", "zsh:1: parse error near `then'", None),
    ("sh-9009-is-cmd-only", "bash", 9009, "", "", None),
    ("sh-127-beats-fffd", "bash", 127, FFFD, "", CNF),
    ("sh-2-syntax-beats-fffd", "dash", 2, "", "Syntax error " + FFFD, SYN),
    ("sh-2-fffd-no-syntax", "sh", 2, "", FFFD, ENC),
    # sh-family rules don't read pwsh's ids or cmd's text
    ("sh-pwsh-id", "bash", 1, "", "CommandNotFoundException", None),
    ("sh-cmd-text", "sh", 1, "", "was unexpected at this time.", None),
    # pwsh: language-independent error ids
    ("pwsh-cnf", "pwsh", 1, "", "FullyQualifiedErrorId : CommandNotFoundException", CNF),
    ("pwsh-parser", "pwsh", 1, "", "+ FullyQualifiedErrorId : ParserError", SYN),
    ("pwsh-cnf-beats-parser", "pwsh", 1, "", "ParserError CommandNotFoundException", CNF),
    ("pwsh-cnf-beats-fffd", "pwsh", 1, FFFD, "CommandNotFoundException", CNF),
    ("pwsh-parser-beats-fffd", "pwsh", 1, "", "ParserError " + FFFD, SYN),
    ("pwsh-id-on-stdout-only", "pwsh", 1, "CommandNotFoundException", "", None),
    ("pwsh-127-not-sh", "pwsh", 127, "", "", None),
    ("pwsh-2-syntax-text-not-sh", "pwsh", 2, "", "syntax error", None),
    ("pwsh-cmd-text", "pwsh", 1, "", "The syntax of the command is incorrect.", None),
    ("pwsh-fffd", "pwsh", 1, "\ufffd", "", ENC),
    # U+FFFD anywhere, on a failed command, for any interpreter
    ("fffd-stdout", "sh", 1, "abc" + FFFD + "def", "", ENC),
    ("fffd-stderr", "bash", 3, "", FFFD, ENC),
    ("fffd-system-unnamed", "system", 1, FFFD, "", ENC),
    ("fffd-negative-exit", "sh", -9, FFFD, "", ENC),
    ("unknown-interpreter-127", "fish", 127, "", "fish: Unknown command", None),
    ("plain-failure", "sh", 1, "", "false", None),
]


@pytest.mark.parametrize(
    ("interpreter", "exit_code", "stdout", "stderr", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_failure_class_rules(
    interpreter: str,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    expected: FailureClass | None,
) -> None:
    assert FailureClass.of(interpreter, exit_code, stdout, stderr) is expected


SEED_SH_FAMILY = ("sh", "bash", "dash", "zsh", "ksh", "ash", "busybox")


@pytest.mark.parametrize("name", SEED_SH_FAMILY)
def test_every_sh_family_member(name: str) -> None:
    assert FailureClass.of(name, 127, "", "") is CNF
    assert FailureClass.of(name, 2, "", "x: syntax error") is SYN
    assert FailureClass.of(name.upper(), 2, "", "x: SYNTAX ERROR") is SYN
    assert FailureClass.of(name, 2, "", "x") is None


def test_sh_family_is_exactly_the_seeds() -> None:
    assert set(SEED_SH_FAMILY) == SH_FAMILY


def test_class_values_are_the_ledger_spellings() -> None:
    assert [c.value for c in FailureClass] == ["command_not_found", "syntax", "encoding"]


def _result(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "arm": "copied_tree",
        "outcome": "settled",
        "shell": True,
        "stdout": "",
        "stderr": "",
    }
    base.update(fields)
    return base


def test_tally_counts_per_interpreter_and_class() -> None:
    results = [
        _result(interpreter="sh", exit_code=127),
        _result(interpreter="sh", exit_code=2, stderr="Syntax error: x"),
        _result(interpreter="sh", exit_code=0, stdout=FFFD),
        _result(interpreter="sh", exit_code=1),
        _result(interpreter="pwsh", exit_code=1, stderr="ParserError"),
        _result(interpreter="pwsh", exit_code=1, stderr="CommandNotFoundException"),
        _result(interpreter="cmd", exit_code=1, stdout=FFFD),
    ]
    tally = ShellTally().absorb_all(results)
    rows = {row.interpreter: row.as_dict() for row in tally.sorted_rows()}
    assert rows == {
        "cmd": {
            "interpreter": "cmd",
            "calls": 1,
            "command_not_found": 0,
            "syntax": 0,
            "encoding": 1,
            "share_failed": 1.0,
        },
        "pwsh": {
            "interpreter": "pwsh",
            "calls": 2,
            "command_not_found": 1,
            "syntax": 1,
            "encoding": 0,
            "share_failed": 1.0,
        },
        "sh": {
            "interpreter": "sh",
            "calls": 4,
            "command_not_found": 1,
            "syntax": 1,
            "encoding": 0,
            "share_failed": 0.5,
        },
    }
    assert [row.interpreter for row in tally.sorted_rows()] == ["cmd", "pwsh", "sh"]


def test_tally_unnamed_results_count_as_system() -> None:
    tally = ShellTally()
    assert tally.absorb(_result(exit_code=1, stderr=FFFD)) is ENC
    tally.absorb(_result(exit_code=127))  # "system" is not sh-family: unclassified
    row = tally.rows["system"]
    assert (row.calls, row.failed, row.failures[ENC]) == (2, 1, 1)


@pytest.mark.parametrize(
    "result",
    [
        _result(interpreter="sh", outcome="backgrounded", handle="h-1", exit_code=None),
        _result(interpreter=None, outcome="exceptional", code="E_TOOL_UNAVAILABLE"),
        _result(shell=False, interpreter=None, exit_code=127),  # the program arm
        {"arm": "container", "outcome": "settled", "exit_code": 127},  # no shell key at all
    ],
    ids=["backgrounded", "exceptional", "program-arm", "no-shell-key"],
)
def test_tally_skips_what_is_not_a_shell_call(result: dict[str, Any]) -> None:
    tally = ShellTally()
    assert tally.absorb(result) is None
    assert tally.rows == {}


def test_tally_counts_interpreter_without_shell_key() -> None:
    tally = ShellTally()
    assert tally.absorb({"arm": "container", "interpreter": "sh", "exit_code": 127}) is CNF
    assert tally.rows["sh"].calls == 1


def test_tally_tolerates_odd_values() -> None:
    tally = ShellTally()
    assert tally.absorb(_result(interpreter="sh", exit_code="127", stdout=None)) is None
    assert tally.rows["sh"].calls == 1
    assert tally.rows["sh"].share_failed == 0.0
