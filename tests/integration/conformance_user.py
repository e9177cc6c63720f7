"""The user axis proved from the host side (issue #14 item 5), for any arm:

- `observe_user_process`: while the command runs, find its real process on the host (by a
  marker in its argv) and read `Uid:`/`Gid:` of /proc/<pid>/status — real, effective,
  saved and filesystem ids, all four. Kept only when every uid is not ours, not root, no
  account in the host's passwd, and inside a subordinate range (/etc/subuid): a principal
  reserved for sandboxes. The owner of a file (conformance.judge_uid) says who *wrote*;
  this says who *runs*, including a setuid'd or fs-uid'd leftover.
- `observe_private_read`: a 0600 file of ours that the command can reach must be
  unreadable. Where the command can reach it is the arm's business: `plant` puts it there
  (for a container: into the mounted copy, after the copy was given to the container's
  uid, right before start) and returns the path the command sees.

Both return `Observed` like every conformance probe; a probe that didn't work raises
ProbeBroken.
"""

from __future__ import annotations

import os
import secrets
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from sprawl_orch.core.assurances import Guarantee, Kept
from tests.integration.conformance import (
    Observed,
    ProbeBroken,
    Runner,
    host_principal,
    subordinate_ranges,
)
from tests.integration.conformance_dialects import REFUSED_EXIT

SECRET = "ours, 0600"


def status_ids(pid: int) -> tuple[list[int], list[int]]:
    """(uids, gids) of /proc/<pid>/status: real, effective, saved, filesystem."""
    uids: list[int] = []
    gids: list[int] = []
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Uid:"):
                uids = [int(x) for x in line.split()[1:]]
            elif line.startswith("Gid:"):
                gids = [int(x) for x in line.split()[1:]]
    return uids, gids


def judge_ids(uids: list[int], gids: list[int], pid: int) -> Observed:
    mine = os.getuid()
    said = f"pid {pid} runs as uids {uids} gids {gids} on the host (we are {mine})"
    shared = sorted({u for u in uids if u in (mine, 0)})
    if shared:
        return Observed(Guarantee.USER, Kept.NO, f"{said}: {shared} is ours or root's")
    accounts = {u: host_principal(u) for u in uids}
    named = {u: a for u, a in accounts.items() if a is not None}
    if named:
        return Observed(Guarantee.USER, Kept.NO, f"{said}: host accounts {named}")
    ranges = subordinate_ranges()
    outside = [u for u in uids if not any(u in r for r in ranges)]
    if outside:
        return Observed(Guarantee.USER, Kept.NO, f"{said}: {outside} in no subordinate range")
    return Observed(Guarantee.USER, Kept.YES, f"{said}: subordinate uids, no host account")


def _find(argv: list[str]) -> psutil.Process | None:
    """The process whose whole argv is the command's: the engine's CLI, conmon or a
    wrapper carry it only as a tail of theirs, and they run as us."""
    for proc in psutil.process_iter(["cmdline"]):
        if (proc.info.get("cmdline") or []) == argv:
            return proc
    return None


def observe_user_process(
    run: Runner, command: Callable[[str], list[str]], timeout: float = 30.0
) -> Observed:
    """`command(marker)` must run for a second or two with `marker` in its argv (sh:
    `sh -c ': MARKER; sleep 2'`). Its process is found from the host while it runs."""
    marker = f"sprawl-user-{secrets.token_hex(6)}"
    argv = command(marker)
    seen: list[tuple[int, list[int], list[int]]] = []
    stop = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            proc = _find(argv)
            if proc is not None:
                try:
                    seen.append((proc.pid, *status_ids(proc.pid)))
                    return
                except OSError:
                    pass
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ran = run(argv)
    finally:
        stop.set()
        watcher.join(5)
    if not seen:
        raise ProbeBroken(f"no process with {marker} was seen on the host: {ran.said()}")
    pid, uids, gids = seen[0]
    return judge_ids(uids, gids, pid)


def sh_sleeper(marker: str) -> list[str]:
    return ["sh", "-c", f": {marker}; sleep 2; :"]


def observe_private_read(run: Runner, plant: Callable[[Path], str], where: Path) -> Observed:
    """Plant a 0600 file of ours (`plant(file)` makes it reachable and returns the path
    the command uses), then have the command read it. Read = NO."""
    name = f"conformance-secret-{secrets.token_hex(6)}"
    secret = where / name
    seen_as = plant(secret)
    ran = run(
        [
            "sh",
            "-c",
            f"if cat {shlex.quote(seen_as)}; then :; else echo refused; exit {REFUSED_EXIT}; fi",
        ]
    )
    if ran.exit_code == 0 and SECRET in ran.stdout:
        return Observed(Guarantee.USER, Kept.NO, f"it read our 0600 {seen_as}")
    if ran.exit_code == REFUSED_EXIT and "ermission denied" in ran.stderr:
        return Observed(
            Guarantee.USER,
            Kept.YES,
            f"reading our 0600 {seen_as} was refused: {ran.stderr.strip()[-120:]}",
        )
    raise ProbeBroken(f"the private read probe failed otherwise: {ran.said()}")


def write_secret(path: Path) -> None:
    """A file only we (its owner) may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, SECRET.encode())
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


def observe_owner_live(run: Runner, copy: Path, timeout: float = 30.0) -> Observed:
    """design §15's file-owner probe, read while the command still runs: an arm may give the
    copy back to the caller when the command ends (rootless: ownership.take_back)."""
    from tests.integration.conformance import judge_uid

    name = f"conformance-owner-{secrets.token_hex(6)}"
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                seen.append((copy / name).lstat().st_uid)
                return
            except OSError:
                time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ran = run(["sh", "-c", f"touch {name}; sleep 2"])
    finally:
        stop.set()
        watcher.join(5)
    if ran.exit_code != 0 or not seen:
        raise ProbeBroken(f"the live create probe failed: {ran.said()}")
    return judge_uid(seen[0])
