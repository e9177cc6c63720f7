"""The CA certificates an image trusts, read from the image itself (issue 25): SSL_CERT_FILE and
its siblings replace a command's trust store, so a command with secrets is given one bundle
holding what its own image trusted plus the run's CA. Without the image's part, a host signed
by a CA only the image trusts (a company CA baked into the image) failed verification in
every tunnel the proxy leaves opaque.

Read through the engine without running anything from the image: a container is created (never
started), the bundle copied out with `<engine> cp`, the container removed. Labelled as an
admission probe, so one left by a process that died between create and remove is swept by the
next admission (container/stale_probes.py). Cached per engine and image ID: an ID names the
image's content, so the read is done once per image and process.
"""

from __future__ import annotations

import contextlib
import posixpath
import secrets
import tempfile
import threading
from pathlib import Path

from sprawl_orch.container.stale_probes import PROBE_SESSION, owner_label
from sprawl_orch.core.errors import SprawlError
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import engine_error, run_cli
from sprawl_orch.engines.podman import PodmanEngine

Engine = DockerEngine | PodmanEngine

# Where distributions keep the one-file bundle OpenSSL-linked clients read (the list Go's
# crypto/x509 tries, in its order): Debian/Ubuntu/Alpine/Arch, Fedora/RHEL, openSUSE,
# CentOS/RHEL 7, Alpine's and the BSDs' own name.
BUNDLE_PATHS: tuple[str, ...] = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
)
# A bundle path may be a symlink (Alpine's /etc/ssl/cert.pem -> certs/ca-certificates.crt);
# `cp` copies the link itself on podman, so the link is followed here, this many times.
_HOPS = 8
_PEM = b"-----BEGIN CERTIFICATE-----"

_cache: dict[tuple[str, str], bytes] = {}
_lock = threading.Lock()


def image_cas(engine: Engine, image: str) -> bytes:
    """The PEM certificates of the image's CA bundle (the first of BUNDLE_PATHS it has); b""
    when it has none (busybox: such an image trusts no CA, and neither will the command).
    SprawlError (E_ENGINE_REFUSED) when the engine cannot create or remove the container."""
    key = (engine.endpoint(), image)
    with _lock:
        known = _cache.get(key)
    if known is not None:
        return known
    found = _read(engine, image)
    with _lock:
        _cache[key] = found
    return found


def _read(engine: Engine, image: str) -> bytes:
    name = f"sprawl-cas-{secrets.token_hex(6)}"
    argv = (
        "create",
        "--name",
        name,
        "--label",
        f"sprawl.session={PROBE_SESSION}",
        "--label",
        f"sprawl.run={owner_label()}",
        "--network",
        "none",
        image,
        # Never started: the program need not exist in the image (create does not look).
        "/sprawl-never-run",
    )
    container = engine.create(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="sprawl-cas-") as tmp:
            for path in BUNDLE_PATHS:
                got = _copy_out(engine, container, path, Path(tmp))
                if got is not None and _PEM in got:
                    return got
            return b""
    finally:
        try:
            engine.remove(container)
        except SprawlError:
            engine.remove(name)


def _copy_out(engine: Engine, container: str, path: str, tmp: Path) -> bytes | None:
    """The file at `path` in the container, symlinks followed inside the image; None when
    the image has no such file."""
    for hop in range(_HOPS):
        dest = tmp / f"{hop}-{secrets.token_hex(4)}"
        done = run_cli(
            engine.name,
            engine.cli_argv(("cp", f"{container}:{path}", str(dest))),
            engine.cli_env(),
            check=False,
        )
        if done.returncode != 0:
            if _absent(done.stderr):
                return None  # the next path is tried
            # Anything else (the engine gone mid-read) would leave the command trusting no
            # image CA at all, cached for the image: refused instead.
            raise engine_error(
                engine.name,
                "cp",
                done.stderr.strip() or f"exit status {done.returncode}",
                f"reading the image's CA bundle {path} failed; check `{engine.name} info`",
            )
        if dest.is_symlink():
            target = str(dest.readlink())
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            continue
        if not dest.is_file():
            return None  # a directory at a bundle's path is not a bundle
        with contextlib.suppress(OSError):  # unreadable: as if absent
            return dest.read_bytes()
        return None
    return None


def _absent(words: str) -> bool:
    """The engine's words for "no such path in the container": docker 20.10+ "Could not find
    the file … in container …", podman 4 "… could not be found on container …: no such file
    or directory"."""
    low = words.lower()
    return any(
        said in low
        for said in ("could not find", "could not be found", "no such file", "not a directory")
    )
