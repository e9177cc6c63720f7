"""A command's egress plan with its secrets: a fresh run (placeholders, CA) per command, the
combined CA bundle written beside its outputs, seen inside at one fixed read-only path."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import ssl
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

from sprawl_orch.config import SandboxConfig
from sprawl_orch.config.secrets import read_values
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.plan import MAX_BUNDLE, EgressPlan, host_bundle
from sprawl_orch.egress.rules import Rules, parse_entry
from sprawl_orch.secrets.spec import BUNDLE_INSIDE, Spec, phrase

_PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def not_dumpable() -> bool:
    """This process holds secrets' values from now on: no core dump of it, and its /proc
    files (environ, mem) no longer readable by another process of the same uid (prctl
    PR_SET_DUMPABLE 0; a non-root caller's bwrap command runs as that uid). False where the
    call is not available (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        # No libc prctl (not Linux): nothing to set; the statement's claims do not rest on it.
        return False


def _on_443(text: str) -> str:
    """A secret host without a port means 443 (docs/secrets.md; check_secrets checks it so
    against the allow-list). Rules read no port as every port: `CONNECT host:8443`, another
    service on that host, was intercepted and handed the value."""
    entry = parse_entry(text)
    if entry.port is not None:
        return text
    return f"[{entry.host}]:443" if ":" in entry.host else f"{entry.host}:443"


def specs_of(sandbox: SandboxConfig, environ: Mapping[str, str]) -> tuple[Spec, ...]:
    """Every configured secret with its value (E_CONFIG_INVALID when one is missing)."""
    values = read_values(sandbox.secrets, environ)
    not_dumpable()
    return tuple(
        Spec(
            name=name,
            hosts=Rules.parse(tuple(_on_443(h) for h in secret.hosts)),
            host_list=secret.hosts,
            value=values[name],
            header=secret.header,
            format=secret.format,
            basic_user=secret.basic_user,
            file=(
                os.path.realpath(os.path.expanduser(secret.file))
                if secret.file is not None
                else None
            ),
        )
        for name, secret in sandbox.secrets.items()
    )


# The host's bundles read so far: (path, dev, ino, size, mtime) -> bytes. Read whole for every
# command before (a file the caller names in SSL_CERT_FILE has no size bound of its own).
_bundles: dict[tuple[str, int, int, int, int], bytes] = {}
_bundles_lock = threading.Lock()


def host_cas(path: Path) -> bytes:
    """The host's CA bundle at `path`, its size checked before a byte is read (bound: the
    image's, MAX_BUNDLE), read once per file version and process. E_CONFIG_INVALID when it
    is not a regular file or is over the bound."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        raise _bundle_error(path, f"it cannot be opened ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _bundle_error(path, "it is not a regular file")
        if st.st_size > MAX_BUNDLE:
            raise _bundle_error(path, f"it is {st.st_size} bytes, over {MAX_BUNDLE}")
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _bundles_lock:
            known = _bundles.get(key)
        if known is not None:
            return known
        data = f.read(MAX_BUNDLE + 1)
    if len(data) > MAX_BUNDLE:  # grew between fstat and read
        raise _bundle_error(path, f"it is over {MAX_BUNDLE} bytes")
    with _bundles_lock:
        for old in [k for k in _bundles if k[0] == str(path)]:
            del _bundles[old]  # one version per path kept, not one per rewrite
        _bundles[key] = data
    return data


def _bundle_error(path: Path, why: str) -> SprawlError:
    return SprawlError(
        ErrorCode.CONFIG_INVALID,
        str(path),
        f"the host's CA bundle {path} (SSL_CERT_FILE, else OpenSSL's default) is not "
        f"usable for a command with secrets: {why}",
        "point SSL_CERT_FILE at a real CA bundle (real ones are < 1 MB)",
    )


def statement_phrase(specs: tuple[Spec, ...]) -> str | None:
    if not specs:
        return None
    return phrase({s.name: s.host_list for s in specs})


def with_secrets(
    plan: EgressPlan,
    specs: tuple[Spec, ...],
    outputs: Path,
    environ: Mapping[str, str],
    image: bytes | None = None,
) -> tuple[EgressPlan, dict[str, str]]:
    """The plan for one command, and what its environment gets (placeholders). The bundle
    replaces the command's trust store (SSL_CERT_FILE and its siblings replace, not add), so
    it holds what the command would have trusted without it (the hosts it reaches without
    interception must still verify) and the run's CA: `image`, the image's own CAs (a
    container with trust = "image"; b"" for an image with no CA store), else the host's."""
    # cryptography and the interception: paid only by a command with secrets
    from sprawl_orch.secrets.intercept import Interception
    from sprawl_orch.secrets.run import SecretRun

    host = host_bundle(environ)
    run = SecretRun(specs, upstream_cafile=str(host) if host is not None else None)
    # Loaded here, before the command runs (once per trust store and process, run.py), not
    # on the proxy's loop by the command's first intercepted connection.
    # A store that cannot be loaded is said where it was before: by the first intercepted
    # connection, refused and recorded (intercept.py).
    with contextlib.suppress(ssl.SSLError, OSError):
        run.upstream_context()
    outputs.mkdir(parents=True, exist_ok=True, mode=0o700)
    bundle = outputs / "ca-bundle.pem"
    base = host_cas(host) if image is None and host is not None else image or b""
    # Public certificates only (the CA's key is never written); 0644 so the command's uid
    # can read it through the read-only bind.
    fd = os.open(bundle, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(base.rstrip(b"\n") + b"\n" + run.ca.pem)
    os.chmod(bundle, 0o644)
    new = dataclasses.replace(
        plan,
        bundle=bundle,
        bundle_at=BUNDLE_INSIDE,
        secrets=Interception(run),
        hidden=tuple(s.file for s in specs if s.file is not None),
    )
    return new, run.env()
