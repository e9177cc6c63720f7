"""The docker daemon's `GET /version` and `GET /info`, kept per daemon process (issue 26).

Every served call is a fresh fork: its docker client negotiated the API version (`GET
/version`) and admission read the daemon's identity (`GET /info`), ~25-60 ms a call on a
loaded host for answers that cannot change while the same daemon runs with the same config.
They are kept in served_memo (so the exec server hands them to every later fork) under a
key that changes whenever the daemon could answer otherwise:

- the socket's path, device and inode (a restarted daemon makes its socket anew);
- the listening process (SO_PEERCRED on a connect: the pid, ~0.1 ms) and its start time
  (a restarted daemon is another process, a recycled pid has another start time);
- its config file's inode, size, mtime and ctime (`--config-file`, default
  /etc/docker/daemon.json for a root dockerd; a rootless one without `--config-file` reads
  its own $XDG_CONFIG_HOME's and gets no key): dockerd re-reads it on SIGHUP, which changes
  `default-runtime` and `runtimes` without a restart; everything else /info reports
  (userns-remap, cgroup driver, rootless, root dir, security options) needs a restart.
  The file's stamp says what the file holds, not what the daemon loaded: an edit not yet
  reloaded (setup-engines' register_runsc writes, then SIGHUPs; a loaded daemon takes
  seconds) would key the old answer under the new stamp and keep it past the reload. So
  an answer is kept only when its runtimes and default runtime are the file's (`agrees`):
  then the daemon has loaded this file, and a reload of it changes nothing /info says.

Only a listener that is itself `dockerd` is keyed (its /proc/<pid>/stat and exe name it): a socket
held by pid 1 (systemd socket activation: the same listener across daemon restarts), by a
forwarder (socat, ssh, a proxy: the daemon behind it can change under the same pid) or not
visible from here (pid 0: another pid namespace) gives no key, and each call asks, as
before. A tcp:// or ssh:// endpoint also asks each time.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

from sprawl_orch.core import served_memo
from sprawl_orch.core.exec_place import peer

KIND = "docker-daemon"
DEFAULT_CONFIG = "/etc/docker/daemon.json"


def _config_file(argv: list[str]) -> str | None:
    # the last one given: dockerd's flags (pflag) let a repeated flag's last value win, and
    # the first was the stamp of a file the daemon never read
    found = None
    for n, arg in enumerate(argv):
        if arg.startswith("--config-file="):
            found = arg.split("=", 1)[1]
        elif arg == "--config-file" and n + 1 < len(argv):
            found = argv[n + 1]
    return found


def _runs_dockerd(proc: Path) -> bool:
    """Its executable is named dockerd, not only its comm: any process sets its comm
    (prctl PR_SET_NAME), and a forwarder so named kept the key while the daemon it
    forwarded to changed. A daemon of another uid hides its executable: its comm decides.
    A forwarder root copied under the name dockerd still passes (root's own doing)."""
    try:
        exe = os.readlink(proc / "exe")
        held = os.stat(proc / "exe")
    except PermissionError:  # another uid's process: its comm said dockerd
        return True
    if os.path.basename(exe).removesuffix(" (deleted)") != "dockerd":  # " (deleted)": upgraded
        return False
    # root's, as a package installs it: a user's copy of a forwarder (socat, python) named
    # dockerd is the user's file, and so is anything a user could rewrite
    return held.st_uid == 0 and not held.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _as_the_daemon_sees(proc: Path, config: str) -> str | None:
    """The path of the daemon's config file from here: through its root (a dockerd in
    another mount namespace -- in a container, its socket bind-mounted out -- reads its own
    /etc/docker/daemon.json) and, for a relative `--config-file`, its working directory.
    A daemon of another uid hides both (a docker-group user's root dockerd): an absolute
    path is then taken as seen from here, a relative one gives no key."""
    try:
        base = os.readlink(proc / "cwd") if not config.startswith("/") else ""
        root = proc / "root"
        os.stat(root)
    except PermissionError:  # another uid's daemon: its root and cwd are hidden
        return config if config.startswith("/") else None
    return f"{root}{os.path.join(base, config)}"


def _file_stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None  # dockerd runs on its defaults; a file made later is a new key
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def daemon_key(host: str) -> list[Any] | None:
    """The key of the daemon process listening at `host`, None when it cannot be told."""
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://") :]
    try:
        sock_stat = os.stat(path)
        if not stat.S_ISSOCK(sock_stat.st_mode):
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
            probe.settimeout(2.0)
            probe.connect(path)
            pid, uid = peer(probe)
        if pid <= 1:
            return None
        proc = Path(f"/proc/{pid}")
        line = (proc / "stat").read_text()
        comm = line[line.index("(") + 1 : line.rindex(")")]
        if comm != "dockerd" or not _runs_dockerd(proc):
            return None
        started = line[line.rindex(")") + 2 :].split()[19]  # field 22: start time in ticks
        argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        config = _config_file(argv)
        if config is None:
            if uid != 0:
                return None  # rootless: its default file is under its own $XDG_CONFIG_HOME
            config = DEFAULT_CONFIG
        config = _as_the_daemon_sees(proc, config)
        if config is None:
            return None
        return [
            path,
            [sock_stat.st_dev, sock_stat.st_ino],
            pid,
            started,
            config,
            _file_stamp(config),
        ]
    except (OSError, ValueError, IndexError):
        # gone, unreadable or not a daemon we can tell apart: ask it, as before
        return None


def recall(key: list[Any] | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the /version, the /info) kept for this daemon process, or None."""
    if key is None:
        return None
    kept = served_memo.recall(KIND, key)
    if not isinstance(kept, dict):
        return None
    version, info = kept.get("version"), kept.get("info")
    if not isinstance(version, dict) or not isinstance(info, dict):
        return None
    if not version.get("ApiVersion"):
        return None
    return dict(version), dict(info)


def agrees(info: dict[str, Any], config: str, stamp: Any) -> bool:
    """The daemon's reloadable answers (runtimes, default runtime) are what `config`, still
    at `stamp`, says: it has loaded this file. Anything else (an edit not reloaded yet, a
    runtime added by a flag or by a file since changed) is not kept: asked every call."""
    import json

    try:
        held = json.loads(Path(config).read_bytes()) if stamp is not None else {}
        if _file_stamp(config) != stamp or not isinstance(held, dict):
            return False  # changed while read
    except (OSError, ValueError):  # unreadable or not JSON: not known to agree, not kept
        return False
    wanted = held.get("runtimes") or {}
    answered = info.get("Runtimes") or {}
    if not isinstance(wanted, dict) or not isinstance(answered, dict):
        return False
    # runc and containerd's own (io.containerd.*) are dockerd's built-ins, never the file's
    # whole entries: a reload of a newer dockerd's runtimeType or options changes what runs
    # under a name whose path and args stay (an entry /info words otherwise: not kept)
    extra = {n: e for n, e in answered.items() if n != "runc" and "." not in n}
    if extra != wanted:
        return False
    return str(info.get("DefaultRuntime") or "runc") == str(held.get("default-runtime") or "runc")


def learn(key: list[Any] | None, version: dict[str, Any], info: dict[str, Any]) -> None:
    if key is not None and agrees(info, str(key[4]), key[5]):
        served_memo.learn(KIND, key, {"version": version, "info": info})
