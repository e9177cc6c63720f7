"""Python helpers the probes use where busybox has no applet (unix/abstract sockets, UDP,
TIOCSTI, ptrace, a double-forked daemon). They ride in the probe script as shell variables,
so they contain no single quote. A sandbox without a Python (a busybox image) runs the
busybox fallback of each probe instead (probes.py).
"""

from __future__ import annotations

UNIX = """
import socket, sys
path, msg = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
try:
    s.connect("\\0" + path[1:] if path.startswith("@") else path)
except OSError as err:
    print("refused", err)
    sys.exit(1)
s.sendall(msg.encode())
if msg.startswith("GET"):
    print("answered", s.recv(60))
print("connected", path)
"""

# Every unix socket this process can find: /proc/net/unix (all sockets of its network
# namespace) plus a walk of the usual socket directories; each one connected to.
SWEEP = """
import os, socket, stat, sys
abstract = sys.argv[1] == "abstract"
# Another escape suite bait on this machine (a second pytest session) is not a door this
# run may judge: their listeners would count our sweep, and ours theirs. Skip every bait path
# but ours (argv[2] is this run token); every other socket is still tried.
mine = sys.argv[2]
found = []
try:
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[7].startswith("@") == abstract:
            found.append(parts[7])
except OSError:
    pass
if not abstract:
    for top in sys.argv[3:]:
        for root, dirs, files in os.walk(top):
            if root.count("/") - top.count("/") >= 4:
                dirs[:] = []
            for f in files:
                p = os.path.join(root, f)
                try:
                    if stat.S_ISSOCK(os.lstat(p).st_mode):
                        found.append(p)
                except OSError:
                    pass
got = []
found = [p for p in found if mine in p or not any(b in p for b in ("esc-", "test_escapes_"))]
for path in list(dict.fromkeys(found))[:150]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(0.5)
    try:
        s.connect("\\0" + path[1:] if path.startswith("@") else path)
        got.append(path)
    except OSError:
        pass
    s.close()
print("seen", len(found), "connected", got[:8])
sys.exit(0 if got else 1)
"""

UDP = """
import socket, sys
addr, port, msg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
try:
    s.sendto(msg.encode(), (addr, port))
except OSError as err:
    print("refused", err)
    sys.exit(1)
print("sent")
"""

# Every way to get an AF_UNIX socket past a seccomp filter on socket(): the plain call, the
# x32 ABI number (a filter that forgets the ABI bit lets it through), and whether io_uring
# (IORING_OP_SOCKET, Linux 5.19+) is there at all; each socket got tries every planted path.
BYPASS = """
import ctypes, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
said, got = [], []
try:
    got.append(("socket()", socket.socket(socket.AF_UNIX)))
except OSError as err:
    said.append("socket(): " + str(err.strerror))
fd = libc.syscall(0x40000000 | 41, 1, 1, 0)
if fd >= 0:
    got.append(("x32 socket", socket.socket(fileno=fd)))
else:
    said.append("x32 socket: errno %d" % ctypes.get_errno())
ring = libc.syscall(425, 1, ctypes.create_string_buffer(120))
said.append("io_uring_setup: " + ("fd %d" % ring if ring >= 0 else "errno %d" % ctypes.get_errno()))
for how, s in got:
    s.settimeout(1)
    for path in sys.argv[1:]:
        try:
            s.connect(path)
            print("connected via", how, "to", path)
            sys.exit(0)
        except OSError as err:
            said.append("%s %s: %s" % (how, path, err.strerror))
print("; ".join(said[:5]))
sys.exit(1)
"""

TCP = """
import socket, sys
addr, port, msg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    s = socket.create_connection((addr, port), timeout=2)
except OSError as err:
    print("refused", err)
    sys.exit(1)
s.sendall(msg.encode())
print("connected")
"""

TIOCSTI = """
import fcntl, os, sys, termios
hit = []
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b" ")
        hit.append(fd)
    except OSError:
        pass
try:
    t = os.open("/dev/tty", os.O_RDWR)
    fcntl.ioctl(t, termios.TIOCSTI, b" ")
    hit.append("/dev/tty")
except OSError:
    pass
print("pushed into", hit)
sys.exit(0 if hit else 1)
"""

# Attach only to *the* host process: in a pid namespace the same number is another one,
# so its start time (field 22 of stat) must match the host's.
PTRACE = """
import ctypes, os, sys
pid, start = int(sys.argv[1]), sys.argv[2]
try:
    mine = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[19]
except OSError as err:
    print("not visible", err)
    sys.exit(1)
if mine != start:
    print("pid", pid, "is another process here")
    sys.exit(1)
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, pid, 0, 0) != 0:
    print("attach refused", ctypes.get_errno())
    sys.exit(1)
os.waitpid(pid, 0)
libc.ptrace(17, pid, 0, 0)
print("attached to host pid", pid)
"""

DAEMON = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 1024)
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(0)
os.wait()
print("forked")
"""

FD_SOCKET = """
import socket, sys
for n in range(3, 256):
    try:
        s = socket.socket(fileno=n)
    except OSError:
        continue
    try:
        s.send(sys.argv[1].encode())
        print("sent on fd", n)
        sys.exit(0)
    except OSError:
        pass
    finally:
        s.detach()
sys.exit(1)
"""

ALL = {
    "PYUNIX": UNIX,
    "PYTCP": TCP,
    "PYBYPASS": BYPASS,
    "PYSWEEP": SWEEP,
    "PYUDP": UDP,
    "PYSTI": TIOCSTI,
    "PYPTRACE": PTRACE,
    "PYDAEMON": DAEMON,
    "PYFDSOCK": FD_SOCKET,
}

for _name, _code in ALL.items():
    assert "'" not in _code, f"{_name} must not contain a single quote"
