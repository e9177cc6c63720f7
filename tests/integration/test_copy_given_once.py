"""The copy is given to the container user once a call (container/arm.py ready_copy; create.py
skips its second whole-copy walk when ready_copy just gave the same copy to the same owner),
and the command still owns what the resync made -- real docker and podman."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import load_config
from sprawl_orch.container import ownership
from sprawl_orch.tool.exec_tool import ExecTool


def test_one_walk_a_call_and_the_command_owns_the_resync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_image: tuple[str, str]
) -> None:
    engine, image = engine_image
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    conf = tmp_path / "sprawl.toml"
    conf.write_text(
        f'[sandbox]\narm = "container"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[sandbox.container]\nengine = "{engine}"\n'
        f'[sandbox.container.images]\n{engine} = "{image}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    (tmp_path / "scratch").mkdir()
    walks: list[Path] = []
    real = ownership.own_copy

    def counted(root: Path, uid: int, gid: int) -> int:
        walks.append(root)
        return real(root, uid, gid)

    monkeypatch.setattr(ownership, "own_copy", counted)
    with ExecTool(load_config(conf), tree, record=False) as tool:
        first = tool.exec(["sh", "-c", "echo x > a.txt"])
        assert first.exit_code == 0, first.as_json_dict()
        # the person makes a directory; the resync makes it in the copy as us
        (tree / "sub").mkdir()
        (tree / "sub" / "b.txt").write_text("b\n")
        walks.clear()
        second: Any = tool.exec(["sh", "-c", "echo y > sub/new && echo z > sub/b.txt"])
        assert second.exit_code == 0, second.as_json_dict()
    # podman --userns=auto knows the owner only from the created container: its one walk
    # is create's; every other path walks in ready_copy only
    assert len(walks) == 1, walks
