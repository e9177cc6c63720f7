"""What a served call takes of its caller's process that no environment or key carries
(issue 26; servedfaith, 2026-12-03): a call is a fork of the server, so without this its
process -- and every command it starts -- had the server's, where the in-process CLI has its
caller's and exec(2) hands them on:

- the blocked signal mask (a caller that blocks SIGINT starts its command with it blocked);
- the signals the caller ignores (SIG_IGN survives exec: `nohup`'s SIGHUP; and a server
  started under nohup ignored SIGHUP for every later caller's command);
- the I/O priority (`ionice -c 3 sprawl-orch exec ...`: the CLI's copy and sync of the tree
  run idle in-process);
- the process name (comm: `sprawl-orch` in-process, what `ps`, `pgrep` and `pkill` match; a
  served call was `python3`, the server's).

The client sends its mask and ignored signals in the call (client/exec_client.py); the I/O
priority and the name are read from the caller's process by the server's side (SO_PEERCRED's pid:
ioprio_get needs no privilege over a process of our uid), so the client pays nothing for it.
"""

from __future__ import annotations

import contextlib
import signal

# Python ignores these itself at every start (and subprocess restores them in children): the
# caller's Python did the same, so whatever the client reports of them is Python's, not its
# caller's.
PYTHON_OWN = (signal.SIGPIPE, signal.SIGXFSZ)
_PR_SET_NAME = 15  # <linux/prctl.h>


class NotServed(Exception):
    """The caller's setting can't be taken by this call's process: the client runs the call
    in-process (it has not started), where the setting is the caller's by inheritance."""


def take(blocked: list[int], ignored: list[int], caller: int) -> None:
    """This process as the caller's: its I/O priority, ignored signals and signal mask -- the
    mask last, after every disposition is set, and before the call starts any thread (which
    would keep the server's mask)."""
    _io_priority(caller)
    _name(caller)
    wanted = set(ignored)
    for number in range(1, signal.NSIG):
        if number in (signal.SIGKILL, signal.SIGSTOP) or number in PYTHON_OWN:
            continue
        with contextlib.suppress(OSError, ValueError):  # glibc's own (32, 33): not settable
            if number in wanted:
                signal.signal(number, signal.SIG_IGN)
            elif signal.getsignal(number) == signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)  # the server's starter ignored it
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _io_priority(pid: int) -> None:
    import psutil

    if not hasattr(psutil.Process, "ionice"):  # a platform without I/O priorities
        return
    try:
        theirs = psutil.Process(pid).ionice()
    except (psutil.Error, OSError) as err:  # the caller is gone: no call to run
        raise NotServed(f"your I/O priority can't be read: {err!r}") from err
    try:
        me = psutil.Process()
        if me.ionice() != theirs:
            me.ionice(theirs.ioclass, theirs.value)
    except psutil.AccessDenied as err:
        # a real-time class the caller inherited but may not set itself (no CAP_SYS_NICE):
        # only a process started by it has it
        raise NotServed(
            f"your I/O priority (class {int(theirs.ioclass)}, level {theirs.value}) needs "
            "a privilege to be set, which you lack"
        ) from err
    except (psutil.Error, ValueError, OSError) as err:  # a class or level psutil refuses
        raise NotServed(f"your I/O priority can't be set: {err!r}") from err


def _name(pid: int) -> None:
    """The caller's comm as this process's (prctl PR_SET_NAME): the in-process CLI is the
    caller's process, so its name is what the caller ran."""
    import ctypes

    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            name = comm.read().rstrip(b"\n")
    except OSError:  # the caller is gone: its call ends with its connection anyway
        return
    ctypes.CDLL(None).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
