"""The python arm's guest runs `-c` code and scripts as CPython does (issue 31): its bootstrap
(wasi_guest._BOOT) runs -c code by exec(str) and a script without runpy, for speed, and what a
program sees of itself must still be CPython's own -- sys.argv, __name__, __file__,
sys.path[0], the globals of __main__, a missing script's message and exit status 2. Each is
compared with the host's CPython run on the same tree from the same directory (the guest
sees the copy at the tree's own path, so the paths agree)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch import ExecTool
from tests.integration.test_python_arm import state, tool_for, tree

__all__ = ["state", "tree"]  # test_python_arm.py's fixtures, used here by name

SHOW = (
    '"""the doc"""\n'
    "import sys\n"
    "print(sys.argv, __name__, __file__, sys.path[0], __doc__, __cached__)\n"
    "print(sorted(globals()))\n"
)


@pytest.fixture
def tool(tree: Path, state: Path) -> Iterator[ExecTool]:
    (tree / "pkg" / "me.py").write_text(SHOW)
    (tree / "link.py").symlink_to("pkg/me.py")
    (tree / "app").mkdir()
    (tree / "app" / "__main__.py").write_text("import sys\nprint('app', __name__, sys.argv)\n")
    with tool_for(tree, state) as t:
        yield t


def host(tree: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=tree, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["pkg/me.py", "a", "b c"],
        ["./pkg/../pkg/me.py"],  # __file__ joined, not normalized; sys.path[0] resolved
        ["link.py", "x"],  # sys.path[0]: the link's target's directory
        ["app", "y"],  # a directory's __main__.py (runpy, as before)
        ["-c", "import sys; print(sys.argv, __name__, sys.path[0]); print(sorted(globals()))"],
        ["-c", "import sys; print(sys.argv)", "-c", "z"],
    ],
)
def test_the_guest_sees_itself_as_cpython_does(tool: ExecTool, tree: Path, argv: list[str]) -> None:
    expected = host(tree, argv)
    assert expected.returncode == 0, expected.stderr
    result = tool.exec(["python", *argv])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected.stdout


def test_an_error_in_a_script_names_its_file(tool: ExecTool, tree: Path) -> None:
    (tree / "boom.py").write_text("x = 1\n1 / 0\n")
    result = tool.exec(["python", "boom.py"])
    assert result.exit_code == 1
    assert f'File "{tree}/boom.py", line 2, in <module>' in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")


def test_a_missing_script_exits_2_with_cpythons_message(tool: ExecTool, tree: Path) -> None:
    expected = host(tree, ["nope.py"])
    result = tool.exec(["python", "nope.py"])
    assert result.exit_code == expected.returncode == 2
    # CPython's words; the program is the guest's `python`, the errno WASI's ENOENT (44)
    program = expected.stderr.split(": can't open file", 1)[0]
    said = expected.stderr.replace(program, "python", 1).replace("[Errno 2]", "[Errno 44]")
    assert result.stderr == said
    assert (
        said == f"python: can't open file '{tree}/nope.py': [Errno 44] No such file or directory\n"
    )


def test_the_bootstrap_costs_little_fuel(tool: ExecTool) -> None:
    # Fuel is deterministic for the pinned binary: the bare interpreter's `-c pass` is ~248M.
    # The bootstrap cost 307M for it (compile() builds the AST types) and 706M for a script
    # (runpy's imports); both paths now stay near the bare start.
    quick = tool.exec(["python", "-c", "pass"])
    script = tool.exec(["python", "pkg/me.py"])
    assert quick.python is not None and script.python is not None
    assert quick.python["fuel_used"] < 265_000_000, quick.python
    assert script.python["fuel_used"] < 330_000_000, script.python
