"""A small fake container backend for unit tests (no engine; SPEC allows fakes here).

`FakeEngine.inspect` answers in docker's shape, built from the create argv it was given,
so verification passes unless a test tampers with `alter` or the argv.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import EngineFacts

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def facts(**changes: Any) -> EngineFacts:
    base: dict[str, Any] = dict(
        engine="docker",
        server_version="20.10.24",
        api_version="1.41",
        os="linux",
        arch="x86_64",
        cgroup_version="1",
        cgroup_driver="cgroupfs",
        memory_limit=True,
        swap_limit=True,
        pids_limit=True,
        cpu_cfs_quota=True,
        rootless=False,
        userns_remap=False,
        default_runtime="runc",
        runtimes=("runc",),
        security_options=("name=seccomp,profile=default",),
    )
    base.update(changes)
    return EngineFacts(**base)


def inspect_from_argv(argv: Sequence[str], runtime_default: str) -> dict[str, Any]:
    """What docker 20.10 reports for such a create (shape of docker_inspect.json)."""
    flags: dict[str, list[str]] = {}
    i = 1
    while argv[i].startswith("--"):
        if argv[i] == "--read-only":
            flags.setdefault("--read-only", []).append("")
            i += 1
            continue
        flags.setdefault(argv[i], []).append(argv[i + 1])
        i += 2
    image = argv[i]
    mount = dict(kv.split("=", 1) for kv in flags["--mount"][0].split(","))
    ulimits = []
    for spec in flags.get("--ulimit", []):
        name, _, values = spec.partition("=")
        soft, _, hard = values.partition(":")
        ulimits.append({"Name": name, "Soft": int(soft), "Hard": int(hard)})
    return {
        "Image": image,
        "State": {"Status": "created", "StartedAt": "0001-01-01T00:00:00Z", "ExitCode": 0},
        "Mounts": [
            {
                "Type": "bind",
                "Source": mount["src"],
                "Destination": mount["dst"],
                "Mode": "",
                "RW": True,
                "Propagation": "rprivate",
            }
        ],
        "Config": {
            "User": flags["--user"][0],
            "Volumes": None,
            "Image": image,
            "WorkingDir": flags["--workdir"][0],
        },
        "HostConfig": {
            "Memory": int(flags.get("--memory", ["0"])[0]),
            "MemorySwap": int(flags.get("--memory-swap", ["0"])[0]),
            "NanoCpus": round(float(flags.get("--cpus", ["0"])[0]) * 1e9),
            "PidsLimit": int(flags.get("--pids-limit", ["0"])[0]),
            "CpuShares": int(flags.get("--cpu-shares", ["0"])[0]),
            "NetworkMode": flags["--network"][0],
            "LogConfig": {"Type": flags["--log-driver"][0], "Config": {}},
            "ReadonlyRootfs": "--read-only" in flags,
            "Privileged": False,
            "PidMode": "",
            "CapAdd": None,
            "CapDrop": flags["--cap-drop"],
            "SecurityOpt": [_inline(o) for o in flags["--security-opt"]],
            "Tmpfs": dict(spec.partition(":")[::2] for spec in flags["--tmpfs"]),
            "Ulimits": ulimits,
            "Runtime": flags.get("--runtime", [runtime_default])[0],
        },
    }


def _inline(opt: str) -> str:
    """docker's CLI reads a `seccomp=FILE` and sends the file's JSON (docker 28 CLI)."""
    if not opt.startswith("seccomp="):
        return opt
    return "seccomp=" + json.dumps(json.loads(Path(opt.removeprefix("seccomp=")).read_text()))


def _touch(data: dict[str, Any]) -> None:
    """`touch NAME` (admission's probe under a user namespace) creates NAME in the mount,
    owned as the container user would: by the owner the copy was given to."""
    argv = data["_argv"]
    if len(argv) >= 2 and argv[-2] == "touch":
        copy = Path(data["Mounts"][0]["Source"])
        made = copy / argv[-1]
        made.touch()
        st = copy.stat()
        os.chown(made, st.st_uid, st.st_gid)


class FakeAttached:
    def __init__(
        self, stdout: Path, stderr: Path, exit_code: int, start_error: str | None, finishes: bool
    ) -> None:
        self.start_error = start_error
        self.stdout, self.stderr = stdout, stderr
        self.exit_code = exit_code
        self.finishes = finishes
        self.collected = False

    def wait(self, timeout: float | None) -> bool:
        return self.finishes

    def collect(self) -> str | None:
        self.stdout.write_bytes(b"out\n")
        self.stderr.write_bytes(b"")
        self.collected = True
        return self.start_error


class FakeEngine:
    """Records every call; behaviour is steered by the attributes below."""

    name = "docker"

    def __init__(self, facts_: EngineFacts | None = None, images: Sequence[str] = ()) -> None:
        self.facts_ = facts_ or facts()
        self.images = set(images)
        self.calls: list[tuple[str, object]] = []
        self.containers: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.fail_start: Mapping[str | None, str] = {}  # runtime -> engine words
        self.alter: Callable[[dict[str, Any]], None] | None = None
        self.facts_error: SprawlError | None = None
        self.remove_error: str | None = None
        self.start_error: str | None = None
        self.exit_code = 0
        self.oom = False
        self.finishes = True
        self.identity_: dict[str, Any] = {"daemon": "fake-1"}
        self.endpoint_ = f"fake:{id(self)}"
        # create fails with these words while set (an engine that changed under kept evidence)
        self.create_error: str | None = None

    def identity(self) -> dict[str, Any]:
        self.calls.append(("identity", None))
        if self.facts_error:
            raise self.facts_error
        return dict(self.identity_)

    def endpoint(self) -> str:
        return self.endpoint_

    def facts(self) -> EngineFacts:
        self.calls.append(("facts", None))
        if self.facts_error:
            raise self.facts_error
        return self.facts_

    def local_image(self, image_id: str) -> str | None:
        return image_id if image_id in self.images else None

    def cli_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return ("/usr/bin/docker", *argv)

    def create(self, argv: Sequence[str]) -> str:
        self.calls.append(("create", tuple(argv)))
        if self.create_error:
            raise SprawlError(
                ErrorCode.ENGINE_REFUSED, "docker create", self.create_error, "see docker info"
            )
        self.created += 1
        container = f"c{self.created}"
        data = inspect_from_argv(argv, self.facts_.default_runtime)
        if self.alter:
            self.alter(data)
        runtime = argv[argv.index("--runtime") + 1] if "--runtime" in argv else None
        data["_runtime_asked"] = runtime
        data["_argv"] = tuple(argv)
        self.containers[container] = data
        return container

    def inspect(self, container: str) -> dict[str, Any]:
        if container not in self.containers:
            raise SprawlError(
                ErrorCode.ENGINE_REFUSED, "docker inspect", "no such container", "none"
            )
        return copy.deepcopy(self.containers[container])

    def start(
        self, container: str, stdout: Path, stderr: Path, given: object = None
    ) -> FakeAttached:
        self.calls.append(("start", container))
        data = self.containers[container]
        words = self.fail_start.get(data["_runtime_asked"])
        state = data["State"]
        if words is None and self.start_error is None:
            state.update(
                StartedAt="2026-11-29T23:45:19Z",
                Status="exited",
                ExitCode=self.exit_code,
                OOMKilled=self.oom,
            )
            _touch(data)
        else:
            state.update(Error=words or "")
        return FakeAttached(stdout, stderr, self.exit_code, self.start_error, self.finishes)

    def kill(self, container: str) -> None:
        self.calls.append(("kill", container))
        self.containers[container]["State"].update(ExitCode=137)

    def remove(self, container: str) -> None:
        self.calls.append(("remove", container))
        if self.remove_error:
            raise SprawlError(
                ErrorCode.ENGINE_REFUSED, "docker rm", self.remove_error, "remove it by hand"
            )
        self.containers.pop(container, None)

    def list_labelled(self, label: str) -> list[str]:
        return list(self.containers)

    def close(self) -> None:
        return None
