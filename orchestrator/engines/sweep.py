"""A session's containers found and force-removed: the guardian's two questions, asked of the
same engine backends the container arm uses (docker.py, podman.py: their binary, found on
PATH's absolute entries only, and their fixed host-side environment, cli_env).

- `find(session, names)`: the containers labelled `sprawl.session=<session>` or named one of
  `names` (a create may have been announced and never labelled, or labelled by another
  version of the arm: either way it is ours);
- `remove(refs)`: force-remove them (ids or names), skipping ones already gone; returns what
  the engine said for the ones it could not remove.

Docker goes through its CLI by default. `benchmarks/guardian.py` measured both, interleaved
in one run (docker 20.10, 3 running containers, 15 kills each, SIGKILL to last gone): SDK
median ~290 ms, CLI ~340 ms -- the daemon's kill + remove dominates (a live process's own
`docker rm -f` takes ~280 ms), and one `docker rm -f a b c` already removes in parallel. The
SDK's ~50 ms is one CLI start; it costs the guardian ~300 ms of CPU to import, paid at every
session's first command, exactly while the orchestrator syncs and creates, for a gain only a
crash sees. `sdk=True` (the guardian's `--docker-via sdk`) keeps it available. Podman here is
daemonless (no API socket), so its sweep is its CLI.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sprawl_orch.core.errors import SprawlError
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import engine_error, run_cli
from sprawl_orch.engines.podman import PodmanEngine, rm_past_busy

LABEL = "sprawl.session"
# An engine that does not answer a list or a removal within this is reported, not awaited:
# the guardian polls every engine side by side until its grace ends.
SWEEP_TIMEOUT = 30.0
_ASK = "check the engine (`docker info` / `podman info`)"


@dataclass(frozen=True)
class Found:
    container_id: str
    name: str


def _ours(labels: object, names: Sequence[str], session: str, wanted: Collection[str]) -> bool:
    if isinstance(labels, dict) and labels.get(LABEL) == session:
        return True
    return any(n in wanted for n in names)


class Sweep:
    """One engine as the guardian uses it. `find` raises SprawlError when the engine can't be
    asked (down, missing binary, no answer in SWEEP_TIMEOUT); `remove` says it in its list."""

    def __init__(self, backend: DockerEngine | PodmanEngine, *, sdk: bool = False) -> None:
        self.backend = backend
        self.name = backend.name
        self.sdk = sdk and isinstance(backend, DockerEngine)

    def _cli(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = self.backend.cli_argv(args)
        return run_cli(self.name, argv, self.backend.cli_env(), timeout=SWEEP_TIMEOUT, check=False)

    def find(self, session: str, names: Collection[str]) -> list[Found]:
        if self.sdk:
            return self._find_sdk(session, names)
        if self.name == "podman":
            return self._find_podman(session, names)
        fmt = '{{.ID}}\t{{.Names}}\t{{.Label "' + LABEL + '"}}'
        done = self._cli(["ps", "-a", "--no-trunc", "--format", fmt])
        if done.returncode != 0:
            raise engine_error("docker", "ps", done.stderr, _ASK)
        found = []
        for line in done.stdout.splitlines():
            cid, own, label = [*line.split("\t"), "", ""][:3]
            names_here = own.split(",") if own else []
            if _ours({LABEL: label}, names_here, session, names):
                found.append(Found(cid, names_here[0] if names_here else cid))
        return found

    def _find_podman(self, session: str, names: Collection[str]) -> list[Found]:
        done = self._cli(["ps", "-a", "--format", "json"])
        if done.returncode != 0:
            raise engine_error("podman", "ps", done.stderr, _ASK)
        try:
            listed = json.loads(done.stdout or "[]")
        except json.JSONDecodeError as err:
            raise engine_error("podman", "ps", f"printed no JSON: {err}", _ASK) from err
        found = []
        for item in listed or []:
            own = list(item.get("Names") or [])
            if _ours(item.get("Labels"), own, session, names):
                found.append(Found(item["Id"], own[0] if own else item["Id"]))
        return found

    def _find_sdk(self, session: str, names: Collection[str]) -> list[Found]:
        assert isinstance(self.backend, DockerEngine)
        try:
            listed = self.backend.api().containers(all=True)
        except SprawlError:
            raise
        except Exception as err:  # the SDK's own (requests', docker's): the engine's words
            raise engine_error("docker", "ps", str(err), _ASK) from err
        found = []
        for item in listed:
            own = [n.lstrip("/") for n in item.get("Names") or []]
            if _ours(item.get("Labels"), own, session, names):
                found.append(Found(item["Id"], own[0] if own else item["Id"]))
        return found

    def remove(self, refs: Collection[str]) -> list[str]:
        if not refs:
            return []
        if self.sdk:
            with ThreadPoolExecutor(max_workers=min(16, len(refs))) as pool:
                return [e for e in pool.map(self._remove_sdk, refs) if e]
        # podman: `-t 0`: its rm -f first *stops* with the container's stop timeout (10 s by
        # default; a `sleep` as PID 1 ignores SIGTERM, so "StopSignal SIGTERM failed to stop
        # container ... in 10 seconds, resorting to SIGKILL" -- podman 4.3.1). `-i`: a name
        # that is already gone is not an error. The OCI runtime (`--runtime runc`) need not be
        # repeated: podman stores it with each container.
        args = ["rm", "-f", "-t", "0", "-i"] if self.name == "podman" else ["rm", "-f"]
        try:
            if self.name == "podman":
                # The guardian's sweep meets the arm's shm race too, right after a SIGKILL
                # (CI, 2026-12-02: the container gone a moment later). `-i` makes a second
                # rm of what the first removed a no-op.
                done = rm_past_busy(lambda: self._cli([*args, *refs]))
            else:
                done = self._cli([*args, *refs])
        except SprawlError as err:
            return [f"{self.name} rm: {err.subject}: {err.detail}"]
        if self.name == "docker":
            return [
                line
                for line in done.stderr.splitlines()
                if line.strip() and "No such container" not in line
            ]
        if done.returncode == 0:
            return []
        return [line for line in done.stderr.splitlines() if line.strip()] or [
            f"podman rm exited {done.returncode}"
        ]

    def _remove_sdk(self, ref: str) -> str | None:
        assert isinstance(self.backend, DockerEngine)
        try:
            self.backend.remove(ref)
        except SprawlError as err:
            return f"{ref}: {err.detail}"
        except Exception as err:  # the SDK's own (requests' connection errors): said, not raised
            return f"{ref}: {err}"
        return None
