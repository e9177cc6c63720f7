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

import posixpath
import re
import secrets
import ssl
import subprocess
import tarfile
import tempfile
import threading

from sprawl_orch.container.stale_probes import PROBE_SESSION, owner_label
from sprawl_orch.core.errors import ErrorCode, SprawlError

# An image is its author's; a bundle of gigabytes was copied to the host's disk and memory whole.
from sprawl_orch.egress.plan import MAX_BUNDLE
from sprawl_orch.engines.docker import DockerEngine
from sprawl_orch.engines.engine import CLI_TIMEOUT, engine_error
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
# docker's `cp` gives the link itself, so the link is followed here (joined and normalised
# from "/", so never out past the image's root), this many times.
_HOPS = 8
_PEM = b"-----BEGIN CERTIFICATE-----"
_BLOCK = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----"
)

# An image's bundle, or its refusal (E_IMAGE_INVALID: over the bound): the image's content
# decides it, so the next command on the image is refused without a container made and a tar
# stream opened again.
_cache: dict[tuple[str, str], bytes | SprawlError] = {}
_lock = threading.Lock()


def image_cas(engine: Engine, image: str) -> bytes:
    """The PEM certificates of the image's CA bundle (the first of BUNDLE_PATHS it has); b""
    when it has none (busybox: such an image trusts no CA, and neither will the command).
    SprawlError (E_ENGINE_REFUSED) when the engine cannot create or remove the container."""
    key = (engine.endpoint(), image)
    with _lock:
        known = _cache.get(key)
    if isinstance(known, SprawlError):
        raise known
    if known is not None:
        return known
    try:
        found = _read(engine, image)
    except SprawlError as err:
        if err.code is ErrorCode.IMAGE_INVALID:
            with _lock:
                _cache[key] = err
        raise  # an engine's failure (E_ENGINE_REFUSED) is tried again by the next command
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
        for path in BUNDLE_PATHS:
            got = _copy_out(engine, container, path)
            if got is not None and _PEM in got:
                return certificates(got)
        return b""
    finally:
        try:
            engine.remove(container)
        except SprawlError:
            engine.remove(name)


def certificates(pem: bytes) -> bytes:
    """Only the CERTIFICATE blocks of `pem` that parse, one after another: the image's text is
    its author's, and it is written into the command's bundle right before the run's CA. An
    unterminated BEGIN line or a broken block made OpenSSL refuse the whole file, the run's
    CA with it; a private key or other text had no business being copied."""
    # Checked by OpenSSL itself (what the command's clients load), not cryptography: that
    # warns of, and will refuse, real roots with a non-positive serial OpenSSL accepts.
    check = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    out = []
    for block in _BLOCK.findall(pem):
        try:
            check.load_verify_locations(cadata=block.decode("ascii"))
        except (ssl.SSLError, ValueError):
            continue  # not a certificate: left out, as OpenSSL would refuse the whole file
        out.append(block + b"\n")
    return b"".join(out)


def _copy_out(engine: Engine, container: str, path: str) -> bytes | None:
    """The regular file at `path` in the container, symlinks followed inside the image; None
    when the image has no such file, or something else there (a directory, a device, a FIFO,
    a symlink loop). Read as the tar stream `cp … -` writes, header first: a directory or a
    file over MAX_BUNDLE is known before any of its content is read. `cp` to a host path
    wrote a directory's whole tree, or a file of gigabytes, to the host's disk first, and
    the file was then read whole into memory."""
    for _hop in range(_HOPS):
        member, data = _stream(engine, container, path)
        if member is None:
            return None
        if member.issym():
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), member.linkname))
            continue
        return data if member.isreg() else None
    return None


def _stream(engine: Engine, container: str, path: str) -> tuple[tarfile.TarInfo | None, bytes]:
    """The first tar member `cp container:path -` writes and, for a regular file within the
    bound, its bytes; (None, b"") when the image has no such path."""
    argv = engine.cli_argv(("cp", f"{container}:{path}", "-"))
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            list(argv),
            env=engine.cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        # An engine that never answers: killed (this process's own child) at the CLI bound.
        timer = threading.Timer(CLI_TIMEOUT, proc.kill)
        timer.start()
        try:
            member, data = _first(proc, path)
        finally:
            timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.poll() is None:
                proc.kill()  # the rest of a directory's tree is not wanted
            proc.wait()
        if member is not None:
            return member, data
        errors.seek(0)
        words = errors.read().decode(errors="replace")
    if _absent(words):
        return None, b""  # the next path is tried
    # Anything else (the engine gone mid-read) would leave the command trusting no image CA
    # at all, cached for the image: refused instead.
    raise engine_error(
        engine.name,
        "cp",
        words.strip() or f"exit status {proc.returncode}",
        f"reading the image's CA bundle {path} failed; check `{engine.name} info`",
    )


def _first(proc: subprocess.Popen[bytes], path: str) -> tuple[tarfile.TarInfo | None, bytes]:
    assert proc.stdout is not None
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            member = tar.next()
            if member is None or not member.isreg():
                return member, b""
            if member.size > MAX_BUNDLE:
                raise SprawlError(
                    ErrorCode.IMAGE_INVALID,
                    path,
                    f"the image's CA bundle {path} is {member.size} bytes, over the "
                    f"{MAX_BUNDLE} read for a command with secrets (real ones are < 1 MB)",
                    'give the image a real CA bundle, or set trust = "host"',
                )
            got = tar.extractfile(member)
            return member, got.read(MAX_BUNDLE) if got is not None else b""
    except tarfile.TarError:
        return None, b""  # no archive: the engine said why on stderr


def _absent(words: str) -> bool:
    """The engine's words for "no such path in the container": docker 20.10+ "Could not find
    the file … in container …", podman 4 "… could not be found on container …: no such file
    or directory"; a symlink loop at the path (docker's daemon: "evalSymlinksInScope: too many
    links") is no bundle either, not an engine failure refusing the command."""
    low = words.lower()
    return any(
        said in low
        for said in (
            "could not find",
            "could not be found",
            "no such file",
            "not a directory",
            "too many links",
            "too many levels of symbolic links",
        )
    )
