"""Inputs that shape the sandbox, each tried as an attacker would plant it (issue 30): files in
the tree, the caller's environment (PATH, CONTAINERS_CONF, DOCKER_CONFIG, XDG_STATE_HOME),
the engine's configuration, the image. test_shaping.py runs every case through sprawl-orch on
each arm it concerns, and as a raw control with nothing of sprawl-orch in the way: the control
must show the effect, or the case proves nothing when the arm shows none.

A case is judged from the host: a marker file a planted program wrote, a file that appeared in
the host's /dev/shm or in the person's tree, the caller's secret in the command's output.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sprawl_orch.core.host_which import host_which
from tests.integration.conftest import missing

CONTAINERS = ("docker", "podman")
SANDBOXES = ("linux_namespaces", "landlock", "docker", "podman")
# Programs sprawl-orch runs on the host around a command: a planted one of the same name must
# never be the one that runs.
HOST_PROGRAMS = ("ionice", "nice", "bwrap", "podman", "docker", "runsc", "true")
TIMEOUT_S = 120.0


@dataclass
class Scene:
    """One case on one row: its directories, token and what it set up."""

    tmp: Path
    tree: Path
    tok: str
    out: Path  # world-writable, outside every sandbox's view: planted programs write here
    images: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)  # the orchestrator's environment
    # what ExecTool is given as its environ (beside os.environ), the test process keeps none of
    # it: a process that inherits the orchestrator's own environment is not judged
    tool_env: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # the config, changed by the case
    chdir: bool = False  # the orchestrator runs with the tree as its cwd (as `exec` does)
    before: frozenset[str] = frozenset()  # the tree's paths once planted
    cleanup: list[Callable[[], None]] = field(default_factory=list)  # run once judged

    @property
    def secret(self) -> str:
        return f"sprawl-secret-{self.tok}"


Plant = Callable[[Scene], None]
Seen = Callable[[Scene, str], "str | None"]  # host evidence of an escape (output given)
Control = Callable[[Scene], str]  # runs the input with nothing in the way; returns output


@dataclass(frozen=True)
class Case:
    id: str
    rows: tuple[str, ...]
    plant: Plant
    sh: str  # the command; {tok} and {secret} are filled in
    seen: Seen
    control: Control
    # a refusal (E_SANDBOX_DENIED, E_CONFIG_INVALID) is the sandbox's answer, not a failure
    refusal_ok: bool = False
    root_only: bool = False
    # run through `sprawl-orch exec` in a process of its own: /proc/self/environ shows a
    # process's environment as it was exec'd, not what a test set in os.environ since
    cli: bool = False
    # a known break not fixed here: the arm rows are strict xfails with this reason
    xfail: str = ""


def run_sh(scene: Scene, text: str, **kw: Any) -> str:
    env = kw.pop("env", None) or {**os.environ, **scene.env}
    done = subprocess.run(
        ["sh", "-c", text],
        cwd=scene.tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        **kw,
    )
    return done.stdout + done.stderr


def engine_run(scene: Scene, engine: str, sh: str) -> str:
    """The image's `sh -c` under the bare engine (the config the case planted applies)."""
    limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    argv = [engine, "run", "--rm", "--pull", "never", "--network", "none", *limits]
    return run_sh(scene, " ".join([*argv, scene.images[engine], "sh", "-c", f"'{sh}'"]))


# -- PATH with an empty or relative entry: the tree's own `ionice`, `bwrap`, `podman` ---------
def plant_programs(scene: Scene, where: Path, entry: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for name in HOST_PROGRAMS:
        real = host_which(name) or f"/nonexistent/{name}"
        prog = where / name
        prog.write_text(
            f'#!/bin/sh\necho "$0 $*" >> {scene.out}/ran-{name} 2>/dev/null\nexec {real} "$@"\n'
        )
        prog.chmod(0o755)
    scene.env["PATH"] = f"{entry}:{os.environ['PATH']}"
    scene.chdir = True


def ran_planted(scene: Scene, out: str) -> str | None:
    ran = sorted(p.name for p in scene.out.glob("ran-*"))
    return f"planted programs ran on the host: {ran}" if ran else None


def control_programs(scene: Scene) -> str:
    return run_sh(scene, "ionice -c 2 -n 7 true; nice -n 10 true")


# -- containers.conf (CONTAINERS_CONF) adding host namespaces and devices --------------------
def plant_containers_conf(text: str) -> Plant:
    def plant(scene: Scene) -> None:
        conf = scene.tmp / "containers.conf"
        conf.write_text(f"[containers]\n{text}\n")
        scene.env["CONTAINERS_CONF"] = str(conf)

    return plant


def shm_file(scene: Scene) -> Path:
    return Path("/dev/shm") / f"sprawl-shaping-{scene.tok}"


def in_host_shm(scene: Scene, out: str) -> str | None:
    path = shm_file(scene)
    return f"{path} appeared on the host" if path.exists() else None


def said_esc(scene: Scene, out: str) -> str | None:
    lines = [line for line in out.splitlines() if line.startswith(f"ESC {scene.tok}")]
    return lines[0] if lines else None


def host_hostname(scene: Scene, out: str) -> str | None:
    name = socket.gethostname()
    return f"the command saw the host's hostname {name!r}" if f"HOST={name}" in out else None


# -- the person's docker client config: proxies into the environment -------------------------
def plant_docker_proxies(scene: Scene) -> None:
    conf = scene.tmp / "docker-config"
    conf.mkdir()
    proxy = f"http://alice:{scene.secret}@127.0.0.1:9"
    (conf / "config.json").write_text(
        json.dumps({"proxies": {"default": {"httpProxy": proxy, "httpsProxy": proxy}}})
    )
    scene.env["DOCKER_CONFIG"] = str(conf)


def secret_out(scene: Scene, out: str) -> str | None:
    return "the caller's secret is in the command's output" if scene.secret in out else None


# -- links in the tree into /proc: the orchestrator's own environment ------------------------
def plant_secret_env(scene: Scene) -> None:
    scene.env["SPRAWL_SHAPING_SECRET"] = scene.secret


def plant_link_environ(scene: Scene) -> None:
    plant_secret_env(scene)
    (scene.tree / "env").symlink_to("/proc/self/environ")


def plant_link_climbing_to_environ(scene: Scene) -> None:
    plant_secret_env(scene)
    (scene.tree / "env").symlink_to(os.path.relpath("/proc/self/environ", scene.tree))


def plant_link_proc_dir(scene: Scene) -> None:
    plant_secret_env(scene)
    (scene.tree / "me").symlink_to("/proc/self")


# -- links in the tree to the engines' sockets, the file and its directory ----------------
ENGINE_SOCKET = "/run/sprawl-orch/docker.sock"  # the private dockerd (.ci/env)
SOCKET_SEEN = "for s in d.sock r/docker.sock; do [ -S $s ] && echo ESC {tok} $s is a socket; done"


def plant_socket_links(scene: Scene) -> None:
    if not os.path.exists(ENGINE_SOCKET):
        missing(f"{ENGINE_SOCKET} is absent: the private dockerd is not running")
    (scene.tree / "d.sock").symlink_to(ENGINE_SOCKET)
    (scene.tree / "r").symlink_to(os.path.dirname(ENGINE_SOCKET))


# -- the state directory inside the tree: copies, and so the command's writes, in the tree ---
def plant_state_in_tree(scene: Scene) -> None:
    scene.data["state"] = {"dir": str(scene.tree / ".sprawl-state")}


def plant_xdg_state_in_tree(scene: Scene) -> None:
    scene.data.pop("state", None)
    scene.env["XDG_STATE_HOME"] = str(scene.tree / ".xdg-state")


def marker_in_tree(scene: Scene, out: str) -> str | None:
    for root, _dirs, files in os.walk(scene.tree):
        if f"marker-{scene.tok}" in files:
            return f"the command's file is in the person's tree: {root}"
    return None


def tree_paths(tree: Path) -> frozenset[str]:
    return frozenset(str(p.relative_to(tree)) for p in tree.rglob("*"))


def tree_changed(scene: Scene, out: str) -> str | None:
    new = sorted(tree_paths(scene.tree) - scene.before)
    return f"a refused command left {new} in the person's tree" if new else None


def snapshot_after(plant: Plant) -> Plant:
    def both(scene: Scene) -> None:
        plant(scene)
        scene.before = tree_paths(scene.tree)

    return both


def control_in_place(scene: Scene) -> str:
    return run_sh(scene, f"echo {scene.tok} > marker-{scene.tok}")


# -- a set-uid root program in the tree ------------------------------------------------------
def plant_setuid(scene: Scene) -> None:
    # coreutils' id, not busybox's: busybox drops a set-uid bit itself for its `id` applet.
    # Dynamic, so it runs on bwrap (the host's libraries in view), not in the busybox image.
    real = host_which("id")
    assert real is not None, "coreutils is on every runner"
    prog = scene.tree / "id"
    shutil.copy(real, prog)
    os.chown(prog, 0, 0)
    prog.chmod(0o4755)
    assert prog.stat().st_mode & stat.S_ISUID


def euid_zero(scene: Scene, out: str) -> str | None:
    return "the tree's set-uid program ran with euid 0" if f"EUID=0 {scene.tok}" in out else None


def control_setuid(scene: Scene) -> str:
    cmd = f'echo "EUID=$(./id -u) {scene.tok}"'
    return run_sh(scene, f"setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{cmd}'")


# -- [sandbox.container] user = "0:0": root of a rootful container writes kernel state ------
def plant_user_root(scene: Scene) -> None:
    if scene.data:
        scene.data["sandbox"]["container"]["user"] = "0:0"


# The value read is written back: nothing of the host changes even where the write lands.
KERNEL_WRITES = (
    "v=$(cat /proc/sys/vm/overcommit_ratio) && echo $v > /proc/sys/vm/overcommit_ratio "
    "&& echo ESC {tok} wrote the host sysctl vm.overcommit_ratio"
)


# -- an image that declares a VOLUME: an engine-made, writable, lasting host directory -------
def plant_volume_image(scene: Scene) -> None:
    if not scene.data:
        return  # the raw control names its image itself
    container = scene.data["sandbox"]["container"]
    container["images"] = {e: scene.images[f"{e}-volume"] for e in CONTAINERS}
    container["user"] = "0:0"  # the volume is root's: a write must fail by the arm, not by mode


def control_volume(engine: str) -> Control:
    def control(scene: Scene) -> str:
        sh = f"echo x > /data/f && echo ESC {scene.tok} wrote /data/f"
        limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        argv = [engine, "run", "--rm", "--pull", "never", "--network", "none", *limits]
        image = scene.images[f"{engine}-volume"]
        return run_sh(scene, " ".join([*argv, "--user", "0", image, "sh", "-c", f"'{sh}'"]))

    return control


# -- [sandbox] env_passthrough = ["LD_PRELOAD"]: a library loaded by every host process -----
PRELOAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char comm[64] = {0}, path[512];
    int f = open("/proc/self/comm", O_RDONLY);
    if (f >= 0) { if (read(f, comm, sizeof comm - 1) < 0) comm[0] = 0; close(f); }
    comm[strcspn(comm, "\n/")] = 0;
    snprintf(path, sizeof path, "%s/preloaded-%s-%d", OUT, comm, (int)getpid());
    f = open(path, O_WRONLY | O_CREAT, 0666);
    if (f >= 0) close(f);
}
"""


def plant_preload(scene: Scene) -> None:
    """A shared object that leaves `preloaded-<comm>-<pid>` in scene.out when any process
    loads it; in scene.out (world-readable, under /tmp): a root caller's bwrap runs as the
    sandbox uid, which cannot read the 0700 test directory the tree is in. Inside bwrap /tmp
    is a private tmpfs and a container's image is static busybox: only a host process that
    sprawl-orch ran can leave the marker."""
    cc = host_which("cc") or host_which("gcc")
    if cc is None:
        missing("no C compiler (apt-get install gcc): the preload library cannot be built")
    src = scene.tmp / "preload.c"
    src.write_text(PRELOAD_C.replace("OUT", json.dumps(str(scene.out))))
    lib = scene.out / "preload.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    lib.chmod(0o755)
    scene.tool_env["LD_PRELOAD"] = str(lib)
    if scene.data:
        scene.data["sandbox"]["env_passthrough"] = ["LD_PRELOAD"]


def control_preload(scene: Scene) -> str:
    return run_sh(scene, "true", env={**os.environ, **scene.tool_env})


def preloaded_on_host(scene: Scene, out: str) -> str | None:
    ran = sorted(p.name for p in scene.out.glob("preloaded-*"))
    return f"the command's LD_PRELOAD loaded into host processes: {ran}" if ran else None


# -- a link in the tree out of it, to the caller's credentials or root's /etc/shadow -----------
def credential_dir(scene: Scene) -> Path:
    # ~/.config: one of the credential places every home has (core.credential_places.SECRETS)
    return Path.home() / ".config" / f"sprawl-shaping-{scene.tok}"


def plant_link_to_credentials(scene: Scene) -> None:
    where = credential_dir(scene)
    where.mkdir(mode=0o700, parents=True)
    scene.cleanup.append(lambda: shutil.rmtree(where, ignore_errors=True))
    key = where / "credentials"
    key.write_text(f"{scene.secret}\n")
    key.chmod(0o600)
    (scene.tree / "k").symlink_to(key)


def plant_link_to_shadow(scene: Scene) -> None:
    (scene.tree / "k").symlink_to("/etc/shadow")


def shadow_out(scene: Scene, out: str) -> str | None:
    first = Path("/etc/shadow").read_text().splitlines()[0]
    return "root's /etc/shadow is in the command's output" if first in out else None
