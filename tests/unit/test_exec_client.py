"""The thin exec client and the per-user server (issue 26) on copied_tree, by the real program:

- the client imports no click, pydantic, docker or rich;
- the CLI contract is the same through the server as in-process (status, stdout bytes, the
  statement, --json, -C, --config, refusals, usage errors), and -i passes stdin through both;
- a place that can't be trusted is refused and the call runs in-process, said once: a link for
  the runtime directory, a socket that is a link or another uid's, a server of another uid;
- the lifeline: SIGKILL of the client ends the command.
(Docker and podman: tests/integration/test_exec_server.py.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sprawl_orch.client.exec_client import connect
from sprawl_orch.core.exec_place import Refused
from tests.integration.conftest import missing

PROGRAM = str(Path(sys.executable).with_name("sprawl-orch"))
HEAVY = {"click", "pydantic", "docker", "rich", "requests", "psutil"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    (tree / "sprawl.toml").write_text(
        f'[sandbox]\narm = "copied_tree"\nscratch_dir = "{tmp_path / "scratch"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    (tmp_path / "scratch").mkdir()
    return tree


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A runtime directory of this test's own: its server is its own, and idles out soon."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SPRAWL_EXEC_SERVER_IDLE": "20"}


def program(
    args: list[str], env: dict[str, str], stdin: bytes = b"", server: bool = True
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [PROGRAM, *args],
        input=stdin,
        capture_output=True,
        env=env if server else {**env, "SPRAWL_EXEC_SERVER": "0"},
        timeout=120,
        check=False,
    )


def _client_modules() -> set[str]:
    """Every module a fresh Python holds after importing the thin client's two modules."""
    code = (
        "import sys, sprawl_orch.client.entry, sprawl_orch.client.exec_client;"
        "print(sorted(sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.replace("'", '"')))


def test_the_client_imports_no_heavy_library() -> None:
    loaded = {m.split(".")[0] for m in _client_modules()}
    assert loaded & HEAVY == set(), loaded & HEAVY


# Paid by every call's client start, and avoidable (core/exec_place.py): typing ~3 ms, socket.py
# ~4 ms (its enums and selectors), hashlib ~3 ms (OpenSSL), json ~3 ms (its decoder and
# scanner: the client only encodes, with _json), signal.py ~2 ms (enums: _signal is loaded
# at start), next to `python -c pass`'s ~29 ms.
AVOIDED = {"typing", "socket", "selectors", "hashlib", "_hashlib", "json", "signal"}


def test_the_client_start_imports_none_of_the_avoidable_modules() -> None:
    loaded = _client_modules()
    assert loaded & AVOIDED == set(), loaded & AVOIDED


def test_the_peer_is_read_as_the_kernel_says() -> None:
    """SO_PEERCRED's three ints, read without struct: our own pid and uid on a socketpair."""
    from sprawl_orch.core.exec_place import peer

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert peer(ours) == (os.getpid(), os.getuid())


def test_a_served_call_ends_the_client_without_the_interpreter_teardown(
    tree: Path, env: dict[str, str]
) -> None:
    """The client exits with the call's status by os._exit (exec_client._leave): an atexit
    hook registered before it never runs, and what the client itself printed is flushed."""
    code = (
        "import atexit, sys; atexit.register(lambda: print('teardown', file=sys.stderr));"
        "print('before', end=''); from sprawl_orch.client.exec_client import run;"
        f"run(['-C', {str(tree)!r}, '--', 'sh', '-c', 'exit 7'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout.startswith(b"before"), done.stdout
    assert b"teardown" not in done.stderr, done.stderr
    # the in-process path (no server) keeps the ordinary exit: its hooks run
    off = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env={**env, "SPRAWL_EXEC_SERVER": "0"},
        timeout=120,
        check=False,
    )
    assert off.returncode == 7 and b"teardown" in off.stderr, off.stderr


CASES = [
    [
        "exec",
        "-C",
        "{tree}",
        "--",
        "sh",
        "-c",
        "cat a.txt; printf '\\377\\000x' ; echo e >&2; exit 7",
    ],
    ["exec", "-C", "{tree}", "--json", "--", "ls"],
    ["exec", "--config", "{tree}/sprawl.toml", "-C", "{tree}", "--", "true"],
    ["exec", "-C", "{tree}", "--", "./no-such-program"],
    ["exec", "-C", "{tree}", "--config", "{tree}/missing.toml", "--", "true"],
    ["exec", "--no-such-option"],
    ["exec", "-C", "{tree}"],
]


@pytest.mark.parametrize("case", CASES)
def test_the_contract_is_the_same_through_the_server(
    case: list[str], tree: Path, env: dict[str, str]
) -> None:
    args = [a.replace("{tree}", str(tree)) for a in case]
    served = program(args, env)
    local = program(args, env, server=False)
    assert served.returncode == local.returncode, (served.stderr, local.stderr)
    if "--json" in args:
        ours, theirs = json.loads(served.stdout), json.loads(local.stdout)
        for key in ("outcome", "exit_code", "stdout", "stderr", "arm", "command"):
            assert ours[key] == theirs[key], key
    else:
        assert served.stdout == local.stdout
    assert _words(served.stderr) == _words(local.stderr)
    assert b"exec server is not used" not in served.stderr


def _words(err: bytes) -> list[str]:
    # handles and copy paths differ per call; the lines and their openings do not
    return [
        line.split(":")[0] + ":" + line.split(":")[1][:12] if ":" in line else line
        for line in err.decode(errors="replace").splitlines()
    ]


def test_stdin_passes_through_the_server_only_with_i(tree: Path, env: dict[str, str]) -> None:
    data = os.urandom(100_000)
    given = program(["exec", "-C", str(tree), "-i", "--", "cat"], env, stdin=data)
    assert (given.returncode, given.stdout) == (0, data), given.stderr
    closed = program(["exec", "-C", str(tree), "--", "cat"], env, stdin=data)
    assert (closed.returncode, closed.stdout) == (0, b"")


def test_a_runtime_directory_that_is_a_link_is_refused_and_said_once(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (Path(env["XDG_RUNTIME_DIR"]) / "sprawl-orch").symlink_to(elsewhere)
    done = program(["exec", "-C", str(tree), "--", "echo", "hi"], env)
    assert (done.returncode, done.stdout) == (0, b"hi\n")
    assert done.stderr.count(b"exec server is not used") == 1
    assert b"not a directory (a link" in done.stderr
    assert list(elsewhere.iterdir()) == []  # nothing made through the link


def test_a_socket_that_is_a_link_or_another_uids_is_refused(tmp_path: Path) -> None:
    place = tmp_path / "place"
    place.mkdir(mode=0o700)
    real = place / "real.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(real))
    os.chmod(real, 0o600)
    listener.listen(1)
    link = place / "link.sock"
    link.symlink_to(real)
    with pytest.raises(Refused, match="not a socket"):
        connect(link)
    if os.getuid() == 0:  # only root can give a file away
        os.chown(real, 65534, -1)
        with pytest.raises(Refused, match="belongs to uid 65534"):
            connect(real)
        os.chown(real, 0, -1)
    os.chmod(real, 0o666)
    with pytest.raises(Refused, match="open to others"):
        connect(real)
    listener.close()


def test_a_server_of_another_uid_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    if os.getuid() != 0:
        missing("a server of another uid needs root to make (CI runs as root)")
    place = tmp_path / "place"
    place.mkdir(mode=0o700)
    path = place / "other.sock"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other uid's server: its file is ours (bound as root), its peer
        # credentials nobody's (the kernel takes them at listen())
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        os.chmod(path, 0o600)
        os.setuid(65534)
        listener.listen(1)
        os.write(write, b"1")
        conn, _ = listener.accept()
        os._exit(0 if conn.recv(1) == b"" else 1)  # the client sent nothing
    os.read(read, 1)
    with pytest.raises(Refused, match="another uid"):
        connect(path)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_sigkill_of_the_client_ends_the_command(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    client = subprocess.Popen(
        [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", f"echo $$ > {marker}; sleep 300"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text().strip()):
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.02)
    pid = int(marker.read_text())
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the command outlived its client"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_server_status_and_stop(tree: Path, env: dict[str, str]) -> None:
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0
    listed = program(["server", "status"], env)
    assert listed.returncode == 0 and b" running" in listed.stdout, listed
    pid = int(listed.stdout.split(b"pid ")[1].split()[0])
    stopped = program(["server", "stop"], env)
    assert f"(pid {pid})".encode() in stopped.stdout
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the server outlived its stop"
        time.sleep(0.02)
    assert b"no exec server" in program(["server", "status"], env).stdout


def test_a_call_outlives_a_killed_server_and_says_its_status(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Each call is a process of its own: the server's end (SIGKILL) changes nothing for it."""
    gate = tmp_path / "gate"
    client = subprocess.Popen(
        [
            PROGRAM,
            "exec",
            "-C",
            str(tree),
            "--",
            "sh",
            "-c",
            f"echo started; while [ ! -e {gate} ]; do sleep 0.02; done; echo done; exit 4",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == b"started\n"
    listed = program(["server", "status"], env)
    server = int(listed.stdout.split(b"pid ")[1].split()[0])
    os.kill(server, signal.SIGKILL)
    gate.touch()
    out, err = client.communicate(timeout=60)
    assert (client.returncode, out) == (4, b"done\n"), err


# CI runs as root. The kernel lets a process of the same uid read another's memory and
# environment when it holds every capability the other holds and the other is dumpable
# (root's full set reads anything, and a reader short of the other's set reads nothing,
# flag or not): so both sides run with none, and only the flag decides.
NO_CAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]


def _read_as_plain_user(path: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*NO_CAPS, "cat", path], capture_output=True, timeout=30, check=False)


def test_the_server_and_its_calls_are_not_readable_by_the_user_s_other_processes(
    tree: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """PR_SET_DUMPABLE 0: the server holds parsed config and each call its caller's
    environment; another process of the same uid and capabilities reads neither's memory or
    environment, while the command the call started (an exec: dumpable again) stays readable
    to it -- the control that the refusal is the flag's."""
    gate = tmp_path / "gate"
    script = f"echo $$; while [ ! -e {gate} ]; do sleep 0.02; done"
    client = subprocess.Popen(
        [*NO_CAPS, PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", script],
        env={**env, "SPRAWL_TEST_TOKEN": "tok-" + os.urandom(8).hex()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdout is not None
    try:
        command = int(client.stdout.readline())
        listed = program(["server", "status"], env)
        server = int(listed.stdout.split(b"pid ")[1].split()[0])
        children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
        # the server's witness of its Landlock domain (exec_place.start_witness) is readable
        # by design: an exec'd `cat` that was given no environment
        witness = int(Path(f"{listed.stdout.split(b' ')[0].decode()}.witness").read_text())
        assert Path(f"/proc/{witness}/environ").read_bytes() == b""
        calls = [int(p) for p in children if int(p) != witness]
        assert calls, "the running call is a child of the server"
        for pid in (server, *calls):
            for name in ("environ", "mem"):
                read = _read_as_plain_user(f"/proc/{pid}/{name}")
                assert read.returncode != 0 and b"denied" in read.stderr, (pid, name, read)
        # the same reader reads the command's environment: the refusal above is the flag's
        assert _read_as_plain_user(f"/proc/{command}/environ").returncode == 0
    finally:
        gate.touch()
        client.communicate(timeout=60)
    assert client.returncode == 0


def test_t_and_it_through_the_server(tree: Path, env: dict[str, str]) -> None:
    """-t through the thin client: a new terminal of the caller's size, never the caller's
    own (the server's call gets the caller's descriptors, so this is where a mistake would
    hand the command the caller's terminal); -it carries what is typed."""
    from tests.integration.test_exec_input import on_a_terminal

    script = "test -t 0 && test -t 1 && echo both-terminals; stty size; tty; exit 3"
    status, shown, err, caller = on_a_terminal(
        tree, ["-t", "--", "sh", "-c", script], b"", 33, 101, (PROGRAM,), env
    )
    assert status == 3, err
    lines = shown.replace(b"\r", b"").decode().splitlines()
    assert {"both-terminals", "33 101"} <= set(lines), (shown, err)
    names = [line for line in lines if line.startswith("/dev/")]
    assert names and caller not in names, (names, caller)
    assert b"not used" not in err, err  # it went through the server
    status, shown, err, _ = on_a_terminal(
        tree,
        ["-it", "--", "sh", "-c", 'read line; echo "got:$line"'],
        b"hello\n",
        24,
        80,
        (PROGRAM,),
        env,
    )
    assert (status, b"got:hello" in shown) == (0, True), (shown, err)
