"""The container arm against real docker and podman (no engine mocks).

Every test runs on both engines; a missing engine fails in CI (conftest). Each test
checks that no container of its session is left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.container.admission import admit, clear_cache
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.container.arm import ContainerArm
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.podman import PodmanEngine
from tests.integration.container_support import (
    Case,
    config_for,
    image_ids,
    make_engine,
    processes_with_cmdline,
    run,
)

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def fresh_admissions() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def case(tmp_path: Path, engine_image: tuple[str, str]) -> Iterator[Case]:
    c = Case(tmp_path, engine_image[0])
    yield c
    assert c.leftovers() == [], "a container of this test was left behind"


def arm_for(engine_image: tuple[str, str], **limits: object) -> ContainerArm:
    name, image = engine_image
    return ContainerArm(config_for(name, image, **limits), make_engine(name))


def test_program_and_shell_line(case: Case, engine_image: tuple[str, str]) -> None:
    arm = arm_for(engine_image)
    arm.prepare(case.source)
    done = run(arm, case.launch(["ls", "a.txt", "missing"]))
    assert done.exit_code == 1
    assert done.stdout_path.read_text() == "a.txt\n"
    assert "missing" in done.stderr_path.read_text()
    secret_value = f"v-{secrets.token_hex(8)}"
    done = run(
        arm,
        case.launch(
            shell="echo $GREETING; echo to-err >&2; exit 7", env={"GREETING": secret_value}
        ),
    )
    assert (done.exit_code, done.killed, done.oom_killed) == (7, False, False)
    assert done.stdout_path.read_text() == f"{secret_value}\n"
    assert done.stderr_path.read_text() == "to-err\n"
    container = done.extra["container"]
    assert isinstance(container, dict)
    argv = container["argv"]
    # the values in a file of ours, read at create and deleted after (issue 30)
    env_file = argv[argv.index("--env-file") + 1]
    assert "--env" not in argv and not os.path.exists(env_file)
    assert not any(secret_value in part for part in argv), "an env value reached the argv"
    assert argv[-3:] == ["/bin/sh", "-c", "echo $GREETING; echo to-err >&2; exit 7"]
    assert container["verified"] is True and container["removed"] is True
    assert container["engine"] == engine_image[0] and container["image"] == engine_image[1]


def test_output_bytes_arrive_as_written(case: Case, engine_image: tuple[str, str]) -> None:
    # docker's json-file log would turn every non-UTF-8 byte into U+FFFD: we attach instead
    line = (
        "head -c 3000000 /dev/urandom > /tmp/r; cat /tmp/r; md5sum /tmp/r >&2; "
        "printf '\\377\\376end' >&2"
    )
    done = run(arm_for(engine_image), case.launch(shell=line))
    out = done.stdout_path.read_bytes()
    err = done.stderr_path.read_bytes()
    assert len(out) == 3_000_000
    assert err.startswith(hashlib.md5(out).hexdigest().encode())
    assert err.endswith(b"\xff\xfeend")


def test_writes_land_in_the_copy(case: Case, engine_image: tuple[str, str]) -> None:
    arm = arm_for(engine_image)
    done = run(arm, case.launch(shell="echo made > new.txt && echo more >> a.txt && mkdir d"))
    assert done.exit_code == 0, done.stderr_path.read_text()
    assert (case.copy / "new.txt").read_text() == "made\n"
    assert (case.copy / "a.txt").read_text() == "original\nmore\n"
    assert (case.copy / "d").is_dir()
    assert sorted(p.name for p in case.source.iterdir()) == ["a.txt"]
    assert (case.source / "a.txt").read_text() == "original\n"


def test_root_filesystem_is_read_only(case: Case, engine_image: tuple[str, str]) -> None:
    line = "touch /bin/x || echo refused; touch /tmp/x && echo tmp-ok"
    done = run(arm_for(engine_image), case.launch(shell=line))
    assert done.stdout_path.read_text() == "refused\ntmp-ok\n"
    assert "Read-only file system" in done.stderr_path.read_text()


def test_the_copy_sits_at_the_working_directorys_own_path(
    case: Case, engine_image: tuple[str, str]
) -> None:
    """An absolute path recorded in the tree (an editable install's, a venv's) names the
    person's tree: inside the container it must resolve into the copy."""
    src = case.source
    (case.copy / "recorded.pth").write_text(f"{src}\n")
    line = (
        'pwd; cat "$(cat recorded.pth)/a.txt"; echo via-path > "$(cat recorded.pth)/b.txt"'
        " && echo wrote"
    )
    done = run(arm_for(engine_image), case.launch(shell=line, workdir=src))
    assert done.exit_code == 0, done.stderr_path.read_text()
    assert done.stdout_path.read_text() == f"{src}\noriginal\nwrote\n"
    assert (case.copy / "b.txt").read_text() == "via-path\n"
    assert not (src / "b.txt").exists()
    assert done.extra["container"]["verified"] is True  # type: ignore[index]


def test_tmp_is_usable_by_the_commands_uid(case: Case, engine_image: tuple[str, str]) -> None:
    line = "id -u; stat -c %a /tmp; touch /tmp/a && mkdir /tmp/d && echo tmp-ok"
    done = run(arm_for(engine_image, user="65534:65534"), case.launch(shell=line))
    assert done.stdout_path.read_text() == "65534\n1777\ntmp-ok\n", done.stderr_path.read_text()


def test_tag_is_refused_at_parse() -> None:
    with pytest.raises(SprawlError) as err:
        parse_config({"sandbox": {"container": {"image": "busybox:latest"}}})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "sprawl-orch image pin busybox:latest" in err.value.recovery  # not the detail


def test_missing_image_refused_without_pull(tmp_path: Path, engine_image: tuple[str, str]) -> None:
    name, _ = engine_image
    absent = "sha256:" + secrets.token_hex(32)
    engine = make_engine(name)
    admission = admit(engine, config_for(name, absent))
    assert not admission.admitted
    assert admission.missing is not None and admission.missing.kind == "image_not_local"
    assert "sprawl-orch image build" in admission.recovery
    # and the engine itself, asked to create it, neither pulls nor finds it
    from sprawl_orch.container.argv import create_argv

    copy = tmp_path / "c"
    copy.mkdir()
    argv = create_argv(
        name,
        config_for(name, absent),
        absent,
        copy,
        ["true"],
        [],
        f"nopull{secrets.token_hex(3)}",
        "nopull",
        "nopull",
        None,
        host=HostLimits.this_host(),
    )
    with pytest.raises(SprawlError) as err:
        engine.create(argv)
    words = err.value.detail.lower()
    assert "no such image" in words or "image not known" in words or "not found" in words
    for pulling in ("trying to pull", "pulling", "registry", "dial tcp", "lookup "):
        assert pulling not in words, f"the engine tried to pull: {words}"
    # (other images may appear meanwhile: engineers and CI jobs share the engines)
    assert absent.removeprefix("sha256:") not in image_ids(name)


def test_docker_daemon_down_is_refused_with_recovery(tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead))
    s.close()  # the path exists, nothing listens: connect() is refused
    engine = DockerEngine(f"unix://{dead}")
    admission = admit(engine, config_for("docker", "sha256:" + "1" * 64))
    assert not admission.admitted
    assert admission.code is ErrorCode.TOOL_UNAVAILABLE
    # The address, the error and the fix for that error (issue 27, item 7).
    assert f"nothing answers at unix://{dead}" in admission.reason
    assert "Connection refused" in admission.reason  # the engine's (SDK's) own words
    assert f"start the daemon that should listen at unix://{dead}" in admission.recovery
    arm = ContainerArm(config_for("docker", "sha256:" + "1" * 64), engine)
    with pytest.raises(SprawlError) as err:
        arm.prepare(tmp_path)
    assert err.value.code is ErrorCode.TOOL_UNAVAILABLE


@pytest.mark.parametrize("name", ["docker", "podman"])
def test_engine_not_installed(name: str) -> None:
    engine = (
        DockerEngine(cli="/nonexistent/docker")
        if name == "docker"
        else PodmanEngine(cli="/nonexistent/podman")
    )
    if name == "docker":  # a docker SDK connection without the CLI can't create
        engine.cli = None
    admission = admit(engine, config_for(name, "sha256:" + "2" * 64))
    assert not admission.admitted
    assert "not installed" in admission.reason
    assert "apt-get install" in admission.recovery


def test_rlimit_above_the_engines_hard_limit_is_explained(
    tmp_path: Path, engine_image: tuple[str, str]
) -> None:
    name, image = engine_image
    real = HostLimits.this_host()
    # Ask for more than the kernel lets anyone set (fs.nr_open). Twice *our* hard limit is
    # refused only while the engine's hard limit (which the container's init, without
    # CAP_SYS_RESOURCE, may not exceed) is no higher than ours, and on a shared machine the
    # dockerd may come from another shell than pytest (here pytest's is 20000, nr_open
    # 1048576). Above nr_open setrlimit fails for every process, root or not.
    nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    asked = max(real.rlimits_hard.get("nofile") or 0, nr_open) * 2
    # Pretend the host allows more than it does, so the engine's runtime meets the limit.
    pretend = HostLimits({**real.rlimits_hard, "nofile": asked * 2}, real.cpus, real.memory_bytes)
    # nproc is given too: podman adds its own default nproc (1048576) for any left out, and
    # verification refuses a limit nobody asked for before the runtime is even reached
    config = config_for(name, image, ulimits={"nofile": f"{asked}:{asked}", "nproc": "1024:1024"})
    admission = admit(make_engine(name), config, pretend)
    assert not admission.admitted
    assert admission.code is ErrorCode.SANDBOX_DENIED
    assert "rlimit" in admission.reason.lower()
    assert "operation not permitted" in admission.reason.lower()
    assert "lower [sandbox.container] ulimits" in admission.recovery
    assert f"nofile {asked * 2}" in admission.recovery  # the limit admission was told of


class DroppingMemory:
    """A real engine whose create loses --memory/--memory-swap (a runtime that accepts a
    flag and ignores it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def endpoint(self) -> str:
        return "dropping-memory:" + self.inner.endpoint()

    def create(self, argv: list[str]) -> str:
        out: list[str] = []
        skip = False
        for part in argv:
            if skip:
                skip = False
                continue
            if part in ("--memory", "--memory-swap"):
                skip = True
                continue
            out.append(part)
        return str(self.inner.create(out))


def test_inspect_mismatch_is_refused_and_removed(case: Case, engine_image: tuple[str, str]) -> None:
    name, image = engine_image
    config = config_for(name, image)
    real = make_engine(name)
    assert admit(real, config).admitted
    altered = DroppingMemory(real)
    # Admission's probe goes through the same create: it refuses such an engine too.
    refused = admit(altered, config)  # type: ignore[arg-type]
    assert not refused.admitted and "HostConfig.Memory" in refused.reason
    arm = ContainerArm(config, altered)  # type: ignore[arg-type]
    arm._admission = admit(real, config)  # admitted by the real engine, then it misbehaves
    with pytest.raises(SprawlError) as err:
        arm.start(case.launch(["touch", "ran"]))
    assert err.value.code is ErrorCode.SANDBOX_DENIED
    assert err.value.subject == "memory"
    assert f"expected {config.memory_bytes}, found 0" in err.value.detail
    assert not (case.copy / "ran").exists(), "the unverified container started"
    missing = subprocess.run(
        [name, "inspect", f"sprawl-{case.session}-1"], capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0, "the refused container was not removed"


def test_memory_over_the_limit_is_oom_killed(case: Case, engine_image: tuple[str, str]) -> None:
    arm = arm_for(engine_image, memory_bytes=64 * MiB)
    # busybox dd allocates one bs-sized buffer and fills it: 200 MiB > 64 MiB
    done = run(arm, case.launch(["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"]))
    assert done.oom_killed is True
    assert done.exit_code == 137
    small = run(arm, case.launch(["dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1"]))
    assert (small.oom_killed, small.exit_code) == (False, 0)


def test_window_kill_and_pids(case: Case, engine_image: tuple[str, str]) -> None:
    arm = arm_for(engine_image)
    seconds = str(3000 + secrets.randbelow(999))
    running = arm.start(case.launch(["sleep", seconds]))
    assert running.wait(0) is False  # a poll
    assert running.wait(0.5) is False  # a bounded wait
    pids = []
    for _ in range(50):
        pids = running.pids()
        if pids:
            break
    assert pids, "no host pid seen for a running container"
    assert set(processes_with_cmdline(["sleep", seconds])) <= set(pids)
    running.kill()
    assert running.wait(30)
    done = running.finish()
    assert done.killed and done.exit_code == 137
    assert done.extra["container"]["removed"] is True  # type: ignore[index]
    assert processes_with_cmdline(["sleep", seconds]) == []
    assert running.pids() == []


def test_program_missing_in_image_is_refused(case: Case, engine_image: tuple[str, str]) -> None:
    arm = arm_for(engine_image)
    try:
        done = run(arm, case.launch(["no-such-program"]))
    except SprawlError as err:
        assert err.code is ErrorCode.TOOL_UNAVAILABLE
        assert err.subject == "no-such-program"
        assert "executable file not found" in err.detail
        assert err.recovery.endswith("or use the shell arm (--shell)")
    else:
        # podman learns it only from `start --attach` (its create does not run the runtime):
        # the Finished record carries the same refusal, which the result becomes.
        assert isinstance(arm.engine, PodmanEngine)
        assert done.refusal is not None and done.refusal.code is ErrorCode.TOOL_UNAVAILABLE
        assert done.refusal.subject == "no-such-program"
        assert "executable file not found" in done.refusal.detail
        # podman's own line is the refusal's words, not the command's stderr (issue 27 item 10)
        assert "unable to start container" not in done.stderr_path.read_text()
        assert "no-such-program" in str(done.extra["container"]["start_error"])  # type: ignore[index]


@pytest.fixture(scope="session")
def crun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real crun: the installed one, or Debian's package unpacked in a temp dir (not
    installed: that would change every podman user's default runtime on this host)."""
    found = shutil.which("crun")
    if found:
        yield found
        return
    root = tmp_path_factory.mktemp("crun")
    subprocess.run(
        ["apt-get", "download", "crun", "libyajl2"], cwd=root, check=True, capture_output=True
    )
    for deb in root.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root / "unpacked")], check=True)
    lib = root / "unpacked/usr/lib/x86_64-linux-gnu"
    wrapper = root / "crun"
    binary = root / "unpacked/usr/bin/crun"
    wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={lib} exec {binary} "$@"\n')
    wrapper.chmod(0o755)
    yield str(wrapper)
    shutil.rmtree(root, ignore_errors=True)


def hybrid_cgroups() -> bool:
    """v1 hierarchies plus a v2 mount that holds a controller (here: hugetlb) — the layout
    crun 1.8 refuses ("cgroups in hybrid mode not supported, drop all controllers from
    cgroupv2")."""
    controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    return (
        Path("/sys/fs/cgroup/memory").is_dir()
        and controllers.exists()
        and bool(controllers.read_text().strip())
    )


def test_podman_crun_failure_falls_back_to_runc_and_says_so(
    tmp_path: Path, podman_image: str, crun: str
) -> None:
    conf = tmp_path / "containers.conf"
    conf.write_text(f'[engine]\nruntime = "crun"\n[engine.runtimes]\ncrun = ["{crun}"]\n')
    engine = PodmanEngine(environ={**os.environ, "CONTAINERS_CONF": str(conf)})
    assert engine.facts().default_runtime == "crun"
    config = config_for("podman", podman_image)
    admission = admit(engine, config)
    assert admission.admitted, admission.reason
    if not hybrid_cgroups():  # crun works on pure v2 hosts: then nothing to fall back from
        assert admission.runtime is None and admission.runtime_used == "crun"
        return
    assert (admission.runtime, admission.runtime_used) == ("runc", "runc")
    said = " ".join(admission.notes)
    assert "default runtime crun failed the probe" in said
    assert "cgroups in hybrid mode not supported" in said
    assert "--runtime runc" in said
    case = Case(tmp_path, "podman")
    done = run(ContainerArm(config, engine), case.launch(["echo", "ran"]))
    assert done.stdout_path.read_text() == "ran\n"
    container = done.extra["container"]
    assert container["runtime"] == "runc"  # type: ignore[index]
    argv = container["argv"]  # type: ignore[index]
    assert argv[argv.index("--runtime") + 1] == "runc"
    assert case.leftovers() == []


def _open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def test_docker_client_sockets_do_not_pile_up(tmp_path: Path, docker_image: str) -> None:
    # docker SDK 7.1 kept one socket per container-specific URL (see docker.one_pool)
    case = Case(tmp_path, "docker")
    arm = ContainerArm(config_for("docker", docker_image), make_engine("docker"))
    run(arm, case.launch(["true"]))
    before = _open_sockets()
    for _ in range(12):
        running = arm.start(case.launch(["sleep", "0.3"]))
        assert running.wait(0) is False
        running.wait(0.05)
        assert running.wait(30)
        running.finish()
    assert _open_sockets() <= before + 1
    arm.close()
    assert case.leftovers() == []
