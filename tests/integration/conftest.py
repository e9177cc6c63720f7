"""Real engines for integration tests.

`busybox_image(engine)` imports a tiny busybox rootfs into docker or podman and returns
its fixed ID (until `images.build` lands, this is the project's test image). The fixtures
`docker_image` / `podman_image` build it once per session and remove it afterwards.
An engine that is absent FAILS the test when CI=true and skips it only outside CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from sprawl_orch.runs.cgroups import Delegation, PlatformShares, delegation

PRIVATE_DOCKER_SOCK = Path("/run/sprawl-orch/docker.sock")
ROOTFS_DIRS = ("bin", "work", "tmp", "etc", "proc", "sys", "dev", "run", "var/tmp")

# .ci/env exports DOCKER_HOST; a person running pytest by hand may not have sourced it.
if "DOCKER_HOST" not in os.environ and PRIVATE_DOCKER_SOCK.exists():
    os.environ["DOCKER_HOST"] = f"unix://{PRIVATE_DOCKER_SOCK}"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(message: str) -> NoReturn:
    """Something a test needs is missing: a failure in CI (CI=true: the runner was set up
    to have it, so its absence is a broken runner), a skip on a developer's machine. The
    one place that decides; every "absent" path in these tests comes through here."""
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def engine_absent(name: str, why: str) -> NoReturn:
    missing(f"{name} is not usable here: {why} (run `bash .ci/setup-engines && . .ci/env`)")


@pytest.fixture(scope="module")
def v1_delegation() -> Delegation:
    """This machine's writable v1 memory+cpu hierarchies. On a v2 host (GitHub's runners)
    the v1 tests don't apply, even in CI: v2 is tested on a directory tree and there."""
    found = delegation()
    if found.version == "v1" and found.shares is PlatformShares.CPU_AND_MEMORY:
        return found
    message = f"no writable v1 memory+cpu hierarchies here: {found.why}"
    if found.version == "v2":
        pytest.skip(message)
    missing(message)


def engine_problem(engine: str) -> str | None:
    """None when the engine answers, else why not."""
    cli = shutil.which(engine)
    if cli is None:
        return f"{engine} is not installed"
    probe = ["version"] if engine == "docker" else ["info", "--format", "json"]
    done = subprocess.run([cli, *probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
    return None


def busybox_rootfs_tar(dest: Path) -> Path:
    busybox = shutil.which("busybox")
    if busybox is None:
        raise RuntimeError("busybox-static is not installed (apt-get install busybox-static)")
    root = dest / "rootfs"
    for d in ROOTFS_DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    for d in ("tmp", "var/tmp"):
        # runc gives a --tmpfs mount the mode of the image's directory: 0755 root would
        # leave /tmp unwritable for the container's non-root user
        (root / d).chmod(0o1777)
    shutil.copy2(busybox, root / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    for applet in applets.stdout.split():
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    tar = dest / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(root, arcname=".")
    return tar


def busybox_image(engine: str, env: dict[str, str] | None = None) -> str:
    """Import a busybox rootfs into `engine` (the CLI with `env`: another DOCKER_HOST);
    return its fixed ID (sha256:<64 hex>)."""
    with tempfile.TemporaryDirectory(prefix="sprawl-busybox-") as tmp:
        tar = busybox_rootfs_tar(Path(tmp))
        done = subprocess.run(
            [engine, "import", "--message", "sprawl-orch test image", str(tar)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
    raw = done.stdout.strip().splitlines()[-1]
    return raw if raw.startswith("sha256:") else f"sha256:{raw}"


def remove_image(engine: str, image: str, env: dict[str, str] | None = None) -> None:
    # Not forced: an image some other test still uses stays, and says so.
    done = subprocess.run(
        [engine, "rmi", image], capture_output=True, text=True, check=False, env=env
    )
    if (
        done.returncode != 0
        and "no such image" not in done.stderr.lower()
        and "image not known" not in done.stderr
    ):
        print(f"could not remove {engine} image {image}: {done.stderr.strip()}")


def _image(engine: str) -> Iterator[str]:
    problem = engine_problem(engine)
    if problem is not None:
        engine_absent(engine, problem)
    image = busybox_image(engine)
    try:
        yield image
    finally:
        remove_image(engine, image)


@pytest.fixture(scope="session")
def docker_image() -> Iterator[str]:
    yield from _image("docker")


@pytest.fixture(scope="session")
def podman_image() -> Iterator[str]:
    yield from _image("podman")


# The second private dockerd, started with --userns-remap=default by .ci/setup-engines.
DOCKER_USERNS_HOST = "unix:///run/sprawl-orch/docker-userns.sock"


@pytest.fixture(scope="session")
def docker_userns() -> Iterator[tuple[dict[str, str], str]]:
    """(environment reaching the userns-remap dockerd, its busybox image ID)."""
    host = os.environ.get("SPRAWL_DOCKER_USERNS_HOST", DOCKER_USERNS_HOST)
    env = {**os.environ, "DOCKER_HOST": host}
    done = subprocess.run(
        ["docker", "info", "--format", "{{json .SecurityOptions}}"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        engine_absent("docker (userns-remap daemon)", (done.stderr or done.stdout).strip())
    if "name=userns" not in done.stdout:
        engine_absent(
            "docker (userns-remap daemon)",
            f"{host} does not remap user namespaces: {done.stdout.strip()}",
        )
    image = busybox_image("docker", env)
    try:
        yield env, image
    finally:
        remove_image("docker", image, env)


@pytest.fixture(params=["docker", "podman"])
def engine_image(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(engine name, image ID) for each engine: parametrizes a test over both."""
    name = str(request.param)
    return name, str(request.getfixturevalue(f"{name}_image"))


@pytest.fixture(scope="session")
def python_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory for the python arm's tests: the 26 MB module's Cranelift entry is
    compiled here (5-50 s on the 2-core machine), and every command, in any test file, loads
    it -- never a Winch one whose background compile would move later commands under a test
    (that is test_python_tiering.py's, on states of its own)."""
    from sprawl_orch.native_fallbacks import wasi_module

    why = wasi_module.missing_why()
    if why is not None:
        missing(f"the python arm's runtime: {why} (pip install -e '.[test]')")
    state = tmp_path_factory.mktemp("pystate")
    wasi_module.compiled(state)
    return state


def holding(token: str) -> list[int]:
    """The pids whose command line holds ``token`` (a command a test started and tagged)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone since listed
                continue
    return found
