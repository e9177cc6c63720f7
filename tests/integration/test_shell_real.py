"""Real shells, real failures: FailureClass reads what sh, bash, dash and busybox ash print.

Each line runs through `resolve_shell` + `shell_argv` exactly as the shell arm builds it,
with output decoded as results.py decodes it (UTF-8 with replacement). Then the same
lines go through the exec tool, the ledger and `view --shells`.

PowerShell 7 can't be installed on this project's machines (no Debian package; the
registries they reach carry no official build), so pwsh is only resolved for real
here: Missing where it is absent, Found with major >= 7 where it is present.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch.cli import main
from sprawl_orch.config import parse_config
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.shell import (
    Found,
    Missing,
    pwsh_major,
    require_shell,
    resolve_shell,
    shell_argv,
)
from sprawl_orch.runs.ledger import Ledger
from sprawl_orch.runs.outcome import FailureClass, ShellTally
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing

CNF = FailureClass.COMMAND_NOT_FOUND
SYN = FailureClass.SYNTAX
ENC = FailureClass.ENCODING

# (id, shell line, expected exit code, expected class)
LINES: list[tuple[str, str, int, FailureClass | None]] = [
    ("not-found", "sprawl_orch_no_such_command_7f3a", 127, CNF),
    ("not-found-in-pipeline-end", "true | sprawl_orch_no_such_command_7f3a", 127, CNF),
    ("syntax-if", "if then fi", 2, SYN),
    ("syntax-paren", "echo (", 2, SYN),
    ("exit-2-not-syntax", "echo 'grep: x: No such file' >&2; exit 2", 2, None),
    ("exit-2-syntax-on-stdout", "echo syntax error; exit 2", 2, None),
    ("bad-bytes-failed", r"printf '\377\376 cp936-ish\n'; exit 1", 1, ENC),
    ("bad-bytes-succeeded", r"printf '\377\376\n' >&2", 0, None),
    ("plain-failure", "exit 3", 3, None),
    ("success", "echo fine", 0, None),
]


def need(program: str) -> str:
    """The program's path; absent: a failure under CI, a skip on a developer's machine."""
    path = shutil.which(program)
    if path is None:
        missing(f"{program} is not installed (bash .ci/setup-engines installs it)")
    return path


def shell_for(name: str, tmp_path: Path) -> Found:
    """Resolve the "system" shell with $SHELL pointing at `name`, as the shell arm does."""
    if name == "sh":
        need("sh")
        environ: dict[str, str] = {"PATH": os.environ.get("PATH", "")}  # no $SHELL: /bin/sh
    elif name == "ash":
        # busybox picks its applet from argv[0]: a link named `ash` is busybox's ash.
        link = tmp_path / "ash"
        link.symlink_to(need("busybox"))
        environ = {"SHELL": str(link)}
    else:
        environ = {"SHELL": need(name)}
    return require_shell(resolve_shell(True, "system", environ))


def run_line(shell: Found, line: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        shell_argv(shell, line),
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
    )
    out = done.stdout.decode("utf-8", errors="replace")
    err = done.stderr.decode("utf-8", errors="replace")
    return done.returncode, out, err


@pytest.mark.parametrize("name", ["sh", "bash", "dash", "ash"])
@pytest.mark.parametrize(
    ("line", "exit_code", "expected"), [case[1:] for case in LINES], ids=[c[0] for c in LINES]
)
def test_real_shell_failures_are_classified(
    name: str, line: str, exit_code: int, expected: FailureClass | None, tmp_path: Path
) -> None:
    shell = shell_for(name, tmp_path)
    assert shell.interpreter == name
    code, out, err = run_line(shell, line, tmp_path)
    assert code == exit_code, (out, err)
    if expected is SYN:
        assert "syntax error" in err.lower(), err
    assert FailureClass.of(shell.interpreter, code, out, err) is expected, (code, out, err)


def test_bin_sh_is_resolved_without_dollar_shell() -> None:
    shell = resolve_shell(True, "system", {"PATH": os.environ.get("PATH", "")})
    assert shell == Found("/bin/sh", "sh")


def test_exec_tool_results_fold_in_the_ledger_view(tmp_path: Path) -> None:
    """exec tool (copied tree) -> results -> ledger -> `view --shells --json`."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "README").write_text("readme\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    offerings = Offerings(
        platform="linux", scratch=scratch, nice=shutil.which("nice"), ionice=shutil.which("ionice")
    )
    config = parse_config(
        {"sandbox": {"arm": "copied_tree"}, "state": {"dir": str(tmp_path / "state")}}
    )
    ledger = Ledger(tmp_path / "view.jsonl")
    bash = need("bash")
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    for environ, lines in (
        (base_env, ["sprawl_orch_no_such_command_7f3a", "if then fi", "cat README"]),
        ({**base_env, "SHELL": bash}, ["echo (", r"printf '\377'; exit 4"]),
    ):
        with ExecTool(config, tree, offerings=offerings, environ=environ) as tool:
            for line in lines:
                result = tool.exec(line, shell=True)
                assert result.outcome == "settled", result
                ledger.append(result.as_json_dict())
        # The program arm's 127 is no shell failure and must not be counted.
        with ExecTool(config, tree, offerings=offerings, environ=environ) as tool:
            program = tool.exec(["sh", "-c", "exit 127"])
            assert program.outcome == "settled" and program.interpreter is None
            ledger.append(program.as_json_dict())

    records = list(ledger.read())
    assert [r["interpreter"] for r in records] == ["sh", "sh", "sh", None, "bash", "bash", None]
    tally = ShellTally().absorb_all(records)
    assert {name: row.as_dict() for name, row in tally.rows.items()} == {
        "sh": {
            "interpreter": "sh",
            "calls": 3,
            "command_not_found": 1,
            "syntax": 1,
            "encoding": 0,
            "share_failed": round(2 / 3, 4),
        },
        "bash": {
            "interpreter": "bash",
            "calls": 2,
            "command_not_found": 0,
            "syntax": 1,
            "encoding": 1,
            "share_failed": 1.0,
        },
    }
    done = CliRunner().invoke(main, ["view", "--shells", "--json", "--ledger", str(ledger.path)])
    assert done.exit_code == 0, done.output
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        tally.rows["bash"].as_dict(),
        tally.rows["sh"].as_dict(),
    ]


def test_pwsh_resolves_for_real_and_never_falls_back() -> None:
    shell = resolve_shell(True, "pwsh", dict(os.environ))
    program = shutil.which("pwsh")
    if program is None:
        assert shell == Missing("pwsh", "no pwsh on the search path")
        with pytest.raises(SprawlError) as caught:
            require_shell(shell)
        assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE
        assert caught.value.subject == "pwsh 7"
        return
    line = subprocess.run(
        [program, "--version"], capture_output=True, text=True, check=False
    ).stdout
    major = pwsh_major(line)
    if major is not None and major >= 7:
        assert shell == Found(program, "pwsh")
    else:
        assert isinstance(shell, Missing) and shell.asked == "pwsh"
