"""The thin exec client and its server (issue 26) against what a caller's process passes to
what it runs beyond its environment, by the real program on copied_tree (servedfaith,
2026-12-03). Each test runs the same command in-process and served and compares what it sees:

- the caller's blocked signal mask (exec(2) keeps it: a caller that blocks SIGINT starts its
  command with SIGINT blocked) -- served, the command had the server's empty mask;
- the signals the caller ignores (SIG_IGN survives exec(2): `nohup`'s SIGHUP, a background
  job's SIGINT) -- served, the command had the server's dispositions;
- the caller's I/O priority (`ionice -c 3 sprawl-orch exec ...`: the CLI's copy and sync run
  idle in-process) -- served, the call ran at the server's;
- the caller's locale and the interpreter's start environment (LC_*, LANG, PYTHON*): the
  server's interpreter set its stdio encoding from its first caller's, and a caller of
  another locale got the statement in the server's encoding.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import missing
from tests.unit.test_exec_client import PROGRAM, env, program, tree

__all__ = ["env", "tree"]  # the fixtures, shared with test_exec_client


def _both(
    shown: list[str],
    tree: Path,
    env: dict[str, str],
    before: Callable[[], object] | None = None,
    caller: dict[str, str] | None = None,
    status: int = 0,
) -> dict[str, subprocess.CompletedProcess[bytes]]:
    """`shown` run in-process ("0") and served ("1") by a caller that runs `before` first, in
    environment `caller` (else `env`); a server already runs, started by a caller in `env`
    without `before`."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    runs = {}
    for served in ("1", "0"):
        runs[served] = subprocess.run(
            [PROGRAM, "exec", "-C", str(tree), "--", *shown],
            env={**(caller or env), "SPRAWL_EXEC_SERVER": served},
            preexec_fn=before,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert runs["0"].returncode == status, runs["0"].stderr[-2000:]
    assert b"exec server is not used" not in runs["1"].stderr, runs["1"].stderr[-2000:]
    program(["server", "stop"], env)
    return runs


def _status(field: str) -> list[str]:
    """The command's own /proc status line (grep is the command: no shell between, which
    sets its own mask while it forks)."""
    return ["grep", f"^{field}:", "/proc/self/status"]


def test_a_caller_s_blocked_signals_are_its_command_s(tree: Path, env: dict[str, str]) -> None:
    def block() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGUSR1})

    runs = _both(_status("SigBlk"), tree, env, block)
    assert runs["0"].stdout == b"SigBlk:\t0000000000000202\n"  # SIGINT and SIGUSR1: 2 and 10
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def test_a_caller_s_ignored_signals_are_its_command_s(tree: Path, env: dict[str, str]) -> None:
    def ignore() -> None:
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)

    runs = _both(_status("SigIgn"), tree, env, ignore)
    assert runs["0"].stdout == b"SigIgn:\t0000000000000007\n"  # SIGHUP, SIGINT, SIGQUIT
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def test_a_server_started_by_an_ignoring_caller_does_not_pass_it_on(
    tree: Path, env: dict[str, str]
) -> None:
    """The other way round: a server started under nohup ignored SIGHUP for every caller's
    command (its dispositions were its starter's)."""
    ignoring = subprocess.run(
        [PROGRAM, "exec", "-C", str(tree), "--", "true"],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert ignoring.returncode == 0, ignoring.stderr[-2000:]
    # this caller ignores nothing, whatever the test run's own start did (a CI run under
    # `nohup` ignores SIGHUP, and a caller's ignored signals are carried: the command saw 1)
    done = subprocess.run(
        [PROGRAM, "exec", "-C", str(tree), "--", *_status("SigIgn")],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, b"SigIgn:\t0000000000000000\n"), done.stderr
    program(["server", "stop"], env)


def test_a_caller_s_io_priority_is_its_call_s(tree: Path, env: dict[str, str]) -> None:
    """`ionice -c 3 sprawl-orch exec ...`: the CLI -- which copies and syncs the tree -- runs
    idle in-process; the command (under the native arms' own `ionice -c 2 -n 7`) sees it as
    its parent's."""

    def idle() -> None:
        psutil.Process().ionice(psutil.IOPRIO_CLASS_IDLE)

    runs = _both(["sh", "-c", "ionice -p $PPID"], tree, env, idle)
    assert runs["0"].stdout == b"idle\n", runs["0"].stdout
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def _unprivileged(argv: list[str]) -> list[str]:
    """`argv` with no capability even as root (an empty bounding set)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        missing("setpriv is not installed (Debian: util-linux)")
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", *argv]


def test_a_real_time_io_class_the_server_may_not_set_runs_in_process(
    tree: Path, env: dict[str, str]
) -> None:
    """A caller that inherited the real-time I/O class but may not set it (no CAP_SYS_NICE),
    served by a server of its own confinement that is not real-time: the call can't take it,
    so it runs in-process (said once), where it is the caller's by inheritance."""
    if os.getuid() != 0:
        missing("setting the real-time I/O class for the caller needs root")
    shown = [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", "ionice -p $PPID"]
    start = subprocess.run(_unprivileged(shown), env=env, capture_output=True, check=False)
    assert start.returncode == 0, start.stderr[-2000:]  # the unprivileged callers' server

    def real_time() -> None:
        psutil.Process().ionice(psutil.IOPRIO_CLASS_RT, 4)

    done = subprocess.run(
        _unprivileged(shown), env=env, preexec_fn=real_time, capture_output=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, b"realtime: prio 4\n"), done.stderr[-2000:]
    assert done.stderr.count(b"exec server is not used (your I/O priority") == 1, done.stderr
    program(["server", "stop"], env)


def test_a_caller_s_locale_is_its_call_s(tree: Path, env: dict[str, str], tmp_path: Path) -> None:
    """A Latin-1 caller's argument `caf\\xe9`: the client decoded it by its locale, the server
    (started under UTF-8) encoded it by its own, and the command got `caf\\xc3\\xa9`. The
    in-process CLI hands it the caller's bytes."""
    localedef = shutil.which("localedef")
    if localedef is None:
        missing("localedef is not installed (Debian: libc-bin), needed to make a Latin-1 locale")
    places = tmp_path / "locales"
    places.mkdir()
    made = subprocess.run(
        [localedef, "-i", "en_US", "-f", "ISO-8859-1", str(places / "en_US.ISO-8859-1")],
        capture_output=True,
        check=False,
    )
    if made.returncode not in (0, 1):  # 1: made, with warnings
        missing(f"localedef could not make en_US.ISO-8859-1: {made.stderr[-500:]!r}")
    latin = {**env, "LOCPATH": str(places), "LC_ALL": "en_US.ISO-8859-1"}
    runs = _both(["printf", os.fsdecode(b"caf\xe9")], tree, env, None, latin)
    assert runs["0"].stdout == b"caf\xe9", runs["0"].stdout
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def _prctl(option: int, value: int) -> None:
    import ctypes

    assert ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


INHERITED = {
    # PR_SET_TIMERSLACK (29): kept across fork and exec; a served command had the server's 50 us
    "timerslack": (lambda: _prctl(29, 1_000_000), ["cat", "/proc/self/timerslack_ns"]),
    # PR_SET_THP_DISABLE (41): kept across fork and exec; served, THP came back on
    "thp": (lambda: _prctl(41, 1), ["grep", "^THP_enabled:", "/proc/self/status"]),
}


@pytest.mark.parametrize("setting", sorted(INHERITED))
def test_a_caller_s_inherited_process_setting_is_its_command_s(
    setting: str, tree: Path, env: dict[str, str]
) -> None:
    before, shown = INHERITED[setting]
    runs = _both(shown, tree, env, before)
    assert runs["0"].stdout in (b"1000000\n", b"THP_enabled:\t0\n"), runs["0"].stdout
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def test_a_served_call_has_its_caller_s_process_name(tree: Path, env: dict[str, str]) -> None:
    """In-process the command's parent is the caller's own process, `sprawl-orch` (what `ps`,
    `pgrep sprawl-orch` and `pkill sprawl-orch` match); served it was `python3`, the server's."""
    runs = _both(["sh", "-c", "cat /proc/$PPID/comm"], tree, env)
    assert runs["0"].stdout == b"sprawl-orch\n", runs["0"].stdout
    assert (runs["1"].returncode, runs["1"].stdout) == (0, runs["0"].stdout), runs["1"].stderr


def test_a_traced_caller_s_command_is_traced(tree: Path, env: dict[str, str]) -> None:
    """`strace -f sprawl-orch exec ...` follows what the in-process CLI starts; a served
    call is the server's child, and the command ran untraced (TracerPid 0)."""
    strace = shutil.which("strace")
    if strace is None:
        missing("strace is not installed (Debian: strace)")
    shown = ["grep", "^TracerPid:", "/proc/self/status"]
    wrapped = [strace, "-f", "-o", os.devnull, PROGRAM, "exec", "-C", str(tree), "--", *shown]
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    done = subprocess.run(wrapped, env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(b"TracerPid:\t") and done.stdout != b"TracerPid:\t0\n"
    assert b"exec server is not used" not in done.stderr  # in-process as asked of nobody
    program(["server", "stop"], env)


@pytest.mark.parametrize("closed", [0, 1])
def test_a_caller_with_a_standard_stream_closed_runs_as_in_process(
    closed: int, tree: Path, env: dict[str, str]
) -> None:
    """`sprawl-orch exec -i -- cat <&-`: the client's connection took the closed number and
    was sent as the command's stdin -- `cat` read the connection and waited out the window
    (600 s) where in-process the CLI ends at once; with stdout closed the command wrote into
    the connection. Such a caller gets the in-process CLI, whatever that does."""
    assert program(["exec", "-C", str(tree), "--", "true"], env).returncode == 0  # a server
    shown = ["exec", "-C", str(tree), "-i", "--", "sh", "-c", "echo out >&2; cat"]
    runs = {}
    for served in ("1", "0"):
        done = subprocess.run(
            [PROGRAM, *shown],
            env={**env, "SPRAWL_EXEC_SERVER": served},
            preexec_fn=lambda: os.close(closed),
            stdout=subprocess.PIPE if closed != 1 else None,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
        runs[served] = (done.returncode, done.stdout, done.stderr.splitlines()[-2:])
    assert runs["1"] == runs["0"]
    # ... which refuses with a code a stream the call needs: it crashed with an
    # AttributeError traceback (sys.stdout / sys.stdin are None) before
    status, _, said = runs["0"]
    assert status == 125 and said[0].startswith(b"sprawl-orch: E_BAD_REQUEST: "), said
    assert b"is closed" in said[0] and said[1].startswith(b"sprawl-orch: what you can do: ")
    program(["server", "stop"], env)


@pytest.mark.parametrize("arm", ["copied_tree", "native"])
def test_a_closed_stdin_without_i_is_the_command_s_dev_null(
    arm: str, tree: Path, env: dict[str, str]
) -> None:
    """`sprawl-orch exec -- sh -c 'echo ok' <&-`: without -i the command reads /dev/null
    anyway, so a closed stdin is no reason to refuse. On the native arm it was: fd 0 was
    free, the landlock helper's spec pipe took it and the command's /dev/null stdin replaced
    it (E_SANDBOX_DENIED, EOFError in the helper)."""
    config = tree / "sprawl.toml"
    config.write_text(config.read_text().replace('arm = "copied_tree"', f'arm = "{arm}"'))
    for served in ("1", "0"):
        done = subprocess.run(
            [PROGRAM, "exec", "-C", str(tree), "--", "sh", "-c", "echo ok; read x; echo $?"],
            env={**env, "SPRAWL_EXEC_SERVER": served},
            preexec_fn=lambda: os.close(0),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, b"ok\n1\n"), done.stderr[-2000:]
    program(["server", "stop"], env)


def test_a_caller_ignoring_sigchld_gets_its_command_s_status(
    tree: Path, env: dict[str, str]
) -> None:
    """With SIGCHLD ignored (inherited) the kernel reaped the command itself, waitpid failed
    and the CLI reported 0 for `exit 3` -- in-process, and served once the call took its
    caller's ignored signals."""

    def ignore() -> None:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)

    runs = _both(["sh", "-c", "exit 3"], tree, env, ignore, status=3)
    assert runs["1"].returncode == 3, runs["1"].stderr[-2000:]


def test_a_caller_gone_before_its_call_starts_is_not_served() -> None:
    """The I/O priority is read from the caller's pid: a caller gone by then (its pid free)
    leaves the call nothing to take, and it runs nothing (NotServed), not the server's."""
    from sprawl_orch.cli import exec_caller

    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(exec_caller.NotServed, match="can't be read"):
        exec_caller._io_priority(gone.pid)


def _deny_write_execute() -> None:
    import ctypes

    # PR_SET_MDWE (65), PR_MDWE_REFUSE_EXEC_GAIN: kept across fork and exec, shown in no /proc
    # file; a kernel before 6.3 says EINVAL
    if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:
        os._exit(77)


def test_a_caller_s_memory_deny_write_execute_is_its_command_s(
    tree: Path, env: dict[str, str]
) -> None:
    """A caller under PR_SET_MDWE (systemd's MemoryDenyWriteExecute=, prctl form) runs its
    in-process command under it -- no writable and executable mapping -- and served, its
    command had the server's none (atkserve)."""
    probe = subprocess.run(
        ["true"], preexec_fn=_deny_write_execute, capture_output=True, check=False
    )
    if probe.returncode == 77:
        missing("PR_SET_MDWE (Linux >= 6.3)")
    code = (
        "import mmap\n"
        "try:\n"
        "    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "    print('mapped')\n"
        "except OSError:\n"
        "    print('refused')\n"
    )
    python = shutil.which("python3")
    assert python is not None
    runs = _both([python, "-c", code], tree, env, before=_deny_write_execute)
    assert runs["0"].stdout == b"refused\n", runs["0"]
    assert runs["1"].stdout == runs["0"].stdout, runs["1"].stderr[-2000:]


def _log_in_as_1000() -> None:
    try:  # an audit login of its own: a new loginuid and session id (CAP_AUDIT_CONTROL)
        with open("/proc/self/loginuid", "w") as loginuid:
            loginuid.write("1000")
    except OSError:
        os._exit(77)


def test_a_caller_s_audit_login_is_its_command_s(tree: Path, env: dict[str, str]) -> None:
    """The audit loginuid and session id (/proc/PID/loginuid, sessionid: kept across fork and
    exec, what auditd names a process's login by) of a caller in another login session: served,
    its command had the server's -- the audit trail named the session that started the server
    for another session's command (atkserve)."""
    probe = subprocess.run(["true"], preexec_fn=_log_in_as_1000, check=False)
    if probe.returncode == 77:
        missing("a settable /proc/self/loginuid (root with CAP_AUDIT_CONTROL, not immutable)")
    shown = ["sh", "-c", "cat /proc/self/loginuid; echo; cat /proc/self/sessionid"]
    runs = _both(shown, tree, env, before=_log_in_as_1000)
    assert runs["0"].stdout.split()[0] == b"1000", runs["0"]
    assert runs["1"].stdout.split()[0] == b"1000", runs["1"].stderr[-2000:]
