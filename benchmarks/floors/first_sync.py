"""The floor of a checked first sync (issue 23), for benchmarks/copy_sync.py's floor rows: kept
apart so the benchmark stays readable (benchmarks/*.py are the runnable scripts)."""

from __future__ import annotations

import os
import stat
import threading

from sprawl_orch.copy.stamps import pack

# The floor of a checked first sync (issue 23): the fewest system calls per file that keep every
# check of copy/sync.py, with none of its bookkeeping: the floor rows of the table.
#
# Per file, as the walk and a copy worker do it (copy/walk.py, copy/source.py, copy/fileops.py):
# ``lstat`` relative to the held source directory (the judgement), ``open`` with ``O_NOFOLLOW``
# and ``fstat`` (the very inode judged), ``open`` of a new copy entry with
# ``O_CREAT | O_EXCL | O_NOFOLLOW``, ``sendfile`` of the judged size, ``fchmod``, ``futimens``
# (mtime kept), ``fstat`` (the copy's stamp for the record, packed as copy/stamps.py packs it),
# two ``close``. Per directory: ``lstat``, ``open`` without following, ``mkdir``, ``open`` of the
# copy directory, ``fchmod``, the listing, and ``futimens`` once its entries are written.
#
# What it leaves out, and so what the floor does not pay: links, the guard, bounds, excludes,
# the retry of a changed entry, progress. The benchmark's tree has none of those to judge.
#
# ``workers`` > 1 splits the top-level directories round-robin between that many workers: threads
# (one GIL, what copy/pool.py uses) or forked processes (one GIL each).
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _copy_dir(src_parent: int, dst_parent: int, name: str, entries: bytearray) -> None:
    st = os.stat(name, dir_fd=src_parent, follow_symlinks=False)
    sd = os.open(name, _DIR, dir_fd=src_parent)
    try:
        if not stat.S_ISDIR(st.st_mode) or os.fstat(sd).st_ino != st.st_ino:
            raise RuntimeError(f"{name} changed while copied")
        os.mkdir(name, 0o700, dir_fd=dst_parent)
        dd = os.open(name, _DIR, dir_fd=dst_parent)
        try:
            os.fchmod(dd, stat.S_IMODE(st.st_mode) & 0o777 | 0o700)
            _copy_entries(sd, dd, entries)
            os.utime(dd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dd)
    finally:
        os.close(sd)


def _copy_entries(sd: int, dd: int, entries: bytearray, only: list[str] | None = None) -> None:
    with os.scandir(sd) as it:
        listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in listed:
        if only is not None and name not in only:
            continue
        if is_dir:
            _copy_dir(sd, dd, name, entries)
            continue
        lst = os.stat(name, dir_fd=sd, follow_symlinks=False)
        if not stat.S_ISREG(lst.st_mode):
            continue  # links and specials: the benchmark's tree has none
        fd = os.open(name, _READ, dir_fd=sd)
        try:
            sst = os.fstat(fd)
            if sst.st_ino != lst.st_ino or sst.st_dev != lst.st_dev:
                raise RuntimeError(f"{name} changed while copied")
            mode = sst.st_mode & 0o777
            out = os.open(name, _CREATE, 0o600, dir_fd=dd)
            try:
                left = sst.st_size
                while left > 0:
                    sent = os.sendfile(out, fd, None, left)
                    if sent == 0:
                        break
                    left -= sent
                os.fchmod(out, mode)
                os.utime(out, ns=(sst.st_atime_ns, sst.st_mtime_ns))
                entries += pack(sst, os.fstat(out), mode)
            finally:
                os.close(out)
        finally:
            os.close(fd)


def _part(src: str, dst: str, names: list[str]) -> None:
    sd, dd = os.open(src, _DIR), os.open(dst, _DIR)
    try:
        _copy_entries(sd, dd, bytearray(), names)
    finally:
        os.close(sd)
        os.close(dd)


def floor_copy(src: str, dst: str, workers: int = 1, processes: bool = False) -> None:
    """Copy the tree ``src`` into the new directory ``dst`` (made 0700) the floor's way."""
    os.mkdir(dst, 0o700)
    names = sorted(os.listdir(src))
    parts = [names[i::workers] for i in range(max(1, workers))]
    if len(parts) == 1:
        _part(src, dst, names)
    elif processes:
        pids = []
        for part in parts:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child exits here
                code = 1
                try:
                    _part(src, dst, part)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        failed = [p for p in pids if os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(pids)} floor workers failed")
    else:
        errors: list[BaseException] = []

        def run(part: list[str]) -> None:
            try:
                _part(src, dst, part)
            except BaseException as err:  # re-raised below, on the caller's thread
                errors.append(err)

        threads = [threading.Thread(target=run, args=(part,)) for part in parts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
    st = os.stat(src)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
