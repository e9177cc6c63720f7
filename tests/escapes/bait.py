"""The host side of the escape probes: everything a probe could reach if it got out.

`Bait(tree, scratch)` plants, on the host, for one arm's run:
- unix listening sockets in several directories and modes (world-writable included), an
  abstract-namespace listener, TCP and UDP listeners on loopback and every other host
  address (IPv4 and IPv6), and a private `podman system service` socket;
- sleepers: a process whose environ/cwd/fd a probe tries to read or write through /proc,
  and victims a probe tries to signal;
- world-writable directories under /tmp, /var/tmp, /dev/shm, /run and $HOME, target files
  for links, a FIFO with a reader, a key in the caller's user keyring;
- inheritable file descriptors (a file, the source tree's directory, a socket).

Every listener records what reached it. Everything created is recorded and removed by
`close()`, also when a test fails half way.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

ESC_FDS = (60, 61, 62)  # the numbers the inheritable fds get (high: pytest owns the low ones)


def link_local() -> str | None:
    """An IPv6 link-local address of this machine with its scope (fe80::…%eth0), if any."""
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:
        for line in f:
            raw, _, _, scope, _, dev = line.split()
            if scope == "20" and dev != "lo":
                return f"{socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw))}%{dev}"
    return None


def host_addresses() -> list[str]:
    """Every address of this machine a listener can bind, link-local ones left out (they
    need a scope id that busybox nc can't take)."""
    found = ["127.0.0.1", "::1"]
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as f:
        for line in f:
            raw, _, _, scope, _, _ = line.split()
            if scope == "00":  # global
                found.append(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw)))
    done = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        addr = line.split()[3].split("/")[0]
        if not addr.startswith("127."):
            found.append(addr)
    return list(dict.fromkeys(found))


class _Accepting(threading.Thread):
    """A stream listener that accepts and records what each connection sent."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.sock, self.got = sock, []  # type: list[bytes]
        self.sock.settimeout(0.1)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(1)
            try:
                self.got.append(conn.recv(200) or b"(connected)")
            except OSError:
                self.got.append(b"(connected)")
            conn.close()


class _Receiving(threading.Thread):
    def __init__(self, sock: socket.socket, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.sock, self.got = sock, []  # type: list[bytes]
        self.sock.settimeout(0.1)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.got.append(self.sock.recv(512) or b"(empty)")
            except OSError:
                continue


class Bait:
    def __init__(self, tree: Path, scratch: Path, state: Path) -> None:
        self.tok = secrets.token_hex(4)
        self.secret = f"esc-secret-{secrets.token_hex(8)}"
        self.tree, self.scratch = tree, scratch
        self.dirs: list[Path] = []
        self.threads: list[_Accepting | _Receiving] = []
        self.socks: list[socket.socket] = []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.fds: list[int] = []
        self.key: int | None = None
        self.values: dict[str, str] = {
            "TOK": self.tok,
            "TREE": str(tree),
            "SCRATCH": str(scratch),
            "HOME": str(Path.home()),
            "STATE": str(state),
            "LEDGER": str(state / "ledger.jsonl"),
        }
        self.unix: dict[str, _Accepting] = {}
        self.tcp: dict[str, _Accepting] = {}
        self.udp: dict[str, _Receiving] = {}
        self.fifo_got: list[bytes] = []
        self.planted: list[Path] = []
        self.closed = threading.Event()
        # Each daemon probe sleeps a number of seconds no other process uses: the host finds
        # survivors by that argument.
        for name in ("D_SETSID", "D_NOHUP", "D_SSD", "D_PY", "D_TRAP", "D_SYSTEMD", "D_BG", "D_DF"):
            self.values[name] = str(7_000_000 + secrets.randbelow(2_000_000))
        # a first command's daemon, looked for by the next one: that one's script holds only
        # the half, so its own command line never matches
        half = 3_500_000 + secrets.randbelow(1_000_000)
        self.values["D_PLANT"], self.values["D_PLANT_HALF"] = str(2 * half), str(half)
        self.values["HOSTMNT"] = os.readlink("/proc/self/ns/mnt")
        with contextlib.suppress(OSError):
            st = os.stat("/etc/passwd")
            self.values["PWID"] = f"{st.st_dev}:{st.st_ino}"
        # A host binary nothing is running (a running one can't be opened for writing:
        # ETXTBSY), to see whether the command could replace it (CVE-2019-5736's shape).
        for binary in ("/usr/bin/tac", "/usr/bin/expand", "/usr/bin/nl"):
            if os.path.exists(binary) and not os.path.islink(binary):
                st = os.stat(binary)
                self.values["BINPATH"], self.values["BINID"] = binary, f"{st.st_dev}:{st.st_ino}"
                break
        with contextlib.suppress(OSError):
            a, b = os.stat("/proc/1/root/tmp"), os.stat("/tmp")
            if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                self.values["P1ROOT"] = "1"
        # /dev/kmsg (c 1 11): readable by root on the host, outside docker's default device
        # allowlist; reading one record changes nothing.
        if os.path.exists("/dev/kmsg"):
            self.values["MAJMIN"] = "1 11"
        if shutil.which("systemctl"):
            state = subprocess.run(
                ["systemctl", "is-system-running"], capture_output=True, text=True, check=False
            ).stdout.strip()
            if state in ("running", "degraded"):
                self.values["SYSTEMD"] = "1"

    # -- directories ------------------------------------------------------------------
    def dir(self, key: str, path: Path, mode: int = 0o777) -> Path:
        path.mkdir(parents=True, exist_ok=False)
        path.chmod(mode)
        self.dirs.append(path)
        self.values[key] = str(path)
        return path

    def plant_dirs(self) -> None:
        t = self.tok
        # written by probes outside the bait directories when they get out
        self.planted += [Path.home() / f".esc-{t}-direct", Path(f"/tmp/.esc-{t}-direct")]
        self.dir("TMPD", Path(f"/tmp/esc-{t}"))
        self.dir("WWD", Path(f"/tmp/esc-{t}-ww"), 0o1777)
        self.dir("VARTMPD", Path(f"/var/tmp/esc-{t}"))
        self.dir("SHMD", Path(f"/dev/shm/esc-{t}"))
        self.dir("RUND", Path(f"/run/esc-{t}"), 0o755)
        self.dir("HOMED", Path.home() / f".esc-{t}")
        self.dir("OUTSIDE", self.tree.parent / f"outside-{t}")
        self.dir("VICTIM", self.scratch / f"sprawl-victim-{t}")
        # the state directory: the ledger, and another workdir's persistent copy in it
        Path(self.values["STATE"]).mkdir(parents=True, exist_ok=True)
        Path(self.values["LEDGER"]).touch()
        self.dir("OTHERCOPY", Path(self.values["STATE"]) / "copies" / f"esc-victim-{t}")
        for name in (
            "target-abs",
            "target-rel",
            "target-hard",
            "resync-target",
            "resync-hard",
            "second-target",
        ):
            base = self.values["OUTSIDE"] if name == "target-rel" else self.values["TMPD"]
            target = Path(base) / name
            target.write_text("untouched\n")
            target.chmod(0o666)
        # next to the tree, on its filesystem: hardlink-host-file, chmod-host-file
        for name, mode in (("target-hl", 0o666), ("chmod-target", 0o644)):
            target = Path(self.values["OUTSIDE"]) / name
            target.write_text("untouched\n")
            target.chmod(mode)
        # hard-linked into the tree as `hard-mode`; a command chmods its copy (apply-mode-*)
        mode_target = Path(self.values["TMPD"]) / "mode-target"
        mode_target.write_text("untouched\n")
        mode_target.chmod(0o644)
        self.dir("RESYNCD", Path(self.values["TMPD"]) / "resync-dir")
        self.dir("LINKD", Path(self.values["TMPD"]) / "link-dir")

    # -- listeners --------------------------------------------------------------------
    def _listen_unix(self, key: str, path: str, mode: int) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        if not path.startswith("\0"):
            os.chmod(path, mode)
        s.listen(16)
        self.socks.append(s)
        acc = _Accepting(s, key)
        acc.start()
        self.threads.append(acc)
        self.unix[key] = acc
        self.values[key] = path.replace("\0", "")

    def plant_listeners(self) -> None:
        v = self.values
        self._listen_unix("U_TMP", f"{v['TMPD']}/s.sock", 0o600)
        self._listen_unix("U_WW", f"{v['WWD']}/ww.sock", 0o777)
        self._listen_unix("U_VARTMP", f"{v['VARTMPD']}/v.sock", 0o777)
        self._listen_unix("U_SHM", f"{v['SHMD']}/d.sock", 0o777)
        self._listen_unix("U_RUN", f"{v['RUND']}/r.sock", 0o777)
        self._listen_unix("U_HOME", f"{v['HOMED']}/h.sock", 0o777)
        self._listen_unix("U_OUTSIDE", f"{v['OUTSIDE']}/o.sock", 0o777)
        self._listen_unix("U_TREE", f"{self.tree}/esc-{self.tok}.sock", 0o777)
        self._listen_unix("U_ABSTRACT", f"\0esc-abstract-{self.tok}", 0)
        for n, addr in enumerate(host_addresses()):
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            t = socket.socket(fam, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind((addr, 0))
            t.listen(16)
            acc = _Accepting(t, f"tcp-{addr}")
            acc.start()
            self.socks.append(t)
            self.threads.append(acc)
            self.tcp[addr] = acc
            self.values[f"TCP{n}_A"], self.values[f"TCP{n}_P"] = addr, str(t.getsockname()[1])
            u = socket.socket(fam, socket.SOCK_DGRAM)
            u.bind((addr, 0))
            rec = _Receiving(u, f"udp-{addr}")
            rec.start()
            self.socks.append(u)
            self.threads.append(rec)
            self.udp[addr] = rec
            self.values[f"UDP{n}_A"], self.values[f"UDP{n}_P"] = addr, str(u.getsockname()[1])
        scoped = link_local()
        if scoped is not None:
            where = socket.getaddrinfo(scoped, 0, socket.AF_INET6, socket.SOCK_STREAM)[0][4]
            ll = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            ll.bind(where)
            ll.listen(16)
            acc = _Accepting(ll, "tcp-link-local")
            acc.start()
            self.socks.append(ll)
            self.threads.append(acc)
            self.tcp[scoped] = acc
            self.values["TCPLL_A"], self.values["TCPLL_P"] = scoped, str(ll.getsockname()[1])
        # 127.0.0.2 and every other address of the machine: one wildcard listener.
        w = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        w.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        w.bind(("0.0.0.0", 0))
        w.listen(16)
        acc = _Accepting(w, "tcp-wildcard")
        acc.start()
        self.socks.append(w)
        self.threads.append(acc)
        self.tcp["0.0.0.0"] = acc
        self.values["TCPW_P"] = str(w.getsockname()[1])

    def start_podman_service(self) -> None:
        """Podman has no daemon socket until someone runs its API service (podman.socket);
        a command that reaches it can start a privileged container, so it is bait too."""
        podman = shutil.which("podman")
        if podman is None:
            return
        path = f"{self.values['RUND']}/podman.sock"
        self.procs["podman"] = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{path}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # 5 s was not always enough for the service to bind under load, and a missing socket
        # would make the probes that aim at it pass for the wrong reason.
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert self.procs["podman"].poll() is None, "podman system service exited"
            assert time.monotonic() < deadline, f"podman system service never made {path}"
            time.sleep(0.05)
        self.values["PODMAN_SOCK"] = path

    # -- processes --------------------------------------------------------------------
    def _sleeper(
        self, key: str, env: dict[str, str], cwd: str | None = None, shell: str = "exec sleep 600"
    ) -> None:
        p = subprocess.Popen(
            ["sh", "-c", shell],
            env={"PATH": "/usr/bin:/bin", **env},
            cwd=cwd,
            start_new_session=True,
        )
        self.procs[key] = p
        self.values[key] = str(p.pid)

    def start_sleepers(self) -> None:
        procfd = Path(self.values["TMPD"]) / "procfd"
        procfd.write_text("untouched\n")
        self._sleeper(
            "P_PID",
            {"ESC_SECRET": self.secret},
            cwd=self.values["TMPD"],
            shell=f"exec 5<>{procfd}; exec sleep 600",
        )
        self._sleeper("S_KILL", {})
        self._sleeper("S_GROUP", {})
        self._sleeper("S_SWEEP", {"ESC_VICTIM": self.tok})
        # The probes must see the final process: wait until every shell has exec'd sleep (a
        # fixed 0.1 s was not always enough with seven other suites on two cores).
        deadline = time.monotonic() + 30
        for key in ("P_PID", "S_KILL", "S_GROUP", "S_SWEEP"):
            cmdline = Path(f"/proc/{self.values[key]}/cmdline")
            while not cmdline.read_bytes().startswith(b"sleep\0"):
                assert self.alive(key), f"{key}: the shell died before it exec'd sleep"
                assert time.monotonic() < deadline, f"{key} never exec'd sleep"
                time.sleep(0.01)
        with open(f"/proc/{self.values['P_PID']}/stat") as f:
            self.values["P_START"] = f.read().rsplit(")", 1)[1].split()[19]

    def alive(self, key: str) -> bool:
        return self.procs[key].poll() is None

    # -- the tree, fds, keys ----------------------------------------------------------
    def plant_tree(self) -> None:
        """Links, a hard link, a FIFO (with a reader) and a device node in the source tree,
        before the first sync."""
        v, t = self.values, self.tree
        self.planted += [
            t / n
            for n in (
                "link-abs",
                "link-rel",
                "link-dir",
                "link-src",
                "hard",
                "hard-mode",
                "fifo",
                "dev-kmsg",
            )
        ]
        (t / "link-abs").symlink_to(f"{v['TMPD']}/target-abs")
        (t / "link-rel").symlink_to(f"../outside-{self.tok}/target-rel")
        (t / "link-dir").symlink_to(v["LINKD"])
        (t / "link-src").symlink_to(str(t / "a.txt"))
        os.link(f"{v['TMPD']}/target-hard", t / "hard")
        os.link(f"{v['TMPD']}/mode-target", t / "hard-mode")
        os.mkfifo(t / "fifo")
        threading.Thread(target=self._read_fifo, args=(t / "fifo",), daemon=True).start()
        if "MAJMIN" in v:
            os.mknod(t / "dev-kmsg", 0o600 | stat.S_IFCHR, os.makedev(1, 11))
            v["DEVNODE"] = "dev-kmsg"

    def _read_fifo(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not self.closed.is_set():
                with contextlib.suppress(BlockingIOError):
                    data = os.read(fd, 200)
                    if data:
                        self.fifo_got.append(data)
                time.sleep(0.05)
        finally:
            os.close(fd)

    def open_fds(self) -> None:
        """Inheritable fds the caller holds when it starts the command (CVE-2024-21626 shape)."""
        f = os.open(f"{self.values['TMPD']}/fd-file", os.O_RDWR | os.O_CREAT, 0o666)
        d = os.open(str(self.tree), os.O_RDONLY | os.O_DIRECTORY)
        a, b = socket.socketpair()
        self.socks.append(b)
        b.settimeout(0.05)
        for fd, target in zip((f, d, a.detach()), ESC_FDS, strict=True):
            os.dup2(fd, target, inheritable=True)
            os.close(fd)
            self.fds.append(target)
        self.fd_peer = b

    def fd_peer_got(self) -> bytes:
        with contextlib.suppress(OSError):
            return self.fd_peer.recv(200)
        return b""

    def add_key(self) -> None:
        """A key in the caller's user keyring (what `keyctl add user NAME DATA @u` does)."""
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        key = syscall(
            248,
            b"user",
            f"esc-key-{self.tok}".encode(),
            self.secret.encode(),
            len(self.secret),
            ctypes.c_int(-4),
        )  # add_key, KEY_SPEC_USER_KEYRING
        self.key = int(key) if key > 0 else None
        self.values["KEYNAME"] = f"esc-key-{self.tok}"

    # -- teardown ---------------------------------------------------------------------
    def close(self) -> None:
        self.closed.set()
        for path in self.planted:  # a block device node of the root disk must not stay
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for th in self.threads:
            th.stop.set()
        for th in self.threads:
            th.join(2)
        for s in self.socks:
            s.close()
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        if self.key is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall(250, 3, self.key)  # keyctl(KEYCTL_REVOKE)
            libc.syscall(250, 9, self.key, ctypes.c_int(-4))  # KEYCTL_UNLINK from @u
        for d in reversed(self.dirs):
            shutil.rmtree(d, ignore_errors=True)
