"""warm_freeze.Freezer on the kernel's own interfaces, both of them: a cgroup v1 freezer
hierarchy and a cgroup v2 one (this machine is hybrid: /sys/fs/cgroup/freezer and the
controller-less /sys/fs/cgroup/unified), each holding a real forking hopper. Frozen, the
listing is complete and stays so; killed while frozen and thawed, nothing is left -- the
order the warm reset relies on (tests/escapes/test_reset_races.py proves it in containers).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch.container.warm_freeze import Freezer
from sprawl_orch.container.warm_host import FROZEN_ROUNDS
from tests.integration.conftest import missing

HOP = 'sleep 0.003; sh -c "$0" "$0" & exit 0'


def _mount(fstype: str, option: str | None) -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        tail = right.split()
        if tail and tail[0] == fstype and (option is None or option in tail[2].split(",")):
            return Path(left.split()[4])
    return None


@pytest.fixture(params=[1, 2])
def cgroup(request: pytest.FixtureRequest) -> Iterator[tuple[int, Path]]:
    version = int(request.param)
    root = _mount("cgroup", "freezer") if version == 1 else _mount("cgroup2", None)
    if os.geteuid() != 0 or root is None:
        missing(f"cgroup v{version} freezer not writable here (root and its mount needed)")
    path = root / f"sprawl-freeze-{secrets.token_hex(4)}"
    path.mkdir()
    if version == 2 and not (path / "cgroup.freeze").exists():
        path.rmdir()
        missing("cgroup v2 without cgroup.freeze (kernel < 5.2)")
    try:
        yield version, path
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                path.rmdir()
                break
            except OSError:
                for pid in (path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.01)


def test_a_hopper_frozen_killed_and_thawed_leaves_nothing(cgroup: tuple[int, Path]) -> None:
    version, path = cgroup
    # The child enters the cgroup itself before it starts hopping: nothing is outside it.
    subprocess.Popen(
        ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; exec sh -c "$0" "$0"', HOP, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    freezer = Freezer(version, path)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while not freezer.members() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert freezer.members(), "the hopper never entered the cgroup"
    # As the warm reset does (warm_host.kill_strays): up to FROZEN_ROUNDS freezes, each of
    # which re-asks the kernel while it waits.
    froze = any(freezer.freeze() for _ in range(FROZEN_ROUNDS))
    assert froze, f"the cgroup did not freeze: {freezer.describe()}"
    try:
        frozen = freezer.members()
        # Frozen: no fork, so the same members however long one looks.
        assert frozen and all(freezer.members() == frozen for _ in range(20)), frozen
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)
    finally:
        freezer.thaw()
    assert not freezer.frozen()
    deadline = time.monotonic() + 10
    while freezer.members() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not freezer.members(), f"left after the frozen kill: {freezer.members()}"


def test_the_freezer_is_found_from_the_cgroup_file_and_the_mount_table(
    cgroup: tuple[int, Path],
) -> None:
    version, path = cgroup
    mounts = Path("/proc/self/mountinfo").read_text()
    rel = "/" + path.name
    lines = f"6:freezer:{rel}\n0::/\n" if version == 1 else f"6:freezer:/\n0::{rel}\n"
    assert Freezer.of(1, mounts, lines) == Freezer(version, path)  # type: ignore[arg-type]
    assert Freezer.of(1, "", lines) is None, "no cgroup mount: no freezer"
