"""The traps issue 28 found in the Python API, each closed: a path where a config goes,
`load_config(".")`, a Config built with bad values, and one name for two windows."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from pydantic import ValidationError

from sprawl_orch import Config, ExecTool, SprawlError, load_config
from sprawl_orch.config import ContainerConfig, SandboxConfig
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.selection.offerings import Offerings
from tests.unit.conftest import make_config


def _own_config(tree: Path, tmp_path: Path) -> None:
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\nwindow_seconds = 7\n[state]\ndir = "{tmp_path / "s"}"\n'
    )


def test_a_path_where_the_config_goes_is_read_as_load_config_would(
    tmp_path: Path, tree: Path, offerings: Offerings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _own_config(tree, tmp_path)
    monkeypatch.chdir(tree)
    # ExecTool(".") was a TypeError: "." taken for a Config.
    with ExecTool(".", offerings=offerings, record=False) as tool:
        assert tool.workdir == tree.resolve()
        assert tool.config.sandbox.window_seconds == 7
        assert tool.exec(["cat", "README"]).stdout == "readme\n"
    monkeypatch.chdir(tmp_path)
    # A directory's sprawl.toml, and the directory is the workdir; a file's, and its own.
    with ExecTool(str(tree), offerings=offerings, record=False) as tool:
        assert (tool.workdir, tool.config.source) == (tree.resolve(), tree / "sprawl.toml")
    with ExecTool(tree / "sprawl.toml", offerings=offerings, record=False) as tool:
        assert tool.workdir == tree.resolve()
    # A config file and a workdir apart (the CLI's --config FILE -C DIR).
    other = tmp_path / "other.toml"
    other.write_text('[sandbox]\narm = "copied_tree"\nwindow_seconds = 3\n')
    with ExecTool(str(other), str(tree), offerings=offerings, record=False) as tool:
        assert (tool.workdir, tool.config.sandbox.window_seconds) == (tree.resolve(), 3)


def test_load_config_takes_a_str_or_a_directory(tmp_path: Path, tree: Path) -> None:
    _own_config(tree, tmp_path)
    # load_config(".") was an AttributeError (a str has no read_bytes).
    assert load_config(str(tree)).sandbox.window_seconds == 7
    assert load_config(str(tree / "sprawl.toml")).source == tree / "sprawl.toml"
    assert load_config(cwd=str(tree)).sandbox.window_seconds == 7
    assert load_config(str(tmp_path)) == Config()  # a directory without one: the defaults
    with pytest.raises(SprawlError) as caught:
        load_config(str(tmp_path / "missing.toml"))
    assert caught.value.code is ErrorCode.CONFIG_INVALID


@pytest.mark.parametrize(
    ("build", "subject"),
    [
        (lambda: Config(sandbox={"arm": "chroot"}), "[sandbox] arm"),
        (lambda: Config(sandbox={"window_seconds": 0}), "[sandbox] window_seconds"),
        (lambda: Config(bogus=1), "bogus"),
        (lambda: SandboxConfig(env_passthrough=("1x",)), "[sandbox] env_passthrough"),
        (lambda: ContainerConfig(image="alpine"), "[sandbox.container] image"),
        (
            lambda: Config(sandbox={"container": {"images": {"docker": "x"}}}),
            "[sandbox.container.images] docker",
        ),
    ],
)
def test_a_config_built_with_bad_values_raises_sprawl_error(build: object, subject: str) -> None:
    # Config(...) leaked pydantic's ValidationError where parse_config raised SprawlError.
    with pytest.raises(SprawlError) as caught:
        build()  # type: ignore[operator]
    assert not isinstance(caught.value, ValidationError)
    assert (caught.value.code, caught.value.subject) == (ErrorCode.CONFIG_INVALID, subject)
    if "image" in subject:  # no default image to take: the fix is the pin (issue 27)
        assert "sprawl-orch image pin" in caught.value.recovery
    else:
        assert caught.value.recovery.startswith(f"fix {subject}")


def test_window_moves_to_the_background_and_timeout_is_its_deprecated_name(
    tmp_path: Path, tree: Path, offerings: Offerings
) -> None:
    config = make_config(tmp_path, arm="copied_tree")
    with ExecTool(config, tree, offerings=offerings, record=False) as tool:
        moved = tool.exec(["sleep", "30"], window=0.2)
        assert (moved.outcome, moved.killed) == ("backgrounded", False)
        assert moved.handle is not None
        assert tool.halt(moved.handle).killed
        with warnings.catch_warnings(record=True) as heard:
            warnings.simplefilter("always")
            old = tool.exec(["sleep", "30"], timeout=0.2)
        assert [w.category for w in heard] == [DeprecationWarning]
        assert heard[0].filename == __file__  # pointed at the caller's line
        assert "window=" in str(heard[0].message)
        assert old.outcome == "backgrounded" and old.handle is not None
        tool.halt(old.handle)
        # The CLI's kill-at-the-window is background_ok=False, under the same name.
        killed = tool.exec(["sleep", "30"], window=0.2, background_ok=False)
        assert (killed.outcome, killed.killed) == ("settled", True)
        with pytest.raises(TypeError, match="not both"), pytest.warns(DeprecationWarning):
            tool.exec(["true"], window=1, timeout=1)
