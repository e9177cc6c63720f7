"""container/image_cas.py against hostile images, for real on docker and podman: an image is
the command's author's, so what sits at its CA bundle's path is chosen by them. Each image here
is a rootfs tar imported as it is (no build, nothing run): a bundle far larger than any real
one, a directory holding a large file, a device node, a FIFO, symlinks to /dev/zero, to
/proc/kcore, out past the rootfs' root and in a loop, and PEM with garbage and a key around it.
What must hold: the read is bounded (the orchestrator never copies nor holds more than the
bound), nothing but a regular file's bytes is ever read, a symlink never leaves the image, and
an engine's temporary container is always removed."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import trustme

from sprawl_orch.container import image_cas as cas_module
from sprawl_orch.container.image_cas import MAX_BUNDLE, image_cas
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.podman import PodmanEngine
from tests.integration.conftest import engine_absent, engine_problem, remove_image

BUNDLE = "etc/ssl/certs/ca-certificates.crt"
Add = Callable[[tarfile.TarFile], None]


def _file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _special(tar: tarfile.TarFile, name: str, kind: bytes, *, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o777 if kind == tarfile.SYMTYPE else 0o755
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 5  # /dev/zero's numbers
    tar.addfile(info)


def _import(engine: str, tmp: Path, add: Add) -> str:
    tar_path = tmp / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for d in ("etc", "etc/ssl", "etc/ssl/certs", "etc/pki", "dev", "proc"):
            _special(tar, d, tarfile.DIRTYPE)
        add(tar)
    done = subprocess.run(
        [engine, "import", "--message", "sprawl-orch hostile CA image", str(tar_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    raw = done.stdout.strip().splitlines()[-1]
    return raw if raw.startswith("sha256:") else f"sha256:{raw}"


@pytest.fixture(params=["docker", "podman"])
def engine(request: pytest.FixtureRequest) -> Iterator[DockerEngine | PodmanEngine]:
    name: str = request.param
    problem = engine_problem(name)
    if problem is not None:
        engine_absent(name, problem)
    yield DockerEngine() if name == "docker" else PodmanEngine()


def _containers(engine: DockerEngine | PodmanEngine) -> set[str]:
    done = subprocess.run(
        [engine.name, "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
        env=engine.cli_env(),
    )
    return {n for n in done.stdout.split() if n.startswith("sprawl-cas-")}


def _read(engine: DockerEngine | PodmanEngine, tmp: Path, add: Add) -> bytes:
    image = _import(engine.name, tmp, add)
    before = _containers(engine)
    try:
        return image_cas(engine, image)
    finally:
        assert _containers(engine) <= before, "a temporary container was left behind"
        cas_module._cache.clear()
        remove_image(engine.name, image)


def test_a_bundle_over_the_bound_is_refused_not_copied(
    engine: DockerEngine | PodmanEngine, tmp_path: Path
) -> None:
    """A bundle of MAX_BUNDLE + 1 MiB: before, copied to the host's disk whole, read into
    memory whole and written whole into the command's bundle (an image of gigabytes did the
    same with gigabytes)."""
    pem = trustme.CA().cert_pem.bytes()
    big = pem + b"#" * (MAX_BUNDLE + (1 << 20))
    made: list[int] = []
    real_create = type(engine).create

    def counted(self: DockerEngine | PodmanEngine, argv: Sequence[str]) -> str:
        made.append(1)
        return real_create(self, argv)

    def twice(add: Add) -> None:
        image = _import(engine.name, tmp_path, add)
        try:
            for _ in range(2):
                with pytest.raises(SprawlError) as refused:
                    image_cas(engine, image)
                assert refused.value.code is ErrorCode.IMAGE_INVALID
                assert "ca-certificates.crt" in str(refused.value)
        finally:
            cas_module._cache.clear()
            remove_image(engine.name, image)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(engine), "create", counted)
        twice(lambda tar: _file(tar, BUNDLE, big))
    # The refusal is the image's content: the second command is refused without a container
    # made and the tar stream opened again.
    assert made == [1]


def test_a_directory_at_the_bundle_path_is_not_copied(
    engine: DockerEngine | PodmanEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory holding a file larger than the bound: not a bundle, and never copied out
    (before, `cp` wrote the whole tree to the host's temporary directory first)."""
    pem = trustme.CA().cert_pem.bytes()

    def add(tar: tarfile.TarFile) -> None:
        _special(tar, BUNDLE, tarfile.DIRTYPE)  # the first path tried
        _file(tar, f"{BUNDLE}/big", pem + b"#" * (MAX_BUNDLE + (1 << 20)))
        _file(tar, "etc/ssl/cert.pem", pem)  # the last

    written: list[int] = []
    real = cas_module.tempfile.TemporaryDirectory if hasattr(cas_module, "tempfile") else None
    if real is not None:

        class Watched(real):  # type: ignore[misc,valid-type]
            def cleanup(self) -> None:
                written.append(sum(p.stat().st_size for p in Path(self.name).rglob("*")))
                super().cleanup()

        monkeypatch.setattr(cas_module.tempfile, "TemporaryDirectory", Watched)
    assert _read(engine, tmp_path, add) == pem
    assert all(n < MAX_BUNDLE for n in written), written


@pytest.mark.parametrize(
    "add",
    [
        pytest.param(lambda t: _special(t, BUNDLE, tarfile.CHRTYPE), id="char-device"),
        pytest.param(lambda t: _special(t, BUNDLE, tarfile.FIFOTYPE), id="fifo"),
        pytest.param(
            lambda t: _special(t, BUNDLE, tarfile.SYMTYPE, link="/dev/zero"), id="to-dev-zero"
        ),
        pytest.param(
            lambda t: _special(t, BUNDLE, tarfile.SYMTYPE, link="/proc/kcore"), id="to-kcore"
        ),
        pytest.param(
            lambda t: _special(t, BUNDLE, tarfile.SYMTYPE, link="../../../../../../etc/hostname"),
            id="out-of-root",
        ),
        pytest.param(
            lambda t: _special(t, BUNDLE, tarfile.SYMTYPE, link="ca-certificates.crt"),
            id="loop",
        ),
    ],
)
def test_nothing_but_a_regular_file_in_the_image_is_read(
    engine: DockerEngine | PodmanEngine, tmp_path: Path, add: Add
) -> None:
    """A device (an imported /dev/zero node), a FIFO (a read would block forever) and symlinks
    to the host's /dev/zero and /proc/kcore, out past the root, or to themselves: each is no
    bundle (b"": no other bundle path exists), and nothing of the host is read."""
    got = _read(engine, tmp_path, add)
    assert got == b""


def test_a_symlink_resolves_inside_the_image(
    engine: DockerEngine | PodmanEngine, tmp_path: Path
) -> None:
    """`../../../../etc/x` from the image's bundle path names the IMAGE's /etc/x, which holds
    a CA: that one is read (the host has no /etc/x)."""
    pem = trustme.CA().cert_pem.bytes()

    def add(tar: tarfile.TarFile) -> None:
        _special(tar, BUNDLE, tarfile.SYMTYPE, link="../../../../../../../etc/sprawl-x.pem")
        _file(tar, "etc/sprawl-x.pem", pem)

    assert not Path("/etc/sprawl-x.pem").exists()
    assert _read(engine, tmp_path, add) == pem


def test_pem_with_garbage_and_a_key_around_it_keeps_only_certificates(
    engine: DockerEngine | PodmanEngine, tmp_path: Path
) -> None:
    """The image's bundle goes into the command's bundle: what is not a certificate (a private
    key, text meant to end the run CA's block early) is not carried over."""
    ca = trustme.CA()
    key = ca.private_key_pem.bytes()
    pem = ca.cert_pem.bytes()
    junk = b"garbage\n-----END CERTIFICATE-----\n" + key + pem + b"\n-----BEGIN CERTIFICATE-----\n"
    got = _read(engine, tmp_path, lambda tar: _file(tar, BUNDLE, junk))
    assert pem.strip() in got
    assert b"PRIVATE KEY" not in got
    assert b"garbage" not in got
    assert got.count(b"-----BEGIN CERTIFICATE-----") == got.count(b"-----END CERTIFICATE-----")


_KILLED_MID_READ = """
import sys, time
from sprawl_orch.container import image_cas
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.podman import PodmanEngine

def stuck(*args, **kwargs):
    print("created", flush=True)
    time.sleep(600)

image_cas._copy_out = stuck
engine = DockerEngine() if sys.argv[1] == "docker" else PodmanEngine()
image_cas.image_cas(engine, sys.argv[2])
"""


def test_a_container_left_by_a_killed_reader_is_swept(
    engine: DockerEngine | PodmanEngine, tmp_path: Path
) -> None:
    """The process reading an image's CAs killed (SIGKILL) between create and remove: its
    never-started container is left, labelled as an admission probe of a dead owner, and the
    next admission's sweep removes it."""
    from sprawl_orch.container.stale_probes import sweep_stale_probes

    pem = trustme.CA().cert_pem.bytes()
    image = _import(engine.name, tmp_path, lambda tar: _file(tar, BUNDLE, pem))
    before = _containers(engine)
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_MID_READ, engine.name, image],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "created"
        child.kill()
        child.wait()
        left = _containers(engine) - before
        assert len(left) == 1, left
        sweep_stale_probes(engine)
        assert not (_containers(engine) - before)
    finally:
        remove_image(engine.name, image)


def test_a_real_bundle_through_an_alpine_style_link_is_kept_whole(
    engine: DockerEngine | PodmanEngine, tmp_path: Path
) -> None:
    """The control: this host's own distribution bundle, reached as Alpine's /etc/ssl/cert.pem
    -> certs/ca-certificates.crt, comes out with every certificate, loadable by OpenSSL."""
    import ssl

    real = Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()

    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "etc/ssl/certs/real.crt", real)
        _special(tar, "etc/ssl/cert.pem", tarfile.SYMTYPE, link="certs/real.crt")

    got = _read(engine, tmp_path, add)
    assert got.count(b"-----BEGIN CERTIFICATE-----") == real.count(b"-----BEGIN CERTIFICATE-----")
    ctx = ssl.create_default_context(cadata=got.decode())
    assert ctx.cert_store_stats()["x509_ca"] == real.count(b"-----BEGIN CERTIFICATE-----")
