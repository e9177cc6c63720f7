"""`changes` and `apply` by real commands on every Linux arm (design §5, issue #18): docker,
podman, linux_namespaces (bwrap) and copied_tree, through the ExecTool.

One busybox-compatible shell line makes every kind of change; the result must name exactly
those paths, apply must bring all of them or a chosen subset, refuse conflicts (tree left
byte-for-byte as it was) and links that leave the tree, and the kept changes must outlive
the next command's sync.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.config import Config, parse_config
from sprawl_orch.container.admission import clear_cache
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing

ARMS = ["docker", "podman", "linux_namespaces", "copied_tree"]

EDIT = (
    "echo changed > README; echo new > new.txt; rm gone.txt; chmod 755 run.sh; "
    "rm -r d; echo d > d; rm k; mkdir k; ln -s /etc/passwd out; ln -s ../../.. up; "
    "ln -s README in; mkdir -p nd/e; echo x > nd/e/x"
)
EXPECTED = {
    "README": ("modified", "file"),
    "d": ("kind_changed", "file"),
    "d/f": ("deleted", None),
    "gone.txt": ("deleted", None),
    "in": ("created", "link"),
    "k": ("kind_changed", "dir"),
    "nd": ("created", "dir"),
    "nd/e": ("created", "dir"),
    "nd/e/x": ("created", "file"),
    "new.txt": ("created", "file"),
    "out": ("created", "link"),
    "up": ("created", "link"),
    "run.sh": ("mode_changed", "file"),
}


def _config(tmp_path: Path, arm: str, request: pytest.FixtureRequest) -> Config:
    sandbox: dict[str, object] = {"scratch_dir": str(tmp_path / "scratch")}
    if arm in ("docker", "podman"):
        image = str(request.getfixturevalue(f"{arm}_image"))
        sandbox.update(arm="container", container={"engine": arm, "images": {arm: image}})
    elif arm == "linux_namespaces":
        sandbox["arm"] = "native"
    else:
        sandbox["arm"] = "copied_tree"
    return parse_config({"sandbox": sandbox, "state": {"dir": str(tmp_path / "state")}})


@pytest.fixture(params=ARMS)
def tool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExecTool]:
    clear_cache()
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("f\n")
    for name, text in (
        ("README", "readme\n"),
        ("gone.txt", "bye\n"),
        ("run.sh", "#!/bin/sh\n"),
        ("k", "k\n"),
        ("keep.txt", "keep\n"),
    ):
        (tree / name).write_text(text)
    (tmp_path / "scratch").mkdir()
    with ExecTool(_config(tmp_path, request.param, request), tree) as t:
        arm = t.choice.arm.value
        want = "container" if request.param in ("docker", "podman") else request.param
        if arm != want:
            missing(f"the {request.param} arm is not available here (chose {arm})")
        yield t


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    out: dict[str, tuple[str, int, bytes | str | None]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            body: bytes | str | None = None
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                body = p.read_bytes()
            out[str(p.relative_to(root))] = (stat.filemode(st.st_mode), st.st_ino, body)
    return out


def test_changes_are_reported_exactly(tool: ExecTool) -> None:
    before = snapshot(tool.workdir)
    result = tool.exec(EDIT, shell=True)
    assert result.outcome == "settled" and result.exit_code == 0, result
    c = result.changes
    assert c is not None and c.kept, c
    got = {e.path: (e.change, e.kind) for e in c.paths}
    assert got == EXPECTED
    assert (c.created, c.modified, c.deleted, c.kind_changed, c.mode_changed) == (7, 1, 2, 2, 1)
    by = {e.path: e for e in c.paths}
    assert by["run.sh"].was_mode == "0644" and by["run.sh"].mode == "0755"
    assert by["README"].size == 8 and by["README"].was_size == 7
    assert by["out"].target == "/etc/passwd"
    assert all(e.verified for e in c.paths)
    assert c.full is not None and Path(c.full).is_file()
    assert snapshot(tool.workdir) == before  # the command changed only its copy
    # A command that changes nothing reports nothing; the first one's changes are still kept.
    quiet = tool.exec(["cat", "README"])
    assert quiet.stdout == "readme\n" and quiet.changes is not None
    assert quiet.changes.total == 0 and quiet.changes.paths == []
    assert Path(c.full).is_file()


def test_apply_a_subset_then_the_rest(tool: ExecTool) -> None:
    result = tool.exec(EDIT, shell=True)
    c = result.changes
    assert result.exit_code == 0 and c is not None and c.kept, (result.stderr, c)
    handle = c.handle
    assert handle is not None
    tool.exec(["true"])  # the next sync resets the copy: the kept changes must not care
    dry = tool.apply(handle, ["README", "nd"], dry_run=True)
    assert dry.diff is not None and "-readme\n+changed\n" in dry.diff and "+x\n" in dry.diff
    assert (tool.workdir / "README").read_text() == "readme\n"  # a dry run writes nothing
    part = tool.apply(handle, ["README", "nd"])
    assert {i.path for i in part.applied} == {"README", "nd", "nd/e", "nd/e/x"}
    assert part.refused == [] and not part.finished
    assert (tool.workdir / "README").read_text() == "changed\n"
    assert (tool.workdir / "nd" / "e" / "x").read_text() == "x\n"
    assert (tool.workdir / "gone.txt").exists() and not (tool.workdir / "new.txt").exists()
    rest = tool.apply(handle)
    assert {i.path for i in rest.refused} == {"out", "up"}  # both links leave the tree
    assert all("leads out of the working directory" in (i.why or "") for i in rest.refused)
    assert {i.path for i in rest.applied} == set(EXPECTED) - {
        "README",
        "nd",
        "nd/e",
        "nd/e/x",
        "out",
        "up",
    }
    w = tool.workdir
    assert (w / "new.txt").read_text() == "new\n" and not (w / "gone.txt").exists()
    assert (w / "d").read_text() == "d\n" and (w / "k").is_dir()
    assert os.readlink(w / "in") == "README"
    assert not (w / "out").exists() and not (w / "up").is_symlink()
    assert stat.S_IMODE((w / "run.sh").stat().st_mode) == 0o755
    assert (w / "keep.txt").read_text() == "keep\n"
    assert not [p for p in os.listdir(w) if p.startswith(".sprawl-apply-")]


def test_conflicts_are_refused_and_the_tree_is_untouched(tool: ExecTool) -> None:
    result = tool.exec("echo mine > README; echo created > new.txt; rm gone.txt", shell=True)
    c = result.changes
    assert result.exit_code == 0 and c is not None and c.kept, (result.stderr, c)
    assert result.changes.handle is not None
    w = tool.workdir
    (w / "README").write_text("the person's edit\n")  # changed since the sync
    (w / "new.txt").write_text("the person's new file\n")  # made since the sync
    before = snapshot(w)
    applied = tool.apply(result.changes.handle, ["README", "new.txt"])
    assert applied.applied == []
    by = {i.path: i for i in applied.refused}
    assert set(by) == {"README", "new.txt"}
    assert all((i.why or "").startswith("conflict") for i in by.values())
    readme = by["README"]
    assert readme.at_sync is not None and readme.now is not None
    assert readme.at_sync["size"] == 7 and readme.now["size"] == len("the person's edit\n")
    assert snapshot(w) == before
    # The path nobody touched still applies.
    rest = tool.apply(result.changes.handle, ["gone.txt"])
    assert [i.path for i in rest.applied] == ["gone.txt"] and not (w / "gone.txt").exists()
