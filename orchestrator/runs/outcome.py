"""Why a shell-arm command failed, and the per-interpreter fold of the ledger (seed D30).

Nothing here runs at exec time: the ledger already holds each result's exit code
and output, so the class is read back from them (a class written at exec time
would be a second authority for the same fact). Each interpreter's messages live
only in this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SH_FAMILY: frozenset[str] = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
REPLACEMENT = "\ufffd"
# Results written before `interpreter` existed all ran the "system" shell (seed D30).
UNNAMED = "system"

# backgrounded: no exit code when it was recorded; exceptional: refused or never
# started, so no interpreter ran (a refused pwsh line carries shell: true but no
# `interpreter`, and must not count as a "system" call).
_NOT_RUN = frozenset({"backgrounded", "exceptional"})

_CMD_NOT_FOUND = 9009
_SH_NOT_FOUND = 127
_SH_SYNTAX = 2
_CMD_SYNTAX_TEXT = ("was unexpected at this time.", "The syntax of the command is incorrect.")


class FailureClass(StrEnum):
    COMMAND_NOT_FOUND = "command_not_found"
    SYNTAX = "syntax"
    ENCODING = "encoding"

    @classmethod
    def of(
        cls, interpreter: str, exit_code: int | None, stdout: str, stderr: str
    ) -> FailureClass | None:
        """Classify one shell-arm result; None is "unclassified".

        The order, first match wins (seed D30: exit code first, then the
        language-independent error ids, and only last the English text; the
        classes are listed command_not_found, syntax, encoding):

        0. exit code 0 -> None, always: a successful command is no failure, even
           with U+FFFD in its output. No exit code (None: killed, or never
           reaped) -> None: there is no finished command to judge.
        1. exit code: cmd 9009 -> command_not_found; sh family 127 ->
           command_not_found; sh family 2 with "syntax error" in stderr -> syntax.
        2. error ids: pwsh stderr with ``CommandNotFoundException`` ->
           command_not_found; with ``ParserError`` -> syntax.
        3. English text: cmd stderr with "was unexpected at this time." or "The
           syntax of the command is incorrect." -> syntax. cmd's messages follow
           the Windows display language, so on a non-English Windows its syntax
           errors stay unclassified; no table of translations is kept here.
        4. U+FFFD anywhere in stdout or stderr -> encoding. It is last: the text
           was decoded as UTF-8 with replacement, so U+FFFD means bytes in another
           code page (cmd on a Chinese Windows writes 936), or a program that
           printed U+FFFD itself (the over-counting side). Any sharper signal
           above names the failure better, so it wins.

        sh family: sh, bash, dash, zsh, ksh, ash, busybox. "syntax error" is
        matched without regard to case because dash, Debian's /bin/sh, writes
        "Syntax error: end of file unexpected" (dash 0.5.12), where bash and
        busybox write "syntax error".
        """
        if exit_code is None or exit_code == 0:
            return None
        name = interpreter.lower()
        sh = name in SH_FAMILY
        if name == "cmd" and exit_code == _CMD_NOT_FOUND:
            return cls.COMMAND_NOT_FOUND
        if sh and exit_code == _SH_NOT_FOUND:
            return cls.COMMAND_NOT_FOUND
        if sh and exit_code == _SH_SYNTAX and "syntax error" in stderr.lower():
            return cls.SYNTAX
        if name == "pwsh":
            if "CommandNotFoundException" in stderr:
                return cls.COMMAND_NOT_FOUND
            if "ParserError" in stderr:
                return cls.SYNTAX
        if name == "cmd" and any(text in stderr for text in _CMD_SYNTAX_TEXT):
            return cls.SYNTAX
        if REPLACEMENT in stdout or REPLACEMENT in stderr:
            return cls.ENCODING
        return None


def _is_shell_result(result: Mapping[str, Any]) -> bool:
    # Only shell-arm results are folded: a program-arm result (argv, no shell) that
    # exits 127 says nothing about a shell. Results carrying `interpreter` are shell
    # results by construction; older ones (before `interpreter`) are recognised by
    # `shell: true`.
    return result.get("interpreter") is not None or result.get("shell") is True


@dataclass
class Row:
    """One interpreter's counts: calls, and failures per class."""

    interpreter: str
    calls: int = 0
    failures: dict[FailureClass, int] = field(
        default_factory=lambda: dict.fromkeys(FailureClass, 0)
    )

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def share_failed(self) -> float:
        """Classified failures over calls (0.0 with no calls)."""
        return self.failed / self.calls if self.calls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "interpreter": self.interpreter,
            "calls": self.calls,
            **{cls.value: self.failures[cls] for cls in FailureClass},
            "share_failed": round(self.share_failed, 4),
        }


@dataclass
class ShellTally:
    """Folds results into calls and classified failures per interpreter.

    Counted: results of the shell arm only (they carry `interpreter`, or
    `shell: true` from before that key existed); one without `interpreter` counts
    under "system", the only interpreter there was. Not counted: backgrounded
    results (`outcome == "backgrounded"`: no exit code when recorded), exceptional
    ones (refused or never started: no interpreter ran), and results of the program
    arm (a program exiting 127 says nothing about a shell).
    """

    rows: dict[str, Row] = field(default_factory=dict)

    def absorb(self, result: Mapping[str, Any]) -> FailureClass | None:
        """Count one result; returns its class (None: unclassified or not counted)."""
        if result.get("outcome") in _NOT_RUN or not _is_shell_result(result):
            return None
        name = str(result.get("interpreter") or UNNAMED)
        row = self.rows.setdefault(name, Row(name))
        row.calls += 1
        exit_code = result.get("exit_code")
        found = FailureClass.of(
            name,
            exit_code if isinstance(exit_code, int) else None,
            _text(result.get("stdout")),
            _text(result.get("stderr")),
        )
        if found is not None:
            row.failures[found] += 1
        return found

    def absorb_all(self, results: Iterable[Mapping[str, Any]]) -> ShellTally:
        for result in results:
            self.absorb(result)
        return self

    def sorted_rows(self) -> list[Row]:
        return [self.rows[name] for name in sorted(self.rows)]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
