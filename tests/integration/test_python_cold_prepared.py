"""A cold guest and a prepared one (wasi_prepared.py) as the command sees them: what CPython's
own `python -c` and `python SCRIPT` would show, the same in both (attacks of issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sprawl_orch.native_fallbacks import wasi_forked
from tests.integration.test_python_arm import state, tool_for, tree

__all__ = ["state", "tree"]  # test_python_arm.py's fixtures, used here by name

pytestmark = pytest.mark.skipif(
    not wasi_forked.usable(), reason="the runtime process needs fork, sessions and pidfds"
)

ORIG = "import sys; print(sys.orig_argv[1:], sys.argv)"


def test_sys_orig_argv_is_the_commands_own_cold_and_prepared(tree: Path, state: Path) -> None:
    # Before the fix a cold guest's sys.orig_argv held the bootstrap, the tree and the
    # command; a prepared one's the bootstrap and the tree only: not the command at all.
    (tree / "args.py").write_text(ORIG + "\n")
    with tool_for(tree, state) as tool:  # each tool's first command is cold
        code = [tool.exec(["python", "-c", ORIG, "a b"]) for _ in range(2)]
    with tool_for(tree, state) as tool:
        script = [tool.exec(["python", "args.py", "x"]) for _ in range(2)]
    for cold, warm in (code, script):
        assert cold.python is not None and warm.python is not None
        assert (cold.python["prepared"], warm.python["prepared"]) == (False, True)
        assert warm.stdout == cold.stdout, (cold.stdout, warm.stdout)
    assert code[0].stdout == f"{['-c', ORIG, 'a b']} ['-c', 'a b']\n", code[0].stderr
    assert script[0].stdout == "['args.py', 'x'] ['args.py', 'x']\n", script[0].stderr
