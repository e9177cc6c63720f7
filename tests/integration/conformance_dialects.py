"""The probe commands of the conformance tests, per dialect (see conformance.py).

`PythonDialect` runs on host arms (a Python is on the host); `ShDialect` uses POSIX sh and
busybox applets, a busybox image's tools (`ShDialect("busybox ")` runs the same applets
through a host's busybox-static). Every probe exits REFUSED_EXIT when the sandbox stopped
what it tried.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Protocol

REFUSED_EXIT = 3


class Dialect(Protocol):
    def write(self, name: str) -> list[str]: ...
    def connect(self, host: str, port: int) -> list[str]: ...
    def outlive(self, marker: str, ready: str) -> list[str]: ...
    def create(self, name: str) -> list[str]: ...
    def chmod(self, path: str) -> list[str]: ...
    def allocate(self, nbytes: int) -> list[str]: ...
    def read(self, path: str) -> list[str]: ...


_PY_CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
except OSError as err:
    print("refused", type(err).__name__, err)
    sys.exit(3)
s.sendall(b"x")
s.close()
print("connected")
"""

_PY_OUTLIVE_POSIX = """
import os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
if os.fork() == 0:
    try:
        os.setsid()
    except OSError:
        pass  # refused (the landlock mechanism): the double fork alone must be caught
    if os.fork() == 0:
        code = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(120)"
        os.execv(sys.executable, [sys.executable, "-c", code, ready, marker])
    os._exit(0)
os.wait()
for _ in range(100):
    if os.path.exists(ready):
        print("ready")
        break
    time.sleep(0.05)
"""

_PY_OUTLIVE_WINDOWS = """
import os, subprocess, sys, time
marker, ready = sys.argv[1], sys.argv[2]
code = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(120)"
argv = [sys.executable, "-c", code, ready, marker]
flags = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
try:
    subprocess.Popen(argv, creationflags=flags | subprocess.CREATE_BREAKAWAY_FROM_JOB)
except OSError:
    subprocess.Popen(argv, creationflags=flags)
for _ in range(100):
    if os.path.exists(ready):
        print("ready")
        break
    time.sleep(0.05)
"""

_PY_ALLOCATE = """
import sys
want, chunk, held, got = int(sys.argv[1]), 16 * 1024 * 1024, [], 0
try:
    while got < want:
        held.append(bytearray(b"\\1") * chunk)  # written, so the pages are really there
        got += chunk
except MemoryError:
    print("refused", got)
    sys.exit(3)
print("allocated", got)
"""

_PY_READ = """
import sys
try:
    print("read", open(sys.argv[1]).read())
except OSError as err:
    print("refused", type(err).__name__, err)
    sys.exit(3)
"""


@dataclass(frozen=True)
class PythonDialect:
    # The interpreter itself, not a venv's link to it: a venv under /tmp (CI may clone
    # there) is hidden inside bwrap by its private --tmpfs /tmp, and the probes need only
    # the standard library.
    python: str = os.path.realpath(sys.executable)
    platform: str = sys.platform

    def _py(self, code: str, *args: str) -> list[str]:
        return [self.python, "-c", code, *args]

    def write(self, name: str) -> list[str]:
        return self._py("import sys; open(sys.argv[1], 'w').write('x')", name)

    def connect(self, host: str, port: int) -> list[str]:
        return self._py(_PY_CONNECT, host, str(port))

    def outlive(self, marker: str, ready: str) -> list[str]:
        code = _PY_OUTLIVE_WINDOWS if self.platform == "win32" else _PY_OUTLIVE_POSIX
        return self._py(code, marker, ready)

    def create(self, name: str) -> list[str]:
        return self.write(name)

    def chmod(self, path: str) -> list[str]:
        return self._py("import os, sys; os.chmod(sys.argv[1], 0o600)", path)

    def allocate(self, nbytes: int) -> list[str]:
        return self._py(_PY_ALLOCATE, str(nbytes))

    def read(self, path: str) -> list[str]:
        return self._py(_PY_READ, path)


@dataclass(frozen=True)
class ShDialect:
    """POSIX sh plus busybox applets (nc, setsid, dd, sleep, touch): a busybox image's
    tools. `prefix` ("busybox ") runs the applets through a host's busybox binary."""

    prefix: str = ""
    shell: str = "sh"

    def _sh(self, line: str) -> list[str]:
        return [self.shell, "-c", line]

    def write(self, name: str) -> list[str]:
        return self._sh(f"echo x > {shlex.quote(name)}")

    def connect(self, host: str, port: int) -> list[str]:
        p = self.prefix
        return self._sh(
            f"if {p}nc -w 3 {host} {port} </dev/null; then echo connected; "
            f"else echo refused; exit {REFUSED_EXIT}; fi"
        )

    def outlive(self, marker: str, ready: str) -> list[str]:
        p, r = self.prefix, shlex.quote(ready)
        # The detached sh keeps the marker in its own argv (the trailing `:` stops sh
        # from exec'ing sleep in its place).
        inner = shlex.quote(f"{p}touch {r}; {p}sleep 120; : {marker}")
        return self._sh(
            f"({p}setsid sh -c {inner} 2>/dev/null || sh -c {inner}) & i=0; "
            f"while [ ! -e {r} ] && [ $i -lt 100 ]; do {p}sleep 0.05; i=$((i+1)); done; "
            f"[ -e {r} ] && echo ready"
        )

    def create(self, name: str) -> list[str]:
        return self._sh(f"{self.prefix}touch {shlex.quote(name)}")

    def chmod(self, path: str) -> list[str]:
        return self._sh(f"{self.prefix}chmod 600 {shlex.quote(path)}")

    def allocate(self, nbytes: int) -> list[str]:
        # dd's buffer is one block of `bs` bytes; reading /dev/zero into it touches every page.
        return self._sh(
            f"if {self.prefix}dd if=/dev/zero of=/dev/null bs={nbytes} count=1 2>/dev/null; "
            f"then echo allocated {nbytes}; else echo refused; exit {REFUSED_EXIT}; fi"
        )

    def read(self, path: str) -> list[str]:
        return self._sh(
            f"if {self.prefix}cat {shlex.quote(path)}; then :; else echo refused; "
            f"exit {REFUSED_EXIT}; fi"
        )
