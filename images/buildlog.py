"""A Dockerfile build's output: kept whole on disk, and read for the step that failed.

A failed build used to surface a 6-line tail, which for `apt-get` is its summary, not the
"Temporary failure resolving '<the mirror>'" that caused it. The whole output goes to a
file that outlives the build (its path is in the error), and the message carries the failing
step's header and its own error lines.

Step headers: docker's classic builder prints `Step 2/3 : RUN …`; podman (buildah) prints
`STEP 2/3: RUN …`.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_STEP = re.compile(r"^(?:Step|STEP) (\d+)/(\d+) ?: ?(.*)$")
# Lines that say why, in the failing step's own output (apt, dpkg, sh, pip, the engines).
_ERROR = re.compile(
    r"^(E:|W:|Err:|error|fatal|ERRO|Error|/bin/sh:|sh:|.*: not found|.*No such file|"
    r".*Temporary failure|.*Could not resolve|.*Unable to locate|.*Permission denied|"
    r".*returned a non-zero code|.*exit status)",
)
_NETWORK = re.compile(
    r"Temporary failure resolving|Could not resolve|Network is unreachable|"
    r"Name or service not known|Failed to establish a new connection",
    re.IGNORECASE,
)


# A server's certificate the build could not verify: pip says it only in its retry WARNINGs
# ("SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] …"), then ends on
# "No matching distribution found", and an outsider's summary showed only the engine's
# "returned a non-zero code: 1" (issue 27, item 13).
_TLS = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLCertVerificationError|"
    r"server certificate verification failed|self[- ]signed certificate",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Failure:
    step: str  # "step 2/3: RUN apt-get update", or "" when no step header was printed
    lines: tuple[str, ...]  # the failing step's error lines (or its last lines)
    network: bool  # the output says a name didn't resolve / the network is unreachable
    tls: bool = False  # the output says a server's TLS certificate could not be verified


def failure(text: str, keep: int = 8) -> Failure:
    """The last step the build started, and the error lines of that step's output."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    start = 0
    step = ""
    for index, line in enumerate(lines):
        match = _STEP.match(line.strip())
        if match:
            start = index + 1
            step = f"step {match.group(1)}/{match.group(2)}: {match.group(3)}"
    own = lines[start:]
    errors = [line.strip() for line in own if _ERROR.match(line.strip())]
    chosen = errors[-keep:] if errors else [line.strip() for line in own[-keep:]]
    # The cause goes first when only a warning said it (pip's retries): the first such line.
    cause = next((line.strip() for line in own if _TLS.search(line)), None)
    if cause is not None and cause not in chosen:
        chosen = [cause, *chosen[-(keep - 1) :]]
    text = "\n".join(own)
    return Failure(step, tuple(chosen), bool(_NETWORK.search(text)), bool(_TLS.search(text)))


def log_dir() -> Path:
    """Where build logs are kept: $SPRAWL_BUILD_LOGS, else <TMPDIR or /var/tmp>/sprawl-orch-
    build-logs-<uid> (a disk, not /tmp's tmpfs). Made 0700: a log can hold build args.

    One per uid: a single machine-wide name, made 0700 by whichever account built first (root
    in CI), failed every other account's `image build --dockerfile` with a PermissionError
    traceback (found by the GitHub Action's test, run as a runner account)."""
    from sprawl_orch.core.errors import ErrorCode, SprawlError

    base = os.environ.get("SPRAWL_BUILD_LOGS") or os.path.join(
        os.environ.get("TMPDIR") or "/var/tmp", f"sprawl-orch-build-logs-{os.getuid()}"
    )
    path = Path(base)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()  # a link to a directory of ours is ours; one to theirs is refused
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        # Another account's directory (or a link it planted) would receive our build output.
        raise SprawlError(
            ErrorCode.CONFIG_INVALID,
            "build logs",
            f"{path} is not a directory of uid {os.geteuid()} (owner uid {st.st_uid})",
            "set SPRAWL_BUILD_LOGS to a directory of your own",
        )
    return path


def new_log(engine: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return log_dir() / f"{engine}-{stamp}-{os.getpid()}.log"
