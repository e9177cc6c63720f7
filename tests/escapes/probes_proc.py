"""Escapes through the caller's process: inherited fds, /proc of host processes, signals,
daemons that outlive the command, the caller's terminal.

Axes: reading or signalling a host process of the caller is what "it runs with your
user's rights" admits (user); writing through /proc/PID/{cwd,root,fd} reaches the host's
files (filesystem); a survivor breaks "nothing the command starts outlives it"
(process_tree); a keystroke pushed into the caller's terminal (TIOCSTI, CVE-2017-5226) runs
outside every wall, and its first casualty is the person's tree (filesystem).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.bait import Bait
from tests.escapes.probe import Judge, Probe, died, exists, file_has, secret_in_output

F, U, P = Guarantee.FILESYSTEM, Guarantee.USER, Guarantee.PROCESS_TREE
DAEMON_GRACE_S = 1.0


def survivor(key: str) -> Judge:
    """A process whose argv holds the probe's unique sleep count, still alive after the
    command ended (grace DAEMON_GRACE_S); it is killed here, so nothing leaks."""

    def seen(bait: Bait, out: str) -> str | None:
        n = bait.values[key]
        deadline = time.monotonic() + DAEMON_GRACE_S
        while True:
            found = []
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        args = f.read().split(b"\0")
                except OSError:
                    continue
                if n.encode() in args and any(a.endswith(b"sleep") for a in args):
                    found.append(int(entry))
            if not found or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return f"sleep {n} outlived the command (pids {found}, killed)" if found else None

    return seen


FD_SWEEP = """for f in /proc/self/fd/*; do
  n=${f##*/}
  case $n in 0|1|2) continue;; esac
  t=$($b readlink "$f" 2>/dev/null)
  if [ -d "$f" ]; then
    echo "$id" > "$f/esc-fd-dir-@TOK@" 2>/dev/null && echo "ESC $id wrote into inherited dir fd $n ($t)"
  elif [ -f "$f" ]; then
    echo "$id" >> "$f" 2>/dev/null && echo "ESC $id wrote into inherited file fd $n ($t)"
  fi
done
echo "NOT $id nothing written through an inherited fd" """

DAEMONS = {
    "daemon-setsid-doublefork": '( $b setsid $b sleep @D_SETSID@ </dev/null >/dev/null 2>&1 & ) ; echo "NOT $id (judged by the host)"',
    "daemon-nohup": 'if command -v nohup >/dev/null; then nohup $b sleep @D_NOHUP@ </dev/null >/dev/null 2>&1 & echo "NOT $id (judged by the host)"; else echo "NOT $id no nohup here"; fi',
    "daemon-start-stop-daemon": '$b start-stop-daemon -S -b -m -p ./esc-ssd.pid -x $b -- sleep @D_SSD@ && echo "NOT $id (judged by the host)"',
    "daemon-ignores-signals": '( trap "" HUP TERM INT; exec $b sleep @D_TRAP@ </dev/null >/dev/null 2>&1 ) & echo "NOT $id (judged by the host)"',
    "daemon-background-job": '$b sleep @D_BG@ </dev/null >/dev/null 2>&1 & echo "NOT $id (judged by the host)"',
    # a double fork that stays in the group (where setsid is refused): its parent is gone
    "daemon-doublefork-group": '( $b sleep @D_DF@ </dev/null >/dev/null 2>&1 & ) ; echo "NOT $id (judged by the host)"',
    "daemon-python-doublefork": 'if [ -n "$py" ]; then "$py" -c "$PYDAEMON" @D_PY@; else ( $b setsid sh -c "$b sleep @D_PY@ & exit" </dev/null >/dev/null 2>&1 & ); fi; echo "NOT $id (judged by the host)"',
    "daemon-systemd-run": 'r=$(systemd-run --unit=esc-@TOK@ --collect sleep @D_SYSTEMD@ 2>&1) && echo "ESC $id systemd started it: $r" || echo "NOT $id $r"; : @SYSTEMD@',
}
PLANTED_DAEMON_SWEEP = r"""n=$(( @D_PLANT_HALF@ * 2 )); hit=
for p in /proc/[0-9]*; do
  if $b tr '\0' '\n' < $p/cmdline 2>/dev/null | $b grep -qx "$n"; then hit="$hit ${p#/proc/}"; fi
done
if [ -n "$hit" ]; then echo "ESC $id the first command's daemon runs in this one:$hit"; else echo "NOT $id"; fi"""
DAEMON_KEYS = {
    "daemon-setsid-doublefork": "D_SETSID",
    "daemon-nohup": "D_NOHUP",
    "daemon-start-stop-daemon": "D_SSD",
    "daemon-ignores-signals": "D_TRAP",
    "daemon-background-job": "D_BG",
    "daemon-doublefork-group": "D_DF",
    "daemon-python-doublefork": "D_PY",
    "daemon-systemd-run": "D_SYSTEMD",
}


def probes() -> list[Probe]:
    out = [
        # warm mode's case: a daemon of the first command running when the next one starts
        Probe(
            "daemon-reaches-next-command",
            "planted by a first command",
            P,
            PLANTED_DAEMON_SWEEP,
            plant="( $b setsid $b sleep @D_PLANT@ </dev/null >/dev/null 2>&1 & )",
            judge=survivor("D_PLANT"),
        ),
        Probe(
            "fd-inherited-sweep",
            "inherited fds",
            F,
            FD_SWEEP,
            judge=lambda b, o: (
                file_has("@TMPD@/fd-file", "fd-inherited-sweep")(b, o)
                or exists("@TREE@/esc-fd-dir-@TOK@")(b, o)
            ),
            orchestrator_closes=True,
        ),
        Probe(
            "fd-inherited-socket",
            "inherited fds",
            Guarantee.NETWORK,
            """if [ -n "$py" ]; then "$py" -c "$PYFDSOCK" "$id" && echo "ESC $id wrote to an inherited socket" || echo "NOT $id no socket fd"
else for f in /proc/self/fd/*; do case $($b readlink $f) in socket:*) echo "ESC $id inherited $($b readlink $f) on fd ${f##*/}";; esac; done; echo "NOT $id no socket fd"; fi""",
            judge=lambda b, o: "the inherited socket's peer got data" if b.fd_peer_got() else None,
            orchestrator_closes=True,
        ),
        Probe(
            "tty-tiocsti",
            "terminal",
            F,
            """if [ -n "$py" ]; then "$py" -c "$PYSTI" && echo "ESC $id" || echo "NOT $id no terminal to push into"
elif [ -t 0 ] || [ -t 1 ] || [ -t 2 ] || (: </dev/tty) 2>/dev/null; then echo "ESC $id a terminal is reachable"
else echo "NOT $id no terminal"; fi""",
            orchestrator_closes=True,
        ),
        Probe(
            "proc-environ",
            "/proc of host processes",
            U,
            '$b cat /proc/@P_PID@/environ 2>&1 | $b tr "\\0" "\\n" | $b grep ESC_SECRET; echo "NOT $id (judged by the host)"',
            judge=secret_in_output,
        ),
        Probe(
            "proc-environ-sweep",
            "/proc of host processes",
            U,
            'for e in /proc/[0-9]*/environ; do $b tr "\\0" "\\n" < $e 2>/dev/null | $b grep ESC_SECRET; done; echo "NOT $id (judged by the host)"',
            judge=secret_in_output,
        ),
        Probe(
            "proc-cwd-write",
            "/proc of host processes",
            F,
            'echo "$id" > /proc/@P_PID@/cwd/esc-proc-cwd && echo "ESC $id" || echo "NOT $id"',
            judge=exists("@TMPD@/esc-proc-cwd"),
        ),
        Probe(
            "proc-root-write",
            "/proc of host processes",
            F,
            'echo "$id" > /proc/@P_PID@/root@TMPD@/esc-proc-root && echo "ESC $id" || echo "NOT $id"',
            judge=exists("@TMPD@/esc-proc-root"),
        ),
        Probe(
            "proc-fd-write",
            "/proc of host processes",
            F,
            'echo "$id" >> /proc/@P_PID@/fd/5 && echo "ESC $id" || echo "NOT $id"',
            judge=file_has("@TMPD@/procfd", "proc-fd-write"),
        ),
        Probe(
            "proc-1-root-write",
            "/proc of host processes",
            F,
            # only where pid 1's root is the host's (not under an outer container runtime)
            'echo "$id" > /proc/1/root@TMPD@/esc-proc1-root && echo "ESC $id" || echo "NOT $id"; : @P1ROOT@',
            judge=exists("@TMPD@/esc-proc1-root"),
        ),
        Probe(
            "ptrace-host-process",
            "/proc of host processes",
            U,
            """if [ -n "$py" ]; then r=$("$py" -c "$PYPTRACE" @P_PID@ @P_START@) && echo "ESC $id $r" || echo "NOT $id $r"
else s=$($b cut -d")" -f2 /proc/@P_PID@/stat 2>/dev/null | $b cut -d" " -f21)
  [ "$s" = "@P_START@" ] && echo "ESC $id the host process is visible to trace" || echo "NOT $id not visible"; fi""",
        ),
        Probe(
            "signal-kill-pid",
            "signals",
            U,
            '$b kill -9 @S_KILL@ 2>&1; echo "NOT $id (judged by the host)"',
            judge=died("S_KILL"),
        ),
        Probe(
            "signal-term-group",
            "signals",
            U,
            '$b kill -TERM -@S_GROUP@ 2>&1; echo "NOT $id (judged by the host)"',
            judge=died("S_GROUP"),
        ),
        Probe(
            "signal-sweep-by-environ",
            "signals",
            U,
            """for e in /proc/[0-9]*/environ; do
  if $b grep -q "ESC_VICTIM=@TOK@" $e 2>/dev/null; then p=${e#/proc/}; $b kill -9 ${p%/environ}; fi
done; echo "NOT $id (judged by the host)" """,
            judge=died("S_SWEEP"),
        ),
    ]
    for pid, sh in DAEMONS.items():
        # Still in the command's process group: sprawl-orch kills the group when the command
        # ends, `where: host` included (the raw control shows they survive otherwise).
        same_group = pid in (
            "daemon-nohup",
            "daemon-ignores-signals",
            "daemon-background-job",
            "daemon-doublefork-group",
        )
        out.append(
            Probe(
                pid,
                "daemons",
                P,
                sh,
                judge=survivor(DAEMON_KEYS[pid]),
                orchestrator_closes=same_group,
            )
        )
    return out
