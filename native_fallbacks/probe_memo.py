"""A bwrap probe that passed, kept by the exec server (issue 26: a served call ran two probes,
~10 ms each -- offerings' user_namespace_works and the arm's prepare -- in every fork).

Kept in the served memo (core/served_memo.py) under what the probe's answer depends on,
read again on every call: the bwrap binary's identity (real path, dev, ino, size, mtime,
ctime, mode and owner: a replaced or re-chmodded bwrap is a new key), every kernel setting
that allows or limits unprivileged user namespaces (Debian's unprivileged_userns_clone,
Ubuntu's AppArmor restriction, the per-namespace-type maxima), the kernel's release, the
user namespace we run in, the uid the probe runs as, where it starts and the system view
it binds. Only a pass is kept: a failure is asked again every time.

Should namespaces stop working in a way none of these show (an LSM policy loaded between
two calls), nothing is weakened: bwrap itself cannot make the namespaces, so the command
does not run, and its failure is reported as the command's (tests/unit/test_probe_memo.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sprawl_orch.core import served_memo

KIND = "bwrap-probe"
SYSCTLS: tuple[str, ...] = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_ipc_namespaces",
    "/proc/sys/user/max_uts_namespaces",
    "/proc/sys/user/max_cgroup_namespaces",
    "/proc/sys/kernel/seccomp/actions_avail",
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None  # not on this kernel: its absence is part of the key


def key(bwrap: str, workdir: str, user: int | None, view: served_memo.Json) -> served_memo.Json:
    """What a probe's answer depends on, read now; None when bwrap cannot be looked at."""
    try:
        st = os.stat(bwrap)
        userns = os.stat("/proc/self/ns/user").st_ino
    except OSError:
        return None  # nothing to key on: the probe runs, and its answer is not kept
    binary: list[served_memo.Json] = [os.path.realpath(bwrap), st.st_dev, st.st_ino, st.st_size]
    binary += [st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid]
    kernel: list[served_memo.Json] = [os.uname().release, userns]
    kernel += [_read(p) for p in SYSCTLS]
    return [binary, kernel, workdir, user, view]


def remembered(the_key: served_memo.Json, run: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
    """`run()`'s answer, or a pass kept under `the_key`; only a pass is kept."""
    if the_key is not None and served_memo.recall(KIND, the_key) is True:
        return True, ""
    ok, why = run()
    if ok and the_key is not None:
        served_memo.learn(KIND, the_key, True)
    return ok, why
