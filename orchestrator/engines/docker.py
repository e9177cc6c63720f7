"""Docker backend: the SDK for facts, inspect, start/wait/logs, kill and remove; the CLI
for create (so the recorded argv is what ran).

Measured on docker 20.10.24 (benchmarks/container_steps.py, medians): CLI create 30 ms vs
a container run's ~300 ms; SDK inspect 2 ms vs CLI 20 ms; SDK attach + start + wait
~280 ms vs CLI `start -a` ~310 ms; SDK remove 11 ms vs CLI 26 ms. The SDK is imported
inside functions only: `import docker` costs ~200 ms.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.host_which import host_which
from sprawl_orch.engines._docker_cli_config import cli_config
from sprawl_orch.engines.docker_attach import API_TIMEOUT, DockerAttached
from sprawl_orch.engines.docker_daemon import daemon_key
from sprawl_orch.engines.docker_daemon import learn as learn_daemon
from sprawl_orch.engines.docker_daemon import recall as recall_daemon
from sprawl_orch.engines.engine import EngineFacts, engine_error, run_cli

if TYPE_CHECKING:
    from docker import APIClient

    from sprawl_orch.core.command_input import CommandInput
    from sprawl_orch.engines._podman_attach import PodmanAttached

DEFAULT_HOST = "unix:///var/run/docker.sock"
# Passed to the CLI and the SDK so both reach the same daemon (a CLI context could differ).
CONNECTION_VARS: tuple[str, ...] = ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONFIG")
# Connections one client may hold at once (long-poll waits of running containers each
# hold one); above it urllib3 opens extra ones and warns "Connection pool is full".
MAX_POOL = 64


def _flag(info: Mapping[str, Any], key: str) -> bool:
    return bool(info.get(key, False))


def parse_facts(info: Mapping[str, Any], version: Mapping[str, Any]) -> EngineFacts:
    """Facts from the daemon's own `GET /info` and `GET /version` answers."""
    options = tuple(str(o) for o in info.get("SecurityOptions") or [])
    names = {o.split(",")[0] for o in options}
    registered: Mapping[str, Any] = info.get("Runtimes") or {}
    runtimes = tuple(sorted(r for r in registered if "." not in r))
    return EngineFacts(
        engine="docker",
        server_version=str(version.get("Version") or info.get("ServerVersion") or "?"),
        api_version=str(version.get("ApiVersion") or "?"),
        os=str(info.get("OSType") or version.get("Os") or "?"),
        arch=str(info.get("Architecture") or version.get("Arch") or "?"),
        # docker < 20.10 has no CgroupVersion: those only ran on v1
        cgroup_version=str(info.get("CgroupVersion") or "1"),
        cgroup_driver=str(info.get("CgroupDriver") or "?"),
        memory_limit=_flag(info, "MemoryLimit"),
        swap_limit=_flag(info, "SwapLimit"),
        pids_limit=_flag(info, "PidsLimit"),
        cpu_cfs_quota=_flag(info, "CpuCfsQuota"),
        rootless="name=rootless" in names,
        userns_remap="name=userns" in names,
        default_runtime=str(info.get("DefaultRuntime") or "runc"),
        runtimes=runtimes,
        runtime_paths=tuple((r, str((registered[r] or {}).get("path") or "")) for r in runtimes),
        runtime_args=tuple(
            (r, " ".join(str(a) for a in (registered[r] or {}).get("runtimeArgs") or []))
            for r in runtimes
        ),
        security_options=options,
        warnings=tuple(str(w) for w in info.get("Warnings") or []),
        root_dir=str(info.get("DockerRootDir") or ""),
    )


def connect_recovery(host: str, words: str) -> str:
    if "Permission denied" in words or "PermissionError" in words:
        return (
            f"the socket {host} refuses this user: add it to the docker group, or use "
            "rootless docker / podman"
        )
    return (
        f"start the docker daemon (systemctl start docker, or dockerd --host {host}), or "
        "point DOCKER_HOST at a running one"
    )


def one_pool(api: APIClient) -> None:
    """Give a unix-socket client ONE connection pool, so connections are reused.

    docker SDK 7.1's UnixHTTPAdapter keys its pools by the full URL: every container-
    specific call (/containers/<id>/json, /start, /wait, DELETE) made a pool with a socket
    of its own, none reused, all kept open until the pool fell out of an LRU of 25 — about
    four sockets piled up per command (seen by tests/integration/test_serve_load.py). The
    `num_pools` argument can't shrink it: `num_pools or X if ssh else 25` ignores it for
    every non-ssh URL. One pool keyed by the socket fixes both. tcp/ssh clients keep theirs.
    """
    from docker.transport.unixconn import UnixHTTPAdapter

    # Looked up in the mounted adapters, not with get_adapter: for a tcp:// client the SDK's
    # get_adapter reads _custom_adapter, which only unix/ssh clients have -- every tcp
    # DOCKER_HOST, live or dead, failed with "'APIClient' object has no attribute
    # '_custom_adapter'" (attack atkws).
    old = api.adapters.get("http+docker://")
    if not isinstance(old, UnixHTTPAdapter):
        return

    class OnePool(UnixHTTPAdapter):  # type: ignore[misc]
        def get_connection(self, url: str, proxies: object = None) -> object:
            return super().get_connection("http+docker://localhost", proxies)

    api.mount("http+docker://", OnePool(f"http+unix://{old.socket_path}", old.timeout, 1, MAX_POOL))
    old.close()
    # requests reads the environment's proxy variables and ~/.netrc on every request
    # (merge_environment_settings): ~8% of a served warm call's CPU in the fork, profiled
    # 2026-12-03 -- four requests, each walking the caller's whole environment. A unix
    # socket is reached by no proxy (UnixHTTPAdapter.get_connection ignores them) and
    # dockerd reads no credentials of a netrc; tcp/ssh clients keep both (returned above).
    api.trust_env = False


class DockerEngine:
    name = "docker"

    def __init__(
        self,
        host: str | None = None,
        *,
        cli: str | None = None,
        environ: Mapping[str, str] | None = None,
        api_timeout: float = API_TIMEOUT,
    ) -> None:
        env = os.environ if environ is None else environ
        self.api_timeout = api_timeout
        self.host = host or env.get("DOCKER_HOST") or DEFAULT_HOST
        self.cli = cli or host_which("docker", env.get("PATH"))
        self._conn: dict[str, str] = {k: env[k] for k in CONNECTION_VARS if k in env}
        self._conn["DOCKER_HOST"] = self.host
        self._home = env.get("HOME") or os.path.expanduser("~")
        self._api: APIClient | None = None
        self._streams: APIClient | None = None
        # the daemon's /version as api() read it (or /version and /info as kept for this
        # daemon process: docker_daemon.py), for the identity() that follows it
        self._seen_version: dict[str, Any] | None = None
        self._seen_info: dict[str, Any] | None = None
        self._daemon_key: list[Any] | None = None

    def endpoint(self) -> str:
        return self.host

    def api(self) -> APIClient:
        if self._api is None:
            import docker
            import docker.errors
            from docker.constants import MINIMUM_DOCKER_API_VERSION
            from docker.utils import kwargs_from_env

            self._daemon_key = daemon_key(self.host)
            kept = recall_daemon(self._daemon_key)
            try:
                # version="auto" asks /version, and identity() (admission, every call) asks
                # it again: one answer serves both, a round trip less per call (issue 26).
                # The same daemon process answered both before (docker_daemon.py): neither
                # is asked, the client starts on the version it negotiated then.
                api = docker.APIClient(
                    **kwargs_from_env(environment=self._conn),
                    version=str(kept[0]["ApiVersion"]) if kept else MINIMUM_DOCKER_API_VERSION,
                    timeout=self.api_timeout,
                )
                one_pool(api)
                # what an earlier client of this engine was told and identity() never read
                # (closed since) is that client's daemon's: never this one's
                self._seen_info = None
                if kept:
                    seen, self._seen_info = kept
                else:
                    seen = dict(api.version(api_version=False))
                    api._version = str(seen["ApiVersion"])  # what "auto" sets
            except Exception as err:  # what the SDK's "auto" turns into DockerException
                raise engine_error(
                    "docker",
                    "connect",
                    f"cannot reach the daemon at {self.host}: "
                    f"Error while fetching server API version: {err}",
                    connect_recovery(self.host, str(err)),
                ) from err
            self._api, self._seen_version = api, seen
        return self._api

    def streams(self) -> APIClient:
        """A second client, no read timeout, for attach streams."""
        if self._streams is None:
            import docker
            from docker.utils import kwargs_from_env

            self._streams = docker.APIClient(
                **kwargs_from_env(environment=self._conn),
                version=self.api().api_version,
                timeout=None,
            )
            one_pool(self._streams)
        return self._streams

    def cli_env(self) -> dict[str, str]:
        """The docker CLI's whole environment: which daemon (ours, never the command's), HOME
        and our own empty CLI config. Nothing else of the host's environment: the command's
        values go by --env-file, and a host-side program run with the tree's LD_PRELOAD or
        LD_LIBRARY_PATH loads the tree's code on the host (issue 30, attack3)."""
        env = dict(self._conn)
        if self._home:
            env["HOME"] = self._home  # the CLI reads its config from $HOME/.docker
        return {**env, **cli_config(self._conn, self._home)}

    def facts(self) -> EngineFacts:
        import docker.errors

        self.cli_argv(())  # the create runs through the CLI: without it nothing can run
        api = self.api()
        try:
            return parse_facts(api.info(), api.version())
        except docker.errors.APIError as err:
            raise engine_error(
                "docker", "info", str(err.explanation or err), connect_recovery(self.host, str(err))
            ) from err

    def identity(self) -> dict[str, Any]:
        """The daemon's ID and every fact admission reads, and which CLI creates: two API
        calls on the connection the command uses next (~10 ms; see container/evidence.py),
        none when this dockerd process answered them before (docker_daemon.py)."""
        import docker.errors

        from sprawl_orch.engines.engine import stamp

        api = self.api()
        seen, self._seen_version = self._seen_version, None  # once: a re-admission asks anew
        kept, self._seen_info = self._seen_info, None
        try:
            info, version = kept or api.info(), seen or api.version()
        except docker.errors.APIError as err:
            raise engine_error(
                "docker", "info", str(err.explanation or err), connect_recovery(self.host, str(err))
            ) from err
        if kept is None and daemon_key(self.host) == self._daemon_key:
            # kept only under the key of the daemon that answered: the one read when this
            # client was made is another's when the path reaches another daemon since (a
            # re-admission, a symlink swapped), and its answer kept under the first one's
            # key was recalled when the path came back to it (userns-remap said on for the
            # plain daemon). The same key before and after: the same daemon answered.
            learn_daemon(self._daemon_key, dict(version), dict(info))
        return {
            "daemon": info.get("ID"),
            "host": self.host,
            "cli": [self.cli, stamp(self.cli)],
            "facts": dataclasses.asdict(parse_facts(info, version)),
        }

    def local_image(self, image_id: str) -> str | None:
        import docker.errors

        try:
            found = str(self.api().inspect_image(image_id).get("Id", ""))
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as err:
            raise engine_error(
                "docker",
                "image inspect",
                str(err.explanation or err),
                "check the image with `docker image ls`",
            ) from err
        # a prefix of another image's ID must not count as the pinned one
        return found if found == image_id else None

    def cli_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        if self.cli is None:
            raise SprawlError(
                ErrorCode.TOOL_UNAVAILABLE,
                "docker",
                "the docker CLI is not installed",
                "install it: apt-get install docker.io (the create runs through the CLI)",
            )
        return (self.cli, *argv)

    def create(self, argv: Sequence[str]) -> str:
        done = run_cli("docker", self.cli_argv(argv), self.cli_env())
        return done.stdout.strip().splitlines()[-1]

    def inspect(self, container: str) -> dict[str, Any]:
        import docker.errors

        try:
            return dict(self.api().inspect_container(container))
        except docker.errors.APIError as err:
            raise engine_error(
                "docker",
                "inspect",
                str(err.explanation or err),
                "the container is gone; run the command again",
            ) from err

    def start(
        self, container: str, stdout: Path, stderr: Path, given: CommandInput | None = None
    ) -> DockerAttached | PodmanAttached:
        if given is not None:
            # The SDK's attach has stdin only as a raw hijacked socket, and no terminal
            # resize of its own: the CLI does both as `docker run -it` does (podman.py's
            # attach runs `<cli> start --attach`, the same words for both engines).
            from sprawl_orch.engines._podman_attach import PodmanAttached

            cli = self.cli_argv(())[0]
            return PodmanAttached(cli, container, self.cli_env(), stdout, stderr, None, given)
        return DockerAttached(self.api(), self.streams(), container, stdout, stderr)

    def kill(self, container: str) -> None:
        import docker.errors

        try:
            self.api().kill(container)
        except docker.errors.APIError as err:
            if err.status_code not in (404, 409):  # gone, or not running any more
                raise engine_error(
                    "docker",
                    "kill",
                    str(err.explanation or err),
                    "kill it by hand: docker rm -f " + container,
                ) from err

    def remove(self, container: str) -> None:
        import docker.errors

        try:
            self.api().remove_container(container, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as err:
            raise engine_error(
                "docker",
                "rm",
                str(err.explanation or err),
                "remove it by hand: docker rm -f " + container,
            ) from err

    def list_labelled(self, label: str) -> list[str]:
        found = self.api().containers(all=True, quiet=True, filters={"label": label})
        return [str(c["Id"]) for c in found]

    def close(self) -> None:
        for client in (self._api, self._streams):
            if client is not None:
                client.close()
        self._api = self._streams = None
        self._seen_version = self._seen_info = None  # the closed client's daemon's answers
