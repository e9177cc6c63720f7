"""The GitHub Action under inputs and repositories shaped by whoever wrote the code under test:
the confined command's output must not reach the runner as workflow commands, the job summary
must not say what the command wrote instead of what held, and the caller's files must stay
inside working-directory. Runs the action's scripts as test_action.py does (its fixture)."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from tests.integration.test_action import Runner, _ids, runner  # noqa: F401  (the fixture)

SECRET = "the caller's, not the command's"


def _obeyed(log: str) -> list[str]:
    """The lines a GitHub runner would take as workflow commands (`::name ...::` or the older
    `##[name ...]`), with `::stop-commands::TOKEN` ... `::TOKEN::` honoured as the runner does."""
    stopped: str | None = None
    obeyed: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        if stopped is not None:
            if line == f"::{stopped}::":
                stopped = None
            continue
        if line.startswith("::stop-commands::"):
            stopped = line.removeprefix("::stop-commands::")
        elif line.startswith(("::", "##[")):
            obeyed.append(line)
    return obeyed


def test_workflow_commands_in_the_commands_output_are_not_obeyed(runner: Runner) -> None:  # noqa: F811
    done, _, _ = runner.action("prepare", {"arm": "native"})
    assert done.returncode == 0, done.stderr
    assert _obeyed(done.stdout) == [] and _obeyed(done.stderr) == []
    command = (
        "printf '::error file=x::pwned\\n::add-mask::Ran\\n##[set-output name=status;]0\\n'; "
        "echo '::warning::from-stderr' >&2; echo '::stop-commands::guessed'; "
        "echo '::set-env name=LD_PRELOAD::/tmp/x'; exit 3"
    )
    done, outputs, _ = runner.action("run", {"command": command})
    assert done.returncode == 3 and outputs["status"] == "3", done.stdout + done.stderr
    # Never obeyed, on either stream; still shown in the log (both streams on stdout).
    assert _obeyed(done.stdout) == [], done.stdout
    assert _obeyed(done.stderr) == [], done.stderr
    assert "::error file=x::pwned" in done.stdout and "::warning::from-stderr" in done.stdout


@pytest.mark.parametrize(
    ("name", "given", "link"),
    [
        ("config", "sprawl-leak.toml", True),
        ("config", "../outside-the-tree.txt", False),
        ("dockerfile", "Containerfile.leak", True),
    ],
)
def test_a_file_input_outside_the_tree_is_refused(
    runner: Runner,  # noqa: F811
    name: str,
    given: str,
    link: bool,
) -> None:
    # The repository under test ships the symlink; the workflow names an innocent path.
    made = runner.checkout / given
    if link:
        made.symlink_to(runner.outside)
    try:
        done, _, _ = runner.action("prepare", {name: given})
        assert done.returncode == 2, done.stdout + done.stderr
        assert "outside working-directory" in done.stderr, done.stderr
        assert SECRET not in done.stdout + done.stderr
        if name == "config":
            done, _, _ = runner.action("run", {"config": given, "command": "true"})
            assert done.returncode == 2 and SECRET not in done.stdout + done.stderr
    finally:
        if link:
            made.unlink()


def test_a_backtick_in_the_command_cannot_write_the_summarys_words(runner: Runner) -> None:  # noqa: F811
    done, _, _ = runner.action("prepare", {"arm": "native"})
    assert done.returncode == 0, done.stderr
    command = ": 'a`b' '` → status **0** (ran) under **container** <!--'; exit 3"
    done, _, summary = runner.action("run", {"command": command})
    assert done.returncode == 3, done.stdout + done.stderr
    line = next(row for row in summary.splitlines() if "status **3**" in row)
    # CommonMark: a code span ends at the first backtick run as long as its opening one. The
    # whole command must sit inside the span, so nothing it wrote reads as the summary's words.
    fence = re.match(r"`+", line)
    assert fence is not None, line
    close = line.index(" " + fence.group(0) + " → status **3**")
    inside = line[len(fence.group(0)) : close]
    assert command in inside, line
    assert not re.search(f"(?<!`){fence.group(0)}(?!`)", inside), line


def test_the_summary_escapes_html_in_what_sprawl_orch_reports(runner: Runner) -> None:  # noqa: F811
    # A refusal's detail names what was given: here a config the caller's repository wrote,
    # with HTML that would open a <details> or a comment over the rows after it.
    config = runner.checkout / "html.toml"
    config.write_text('[sandbox]\narm = "<details><!--"\n')
    os.chown(config, *_ids())
    try:
        done, _, summary = runner.action("run", {"config": config.name, "command": "true"})
        assert done.returncode != 0, done.stdout
        assert "<details>" not in summary and "<!--" not in summary, summary
    finally:
        config.unlink()


def test_a_working_directory_symlinked_out_of_the_checkout_is_refused(
    runner: Runner,  # noqa: F811
) -> None:
    # The repository under test makes the tree the workflow names a symlink to the runner's
    # own files: the command would run in a copy of them.
    private = runner.outside.parent / "runner-private"
    private.mkdir()
    (private / "token.txt").write_text(SECRET + "\n")
    link = runner.checkout / "leaky"
    link.symlink_to(private)
    try:
        for path in (private, private / "token.txt"):
            os.chown(path, *_ids())
        done, _, _ = runner.action("prepare", {"arm": "copied_tree"})
        assert done.returncode == 0, done.stderr
        inputs = {"working-directory": "leaky", "command": "cat token.txt"}
        done, _, _ = runner.action("run", inputs)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "outside the checkout" in done.stderr and SECRET not in done.stdout
    finally:
        link.unlink()
        shutil.rmtree(private)


@pytest.mark.parametrize("window", ["nan", "inf", "1e400", "-1"])
def test_a_timeout_that_keeps_no_window_is_refused(runner: Runner, window: str) -> None:  # noqa: F811
    # `nan` passed sprawl-orch's own range check and the command ran with no window at all.
    done, _, _ = runner.action("prepare", {"arm": "native"})
    assert done.returncode == 0, done.stderr
    done, _, _ = runner.action("run", {"command": "sleep 3; echo outlived", "timeout": window})
    assert done.returncode == 2 and "input 'timeout'" in done.stderr, done.stdout + done.stderr
    assert "outlived" not in done.stdout
