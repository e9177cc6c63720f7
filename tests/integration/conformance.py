"""Five-axis conformance probes (design §15), shared by every arm's conformance test.

Each axis is *observed* with a real command run through the arm under test and read back
from the host; `assert_conformance(claimed, observed)` fails on any axis where the arm's
`Assurances` and the observation differ, in either direction.

    run = exec_runner(tool)                       # or tool.exec(..., where="host")
    observed = observe_all(run, PythonDialect(), workdir=tree, copy=lambda: the_copy(scratch),
                           limit_bytes=64 * MiB)
    assert_conformance(arm.assurances(), observed)

- `run` is any `Runner`: a callable taking an argv and returning `Ran` (exit code, stdout,
  stderr). `exec_runner(tool, where=...)` wraps an ExecTool and fails on a refusal.
- A `Dialect` (conformance_dialects.py) writes the probe commands: `PythonDialect`
  (host arms: a Python is on the host) or `ShDialect` (busybox images;
  `ShDialect("busybox ")` runs the same applets on a host that has busybox-static,
  which is how it is tested here).
- `copy` returns the directory the arm ran the command in when it is not the working
  directory (the synced copy; `the_copy(scratch_root)` finds it), or None.

What each observation means (kept = YES):
  filesystem    the files the command wrote in its working directory, relatively and by the
                directory's absolute path, are in the copy and not in the source tree (in
                the source: NO; in neither: the probe is broken)
  network       a connection to a listener on the host's 127.0.0.1 failed and the listener
                saw nothing (connected and seen: NO)
  process_tree  a grandchild that called setsid() (Windows: a detached process) and was
                confirmed alive when the command ended is gone within GONE_GRACE_S; a
                survivor means NO and is killed by the probe
  user          POSIX: the owner uid of a file the command created, read from the host, is
                neither ours nor root. Windows: a file only we may read (outside the copy)
                can't be read by the command (an AppContainer keeps our user SID; its own
                SID is what differs, so access, not ownership, tells)
  resources     allocating (and touching) more than `limit_bytes` fails or gets the
                command killed (it succeeded: NO)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from sprawl_orch.core.assurances import Assurances, Guarantee, Kept
from sprawl_orch.native_fallbacks.sandbox_uid import RANGE_SIZE, RANGE_START
from tests.integration.conformance_dialects import (
    REFUSED_EXIT,
    Dialect,
)
from tests.integration.conftest import missing

MiB = 1024 * 1024
GONE_GRACE_S = 0.5


@dataclass(frozen=True)
class Ran:
    exit_code: int | None
    stdout: str
    stderr: str

    def said(self) -> str:
        err = self.stderr.strip()[-400:]
        return f"exit {self.exit_code}; stdout {self.stdout.strip()!r}; stderr {err!r}"


Runner = Callable[[Sequence[str]], Ran]


@dataclass(frozen=True)
class Observed:
    axis: Guarantee
    kept: Kept
    evidence: str


class ProbeBroken(AssertionError):
    """The probe itself did not work: neither outcome can be concluded."""


def absent(what: str, why: str) -> None:
    """A mechanism this test needs is missing: a failure in CI (CI=true: the runner was
    set up to have it), a skip elsewhere."""
    missing(f"{what} is not usable here: {why}")


def exec_runner(tool: object, where: str = "sandbox", timeout: float = 60.0) -> Runner:
    """A Runner over an ExecTool; a refused command fails the test (probes must run)."""

    def run(argv: Sequence[str]) -> Ran:
        result = tool.exec(list(argv), where=where, timeout=timeout)  # type: ignore[attr-defined]
        if result.outcome != "settled":
            raise ProbeBroken(f"{list(argv)} was not run: {result.code}: {result.detail}")
        return Ran(result.exit_code, result.stdout, result.stderr)

    return run


def arm_runner(
    arm: object, cwd: Path, env: dict[str, str], outputs: Path, timeout: float = 60.0
) -> Runner:
    """A Runner straight over an arm (prepare is the caller's): Launch -> start -> wait ->
    finish, for proving an arm where the exec tool can't run yet."""
    from sprawl_orch.runs.launch import Launch

    count = iter(range(1, 1_000_000))

    def run(argv: Sequence[str]) -> Ran:
        n = next(count)
        launch = Launch(
            argv=tuple(argv),
            cwd=cwd,
            env=env,
            outputs=outputs / str(n),
            tag=f"conformance-{n}",
            session="conformance",
        )
        running = arm.start(launch)  # type: ignore[attr-defined]
        if not running.wait(timeout):
            running.kill()
        done = running.finish()
        out = done.stdout_path.read_text(errors="replace")
        err = done.stderr_path.read_text(errors="replace")
        return Ran(done.exit_code, out, err)

    return run


def the_copy(root: Path) -> Path | None:
    """The one synced copy under ``root``: a state directory's persistent copies
    (copies/<key>/<slot>/tree, copy_store), or a scratch root's ScratchCopy (sprawl-*)."""
    copies = [p for p in root.glob("copies/*/*/tree") if p.is_dir()]
    copies += [p for p in root.glob("sprawl-*") if p.is_dir()]
    if len(copies) > 1:
        raise ProbeBroken(f"more than one copy under {root}: {copies}")
    return copies[0] if copies else None


# -- dialects -------------------------------------------------------------------------
# -- observations ---------------------------------------------------------------------
def _token() -> str:
    return secrets.token_hex(6)


def observe_filesystem(
    run: Runner,
    dialect: Dialect,
    workdir: Path,
    copy: Callable[[], Path | None],
    abs_refused: bool = False,
) -> Observed:
    """Two writes: one relative to the working directory, one by the working directory's
    own absolute path -- the path an editable install or a venv records. Kept only when
    both land in the copy and neither in the tree (design §5: the copy sits at that path).
    `abs_refused`: an arm without a mount namespace (landlock) has the copy elsewhere, and
    the write by the tree's path must then fail with "Permission denied", landing nowhere."""
    seen: list[str] = []
    for target in (f"conformance-fs-{_token()}", str(workdir / f"conformance-abs-{_token()}")):
        ran = run(dialect.write(target))
        name = Path(target).name
        if ran.exit_code != 0 and abs_refused and target.startswith("/"):
            if (workdir / name).exists():
                (workdir / name).unlink()
                return Observed(Guarantee.FILESYSTEM, Kept.NO, f"{target} landed in {workdir}")
            if "Permission denied" not in ran.stderr:
                raise ProbeBroken(f"the write by absolute path failed otherwise: {ran.said()}")
            seen.append(f"{target} (refused: Permission denied)")
            continue
        if ran.exit_code != 0:
            raise ProbeBroken(f"the write probe failed: {ran.said()}")
        # Checked after each command: the next one's sync makes the copy equal the tree again.
        where = copy()
        if (workdir / name).exists():
            (workdir / name).unlink()
            return Observed(Guarantee.FILESYSTEM, Kept.NO, f"{target} landed in {workdir}")
        if where is None or not (where / name).exists():
            raise ProbeBroken(
                f"{target} was written (exit 0) but is neither in {workdir} nor the copy"
            )
        seen.append(target)
    if abs_refused:
        changed = _chmod_by_path(run, dialect, workdir)
        if changed is not None:
            return Observed(Guarantee.FILESYSTEM, Kept.NO, changed)
        seen.append("a chmod by the tree's path (refused)")
    return Observed(
        Guarantee.FILESYSTEM, Kept.YES, f"{' and '.join(seen)}: in the copy only, or refused"
    )


def _chmod_by_path(run: Runner, dialect: Dialect, workdir: Path) -> str | None:
    """Without a mount namespace the tree's own files are reachable by path, and Landlock
    governs no chmod: only the command's uid stops one. What changed, or None."""
    target = workdir / f"conformance-mode-{_token()}"
    target.write_text("x")
    target.chmod(0o644)
    try:
        ran = run(dialect.chmod(str(target)))
        mode = target.stat().st_mode & 0o777
    finally:
        target.unlink(missing_ok=True)
    if mode != 0o644:
        return f"a chmod of {target} by its path changed its mode to {mode:o} ({ran.said()})"
    return None


class _Listener:
    """A TCP listener on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.seen += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def observe_network(run: Runner, dialect: Dialect) -> Observed:
    listener = _Listener()
    try:
        ran = run(dialect.connect("127.0.0.1", listener.port))
        # The accept thread counts a connection that just arrived on its own time (a fixed
        # 0.2 s was not always enough on a loaded machine): wait for it when the probe says
        # it connected; when it says it did not, give a stray connection a moment to show.
        deadline = time.monotonic() + (30 if "connected" in ran.stdout else 0.5)
        while not listener.seen and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        listener.close()
    said = f"127.0.0.1:{listener.port}: {ran.stdout.strip() or ran.stderr.strip()[-200:]}"
    if ran.exit_code == 0 and "connected" in ran.stdout and listener.seen:
        return Observed(Guarantee.NETWORK, Kept.NO, f"connected to {said}")
    if ran.exit_code != 0 and not listener.seen:
        return Observed(Guarantee.NETWORK, Kept.YES, f"no connection to {said}")
    raise ProbeBroken(f"connect probe and listener disagree (seen {listener.seen}): {ran.said()}")


def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if any(marker in part for part in cmdline):
            found.append(proc)
    return found


def observe_process_tree(run: Runner, dialect: Dialect, workdir: Path) -> Observed:
    marker, ready = f"sprawl-outlive-{_token()}", f"conformance-ready-{_token()}"
    ran = run(dialect.outlive(marker, ready))
    if "ready" not in ran.stdout:
        raise ProbeBroken(f"the grandchild never said it was running: {ran.said()}")
    deadline = time.monotonic() + GONE_GRACE_S
    left = _with_marker(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _with_marker(marker)
    (workdir / ready).unlink(missing_ok=True)
    if not left:
        return Observed(
            Guarantee.PROCESS_TREE,
            Kept.YES,
            "the setsid grandchild was gone when the command ended",
        )
    pids = [p.pid for p in left]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return Observed(
        Guarantee.PROCESS_TREE,
        Kept.NO,
        f"the setsid grandchild outlived the command (pids {pids}, killed by the test)",
    )


def observe_user(
    run: Runner,
    dialect: Dialect,
    workdir: Path,
    copy: Callable[[], Path | None],
    platform: str = sys.platform,
) -> Observed:
    if platform == "win32":
        return _observe_user_by_access(run, dialect)
    name = f"conformance-user-{_token()}"
    ran = run(dialect.create(name))
    if ran.exit_code != 0:
        raise ProbeBroken(f"the create probe failed: {ran.said()}")
    where = copy()
    candidates = [workdir / name] + ([where / name] if where is not None else [])
    path = next((p for p in candidates if p.exists()), None)
    if path is None:
        raise ProbeBroken(f"{name} was created (exit 0) but is not in {candidates}")
    uid = path.stat().st_uid
    if path.parent == workdir:
        path.unlink()
    return judge_uid(uid)


def subordinate_ranges(path: Path = Path("/etc/subuid")) -> list[range]:
    ranges = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            start, count = int(parts[1]), int(parts[2])
            ranges.append(range(start, start + count))
    return ranges


def host_principal(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def judge_uid(uid: int) -> Observed:
    """design §1's user rule, read from the host: kept only for a uid that is not ours, not
    root, not a host account (a rootful container's 65534 is the host's `nobody`), and lies
    in a range reserved for sandboxes: a subordinate range (/etc/subuid), or the range
    sprawl-orch takes a root caller's bwrap uid from (outside every subordinate range)."""
    mine = os.getuid()  # type: ignore[attr-defined,unused-ignore]
    said = f"the file it created is owned by uid {uid} (we are {mine})"
    if uid in (mine, 0):
        return Observed(Guarantee.USER, Kept.NO, f"{said}: ours or root's")
    account = host_principal(uid)
    if account is not None:
        return Observed(Guarantee.USER, Kept.NO, f"{said}: the host account {account!r}")
    own = range(RANGE_START, RANGE_START + RANGE_SIZE)
    if not any(uid in r for r in subordinate_ranges()) and uid not in own:
        return Observed(Guarantee.USER, Kept.NO, f"{said}: in no subordinate range")
    if uid in own:
        return Observed(Guarantee.USER, Kept.YES, f"{said}: sprawl-orch's own range, no account")
    return Observed(Guarantee.USER, Kept.YES, f"{said}: a subordinate uid, no host account")


def _observe_user_by_access(run: Runner, dialect: Dialect) -> Observed:
    private = Path(tempfile.mkdtemp(prefix="sprawl-conformance-"))
    secret = private / "ours-only.txt"
    secret.write_text("ours")
    try:
        ran = run(dialect.read(str(secret)))
    finally:
        secret.unlink()
        private.rmdir()
    if ran.exit_code == 0 and "ours" in ran.stdout:
        return Observed(Guarantee.USER, Kept.NO, f"it read {secret}, which only we may read")
    if ran.exit_code == REFUSED_EXIT:
        return Observed(
            Guarantee.USER, Kept.YES, f"it could not read {secret}: {ran.stdout.strip()}"
        )
    raise ProbeBroken(f"the read probe failed otherwise: {ran.said()}")


def observe_resources(run: Runner, dialect: Dialect, limit_bytes: int) -> Observed:
    want = limit_bytes + max(limit_bytes // 2, 32 * MiB)
    ran = run(dialect.allocate(want))
    if ran.exit_code == 0 and "allocated" in ran.stdout:
        return Observed(
            Guarantee.RESOURCES, Kept.NO, f"it allocated {want} bytes past a limit of {limit_bytes}"
        )
    killed = ran.exit_code is not None and (ran.exit_code < 0 or ran.exit_code == 137)
    if killed or ran.exit_code == REFUSED_EXIT:
        return Observed(
            Guarantee.RESOURCES,
            Kept.YES,
            f"allocating {want} bytes past {limit_bytes} was stopped ({ran.said()})",
        )
    raise ProbeBroken(f"the allocation probe failed otherwise: {ran.said()}")


def observe_all(
    run: Runner,
    dialect: Dialect,
    *,
    workdir: Path,
    copy: Callable[[], Path | None],
    limit_bytes: int,
    abs_refused: bool = False,
) -> dict[Guarantee, Observed]:
    return {
        Guarantee.FILESYSTEM: observe_filesystem(run, dialect, workdir, copy, abs_refused),
        Guarantee.NETWORK: observe_network(run, dialect),
        Guarantee.PROCESS_TREE: observe_process_tree(run, dialect, workdir),
        Guarantee.USER: observe_user(run, dialect, workdir, copy),
        Guarantee.RESOURCES: observe_resources(run, dialect, limit_bytes),
    }


def mismatches(claimed: Assurances, observed: dict[Guarantee, Observed]) -> list[str]:
    wrong = []
    for axis in Guarantee:
        said = claimed.axes()[axis]
        seen = observed[axis]
        if said is not seen.kept:
            wrong.append(
                f"{axis.value}: claimed {said.value}, observed {seen.kept.value} ({seen.evidence})"
            )
    return wrong


def table(arm: str, observed: dict[Guarantee, Observed]) -> str:
    return f"{arm}: " + ", ".join(f"{a.value}={o.kept.value}" for a, o in observed.items())


def assert_conformance(claimed: Assurances, observed: dict[Guarantee, Observed]) -> None:
    wrong = mismatches(claimed, observed)
    assert not wrong, "claim and observation differ:\n  " + "\n  ".join(wrong)
