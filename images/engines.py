"""`sprawl-orch image`'s engine: the image store of the one engine layer (engines/images.py:
resolve, inspect, import, remove) plus building from a Dockerfile.

Nothing here pulls: `build` runs with `--pull=false`/`--pull=never` after every base was found
locally (see dockerfile.py for why that check is needed).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError, os_errors
from sprawl_orch.engines.engine import ENGINES
from sprawl_orch.engines.images import (
    LABEL_DATE,
    LABEL_RECIPE,
    LABEL_SOURCE,
    ImageStore,
    LocalImage,
    fixed_id,
)
from sprawl_orch.images import buildlog
from sprawl_orch.images._engine_build import build_args, build_failed
from sprawl_orch.images.dockerfile import DockerfileError, external_bases

# The names images/ and its callers have always imported from here.
__all__ = [
    "BUILD_FIRST",
    "LABEL_DATE",
    "LABEL_RECIPE",
    "LABEL_SOURCE",
    "ImageEngine",
    "LocalImage",
    "engine",
    "fixed_id",
]

BUILD_FIRST = "build or import it first: sprawl-orch image build busybox"


class ImageEngine(ImageStore):
    """An engine as `sprawl-orch image` uses it: its image store, and builds."""

    def check_bases(self, dockerfile: Path, build_args: Mapping[str, str] | None = None) -> None:
        """Refuse, before anything runs, when a base image isn't in this engine's store."""
        try:
            with os_errors(
                ErrorCode.IMAGE_INVALID,
                dockerfile,
                "cannot read the Dockerfile",
                "check the path given with --dockerfile",
            ):
                text = dockerfile.read_text(encoding="utf-8")
            bases = external_bases(text, build_args)
        except DockerfileError as err:
            raise SprawlError(
                ErrorCode.IMAGE_INVALID,
                subject=f"{dockerfile}:{err.line}",
                detail=str(err),
                recovery="give the ARG a default, or write the base image's tag or ID",
            ) from err
        for base in bases:
            if self.resolve(base.ref) is None:
                raise SprawlError(
                    ErrorCode.IMAGE_INVALID,
                    subject=f"{base.instruction} {base.ref}",
                    detail=f"{dockerfile}:{base.line}: base image {base.ref} is not in "
                    f"{self.name}'s local images, and sprawl-orch never pulls",
                    recovery=f"{BUILD_FIRST} --engine {self.name}, then write FROM "
                    "sprawl/busybox:latest (or its ID)",
                )

    def build(
        self,
        dockerfile: Path,
        context: Path,
        *,
        labels: Mapping[str, str],
        tag: str | None,
        ulimits: Mapping[str, str],
        on_line: Callable[[str], None],
        network: str = "none",
    ) -> str:
        """Build without pulling; bases are checked first (check_bases). `network` is the
        RUN steps' network ("none" or "host"). The whole output goes to a log file, kept
        (path in the error) when the build fails."""
        self.check_bases(dockerfile)
        with tempfile.TemporaryDirectory(prefix="sprawl-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            args = build_args(
                self.name, dockerfile, context, iidfile, labels, tag, ulimits, network
            )
            # BuildKit resolves FROM against the registry even for local images; the classic
            # builder uses the local store. Docker 20.10 with no buildx uses it anyway.
            env = {**os.environ, **self.env, "DOCKER_BUILDKIT": "0"}
            log_path = buildlog.new_log(self.name)
            try:
                with log_path.open("w", encoding="utf-8") as log:
                    log.write(f"$ {' '.join(self._argv(args))}\n")
                    proc = subprocess.Popen(
                        self._argv(args),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        env=env,
                        text=True,
                        errors="replace",
                    )
                    with proc:
                        assert proc.stdout is not None
                        for line in proc.stdout:
                            log.write(line)
                            if line.strip():
                                on_line(line.rstrip())
            except FileNotFoundError as err:
                log_path.unlink(missing_ok=True)
                raise self._unreachable("build", f"{self._argv(args)[0]} is not on PATH") from err
            if proc.returncode != 0 or not iidfile.is_file():
                raise build_failed(self.name, dockerfile, proc.returncode, log_path, network)
            log_path.unlink(missing_ok=True)
            return fixed_id(iidfile.read_text())


def engine(name: str) -> ImageEngine:
    if name not in ENGINES:
        raise SprawlError(
            ErrorCode.BAD_REQUEST,
            subject=f"engine {name}",
            detail=f"{name!r} is not an engine (accepted: {', '.join(ENGINES)})",
            recovery="use --engine docker or --engine podman",
        )
    return ImageEngine(name)
