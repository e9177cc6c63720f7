"""`image build`'s pieces (images/engines.py's ImageEngine.build runs them): the build's argv,
never pulling, and the refusal of a failed build, read from its log (buildlog.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.images import buildlog


def build_args(
    name: str,
    dockerfile: Path,
    context: Path,
    iidfile: Path,
    labels: Mapping[str, str],
    tag: str | None,
    ulimits: Mapping[str, str],
    network: str,
) -> list[str]:
    """`<engine> build ...`'s arguments: no pull, the ID written to `iidfile`, intermediate
    containers removed whatever happens, RUN steps on `network`."""
    pull = "--pull=false" if name == "docker" else "--pull=never"
    args = ["build", pull, "--file", str(dockerfile), "--iidfile", str(iidfile)]
    # The default removes intermediate containers only after a successful build:
    # three failed builds left three stopped containers (issue 19). Both engines
    # take --rm/--force-rm (podman's default for --force-rm is true; said anyway).
    args += ["--rm", "--force-rm", "--network", network]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    # RUN steps start containers: podman's default rlimits exceed these hosts' hard
    # limits ("error setting rlimit type 7: operation not permitted").
    for rlimit, limit in ulimits.items():
        args += ["--ulimit", f"{rlimit}={limit}"]
    if tag:
        args += ["--tag", tag]
    args.append(str(context))
    return args


def build_failed(
    name: str, dockerfile: Path, status: int, log_path: Path, network: str
) -> SprawlError:
    """The refusal of a failed build: the failing step, the log's telling lines, what to do."""
    why = buildlog.failure(log_path.read_text(encoding="utf-8", errors="replace"))
    step = why.step or "before any step"
    recovery = f"read the whole log, {log_path}; fix {step.split(':')[0]} of {dockerfile}"
    if why.tls:
        recovery = (
            "a server's TLS certificate could not be verified (a proxy that re-signs TLS, "
            "or a private index or mirror): give the image that CA (COPY it in and point "
            f"SSL_CERT_FILE / PIP_CERT at it) or use a mirror the image trusts; log: {log_path}"
        )
    elif why.network and network == "none":
        recovery = (
            f"the step wanted the network and RUN steps had none (--network none): build "
            f"again with --network host (e.g. to reach the package mirror); log: {log_path}"
        )
    return SprawlError(
        ErrorCode.ENGINE_REFUSED,
        subject=f"{name} build {dockerfile}",
        detail=f"exit {status} in {step}: " + " | ".join(why.lines) + f" (log: {log_path})",
        recovery=recovery,
    )
