"""Run a command in a user namespace of its own, every id mapped to itself, whose
`user.max_user_namespaces` is 0: nothing in it can make another user namespace, as on a
host that refuses them (Ubuntu 24.04's AppArmor rule, an unprivileged container). The
sysctl is per user namespace: the machine's own value, which other suites running at the
same time depend on, is never touched.

    python -m tests.integration.nouserns ARGV...   (root only: the identity map of every
                                                     id needs CAP_SETUID in the parent)
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000
ALL_IDS = "0 0 4294967295\n"


def main(argv: list[str]) -> int:
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"unshare: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(99)
        os.write(ready_w, b"k")
        os.read(go_r, 1)  # the parent wrote our maps
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
        os.execvp(argv[0], argv)
    os.close(ready_w)
    os.close(go_r)
    if os.read(ready_r, 1) != b"k":
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(ALL_IDS)
    os.write(go_w, b"g")
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
