"""The synced copy (design §5) on real temporary trees: exact FileWork, links, bounds, safety.

Every test runs against both copy sides: directory fds (what Linux and macOS use) and paths
checked with lstat (Windows' fallback, forced here), so the fallback meets the same numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sprawl_orch.copy import sync as copy_sync
from sprawl_orch.copy import walk as copy_walk
from sprawl_orch.copy.fileops import FdCopy
from sprawl_orch.copy.links import stays_inside
from sprawl_orch.copy.paths import PathCopy
from sprawl_orch.copy.scratch import ScratchCopy
from sprawl_orch.copy.sync import Bounds, CopySide, FileWork, dir_fds_work, sync
from sprawl_orch.core.errors import ErrorCode, SprawlError

Entry = tuple[object, ...]


@pytest.fixture(autouse=True, params=["dir_fd", "paths"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CopySide[Any]:
    """The copy side every sync in the test uses (copy_sync picks one per platform)."""
    if request.param == "dir_fd" and not dir_fds_work():
        pytest.skip("this platform has no directory fds; only the path fallback runs here")
    impl: CopySide[Any] = FdCopy() if request.param == "dir_fd" else PathCopy()
    monkeypatch.setattr(copy_sync, "COPY_SIDE", impl)
    return impl


def make_tree(root: Path, files: int, dirs: int = 4) -> int:
    """``files`` files spread round-robin over the root and ``dirs`` directories; returns dirs.

    With 4 directories they are d0, d0/d1, d2 and d2/d3: f0 and f5 sit in the root, f1 in d0,
    f2 in d0/d1, f3 in d2, f4 in d2/d3, and so on.
    """
    root.mkdir(parents=True, exist_ok=True)
    places = [root]
    for i in range(dirs):
        parent = places[-1] if i % 2 else root
        places.append(parent / f"d{i}")
        places[-1].mkdir()
    for i in range(files):
        (places[i % len(places)] / f"f{i}.txt").write_bytes(f"file {i}\n".encode() * (i + 1))
    return dirs


def snapshot(root: Path) -> dict[str, Entry]:
    """Everything about a tree that a write would change, links not followed."""
    seen: dict[str, Entry] = {}
    for here, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(here, name)
            s = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(s.st_mode):
                seen[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(s.st_mode):
                seen[rel] = ("file", path.read_bytes(), s.st_mode, s.st_ino, s.st_mtime_ns)
            else:
                seen[rel] = ("other", s.st_mode, s.st_ino, s.st_mtime_ns)
    return seen


def view(root: Path, follow: bool, top: Path | None = None) -> dict[str, Entry]:
    """What the copy must equal: the source seen through its links (``follow``) except the
    in-tree relative ones, kept as links; or the copy seen without following anything."""
    seen: dict[str, Entry] = {}
    top = top or root
    for name in os.listdir(root):
        path = root / name
        if path.is_symlink():
            target = os.readlink(path)
            where = path.parent.relative_to(top).parts
            if not follow or (not os.path.isabs(target) and stays_inside(str(top), where, target)):
                seen[name] = ("link", target, path.lstat().st_mtime_ns)
                continue
        try:
            s = path.stat() if follow else path.lstat()
        except OSError:
            continue  # dangling link: copied as nothing
        if stat.S_ISDIR(s.st_mode):
            inner = view(path, follow, top if follow and not path.is_symlink() else path)
            seen.update({f"{name}/{k}": v for k, v in inner.items()})
            # Stat again once its entries are read: the sync sets a directory's mtime last.
            s = path.stat() if follow else path.lstat()
            seen[name] = ("dir", stat.S_IMODE(s.st_mode) & 0o777 | 0o700, s.st_mtime_ns)
        elif stat.S_ISREG(s.st_mode):
            seen[name] = (
                "file",
                path.read_bytes(),
                stat.S_IMODE(s.st_mode) & 0o777,
                s.st_mtime_ns,
            )
        elif not follow:
            seen[name] = ("not a file or directory", s.st_mode)
    return seen


def assert_equal_trees(source: Path, copy: Path) -> None:
    """Equal bytes, bits, link targets and mtimes (nanoseconds), the roots' mtimes too."""
    assert view(copy, follow=False) == view(source, follow=True)
    assert copy.stat().st_mtime_ns == source.stat().st_mtime_ns


def work(
    created: int = 0,
    rewritten: int = 0,
    removed: int = 0,
    *,
    walked: int,
    skipped: tuple[str, ...] = (),
) -> FileWork:
    return FileWork(
        created=created, rewritten=rewritten, removed=removed, walked=walked, skipped=skipped
    )


@pytest.fixture
def src(tmp_path: Path) -> Path:
    make_tree(tmp_path / "src", 10)
    return tmp_path / "src"


def entries(root: Path) -> int:
    return sum(len(d) + len(f) for _, d, f in os.walk(root))


# --- counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("files", [50, 100])
def test_first_sync_creates_every_file_and_resync_does_nothing(tmp_path: Path, files: int) -> None:
    dirs = make_tree(tmp_path / "src", files)
    src, copy = tmp_path / "src", tmp_path / "copy"
    assert sync(src, copy) == work(created=files, walked=files + dirs)
    assert_equal_trees(src, copy)
    before = snapshot(copy)
    assert sync(src, copy) == work(walked=files + dirs)
    assert snapshot(copy) == before  # equal files are not even rewritten (same inode, mtime)


def test_one_change_one_deletion_one_addition(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    (src / "f0.txt").write_bytes(b"longer than before, so a different size\n")
    n = entries(src)
    assert sync(src, copy) == work(rewritten=1, walked=n)
    (src / "d0" / "f1.txt").unlink()
    assert sync(src, copy) == work(removed=1, walked=n - 1)
    (src / "d2" / "new.txt").write_bytes(b"new")
    assert sync(src, copy) == work(created=1, walked=n)
    assert_equal_trees(src, copy)


@pytest.mark.parametrize("size", [100, 3 * 1024 * 1024 + 7])  # one chunk, and four (1 MiB)
def test_same_length_rewrite_in_the_same_tick_is_detected(
    tmp_path: Path, src: Path, size: int
) -> None:
    target = src / "d0" / "f1.txt"
    target.write_bytes(os.urandom(size))
    copy = tmp_path / "copy"
    sync(src, copy)
    old = target.stat()
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF  # only the last byte of the last chunk differs
    target.write_bytes(data)
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert target.stat().st_size == old.st_size and target.stat().st_mtime_ns == old.st_mtime_ns
    assert sync(src, copy) == work(rewritten=1, walked=entries(src))
    assert_equal_trees(src, copy)


def test_kind_changes_file_to_dir_and_dir_to_file(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    n = entries(src)
    (src / "f0.txt").unlink()
    (src / "f0.txt").mkdir()
    (src / "f0.txt" / "a").write_bytes(b"a")
    (src / "f0.txt" / "b").write_bytes(b"b")
    assert sync(src, copy) == work(created=2, removed=1, walked=n + 2)
    assert_equal_trees(src, copy)
    inside = len(list((src / "d0").rglob("*")))
    files_inside = sum(1 for p in (copy / "d0").rglob("*") if not p.is_dir())
    shutil.rmtree(src / "d0")
    (src / "d0").write_bytes(b"now a file")
    assert sync(src, copy) == work(created=1, removed=files_inside, walked=n + 2 - inside)
    assert (copy / "d0").read_bytes() == b"now a file"
    assert_equal_trees(src, copy)


def test_source_links_are_followed_file_to_link_and_back(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside content")
    sync(src, copy)
    n = entries(src)
    (src / "f0.txt").unlink()
    (src / "f0.txt").symlink_to(outside)  # file -> link: the copy gets the content
    assert sync(src, copy) == work(rewritten=1, walked=n)
    assert not (copy / "f0.txt").is_symlink()
    assert (copy / "f0.txt").read_bytes() == b"outside content"
    (src / "f0.txt").unlink()
    (src / "f0.txt").write_bytes(b"outside content")  # link -> file, same bytes and mtime:
    times = outside.stat()
    os.utime(src / "f0.txt", ns=(times.st_atime_ns, times.st_mtime_ns))  # untouched
    assert sync(src, copy) == work(walked=n)
    (src / "f0.txt").write_bytes(b"a plain file again")
    assert sync(src, copy) == work(rewritten=1, walked=n)
    assert_equal_trees(src, copy)


def test_link_out_of_the_tree_brings_content_not_a_door(tmp_path: Path, src: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    make_tree(elsewhere, 3, dirs=1)
    (src / "door").symlink_to(elsewhere)
    (src / "dangling").symlink_to(tmp_path / "nothing")
    (src / "self").symlink_to("self")  # in the tree: kept as the same (looping) link
    os.mkfifo(src / "fifo")
    before = snapshot(elsewhere)
    copy = tmp_path / "copy"
    n = entries(src)
    done = sync(src, copy)
    assert done.model_copy(update={"skipped": ()}) == work(
        created=10 + 3 + 1, walked=n + entries(elsewhere)
    )
    assert sorted(done.skipped) == [  # named, not skipped silently (issue 27)
        "dangling: a symbolic link that leads nowhere (No such file or directory)",
        "fifo: a fifo (named pipe): only files, directories and links are copied",
    ]
    assert_equal_trees(src, copy)
    assert (copy / "door").is_dir() and not (copy / "door").is_symlink()
    assert os.readlink(copy / "self") == "self"
    for name in ("dangling", "fifo"):
        assert not os.path.lexists(copy / name)
    (copy / "door" / "f0.txt").write_bytes(b"a command writes the copy")
    assert snapshot(elsewhere) == before


def test_permission_bits_copied_setuid_dropped(tmp_path: Path, src: Path) -> None:
    (src / "f0.txt").chmod(0o755)
    (src / "f5.txt").chmod(0o4755)
    (src / "d0").chmod(0o750)
    copy = tmp_path / "copy"
    sync(src, copy)
    assert stat.S_IMODE((copy / "f0.txt").stat().st_mode) == 0o755
    assert stat.S_IMODE((copy / "f5.txt").stat().st_mode) == 0o755
    assert stat.S_IMODE((copy / "d0").stat().st_mode) == 0o750
    (src / "f0.txt").chmod(0o644)  # same bytes, other bits: recopied with the new bits
    assert sync(src, copy) == work(rewritten=1, walked=entries(src))
    assert_equal_trees(src, copy)


def test_copy_falls_back_when_the_kernel_refuses_sendfile(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> int:  # what Linux 6.18 answers for /proc/self/status
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", refuse)
    assert sync(src, tmp_path / "copy") == work(created=10, walked=entries(src))
    assert_equal_trees(src, tmp_path / "copy")


# --- bounds and failures ---------------------------------------------------------------------


def test_link_loop_is_found_by_the_loop_check(tmp_path: Path, src: Path) -> None:
    (src / "d0" / "loop").symlink_to(src)  # absolute: followed, and it contains itself
    before = snapshot(src)
    copy = tmp_path / "copy"
    with pytest.raises(SprawlError) as caught:
        sync(src, copy)
    err = caught.value
    assert err.code is ErrorCode.COPY_BOUND and err.subject == str(src)
    assert "d0/loop is a symbolic link to a directory that contains it" in err.detail
    assert "loop check" in err.detail and "d0/loop" in err.recovery
    assert not os.path.lexists(copy)
    assert snapshot(src) == before


def test_one_step_loop_is_a_link_not_forty_levels(tmp_path: Path, src: Path) -> None:
    (src / "a").symlink_to(".")
    (src / "d0" / "up").symlink_to("..")
    (src / "d2" / "out").symlink_to("../../elsewhere")  # climbs out: content rule (dangles)
    copy = tmp_path / "copy"
    n = entries(src)
    dead = ("d2/out: a symbolic link that leads nowhere (No such file or directory)",)
    assert sync(src, copy) == work(created=10 + 2, walked=n, skipped=dead)
    assert os.readlink(copy / "a") == "." and os.readlink(copy / "d0" / "up") == ".."
    assert not os.path.lexists(copy / "d2" / "out")
    assert_equal_trees(src, copy)
    assert sync(src, copy) == work(walked=n, skipped=dead)
    (src / "a").unlink()
    (src / "a").symlink_to("d0")  # retargeted: rewritten
    assert sync(src, copy) == work(rewritten=1, walked=n, skipped=dead)
    assert os.readlink(copy / "a") == "d0"


def _total_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _deepest(root: Path) -> int:
    return max(len(p.relative_to(root).parts) for p in root.rglob("*"))


@pytest.mark.parametrize("bound", ["files", "bytes", "depth"])
@pytest.mark.parametrize("scratch_copy", [False, True])
def test_each_bound_refuses_and_deletes_the_partial_copy(
    tmp_path: Path, src: Path, bound: str, scratch_copy: bool
) -> None:
    exact = {"files": 10, "bytes": _total_bytes(src), "depth": _deepest(src)}
    fits = Bounds(**exact)
    before = snapshot(src)
    holder = ScratchCopy(tmp_path, "t") if scratch_copy else None
    copy = holder.path if holder else tmp_path / "copy"
    assert (holder.sync(src, fits) if holder else sync(src, copy, fits)).created == 10
    (src / "f0.txt").write_bytes(b"changed, so the next sync writes again" * 3)
    exact["bytes"] = _total_bytes(src)
    fits = Bounds(**exact)
    over = Bounds(**{**exact, bound: exact[bound] - 1})
    with pytest.raises(SprawlError) as caught:
        holder.sync(src, over) if holder else sync(src, copy, over)
    err = caught.value
    assert err.code is ErrorCode.COPY_BOUND and err.subject == str(src)
    key = f"[sandbox.copy] max_{bound} = {exact[bound] - 1}"
    assert key in err.detail and "exclude" in err.recovery
    assert f"[sandbox.copy] max_{bound} (now {exact[bound] - 1})" in err.recovery
    reached = {
        "files": "10 reached",
        "bytes": f"{exact['bytes']:,} reached after 10 files",
        "depth": "d2/d3/f4.txt is at level 3",
    }
    assert reached[bound] in err.detail
    # The largest top-level entry, sized whole (not only as far as the sync got).
    assert "largest top-level entries: d2 196 B (4 files)" in err.detail
    assert not os.path.lexists(copy)
    before["f0.txt"] = snapshot(src)["f0.txt"]
    assert snapshot(src) == before
    assert (holder.sync(src, fits) if holder else sync(src, copy, fits)).created == 10
    if holder:
        assert holder.close() is None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


@contextlib.contextmanager
def _without_dac_override() -> Iterator[None]:
    """This thread without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (effective set only, put
    back after): root then meets a file's mode bits like anyone. Before, root's unreadable
    file was a link to a write-only sysctl, and the sync no longer follows links into /proc."""
    libc = ctypes.CDLL(None, use_errno=True)
    head, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(head), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    saved = data[0].effective
    data[0].effective &= ~((1 << 1) | (1 << 2))  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(head), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    try:
        yield
    finally:
        data[0].effective = saved
        libc.capset(ctypes.byref(head), data)


def _unreadable(path: Path) -> None:
    path.write_bytes(b"secret")
    path.chmod(0)
    try:
        os.close(os.open(path, os.O_RDONLY))
    except PermissionError:
        return
    pytest.skip("no file on this machine that this user cannot read")


def test_unreadable_source_file_is_fatal_and_deletes_the_copy(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    with _without_dac_override() if os.geteuid() == 0 else contextlib.nullcontext():
        _unreadable(src / "d2" / "secret")
        with pytest.raises(SprawlError) as caught:
            sync(src, copy)
    assert caught.value.code is ErrorCode.STORAGE_FATAL
    assert caught.value.subject == str(src / "d2" / "secret")
    assert not os.path.lexists(copy)


def test_copy_and_source_must_not_overlap(tmp_path: Path, src: Path) -> None:
    before = snapshot(src)
    for copy in (src / "d0" / "copy", tmp_path, src):
        with pytest.raises(SprawlError) as caught:
            sync(src, copy)
        assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert snapshot(src) == before


# --- the copy side is hostile ----------------------------------------------------------------


def test_hard_links_made_in_the_copy_never_write_through(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    # The command links one copy file to another name, and a source file into the copy
    # (same filesystem here, which is the worst case), then writes through its own link.
    (copy / "f5.txt").unlink()
    os.link(copy / "f0.txt", copy / "f5.txt")
    (copy / "d0" / "f1.txt").unlink()
    os.link(src / "d0" / "d1" / "f2.txt", copy / "d0" / "f1.txt")
    (copy / "f5.txt").write_bytes(b"written through the command's own link")
    before = snapshot(src)
    assert sync(src, copy) == work(rewritten=3, walked=entries(src))
    assert snapshot(src) == before
    assert_equal_trees(src, copy)
    ino = {(copy / p).stat().st_ino for p in ("f0.txt", "f5.txt", "d0/f1.txt")}
    assert len(ino) == 3 and not ino & {p.stat().st_ino for p in src.rglob("*")}


def test_planted_links_in_the_copy_are_replaced_not_followed(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    (src / "f0.txt").write_bytes(b"the source changed")
    (copy / "f0.txt").unlink()
    (copy / "f0.txt").symlink_to(src / "f0.txt")  # a door: writing it would write the source
    shutil.rmtree(copy / "d2")
    (copy / "d2").symlink_to(src / "d2")  # a door to a whole source directory
    (copy / "extra").symlink_to(src / "f5.txt")
    before = snapshot(src)
    n_d2 = sum(1 for p in (src / "d2").rglob("*") if p.is_file())
    assert sync(src, copy) == work(created=n_d2, rewritten=1, removed=2, walked=entries(src))
    assert snapshot(src) == before
    assert_equal_trees(src, copy)


def test_a_deep_tree_made_in_the_copy_is_removed(tmp_path: Path, src: Path) -> None:
    copy = tmp_path / "copy"
    sync(src, copy)
    fd = os.open(copy, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):  # deeper than Python's recursion limit and than PATH_MAX allows
        os.mkdir("deep", dir_fd=fd)
        os.close(os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        fd, old = os.open("deep", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    assert sync(src, copy) == work(removed=1500, walked=entries(src))
    assert_equal_trees(src, copy)


# --- ScratchCopy -----------------------------------------------------------------------------


def test_scratch_copy_is_private_and_close_is_idempotent(tmp_path: Path, src: Path) -> None:
    holder = ScratchCopy(tmp_path, "sess1")
    assert holder.path.parent == tmp_path and holder.path.name.startswith("sprawl-sess1-")
    assert stat.S_IMODE(holder.path.stat().st_mode) == 0o700
    assert holder.sync(src).created == 10
    assert holder.close() is None and not holder.path.exists()
    assert holder.close() is None
    with pytest.raises(SprawlError) as caught:
        ScratchCopy(tmp_path, "../escape")
    assert caught.value.code is ErrorCode.CONFIG_INVALID


def _make_undeletable(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Make a file in ``path`` undeletable for real if possible; returns the undo commands."""
    victim = path / "pinned"
    victim.write_bytes(b"x")
    if os.geteuid() != 0:
        path.chmod(0o500)
        return [["chmod", "700", str(path)]]
    if (
        shutil.which("chattr")
        and subprocess.run(
            ["chattr", "+i", str(victim)], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return [["chattr", "-i", str(victim)]]

    def refuse(*_: object) -> None:  # a filesystem without chattr: fail the way rmdir would
        raise PermissionError(1, "Operation not permitted", str(victim))

    monkeypatch.setattr(copy_sync.COPY_SIDE, "remove", refuse)
    return []


def test_close_never_raises_and_says_what_stayed(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = ScratchCopy(tmp_path, "stuck")
    holder.sync(src)
    undo = _make_undeletable(holder.path, monkeypatch)
    try:
        left = holder.close()
        assert isinstance(left, str) and str(holder.path) in left
    finally:
        for argv in undo:
            subprocess.run(argv, check=True)
        monkeypatch.undo()
    assert holder.close() is None and not holder.path.exists()


# --- property: after any pair of syncs the copy equals the source, with oracle counts ---------

names = st.sampled_from(["a", "b", "c", "d"])
trees = st.recursive(
    st.binary(max_size=8),
    lambda children: st.dictionaries(names, children, max_size=3),
    max_leaves=12,
)
roots = st.dictionaries(names, trees, max_size=4)


def write(root: Path, tree: dict[str, object]) -> None:
    root.mkdir()
    for name, item in tree.items():
        if isinstance(item, bytes):
            (root / name).write_bytes(item)
        else:
            assert isinstance(item, dict)
            write(root / name, item)


def mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def files_of(tree: dict[str, object], prefix: str = "") -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name, item in tree.items():
        if isinstance(item, bytes):
            out[prefix + name] = item
        else:
            assert isinstance(item, dict)
            out.update(files_of(item, f"{prefix}{name}/"))
    return out


# The autouse `side` fixture is function-scoped but constant across examples: harmless.
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(first=roots, second=roots)
def test_property_copy_equals_source_and_counts_match_an_oracle(
    first: dict[str, object], second: dict[str, object]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src, copy = Path(tmp, "src"), Path(tmp, "copy")
        write(src, first)
        sync(src, copy)
        assert_equal_trees(src, copy)
        was = mtimes(src)
        shutil.rmtree(src)
        write(src, second)
        old, new, now = files_of(first), files_of(second), mtimes(src)
        expected = work(
            created=len(new.keys() - old.keys()),
            # Bytes or mtime differ (the second tree is written anew: its mtimes are later
            # unless the clock's tick lumps them together).
            rewritten=sum(
                1 for p in new.keys() & old.keys() if new[p] != old[p] or was[p] != now[p]
            ),
            removed=len(old.keys() - new.keys()),
            walked=entries(src),
        )
        assert sync(src, copy) == expected
        assert_equal_trees(src, copy)
        assert sync(src, copy) == work(walked=entries(src))


def test_a_venv_is_counted_once(tmp_path: Path) -> None:
    """The project's own .venv: lib64 -> lib used to be followed, doubling files and bytes."""
    src = tmp_path / "proj"
    site = src / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for i in range(30):
        (site / f"m{i}.py").write_bytes(b"x" * 100)
    (src / ".venv" / "lib64").symlink_to("lib")
    (src / ".venv" / "bin").mkdir()
    interpreter = tmp_path / "python3"
    interpreter.write_bytes(b"\x7fELF interpreter")
    (src / ".venv" / "bin" / "python").symlink_to(interpreter)  # absolute: its content
    # Relative, but its next step (python -> /abs) leaves the tree: content as well.
    (src / ".venv" / "bin" / "python3").symlink_to("python")
    (src / ".venv" / "bin" / "activate").write_bytes(b"")
    (src / ".venv" / "bin" / "py").symlink_to("activate")  # every step inside: a link
    copy = tmp_path / "copy"
    # 30 modules + lib64 + python + python3 + activate + py = 35 files, 3 000 + 2 x 16 bytes:
    # the bounds hold exactly, so lib's files were not counted a second time through lib64.
    work = sync(src, copy, Bounds(files=35, bytes=3032))
    assert work.created == 35
    assert os.readlink(copy / ".venv" / "lib64") == "lib"
    assert os.readlink(copy / ".venv" / "bin" / "py") == "activate"
    for name in ("python", "python3"):
        assert (copy / ".venv" / "bin" / name).read_bytes() == b"\x7fELF interpreter"
        assert not (copy / ".venv" / "bin" / name).is_symlink()
    assert (copy / ".venv" / "lib64" / "python3.11" / "site-packages" / "m0.py").exists()


def test_the_copy_root_mode_a_command_changed_is_restored(tmp_path: Path, src: Path) -> None:
    # Issue 27: `chmod 000 .` in the copy broke every later command; every directory but the
    # root was restored. Both sides, and a mode that adds bits (0777) as well as one that drops.
    copy = tmp_path / "copy"
    sync(src, copy)
    for mode in (0o000, 0o777):
        copy.chmod(mode)
        sync(src, copy)
        assert stat.S_IMODE(copy.stat().st_mode) == 0o700


def test_skipped_entries_are_named_up_to_a_bound(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy_walk, "SKIPPED_NAMED", 2)
    for i in range(3):
        os.mkfifo(src / f"p{i}")
    work = sync(src, tmp_path / "copy")
    assert len(work.skipped) == 3 and work.skipped[-1] == "… and 1 more"
    assert all("a fifo (named pipe)" in s for s in work.skipped[:2])
    # A device, reached through a link out of the tree (the bare sync has no guard; the
    # tool's guard refuses /dev and names it in refused_links instead).
    shutil.rmtree(src)
    src.mkdir()
    (src / "null").symlink_to("/dev/null")
    work = sync(src, tmp_path / "copy")
    assert work.skipped == ("null: a device: only files, directories and links are copied",)
