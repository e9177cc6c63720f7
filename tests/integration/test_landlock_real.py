"""The landlock mechanism on this machine's kernel (native_fallbacks/landlock.py): every
refusal of seccomp_landlock.py's docstring tried by a real command, each beside the same
line run with `where = "host"` (the control: a line that the host refuses too proves
nothing); `auto` taking Landlock where user namespaces are really refused; the helper
holding the process tree; the ABI refusal."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.core.arms import ArmName
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.core.host_which import host_which
from sprawl_orch.native_fallbacks.bwrap import user_namespace_works
from sprawl_orch.native_fallbacks.landlock import LandlockArm, abi
from sprawl_orch.runs.yielding import Yielders
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conftest import missing

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
REPO = Path(__file__).resolve().parents[2]

# Each line in a forked child (setsid/setpgid/unshare change the process that calls them,
# and the command itself is a session leader, where setsid fails anyway).
PROBE = r"""
import ctypes, errno, os, socket, sys
port, target = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def child(f):
    pid = os.fork()
    if pid == 0:
        try:
            f()
            os._exit(0)
        except OSError as e:
            os._exit(e.errno or 255)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
def t(name, f):
    code = child(f)
    print(name, "allowed" if code == 0 else errno.errorcode.get(code, code), flush=True)
def ok(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def listen_autobind():
    s = socket.socket()
    s.listen()
def bind():
    socket.socket().bind(("127.0.0.1", 0))
def fastopen():
    socket.socket().sendto(b"tfo", 0x20000000, ("127.0.0.1", port))
def setsid_after_fork():
    # not a group leader: setsid() would succeed
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os._exit(0)
        except OSError as e:
            os._exit(e.errno)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code))
t("tcp_connect", lambda: socket.create_connection(("127.0.0.1", port), 5).close())
t("tcp_bind", bind)
t("tcp_listen_autobind", listen_autobind)
t("tcp_fastopen", fastopen)
t("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
t("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
t("icmp_ping", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 1))
t("sctp_stream", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
t("sctp_seqpacket", lambda: socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET, 132))
t("mptcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))
t("unix", lambda: socket.socket(socket.AF_UNIX))
t("vsock_created", lambda: socket.socket(40, socket.SOCK_STREAM))  # created only, never connected
t("setsid", setsid_after_fork)
t("setpgid", lambda: os.setpgid(0, 0))
t("unshare_user", lambda: ok(libc.unshare(0x10000000)))
t("unshare_net", lambda: ok(libc.unshare(0x40000000)))
t("clone3", lambda: ok(libc.syscall(ctypes.c_long(435), None, ctypes.c_long(0))))
t("io_uring_setup", lambda: ok(libc.syscall(ctypes.c_long(425), ctypes.c_long(8),
  ctypes.create_string_buffer(120))))
t("hardlink_out", lambda: os.link(target, "esc-hardlink"))
t("write_out", lambda: open(target, "a").write("x"))
t("read_etc_hostname", lambda: open("/etc/hostname").read())
t("write_copy", lambda: open("written-in-copy", "w").write("x"))
t("socketpair_stream", lambda: socket.socketpair())
"""
# Lines the sandbox must keep allowed: a program that can't work is no sandbox.
STAYS = {"read_etc_hostname", "write_copy", "socketpair_stream"}
# Lines whose host answer depends on the kernel's modules (sctp, vsock, mptcp): the host
# must allow at least these for the test to prove anything.
HOST_MUST = {
    "tcp_connect",
    "tcp_bind",
    "tcp_listen_autobind",
    "udp",
    "unix",
    "setsid",
    "setpgid",
    "unshare_net",
    "hardlink_out",
    "write_out",
}


def landlock_config(tmp_path: Path, **native: str) -> dict[str, object]:
    return {
        "sandbox": {
            "arm": "native",
            "scratch_dir": str(tmp_path / "scratch"),
            "native": {"mechanism": "landlock", **native},
        },
        "state": {"dir": str(tmp_path / "state")},
    }


def need_landlock() -> None:
    if abi() < 3:
        missing(f"this kernel's Landlock ABI is {abi()}; the landlock mechanism needs 3")


class Listener:
    """A TCP listener on the host's loopback that counts what reached it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.got.append(conn.recv(64) or b"(connected)")
                except OSError:
                    self.got.append(b"(connected)")

    def close(self) -> None:
        self.sock.close()


def answers(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, _, said = line.partition(" ")
        if said:
            out[name] = said
    return out


def test_every_refusal_holds_against_a_real_command(tmp_path: Path) -> None:
    need_landlock()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "scratch").mkdir()
    (tree / "probe.py").write_text(PROBE)
    target = tmp_path / "outside.txt"  # beside the tree: on the copy's filesystem
    target.write_text("untouched\n")
    target.chmod(0o666)
    python = os.path.realpath(sys.executable)
    listener = Listener()
    try:
        with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
            assert tool.choice.arm is ArmName.LANDLOCK, tool.choice.reason()
            argv = [python, "probe.py", str(listener.port), str(target)]
            inside = tool.exec(argv, background_ok=False)
            assert inside.exit_code == 0, inside.stderr
            reached_from_inside = list(listener.got)
            untouched = target.read_text() == "untouched\n"
            host = tool.exec(argv, where="host", background_ok=False)
            assert host.exit_code == 0, host.stderr
    finally:
        listener.close()
    sandbox, control = answers(inside.stdout), answers(host.stdout)
    print(json.dumps({"landlock": sandbox, "host": control}, indent=1))
    assert set(sandbox) == set(control) and len(sandbox) == PROBE.count('\nt("')
    unproven = [n for n in HOST_MUST if control[n] != "allowed"]
    assert not unproven, f"the host control refused these, so they prove nothing: {unproven}"
    for name, said in sandbox.items():
        if name in STAYS:
            assert said == "allowed", (name, said)
        else:
            assert said != "allowed", f"{name} was allowed under landlock"
    # clone3 with no arguments: EINVAL from the kernel, ENOSYS from the filter (glibc's cue
    # to fall back to clone, whose flags seccomp can read)
    assert (sandbox["clone3"], control["clone3"]) == ("ENOSYS", "EINVAL")
    assert reached_from_inside == [], reached_from_inside
    assert untouched
    assert target.read_text() == "untouched\nx"  # the control wrote it: the line can tell


def test_a_setsid_double_fork_is_killed_when_the_command_ends(tmp_path: Path) -> None:
    """Without a pid namespace: the double-forked grandchild is re-parented to the helper
    (its subreaper) and killed with the command; setsid() is refused, so it also stays in
    the process group the guardian would kill."""
    need_landlock()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "scratch").mkdir()
    marker = str(7_000_000 + int.from_bytes(os.urandom(3), "big"))
    line = f"(setsid sleep {marker} || sleep {marker}) </dev/null >/dev/null 2>&1 & echo started"
    with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
        done = tool.exec(["sh", "-c", f"( {line} ) ; echo $?"], background_ok=False)
    assert "started" in done.stdout, done
    deadline = time.monotonic() + 30
    alive = ["?"]
    while alive and time.monotonic() < deadline:
        alive = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if marker in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE
        ]
        if alive:
            time.sleep(0.1)
    for pid in alive:
        if pid != "?":
            psutil.Process(pid).kill()
    assert not alive, f"the double-forked sleep {marker} outlived the command: {alive}"


def test_auto_takes_landlock_where_user_namespaces_are_refused(tmp_path: Path) -> None:
    """A real refusal: the CLI runs in a user namespace of the test's own whose
    user.max_user_namespaces is 0 (tests/integration/nouserns.py), so bwrap cannot make
    one; `auto` steps past bwrap to Landlock and says why."""
    need_landlock()
    bwrap = host_which("bwrap")
    if os.geteuid() == 0:
        wrapper = [sys.executable, "-m", "tests.integration.nouserns"]
    elif bwrap is not None and not user_namespace_works(bwrap)[0]:
        wrapper = []  # the machine itself refuses them (a stock Ubuntu 24.04 runner)
    else:
        missing(
            "user namespaces work here, and mapping every id into a test-owned one whose "
            "max_user_namespaces is 0 needs root"
        )
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "native"\nscratch_dir = "{tmp_path}/scratch"\n'
        f'[state]\ndir = "{tmp_path}/state"\n'
    )
    (tmp_path / "scratch").mkdir()
    main = "import sys; from sprawl_orch.cli import main; sys.exit(main())"
    cli = [sys.executable, "-c", main, "exec", "-C", str(tree), "--json", "--", "id"]
    done = subprocess.run(
        [*wrapper, *cli],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["confinement"]["arm"] == "landlock", result["confinement"]
    said = result["confinement"]["statement"]
    assert "Stepped down: an unprivileged user namespace cannot be created" in said
    if wrapper:
        assert "max_*_namespaces" in said or "ENOSPC" in said, said


def test_an_abi_too_old_is_refused_naming_both(tmp_path: Path) -> None:
    arm = LandlockArm(Yielders(None, None, None), found=2)
    with pytest.raises(SprawlError) as err:
        arm.prepare(tmp_path)
    assert err.value.code.value == "E_SANDBOX_DENIED"
    assert "ABI 2" in err.value.detail and "ABI 3" in err.value.detail


def test_python_pip_git_and_a_shell_still_work_under_landlock(tmp_path: Path) -> None:
    """The host's own tools under the ruleset and filter: an interpreter (the venv's, from
    PATH), pip, git (HOME is private and writable), a shell writing /dev/null,
    TMPDIR, make-style rename across directories in the copy (REFER)."""
    need_landlock()
    if shutil.which("git") is None:
        missing("git is needed (apt-get install git)")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "x.txt").write_text("x\n")
    (tmp_path / "scratch").mkdir()
    python = os.path.realpath(sys.executable)
    line = (
        f"{python} -c 'import ssl, json, sqlite3; print(\"py ok\")' && "
        f"{python} -m pip --version >/dev/null && echo pip ok && "
        "git init -q . && git -c user.name=t -c user.email=t@t add -A && "
        "git -c user.name=t -c user.email=t@t commit -qm one && echo git ok && "
        "echo to-stderr >&2 && echo n >/dev/null && "
        't=$(mktemp) && echo hi > "$t" && echo tmp ok && '
        "mkdir b && mv a/x.txt b/ && echo rename ok"
    )
    with ExecTool(parse_config(landlock_config(tmp_path)), tree) as tool:
        done = tool.exec(["sh", "-c", line], background_ok=False)
    for said in ("py ok", "pip ok", "git ok", "tmp ok", "rename ok"):
        assert said in done.stdout, done.stdout + done.stderr
    assert "to-stderr" in done.stderr
