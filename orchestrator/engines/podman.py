"""Podman backend: the CLI and its JSON only.

No podman service socket runs on these hosts (podman is daemonless here), so facts come
from `podman info --format json` and inspect from `podman container inspect`. Every CLI
call costs ~50 ms on podman 4.3.1, so the run takes as few as it can: create, inspect,
`start --attach` (start + wait + output in one call, stdout and stderr kept apart),
inspect, rm.

conmon 2.1.6 (spawned by `podman start`) writes its OOM marker file "oom" into its
*working directory*, and podman 4.3.1 looks for it in the container's bundle
(`StaticDir`). Started from anywhere else, an OOM-killed container reads
`State.OOMKilled: false` (seen: exit 137, "Memory cgroup out of memory: Killed process
… (dd)" in the kernel log) and an empty file named "oom" appears in whatever directory
we were in — possibly the person's tree. So `start` runs with cwd = StaticDir.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sprawl_orch.core.command_input import CommandInput
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.host_which import host_which
from sprawl_orch.engines._podman_attach import PodmanAttached
from sprawl_orch.engines.engine import EngineFacts, engine_error, run_cli

# Where podman finds its configuration and state; passed through to every CLI call.
CONNECTION_VARS: tuple[str, ...] = (
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "HOME",
    "PATH",
)
# OCI runtimes podman can be told to use by name (`--runtime NAME`).
KNOWN_RUNTIMES: tuple[str, ...] = ("runc", "crun")
RM_BUSY_RETRIES: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4, 0.8)
MNT_DETACH = 2  # <sys/mount.h>
UMOUNT_NOFOLLOW = 8  # never through a link, should one ever stand at <StaticDir>/shm
_GONE = ("no such container", "no container with name or id")


def parse_facts(info: Mapping[str, Any], installed: Sequence[str] = ()) -> EngineFacts:
    """Facts from `podman info --format json`; `installed` = runtimes found on PATH."""
    host: Mapping[str, Any] = info.get("host") or {}
    version: Mapping[str, Any] = info.get("version") or {}
    security: Mapping[str, Any] = host.get("security") or {}
    controllers = set(host.get("cgroupControllers") or [])
    mappings: Mapping[str, Any] = host.get("idMappings") or {}
    default = str((host.get("ociRuntime") or {}).get("name") or "?")
    runtimes = tuple(dict.fromkeys([default, *installed]))
    return EngineFacts(
        engine="podman",
        server_version=str(version.get("Version") or "?"),
        api_version=str(version.get("APIVersion") or "?"),
        os=str(host.get("os") or version.get("Os") or "?"),
        arch=str(host.get("arch") or "?"),
        cgroup_version=str(host.get("cgroupVersion") or "?").removeprefix("v"),
        cgroup_driver=str(host.get("cgroupManager") or "?"),
        # rootless cgroup v2 without delegation lists no controllers: limits would be ignored
        memory_limit="memory" in controllers,
        swap_limit="memory" in controllers,
        pids_limit="pids" in controllers,
        cpu_cfs_quota="cpu" in controllers,
        rootless=bool(security.get("rootless")),
        userns_remap=bool(mappings.get("uidmap")),
        default_runtime=default,
        runtimes=runtimes,
        security_options=tuple(
            k for k in ("apparmorEnabled", "seccompEnabled", "selinuxEnabled") if security.get(k)
        ),
        uid_map=_id_map(mappings.get("uidmap")),
        gid_map=_id_map(mappings.get("gidmap")),
        seccomp_profile=str(security.get("seccompProfilePath") or ""),
    )


def _id_map(entries: Any) -> tuple[tuple[int, int, int], ...]:
    return tuple((int(e["container_id"]), int(e["host_id"]), int(e["size"])) for e in entries or ())


def rm_past_busy(
    rm: Callable[[], subprocess.CompletedProcess[str]],
) -> subprocess.CompletedProcess[str]:
    """Run a `podman rm` and, while it fails on the shm race below ("unlinkat
    …/userdata/shm: device or resource busy"), again after each of RM_BUSY_RETRIES: an rm a
    moment later finds the shm unmounted by the first and removes the rest. The arm's remove
    and the guardian's sweep (engines/sweep.py) both meet it."""
    done = rm()
    for pause in RM_BUSY_RETRIES:
        if done.returncode == 0 or "device or resource busy" not in done.stderr:
            break
        time.sleep(pause)
        done = rm()
    return done


def unmount_shm(bundle: str) -> bool:
    """Unmount the container's `<StaticDir>/shm` if it is still mounted; True when done.

    Rootful podman 4.3.1 with --userns=auto leaves userdata/shm mounted after the
    container exits (with the host's user namespace the exit cleanup unmounts it), and
    `podman rm` then deletes the container's storage in one goroutine while another
    unmounts shm: strace shows unlinkat(…/userdata/shm, AT_REMOVEDIR) = EBUSY a
    millisecond before umount2(…/userdata/shm, MNT_DETACH), and rm fails "unlinkat
    …/userdata/shm: device or resource busy" -- 14 removals in 40 here under load, each
    costing a retry (sleep + a second ~50 ms rm). Unmounting first, as rm itself would,
    leaves it nothing to race. Lazy (MNT_DETACH): the container's own mount namespace,
    if anything still runs in it, keeps its /dev/shm. Only root may; rootless podman's
    mount lives in its own namespace and is left to rm (and RM_BUSY_RETRIES)."""
    shm = os.path.join(bundle, "shm")
    if os.geteuid() != 0 or not os.path.ismount(shm):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.umount2(shm.encode(), MNT_DETACH | UMOUNT_NOFOLLOW)) == 0


def _gone(words: str) -> bool:
    low = words.lower()
    return any(g in low for g in _GONE)


class PodmanEngine:
    name = "podman"

    def __init__(
        self,
        *,
        cli: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self._bundles: dict[str, str] = {}
        self.cli = cli or host_which("podman", env.get("PATH"))
        self._conn: dict[str, str] = {k: env[k] for k in CONNECTION_VARS if k in env}
        self._path = env.get("PATH")
        # The create runs with the child's HOME (the container arm's is /tmp) so that
        # `--env HOME` passes it; rootless podman finds its store and configuration from
        # HOME unless XDG_DATA_HOME/XDG_CONFIG_HOME say otherwise, and with HOME=/tmp
        # it made a new empty store in /tmp/.local ("image not known") and read
        # /tmp/.config/containers -- anyone's to write. Pin both to this process's home.
        home = self._conn.get("HOME") or str(Path.home())
        self._conn.setdefault("XDG_DATA_HOME", str(Path(home) / ".local" / "share"))
        self._conn.setdefault("XDG_CONFIG_HOME", str(Path(home) / ".config"))

    def endpoint(self) -> str:
        return f"{self.cli}:{self._conn.get('CONTAINERS_CONF', '')}"

    def _bin(self) -> str:
        if self.cli is None:
            raise SprawlError(
                ErrorCode.TOOL_UNAVAILABLE,
                "podman",
                "podman is not installed",
                "install it: apt-get install podman runc",
            )
        return self.cli

    def cli_env(self) -> dict[str, str]:
        """The podman CLI's whole environment: where podman finds its configuration and store
        (CONNECTION_VARS, the XDG homes pinned). Nothing else of the host's environment: the
        command's values go by --env-file, and a host-side program run with the tree's
        LD_PRELOAD or LD_LIBRARY_PATH loads the tree's code on the host, here as root
        (issue 30, attack3)."""
        return dict(self._conn)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_cli("podman", [self._bin(), *args], self.cli_env(), check=check)

    def facts(self) -> EngineFacts:
        done = self._run("info", "--format", "json")
        try:
            info = json.loads(done.stdout)
        except json.JSONDecodeError as err:
            raise engine_error(
                "podman", "info", f"not JSON: {done.stdout[:200]!r}", "check `podman info`"
            ) from err
        installed = [r for r in KNOWN_RUNTIMES if host_which(r, self._path)]
        return parse_facts(info, installed)

    def identity(self) -> dict[str, Any]:
        """Which podman, runtimes, configuration and store -- read from file stamps, not
        `podman info` (~200 ms): see container/evidence.py. ~0.1 ms."""
        from sprawl_orch.engines.engine import stamp

        configs = self._config_files()
        return {
            "podman": [self.cli, stamp(self.cli)],
            "euid": os.geteuid(),
            # runsc is given by the path of a wrapper (container/gvisor.py), not by name
            "runtimes": {r: stamp(host_which(r, self._path)) for r in (*KNOWN_RUNTIMES, "runsc")},
            "configs": {str(p): stamp(p) for p in configs},
            "store": [str(root := self._graph_root(configs)), stamp(root, contents=False)],
        }

    def _config_files(self) -> list[Path]:
        """Every containers.conf / storage.conf (and drop-in directory) podman may read."""
        home = Path(self._conn.get("HOME") or Path.home())
        user = Path(self._conn.get("XDG_CONFIG_HOME") or home / ".config") / "containers"
        found = [
            Path(self._conn[k])
            for k in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF")
            if self._conn.get(k)
        ]
        for base in (Path("/usr/share/containers"), Path("/etc/containers"), user):
            found += [base / "containers.conf", base / "containers.conf.d", base / "storage.conf"]
        return found

    def _graph_root(self, configs: Sequence[Path]) -> Path:
        """storage.conf's graphroot (the last file read wins), else podman's default."""
        import tomllib

        root: str | None = None
        chosen = self._conn.get("CONTAINERS_STORAGE_CONF")
        for conf in [Path(chosen)] if chosen else configs:
            if conf.name != "storage.conf" and not chosen:
                continue
            try:
                root = tomllib.loads(conf.read_text()).get("storage", {}).get("graphroot") or root
            except (OSError, ValueError):
                continue
        if root:
            return Path(root)
        if os.geteuid() == 0:
            return Path("/var/lib/containers/storage")
        data = self._conn.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(data) / "containers" / "storage"

    def local_image(self, image_id: str) -> str | None:
        done = self._run("image", "inspect", "--format", "{{.Id}}", image_id, check=False)
        if done.returncode != 0:
            if "image not known" in done.stderr or "no such image" in done.stderr.lower():
                return None
            raise engine_error(
                "podman", "image inspect", done.stderr, "check the image with `podman images`"
            )
        found = done.stdout.strip()
        # podman prints the bare hex; the pin is "sha256:<hex>"
        return image_id if found == image_id.removeprefix("sha256:") else None

    def cli_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return (self._bin(), *argv)

    def create(self, argv: Sequence[str]) -> str:
        done = run_cli("podman", self.cli_argv(argv), self.cli_env())
        return done.stdout.strip().splitlines()[-1]

    def inspect(self, container: str) -> dict[str, Any]:
        done = self._run("container", "inspect", container, check=False)
        if done.returncode != 0:
            raise engine_error(
                "podman", "inspect", done.stderr, "the container is gone; run the command again"
            )
        found = dict(json.loads(done.stdout)[0])
        if found.get("StaticDir"):
            self._bundles[container] = str(found["StaticDir"])
        return found

    def start(
        self, container: str, stdout: Path, stderr: Path, given: CommandInput | None = None
    ) -> PodmanAttached:
        bundle = self._bundles.get(container)
        if bundle is None:  # normally known from the verification inspect
            bundle = str(self.inspect(container).get("StaticDir") or "") or None
        return PodmanAttached(self._bin(), container, self.cli_env(), stdout, stderr, bundle, given)

    def init_pid(self, container: str) -> int:
        """`podman init`: the container's namespaces exist, its program has not started (OCI
        create without start); the host pid that holds them (egress/netns.py binds there).
        conmon starts here, not at `start`: it runs in the bundle for its OOM marker too."""
        bundle = self._bundles.get(container)
        done = subprocess.run(
            [self._bin(), "init", container],
            env=self.cli_env(),
            cwd=bundle,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise engine_error("podman", "init", done.stderr, "run the command again")
        return int(self.inspect(container)["State"]["Pid"])

    def kill(self, container: str) -> None:
        done = self._run("kill", "--signal", "KILL", container, check=False)
        if done.returncode != 0 and not _gone(done.stderr) and "not running" not in done.stderr:
            raise engine_error(
                "podman", "kill", done.stderr, "kill it by hand: podman rm -f " + container
            )

    def remove(self, container: str) -> None:
        bundle = self._bundles.pop(container, None)
        if bundle is not None:
            unmount_shm(bundle)
        # The retry is kept for what unmount_shm can't reach (rootless: the mount is in
        # podman's own namespace; a bundle never inspected).
        done = rm_past_busy(lambda: self._run("rm", "--force", container, check=False))
        if done.returncode != 0 and not _gone(done.stderr):
            raise engine_error(
                "podman", "rm", done.stderr, "remove it by hand: podman rm -f " + container
            )

    def unshare(self, argv: list[str]) -> None:
        """Run `argv` inside podman's rootless user namespace (`podman unshare`), where
        the caller is root over its subordinate ids (ownership.give_copy)."""
        self._run("unshare", *argv)

    def list_labelled(self, label: str) -> list[str]:
        done = self._run("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}")
        return done.stdout.split()

    def close(self) -> None:
        return None
