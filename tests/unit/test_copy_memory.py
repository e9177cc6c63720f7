"""The resync given a memory of the copy's side (design §5.1, copy/memory.py, copy/walk_memory.py):
the racy-clean property of test_copy_stamps run against it, and each of the memory's own
safeguards, each of which fails without it.

`Served` stands in for the per-user exec server and the `changes` walk: after each sync it
takes the copy's stamps (what the record before the command holds); at the next sync it walks
the copy (what the walk after the command sees), builds the memory and gates it. Writes to the
copy between the two are the command's; writes after the walk are a writer that never took
the lock (the gate's writer note is what stops those: test_copy_store_writers)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprawl_orch.changes.record import fs_now_ns
from sprawl_orch.copy import fileops
from sprawl_orch.copy import memory as copy_memory
from sprawl_orch.copy import stamps as copy_stamps
from sprawl_orch.copy.sync import COPY_SIDE, Bounds, FileWork, sync_with_record
from sprawl_orch.core import fs_clock
from tests.unit.test_copy_stamps import MARGIN, OPS, assert_same, coarse_clock

pytestmark = pytest.mark.skipif(
    fs_clock.granularity_ns(os.stat(tempfile.gettempdir()).st_dev) is None
    or not isinstance(COPY_SIDE, fileops.FdCopy),
    reason="no known timestamp margin here, or no directory fds (the memory walk needs both)",
)

TOKEN = "t1"
_ALL = 1 << 62  # a line no ctime reaches: a plain snapshot


class Served:
    """One slot as the exec server would keep it (the module docstring)."""

    def __init__(self, src: Path, copy: Path, record: Path) -> None:
        self.src, self.copy, self.record = src, copy, record
        self.before: dict[str, tuple[int, ...]] | None = None
        self.line = 0
        self.used = False  # the last sync ran with a memory the gate let through

    def memory(self, token: str = TOKEN) -> copy_memory.CopyMemory | None:
        if self.before is None:
            return None
        seen, _ = copy_memory.observe(self.copy, self.before, self.line)
        rec = copy_stamps.load(self.record)
        if rec is None:
            return None
        made = copy_memory.build(token, os.lstat(self.copy), rec, os.stat(self.record), seen)
        return copy_memory.gate(made, TOKEN, self.copy, self.record, False)

    def sync(self, bounds: Bounds = Bounds()) -> FileWork:
        mem = self.memory()
        self.used = mem is not None
        work, _ = sync_with_record(self.src, self.copy, bounds, record=self.record, memory=mem)
        self.after_sync()
        return work

    def after_sync(self) -> None:
        _, self.before = copy_memory.observe(self.copy, {}, _ALL)
        self.line = fs_now_ns(self.copy.parent)


@pytest.fixture
def served(tmp_path: Path) -> Served:
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    for i in range(30):
        (src / ("d" if i % 3 == 1 else "d/e" if i % 3 == 2 else "") / f"f{i}").write_bytes(
            b"%08d" % i
        )
    os.symlink("f0", src / "link")
    s = Served(src, tmp_path / "copy", tmp_path / "stamps")
    s.sync()
    time.sleep(MARGIN)
    s.sync()
    time.sleep(MARGIN)
    s.sync()  # the record now vouches for every file
    return s


class Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed = self.compared = 0
        kinds, same = fileops.FdCopy.kinds, fileops.same_bytes

        def listed(side: fileops.FdCopy, handle: int) -> dict[str, fileops.Kind]:
            self.listed += 1
            return kinds(side, handle)

        def compared(*args: object) -> bool:
            self.compared += 1
            return same(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(fileops.FdCopy, "kinds", listed)
        monkeypatch.setattr(fileops, "same_bytes", compared)


def test_a_quiet_resync_lists_no_copy_directory(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = Counts(monkeypatch)
    before = served.record.stat()
    work = served.sync()
    assert served.used
    assert work == FileWork(created=0, rewritten=0, removed=0, walked=33)
    # No copy directory listed (the root, holding the link, is open but not listed).
    assert (count.listed, count.compared) == (0, 0)
    assert_same(served.src, served.copy)
    assert (served.record.stat().st_ino, served.record.stat().st_mtime_ns) == (
        before.st_ino,
        before.st_mtime_ns,
    )
    # The record the memory walk made is the one a full walk makes.
    _, full = sync_with_record(served.src, served.copy, record=served.record)
    again = copy_stamps.load(served.record)
    assert again is not None and again.paths == full.paths and again.entries == full.entries


def _in_place(path: Path, data: bytes) -> None:
    """The command's write: same inode, same size, its mtime put back (only ctime moves)."""
    before = path.lstat()
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, data, 0)
    os.close(fd)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_command_write_in_place_is_undone(served: Served) -> None:
    _in_place(served.copy / "d" / "e" / "f2", b"XXXXXXXX")
    assert served.sync().rewritten == 1
    assert served.used
    assert_same(served.src, served.copy)


def test_a_touched_directory_gets_its_times_back(served: Served) -> None:
    d = served.copy / "d" / "e"
    now = d.stat()
    os.utime(d, ns=(now.st_atime_ns, now.st_mtime_ns + 5_000_000_000))
    served.sync()
    assert served.used
    assert_same(served.src, served.copy)


def test_a_file_planted_with_the_directory_times_put_back_goes(served: Served) -> None:
    # Only the directory's ctime says its listing changed: the memory must not list it.
    d = served.copy / "d" / "e"
    now = d.stat()
    (d / "planted").write_bytes(b"p")
    os.utime(d, ns=(now.st_atime_ns, now.st_mtime_ns))
    assert served.sync().removed == 1
    assert served.used
    assert_same(served.src, served.copy)


def test_a_chmod_directory_gets_its_bits_back(served: Served) -> None:
    (served.copy / "d").chmod(0o755 | 0o700)
    (served.copy / "d").chmod(0o700)
    served.sync()
    assert stat.S_IMODE((served.copy / "d").stat().st_mode) == stat.S_IMODE(
        (served.src / "d").stat().st_mode
    )
    assert_same(served.src, served.copy)


def test_a_file_hard_linked_inside_the_copy_voids_the_memory(served: Served) -> None:
    os.link(served.copy / "d" / "f1", served.copy / "d" / "e" / "alias")
    assert served.memory() is None
    served.sync()
    assert not (served.copy / "d" / "e" / "alias").exists()
    assert_same(served.src, served.copy)


def test_the_gate(served: Served) -> None:
    assert served.memory() is not None
    # another holder came between: the token the lease found is not the memory's
    seen, _ = copy_memory.observe(served.copy, served.before or {}, served.line)
    rec = copy_stamps.load(served.record)
    assert rec is not None
    made = copy_memory.build(TOKEN, os.lstat(served.copy), rec, os.stat(served.record), seen)
    gate = copy_memory.gate
    assert gate(made, "t2", served.copy, served.record, False) is None
    assert gate(made, None, served.copy, served.record, False) is None
    # a command of an arm that writes copies in place ran since this boot
    assert gate(made, TOKEN, served.copy, served.record, True) is None
    assert gate(made, TOKEN, served.copy, served.record, False) is made
    # the record replaced (an older version's sync writes its own: a new inode)
    shutil.copy2(served.record, served.record.with_name("x"))
    os.replace(served.record.with_name("x"), served.record)
    assert gate(made, TOKEN, served.copy, served.record, False) is None
    # the copy root replaced
    made = copy_memory.build(TOKEN, os.lstat(served.copy), rec, os.stat(served.record), seen)
    shutil.copytree(served.copy, served.copy.with_name("c2"), symlinks=True)
    shutil.rmtree(served.copy)
    os.rename(served.copy.with_name("c2"), served.copy)
    assert gate(made, TOKEN, served.copy, served.record, False) is None


def test_a_copy_not_as_remembered_runs_the_full_walk(served: Served) -> None:
    mem = served.memory()
    assert mem is not None
    # After the walk that made the memory (a writer the gate did not catch): an extra file in
    # a remembered directory, and a new source file there, which makes the walk open it.
    (served.copy / "d" / "e" / "planted").write_bytes(b"p")
    (served.src / "d" / "e" / "new").write_bytes(b"n")
    work, _ = sync_with_record(served.src, served.copy, record=served.record, memory=mem)
    assert (work.created, work.removed) == (1, 1)
    assert_same(served.src, served.copy)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, coarse=st.booleans())
def test_property_a_memory_never_hides_a_change(
    ops: list[tuple[str, str, str, object, bool]], coarse: bool
) -> None:
    """test_copy_stamps' property, every sync after the first given the memory."""
    names = ["a", "b", os.path.join("d", "c")]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        wait = coarse_clock(patch) if coarse else MARGIN
        src = Path(tmp, "src")
        (src / "d").mkdir(parents=True)
        for name in names:
            (src / name).write_bytes(b"initial!")
        served = Served(src, Path(tmp, "copy"), Path(tmp, "stamps"))
        served.sync()
        for op, where, name, arg, set_back in ops:
            root = src if where == "src" else served.copy
            target = root / name
            if op == "write":
                before = target.stat() if target.exists() else None
                assert isinstance(arg, bytes)
                if where == "copy" and target.exists():
                    target.chmod(0o644 | stat.S_IWUSR)
                target.write_bytes(arg)
                if set_back and before is not None:
                    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
            elif op == "chmod" and target.exists():
                assert isinstance(arg, int)
                target.chmod(arg)
            elif op == "utime" and target.exists():
                assert isinstance(arg, int)
                now = target.stat()
                os.utime(target, ns=(now.st_atime_ns, now.st_mtime_ns + arg))
            elif op == "wait":
                time.sleep(wait)
            elif op == "sync":
                served.sync()
                assert_same(src, served.copy)
        served.sync()
        assert_same(src, served.copy)


def test_bounds_still_apply_with_a_memory(served: Served) -> None:
    mem = served.memory()
    assert mem is not None
    with pytest.raises(Exception, match="max_files = 5"):
        sync_with_record(served.src, served.copy, Bounds(files=5), record=served.record, memory=mem)
    assert not served.copy.exists() and not served.record.exists()


def test_the_server_builds_the_form_once_from_what_a_call_taught(served: Served) -> None:
    """The exec server's side (core/served_memo.py): a call's taught memory goes over the
    channel, the server decodes it from the record file before the next fork; that fork's
    recall finds the by-directory form, and a record replaced meanwhile is refused."""
    from sprawl_orch.core import served_memo

    assert served.before is not None
    seen, _ = copy_memory.observe(served.copy, served.before, served.line)
    key = os.path.abspath(served.record)
    value = copy_memory.value_of(TOKEN, os.lstat(served.copy), os.stat(served.record), seen)
    # What earlier tests of this process learned is in the same batch, smallest first: in the
    # whole suite it filled the 60 000 bytes before this memory (the clean-clone CI failed
    # here, alone it passed). A served call's fork starts with nothing learned: so does this.
    served_memo._learned.clear()
    server, call = served_memo.channel()
    try:
        copy_memory.keep(key, value)
        served_memo.send_learned(call)
        served_memo._decoded.pop(json_slot(key), None)  # only what the server decodes counts
        served_memo.take_learned(server)
        assert isinstance(served_memo._decoded.get(json_slot(key)), copy_memory.CopyMemory)
        got = copy_memory.recall(key)
        assert got is not None and got.token == TOKEN and "d" in got.dirs
        assert copy_memory.recall(key) is None  # used once
        # A record replaced between the call and the decode: its identity is not the taught one.
        copy_memory.keep(key, value)
        served_memo.send_learned(call)
        shutil.copy2(served.record, served.record.with_name("x"))
        os.replace(served.record.with_name("x"), served.record)
        served_memo.take_learned(server)
        assert copy_memory.recall(key) is None
    finally:
        os.close(server)
        os.close(call)


def json_slot(key: str) -> str:
    import json

    return json.dumps([copy_memory.KIND, key], sort_keys=True, separators=(",", ":"))
