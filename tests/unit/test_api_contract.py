"""The Python API without traps (issue #13): str workdirs, the workdir's own config, shell
lists quoted as the list said, a str without shell=True is a TypeError, and every result --
refused ones too -- has a statement to print."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.config import Config
from sprawl_orch.selection.offerings import Offerings
from sprawl_orch.tool.exec_tool import ExecTool
from tests.unit.conftest import make_config


def test_a_str_workdir_is_a_path(tmp_path: Path, tree: Path, offerings: Offerings) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, str(tree), offerings=offerings) as tool:
        result = tool.exec(["cat", "README"])
    assert (result.outcome, result.stdout) == ("settled", "readme\n")
    assert tool.workdir == tree.resolve()


def test_no_config_reads_the_workdirs_own(
    tmp_path: Path, tree: Path, offerings: Offerings, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "sprawl.toml").write_text(
        '[sandbox]\narm = "copied_tree"\nwindow_seconds = 7\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "sprawl.toml").write_text("[sandbox]\nwindow_seconds = 99\n")
    monkeypatch.chdir(elsewhere)  # the process's cwd is not where the config is read
    with ExecTool(None, str(tree), offerings=offerings) as tool:
        assert tool.config.sandbox.window_seconds == 7
        assert tool.config.source == tree / "sprawl.toml"
        assert tool.exec(["true"]).arm == "copied_tree"


def test_a_shell_list_is_quoted_word_for_word(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings) as tool:
        result = tool.exec(["printf", "%s|", "a b", "c", "$HOME;", "|", "wc"], shell=True)
    assert result.outcome == "settled", result
    assert result.stdout == "a b|c|$HOME;|||wc|"
    assert result.command == ["printf '%s|' 'a b' c '$HOME;' '|' wc"]


def test_a_str_without_shell_is_a_type_error(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with ExecTool(make_config(tmp_path, arm="copied_tree"), tree, offerings=offerings) as tool:
        with pytest.raises(TypeError, match="shell=True") as caught:
            tool.exec("echo hi")
        assert "['echo', 'hi']" in str(caught.value)
        with pytest.raises(TypeError):
            tool.exec(["echo", b"hi"])  # type: ignore[list-item]
        assert tool.exec("echo hi", shell=True).stdout == "hi\n"


def test_a_refused_result_still_has_a_statement(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    with ExecTool(Config(), tree, offerings=offerings, record=False) as tool:
        refused = tool.exec(["no-such-program-anywhere"])
    assert refused.outcome == "exceptional" and refused.confinement is None
    assert refused.statement.startswith("E_")
    assert "what you can do" in refused.statement


def test_the_public_face_resolves_and_is_documented() -> None:
    import importlib.resources
    import subprocess
    import sys

    import sprawl_orch

    for name in sprawl_orch.__all__:
        value = getattr(sprawl_orch, name)
        assert (value.__doc__ or "").strip(), f"{name} has no docstring"
    with pytest.raises(AttributeError):
        _ = sprawl_orch.no_such_name
    assert importlib.resources.files("sprawl_orch").joinpath("py.typed").is_file()
    # `import sprawl_orch` alone loads none of the heavy modules (the CLI's lean path)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sprawl_orch; "
            "print(sorted(m for m in sys.modules if m.startswith('sprawl_orch')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "['sprawl_orch']"
