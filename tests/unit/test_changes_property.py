"""`changes` against the truth: random commands (sequences of writes, same-bytes rewrites,
hidden edits with the mtime set back, chmods and chmods back, renames over, deletions, new
files and directories, hard links, a directory replaced by a link) on a copy recorded the way
the exec tool records it; what compute reports must be exactly what a full comparison of the
copy's kinds, permission bits, bytes and link targets before and after says."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprawl_orch.changes.changes import compute
from tests.unit.test_changes_walk import Copy, hidden_edit

OPS = (
    "write",
    "same",
    "hidden",
    "chmod",
    "chmod_back",
    "rename",
    "delete",
    "create",
    "mkdir",
    "link_dir",
    "hardlink",
    "touch",
)


def truth(root: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    """Every entry: kind, permission bits, bytes (files) or target (links)."""
    out: dict[str, tuple[str, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            st_ = path.lstat()
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st_.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st_.st_mode), path.read_bytes())
    return out


def expected(
    before: dict[str, tuple[str, int, bytes | str | None]],
    after: dict[str, tuple[str, int, bytes | str | None]],
) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for rel in before.keys() - after.keys():
        found.add((rel, "deleted"))
    for rel in after.keys() - before.keys():
        found.add((rel, "created"))
    for rel in before.keys() & after.keys():
        (kind, mode, data), (kind2, mode2, data2) = before[rel], after[rel]
        if kind != kind2:
            found.add((rel, "kind_changed"))
        elif data != data2:
            found.add((rel, "modified"))
        elif mode != mode2:
            found.add((rel, "mode_changed"))
    return found


def run(copy: Path, ops: list[tuple[str, int]]) -> None:
    for n, (op, pick) in enumerate(ops):
        files = sorted(p for p in copy.rglob("*") if p.is_file() and not p.is_symlink())
        dirs = sorted(p for p in copy.rglob("*") if p.is_dir() and not p.is_symlink())
        if not files or not dirs:
            return
        f, d = files[pick % len(files)], dirs[pick % len(dirs)]
        if op == "write":
            f.write_bytes(f.read_bytes() + b"+")
        elif op == "same":
            data = f.read_bytes()
            f.unlink()
            f.write_bytes(data)
        elif op == "hidden":
            data = f.read_text()
            hidden_edit(f, data[::-1] if data[::-1] != data else data.upper())
        elif op == "chmod":
            f.chmod(0o700)
        elif op == "chmod_back":
            f.chmod(0o644)
        elif op == "rename":
            other = files[(pick + 1) % len(files)]
            if other != f:
                os.rename(f, other)
        elif op == "delete":
            f.unlink()
        elif op == "create":
            (d / f"new{n}.txt").write_text(f"new {n}\n")
        elif op == "mkdir":
            (d / f"sub{n}").mkdir()
        elif op == "link_dir":
            shutil.rmtree(d)
            d.symlink_to("elsewhere")
        elif op == "hardlink":
            os.link(f, d / f"hard{n}.txt")
        elif op == "touch":
            os.utime(f)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50)), max_size=6),
    walk=st.booleans(),
)
def test_changes_equal_a_full_comparison(
    tmp_path_factory: object, ops: list[tuple[str, int]], walk: bool
) -> None:
    tmp = tmp_path_factory.mktemp("prop")  # type: ignore[attr-defined]
    synced = Copy(tmp, walk)
    for f in synced.source.rglob("*.txt"):  # the fixture's files are 0644 in the source
        assert stat.S_IMODE(f.stat().st_mode) == 0o644
    before = truth(synced.copy)
    run(synced.copy, ops)
    found = {(e.path, e.change) for e in compute(synced.record, synced.source, synced.copy)}
    assert found == expected(before, truth(synced.copy)), ops
