"""Network escapes (axis: network): host unix sockets anywhere and in any mode, the
engines' own daemon sockets, abstract sockets, TCP and UDP to every host address.

Why each exists:
- a read-only bind does not stop connect(): `--ro-bind / /` handed dockerd's socket to
  every linux_namespaces command (issue #11) -- so sockets are planted in every directory
  that commonly holds one, world-writable ones included, and the engines' sockets tried;
- a tmpfs mask can be lifted by whoever may umount it: the unmask probes try, directly and
  from a nested user namespace (Codex and sandbox-runtime refuse AF_UNIX with seccomp as
  the second wall);
- abstract sockets have no path at all: only a network namespace hides them;
- without a Python (busybox image) a path socket that is merely *visible* counts as an
  escape: the probe cannot prove it unreachable.
"""

from __future__ import annotations

import os

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.bait import host_addresses
from tests.escapes.probe import Probe, listener

N = Guarantee.NETWORK


def _unix(pid: str, key: str, path: str) -> Probe:
    sh = f"""s="{path}"
if [ -n "$py" ]; then
  if "$py" -c "$PYUNIX" "$s" "$id" >/dev/null; then echo "ESC $id connected $s"; else echo "NOT $id $s refused"; fi
elif [ -S "$s" ]; then echo "ESC $id $s is visible (no client here to prove it unreachable)"
else echo "NOT $id $s not visible"; fi"""
    return Probe(pid, "unix sockets", N, sh, judge=listener("unix", key))


def _engine(pid: str, path: str) -> Probe:
    sh = f"""s="{path}"
if [ -n "$py" ]; then
  if "$py" -c "$PYUNIX" "$s" "GET /_ping HTTP/1.0

"; then echo "ESC $id the engine answered on $s"; else echo "NOT $id $s refused"; fi
elif [ -S "$s" ]; then echo "ESC $id $s is visible (no client here to prove it unreachable)"
else echo "NOT $id $s not visible"; fi"""
    return Probe(pid, "engine sockets", N, sh)


ENGINE_SOCKETS = {
    "docker-private": "/run/sprawl-orch/docker.sock",
    "docker-default": "/var/run/docker.sock",
    "containerd": "/run/containerd/containerd.sock",
    "podman-rootful": "/run/podman/podman.sock",
}

UNMASK = """for m in /run /var/run /tmp /var/tmp /dev/shm; do $b umount -l $m 2>/dev/null; done
for s in "@U_RUN@" "@U_TMP@" "@U_SHM@" "@U_VARTMP@"; do [ -S "$s" ] && echo "$s"; done"""


# In the host's mount namespace nothing masks a socket; what is left to stop a connect is
# that no AF_UNIX socket can be made (the landlock mechanism's seccomp program).
HOSTMNT_UNIX = (
    """if [ -n "$py" ] && ! "$py" -c 'import socket; socket.socket(socket.AF_UNIX)' 2>/dev/null; """
    """then echo "NOT $id the host's mount namespace, but no unix socket can be made"; """
    """else echo "ESC $id runs in the host's mount namespace: nothing masks a socket"; fi"""
)


def probes() -> list[Probe]:
    out = [
        _unix("unix-tmp", "U_TMP", "@U_TMP@"),
        _unix("unix-tmp-worldwritable", "U_WW", "@U_WW@"),
        _unix("unix-var-tmp", "U_VARTMP", "@U_VARTMP@"),
        _unix("unix-dev-shm", "U_SHM", "@U_SHM@"),
        _unix("unix-run", "U_RUN", "@U_RUN@"),
        _unix("unix-var-run-alias", "U_RUN", "/var@U_RUN@"),
        _unix("unix-home", "U_HOME", "@U_HOME@"),
        _unix("unix-beside-tree", "U_OUTSIDE", "@U_OUTSIDE@"),
        _unix("unix-in-tree-copied", "U_TREE", "./esc-@TOK@.sock"),
        _unix("unix-in-tree-abs", "U_TREE", "@U_TREE@"),
        _engine("engine-podman-service", "@PODMAN_SOCK@"),
        Probe(
            "unix-sweep",
            "unix sockets",
            N,
            """if [ -n "$py" ]; then
  r=$("$py" -c "$PYSWEEP" path @TOK@ /run /var/run /tmp /var/tmp /dev/shm @HOME@ /home) && echo "ESC $id $r" || echo "NOT $id $r"
else
  f=$($b find /run /var/run /tmp /var/tmp /dev/shm @HOME@ /home -maxdepth 4 -type s 2>/dev/null | $b head -5)
  [ -n "$f" ] && echo "ESC $id visible: $f" || echo "NOT $id no socket visible"
fi""",
        ),
        Probe(
            "unix-unmask",
            "unix sockets",
            N,
            f"""if hostmnt; then {HOSTMNT_UNIX}; exit; fi
r=$({UNMASK})
[ -n "$r" ] && echo "ESC $id umount revealed $r" || echo "NOT $id the masks stayed"
""",
        ),
        Probe(
            "unix-unmask-nested-userns",
            "unix sockets",
            N,
            f"""if hostmnt; then {HOSTMNT_UNIX}; exit; fi
r=$($b unshare -Urm $b sh -c '{UNMASK}' 2>&1)
case "$r" in /*) echo "ESC $id a nested namespace revealed $r";; *) echo "NOT $id ${{r:-the masks stayed}}";; esac
""",
        ),
        Probe(
            "unix-seccomp-bypass",
            "unix sockets",
            N,
            """if [ -n "$py" ]; then
  r=$("$py" -c "$PYBYPASS" "@U_TMP@" "@U_RUN@" "@U_HOME@" "@U_SHM@") && echo "ESC $id $r" || echo "NOT $id $r"
else echo "NOT $id no Python here to make raw syscalls"; fi""",
            judge=lambda b, o: next(
                (
                    listener("unix", k)(b, o)
                    for k in ("U_TMP", "U_RUN", "U_HOME", "U_SHM")
                    if listener("unix", k)(b, o)
                ),
                None,
            ),
        ),
        Probe(
            "abstract-planted",
            "abstract sockets",
            N,
            """if [ -n "$py" ]; then
  "$py" -c "$PYUNIX" "@@U_ABSTRACT@" "$id" >/dev/null && echo "ESC $id connected" || echo "NOT $id refused"
elif $b grep -q "@@U_ABSTRACT@" /proc/net/unix; then echo "ESC $id the host's abstract socket is in /proc/net/unix"
else echo "NOT $id not in this network namespace"; fi""",
            judge=listener("unix", "U_ABSTRACT"),
        ),
        Probe(
            "abstract-sweep",
            "abstract sockets",
            N,
            """if [ -n "$py" ]; then
  r=$("$py" -c "$PYSWEEP" abstract @TOK@) && echo "ESC $id $r" || echo "NOT $id $r"
else
  n=$($b grep -c " @" /proc/net/unix)
  [ "$n" -gt 0 ] && echo "ESC $id $n abstract sockets visible" || echo "NOT $id none visible"
fi""",
        ),
    ]
    # The engines' sockets that exist on this machine (a probe of an absent one could
    # never show an escape, not even on the host control).
    for name, path in ENGINE_SOCKETS.items():
        if os.path.exists(path):
            out.append(_engine(f"engine-{name}", path))
    for n in range(len(host_addresses())):
        a, p = f"@TCP{n}_A@", f"@TCP{n}_P@"
        out.append(
            Probe(
                f"tcp-addr{n}",
                "tcp/udp",
                N,
                f"""echo "$id" | $b timeout 5 $b nc -w 2 {a} {p} >/dev/null 2>&1 && echo "ESC $id connected {a}" || echo "NOT $id {a}:{p} refused" """,
                judge=listener("tcp", f"TCP{n}_A"),
            )
        )
        ua, up = f"@UDP{n}_A@", f"@UDP{n}_P@"
        out.append(
            Probe(
                f"udp-addr{n}",
                "tcp/udp",
                N,
                f"""if [ -n "$py" ]; then "$py" -c "$PYUDP" {ua} {up} "$id" >/dev/null; else $b timeout 1 $b tftp -g -r "$id" -l /dev/null {ua} {up} >/dev/null 2>&1; fi
echo "NOT $id (judged by the host's receiver)" """,
                judge=listener("udp", f"UDP{n}_A"),
            )
        )
    out.append(
        Probe(
            "tcp-ipv6-link-local",
            "tcp/udp",
            N,
            """if [ -n "$py" ]; then "$py" -c "$PYTCP" @TCPLL_A@ @TCPLL_P@ "$id" >/dev/null && echo "ESC $id connected" || echo "NOT $id refused"
else echo "$id" | $b timeout 5 $b nc -w 2 @TCPLL_A@ @TCPLL_P@ >/dev/null 2>&1 && echo "ESC $id connected" || echo "NOT $id refused"; fi""",
            judge=listener("tcp", "TCPLL_A"),
        )
    )
    out.append(
        Probe(
            "tcp-127.0.0.2",
            "tcp/udp",
            N,
            """echo "$id" | $b timeout 5 $b nc -w 2 127.0.0.2 @TCPW_P@ >/dev/null 2>&1 && echo "ESC $id connected" || echo "NOT $id refused" """,
            judge=listener("tcp", "0.0.0.0"),
        )
    )
    out.append(
        Probe(
            "tcp-localhost-name",
            "tcp/udp",
            N,
            """echo "$id" | $b timeout 5 $b nc -w 2 localhost @TCPW_P@ >/dev/null 2>&1 && echo "ESC $id connected" || echo "NOT $id refused" """,
            judge=listener("tcp", "0.0.0.0"),
        )
    )
    return out
