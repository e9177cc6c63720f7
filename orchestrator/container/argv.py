"""The create argv (design §3.3): one pure function, and the limits it carries.

`fit_limits` turns `[sandbox.container]` into numbers that fit this host: a value the
person left at its default is lowered to the host's limit (and the lowering is said in
`Limits.notes`); a value the person wrote that the host cannot give is refused with
E_CONFIG_INVALID naming both numbers. `create_argv` then lays the limits out exactly in
the order design §3.3 lists. Env *values* never appear: the arm passes `env_file`, a private
file of ours (command.env_file) read by the engine at create; without it (the admission
probe, which passes no values) `--env NAME` names them. Never the CLI's own environment:
issue 30 found the command's LD_PRELOAD acting on the podman CLI on the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sprawl_orch.config import ENV_NAME, ContainerConfig
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import ENGINES, IMAGE_ID

# The tmpfs at /tmp: sticky and world-writable like a host's /tmp. Without a mode the
# engines make it root-owned 0755, and `touch /tmp/a` failed for the command's uid 65534.
TMP_TMPFS = "/tmp:mode=1777"
# Where the copy may not be mounted: the runtime's own mounts, and the root itself.
RESERVED_DESTINATIONS: tuple[str, ...] = ("/proc", "/sys", "/dev")
# docker/podman container names: [a-zA-Z0-9][a-zA-Z0-9_.-]*
_NAME_PART = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")

# /proc/self/limits row titles -> the names `--ulimit` takes.
PROC_LIMIT_NAMES: dict[str, str] = {
    "Max cpu time": "cpu",
    "Max file size": "fsize",
    "Max data size": "data",
    "Max stack size": "stack",
    "Max core file size": "core",
    "Max resident set": "rss",
    "Max processes": "nproc",
    "Max open files": "nofile",
    "Max locked memory": "memlock",
    "Max address space": "as",
    "Max file locks": "locks",
    "Max pending signals": "sigpending",
    "Max msgqueue size": "msgqueue",
    "Max nice priority": "nice",
    "Max realtime priority": "rtprio",
    "Max realtime timeout": "rttime",
}


def parse_proc_limits(text: str) -> dict[str, int | None]:
    """Hard limits from the text of /proc/self/limits; None = unlimited."""
    hard: dict[str, int | None] = {}
    for line in text.splitlines()[1:]:
        for title, name in PROC_LIMIT_NAMES.items():
            if line.startswith(title):
                fields = line[len(title) :].split()
                if len(fields) >= 2:
                    hard[name] = None if fields[1] == "unlimited" else int(fields[1])
    return hard


def parse_meminfo_total(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


@dataclass(frozen=True)
class HostLimits:
    """What the host can give a container. Sampled by `this_host()`; a plain value otherwise."""

    rlimits_hard: Mapping[str, int | None]
    cpus: int
    memory_bytes: int | None

    @classmethod
    def this_host(cls) -> HostLimits:
        # The runtime applies --ulimit in a child of the engine; our own hard limits are
        # the best evidence we have of the host's (podman 4.3 inherits them exactly).
        with open("/proc/self/limits", encoding="ascii") as f:
            rlimits = parse_proc_limits(f.read())
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                memory = parse_meminfo_total(f.read())
        except OSError:
            memory = None
        return cls(rlimits, os.cpu_count() or 1, memory)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    cpus: float
    pids: int
    cpu_shares: int
    user: str
    ulimits: tuple[tuple[str, int, int], ...]  # (name, soft, hard), sorted by name
    notes: tuple[str, ...] = ()
    # --pids-limit, the host cgroup's count: `pids` itself under runc/crun; under gVisor
    # the sentry's own threads too (gvisor.host_pids), the guest's count being RLIMIT_NPROC
    pids_cgroup: int = 0

    @property
    def pids_limit(self) -> int:
        return self.pids_cgroup or self.pids

    @property
    def memory_swap_bytes(self) -> int:
        # equal to memory: no swap on top of the memory limit
        return self.memory_bytes

    @property
    def nano_cpus(self) -> int:
        return round(self.cpus * 1e9)

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)


def _refuse(key: str, detail: str, recovery: str) -> SprawlError:
    return SprawlError(ErrorCode.CONFIG_INVALID, f"[sandbox.container] {key}", detail, recovery)


def _fit_ulimits(
    config: ContainerConfig, host: HostLimits, notes: list[str]
) -> tuple[tuple[str, int, int], ...]:
    explicit = "ulimits" in config.model_fields_set
    fitted: list[tuple[str, int, int]] = []
    for name, value in sorted(config.ulimits.items()):
        soft_s, _, hard_s = value.partition(":")
        soft, hard = int(soft_s), int(hard_s or soft_s)
        if name not in host.rlimits_hard:
            raise _refuse(
                "ulimits",
                f"ulimit {name!r} is not one of {', '.join(sorted(host.rlimits_hard))}",
                "use a name from that list, as `ulimit` and /proc/self/limits know them",
            )
        if soft > hard:
            raise _refuse(
                "ulimits",
                f'{name} = "{value}": soft {soft} is above hard {hard}',
                f'write {name} = "{hard}:{hard}" or lower the soft limit',
            )
        ceiling = host.rlimits_hard[name]
        if ceiling is not None and hard > ceiling:
            if explicit:
                raise _refuse(
                    "ulimits",
                    f'{name} = "{value}" is above this host\'s hard limit {ceiling} '
                    '(/proc/self/limits); the runtime would fail with "setrlimit: Operation '
                    'not permitted"',
                    f'write {name} = "{min(soft, ceiling)}:{ceiling}" or lower',
                )
            notes.append(
                f"ulimit {name} lowered from {soft}:{hard} to the host's hard limit {ceiling}"
            )
            soft, hard = min(soft, ceiling), ceiling
        fitted.append((name, soft, hard))
    return tuple(fitted)


def fit_limits(config: ContainerConfig, host: HostLimits, gvisor: bool = False) -> Limits:
    """The configured limits made to fit `host`: defaults lowered (and said), explicit
    values that don't fit refused with both numbers. `gvisor`: the command runs on runsc,
    whose processes the host's pids cgroup doesn't count one for one (gvisor.guest_limits)."""
    notes: list[str] = []
    cpus = config.cpus
    if cpus > host.cpus:
        if "cpus" in config.model_fields_set:
            raise _refuse(
                "cpus",
                f"cpus = {cpus:g} but this host has {host.cpus} CPUs; engines refuse "
                "more CPUs than the host has",
                f"write cpus = {host.cpus} or fewer",
            )
        notes.append(f"cpus lowered from {cpus:g} to the host's {host.cpus}")
        cpus = float(host.cpus)
    memory = config.memory_bytes
    if host.memory_bytes is not None and memory > host.memory_bytes:
        if "memory_bytes" in config.model_fields_set:
            raise _refuse(
                "memory_bytes",
                f"memory_bytes = {memory} is above this host's memory "
                f"{host.memory_bytes} (/proc/meminfo MemTotal)",
                f"write memory_bytes = {host.memory_bytes // 2} or less",
            )
        notes.append(f"memory lowered from {memory} to half the host's {host.memory_bytes}")
        memory = host.memory_bytes // 2
    ulimits = _fit_ulimits(config, host, notes)
    pids_cgroup = 0
    if gvisor:
        from sprawl_orch.container.gvisor import guest_limits, host_pids

        ulimits, pids_cgroup = guest_limits(ulimits, config.pids), host_pids(config.pids)
    return Limits(
        memory_bytes=memory,
        cpus=cpus,
        pids=config.pids,
        cpu_shares=config.cpu_shares,
        user=config.user,
        ulimits=ulimits,
        notes=tuple(notes),
        pids_cgroup=pids_cgroup,
    )


def container_name(tag: str) -> str:
    return f"sprawl-{tag}"


def destination_of(copy: Path, workdir: Path | None) -> str:
    """Where the copy is mounted in the container, and where the command starts: the working
    directory's own path (design §5), so absolute paths recorded in the tree (editable
    installs, venvs, build systems) resolve into the copy, never to the person's tree. Without
    a working directory (admission's probe) the copy sits at its own path."""
    where = str(workdir if workdir is not None else copy)
    if (
        not where.startswith("/")
        or where == "/"
        or any(c in where for c in ",=\n")
        or any(where == r or where.startswith(r + "/") for r in RESERVED_DESTINATIONS)
    ):
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            "working directory",
            f"{where!r} cannot be the copy's place in a container: it must be an absolute "
            "path other than / and outside /proc, /sys and /dev, free of ',', '=' and "
            "newlines (--mount is comma/equals separated)",
            "run from a plain project directory",
        )
    return where


def _check(engine: str, image_id: str, copy: Path, tag: str, env_names: Sequence[str]) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if not IMAGE_ID.match(image_id):
        raise _refuse(
            "image",
            f"{image_id!r} is not a fixed image ID (sha256:<64 hex>); a tag can move "
            "and is never pulled",
            f"resolve it locally: sprawl-orch image pin {image_id}",
        )
    if not copy.is_absolute() or any(c in str(copy) for c in ",=\n"):
        # --mount is comma/equals separated: such a path would change the mount's meaning.
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            "[sandbox] scratch_dir",
            f"the copy path {str(copy)!r} must be absolute and free of ',', '=' and newlines "
            "to be mounted with --mount",
            "set [sandbox] scratch_dir to a plain absolute path",
        )
    if not _NAME_PART.match(tag):
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            "tag",
            f"{tag!r} cannot be part of a container name",
            "use letters, digits, '_', '.', '-'",
        )
    for name in env_names:
        if not ENV_NAME.match(name):
            raise SprawlError(
                ErrorCode.BAD_REQUEST,
                "env",
                f"{name!r} is not an environment variable name",
                "pass names made of letters, digits and '_'",
            )


def create_argv(
    engine: str,
    config: ContainerConfig,
    image_id: str,
    copy: Path,
    argv: Sequence[str],
    env_names: Iterable[str],
    tag: str,
    session: str,
    run: str,
    runtime: str | None,
    *,
    host: HostLimits,
    userns: Sequence[str] = (),
    workdir: Path | None = None,
    limits: bool = True,
    gvisor: bool = False,
    seccomp: str | None = None,
    read_only: Sequence[tuple[str, str]] = (),
    entrypoint: str | None = None,
    env_file: Path | None = None,
    stdin_open: bool = False,
    tty: bool = False,
) -> tuple[str, ...]:
    """`create …` for `engine` (without the program name), exactly as design §3.3 lists it;
    the copy mounted at `workdir`'s path (`destination_of`); `seccomp`: the profile file
    (seccomp_profile.py) in place of the engine's default. `read_only`: (host path,
    container path) binds added read-only (the egress hold, trust = "host"'s CA bundle);
    `entrypoint`: the image's replaced (the egress hold's static shell); the values in
    `env_file`. `stdin_open`/`tty`: -i/-t (core/command_input.py), attached by the CLI."""
    names = sorted(set(env_names))
    _check(engine, image_id, copy, tag, names)
    where = destination_of(copy, workdir)
    if not argv:
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            "command",
            "the command is empty",
            "give a program and its arguments",
        )
    fitted = fit_limits(config, host, gvisor)
    out: list[str] = [
        "create",
        "--pull",
        "never",
        "--name",
        container_name(tag),
        "--label",
        f"sprawl.session={session}",
        "--label",
        f"sprawl.run={run}",
        "--network",
        "none",
        # explicit, not the engine's default: containers.conf `ipcns = "host"` (read from
        # CONTAINERS_CONF, /etc/containers, ~/.config/containers) gave podman containers the
        # host's /dev/shm to write while filesystem was claimed, and podman 4.3's inspect
        # still said "shareable" (tests/escapes/test_shaping.py); the flag overrides the file
        "--ipc",
        "private",
        # the engine keeps no log of its own: docker's json-file and podman's k8s-file
        # stored every byte printed on the host's disk, outside the state directory, for the
        # container's life (40 MiB of stdout: ~40 MiB in each; issue 30 break 4 attacked
        # again); output comes from the attach stream, capped by runs/output_pipe.py
        "--log-driver",
        "none",
        # an engine that drops them (rootless podman on cgroup v1: "Resource limits are
        # not supported and ignored") is not asked: the result says resources = no
        *(
            (
                "--memory",
                str(fitted.memory_bytes),
                "--memory-swap",
                str(fitted.memory_swap_bytes),
                "--cpus",
                f"{fitted.cpus:g}",
                "--pids-limit",
                str(fitted.pids_limit),
                "--cpu-shares",
                str(fitted.cpu_shares),
            )
            if limits
            else ()
        ),
        "--user",
        fitted.user,
        *userns,  # e.g. --userns auto:size=65536 (podman); userns.py chooses them
        "--read-only",
        "--tmpfs",
        TMP_TMPFS,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        *(("--security-opt", f"seccomp={seccomp}") if seccomp else ()),
        "--mount",
        f"type=bind,src={copy},dst={where}",
        "--workdir",
        where,
    ]
    for source, target in read_only:
        out += ["--mount", f"type=bind,src={source},dst={target},readonly"]
    if entrypoint is not None:
        out += ["--entrypoint", entrypoint]
    if env_file is not None:
        out += ["--env-file", str(env_file)]
    else:
        for name in names:
            out += ["--env", name]
    for name, soft, hard in fitted.ulimits:
        out += ["--ulimit", f"{name}={soft}:{hard}"]
    if runtime is not None:
        out += ["--runtime", runtime]
    out += [*(["--interactive"] if stdin_open else []), *(["--tty"] if tty else [])]
    out.append(image_id)
    out.extend(argv)
    return tuple(out)
