"""The image store of docker and podman, through their CLIs: resolve, inspect, list, import and
remove images -- the image admin's verbs on the one engine layer (its binary from backends.py,
its runner engine.run_cli). Building (images/engines.py) stands on this.

The CLI, not the docker SDK: podman here is daemonless (no API socket to talk to), both CLIs
speak the same verbs, and the SDK costs ~200 ms to import. Nothing here pulls: `image
inspect` is local-only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.backends import backend
from sprawl_orch.engines.engine import IMAGE_ID, daemon_refused, run_cli, socket_denied

LABEL_RECIPE = "sprawl.recipe"
LABEL_DATE = "sprawl.date"
LABEL_SOURCE = "sprawl.source"

# What each engine says when an image simply isn't in its store (vs. an unreachable engine).
_NOT_LOCAL = re.compile(
    r"no such image|image not known|failed to find image|invalid reference format|"
    r"repository name must be lowercase|not a valid",
    re.IGNORECASE,
)
_UNREACHABLE_RECOVERY = {
    "docker": "start the daemon and point DOCKER_HOST at it: bash .ci/setup-engines && . .ci/env",
    "podman": "install podman (apt-get install podman, or bash .ci/setup-engines)",
}


# A reference that is an image ID (full, with or without its algorithm, or a short prefix).
_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")


def fixed_id(raw: str) -> str:
    """Podman prints IDs without the `sha256:` prefix docker uses; configs hold the prefix."""
    raw = raw.strip()
    return raw if raw.startswith("sha256:") else f"sha256:{raw}"


@dataclass(frozen=True)
class LocalImage:
    engine: str
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    created: str
    size: int
    # The image's own Config: what a command gets when sprawl-orch doesn't override it.
    path: str = ""  # Env PATH=…, "" when the image sets none
    user: str = ""  # Config.User, "" = the engine's default (root) unless the run sets one
    workdir: str = ""  # Config.WorkingDir, "" = /

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "id": self.id,
            "tags": list(self.tags),
            "labels": dict(self.labels),
            "created": self.created,
            "size": self.size,
            "path": self.path,
            "user": self.user,
            "workdir": self.workdir,
        }

    def facts(self) -> str:
        """One line: PATH, user and working directory as the image itself sets them."""
        return (
            f"PATH={self.path or '(unset)'} user={self.user or '(unset: root)'} "
            f"workdir={self.workdir or '(unset: /)'}"
        )


@dataclass(frozen=True)
class ImageStore:
    """An engine's image store as `sprawl-orch image` uses it: its CLI to resolve, import,
    pin and remove images. `binary` defaults to the backend's (engines/backends.py)."""

    name: str
    binary: str = ""
    env: Mapping[str, str] = field(default_factory=dict)

    def _argv(self, args: Sequence[str]) -> list[str]:
        # The binary the arm and the guardian run (engines/backends.py); its bare name when
        # none is installed, so the runner says so.
        return [self.binary or backend(self.name).cli or self.name, *args]

    def _unreachable(self, what: str, detail: str) -> SprawlError:
        return SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject=f"{self.name} ({what})",
            detail=detail,
            recovery=_UNREACHABLE_RECOVERY.get(self.name, f"install {self.name}"),
        )

    def run(
        self, args: Sequence[str], *, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the CLI (engine.run_cli, no time limit: an import or a build takes
        what it takes); a CLI that can't be run is TOOL_UNAVAILABLE, the exit is not judged."""
        # The admin's own environment, unlike the arm's fixed one (engines' cli_env): a person
        # at their terminal builds with their proxies and registries config (podman build
        # passes HTTP_PROXY to RUN steps), and no attacker's tree shapes this process.
        return run_cli(
            self.name,
            self._argv(args),
            {**os.environ, **self.env},
            timeout=None,
            check=False,
            stdin=stdin,
        )

    def _ok(self, args: Sequence[str], *, what: str, stdin: bytes | None = None) -> str:
        done = self.run(args, stdin=stdin)
        out = done.stdout
        err = done.stderr.strip()
        if done.returncode == 0:
            return out
        if _looks_unreachable(err):
            raise self._unreachable(what, _last(err))
        raise SprawlError(
            ErrorCode.ENGINE_REFUSED,
            subject=f"{self.name} {what}",
            detail=f"exit {done.returncode}: {_last(err)}",
            recovery=f"read the {self.name} message above; nothing was changed by sprawl-orch",
        )

    def server_version(self) -> str:
        """The engine's own answer (docker: the daemon's version), proving it is reachable."""
        fmt = "{{.Server.Version}}" if self.name == "docker" else "{{.Version}}"
        return self._ok(["version", "--format", fmt], what="version").strip()

    def resolve(self, ref: str) -> str | None:
        """The fixed ID `ref` (tag, short or full ID) names in the local store, or None.
        `image inspect` never pulls. Podman's names are matched exactly (see _exactly)."""
        if self.name == "podman" and "@" not in ref and not _IMAGE_ID.fullmatch(ref):
            return self._exactly(ref)
        done = self.run(["image", "inspect", "--format", "{{.Id}}", ref])
        if done.returncode == 0:
            lines = done.stdout.split()
            return fixed_id(lines[0]) if lines else None
        err = done.stderr.strip()
        if _NOT_LOCAL.search(err) and not _looks_unreachable(err):
            return None
        if _looks_unreachable(err):
            raise self._unreachable("image inspect", _last(err))
        raise SprawlError(
            ErrorCode.ENGINE_REFUSED,
            subject=f"{self.name} image inspect {ref}",
            detail=f"exit {done.returncode}: {_last(err)}",
            recovery="check the reference spelling (repository:tag or sha256:<hex>)",
        )

    def _exactly(self, ref: str) -> str | None:
        """Podman resolves a short name against every local name ending in it: an outsider's
        `image pin busybox:latest` pinned `localhost/sprawl/busybox:latest` while another
        `localhost/…/busybox:latest` existed (issue 27, item 15). Only the name given, or what
        docker would also call it (its default registry's library/, localhost/), counts; a
        short-name match alone or two images under the spellings of one name are refused,
        naming each."""
        # docker's default registry, from its SDK: no registry host is written here.
        from docker.auth import INDEX_NAME

        listed = self._listing()
        tagged = ref if ":" in ref.rsplit("/", 1)[-1] else f"{ref}:latest"
        spellings = {tagged, f"localhost/{tagged}", f"{INDEX_NAME}/{tagged}"}
        spellings.add(f"{INDEX_NAME}/library/{tagged}")
        exact: dict[str, set[str]] = {}
        short: dict[str, set[str]] = {}
        for line in listed.splitlines():
            parts = line.split()
            if len(parts) != 2:
                continue
            image_id, name = fixed_id(parts[0]), parts[1]
            if name in spellings:
                exact.setdefault(image_id, set()).add(name)
            elif name.endswith(f"/{tagged}"):
                short.setdefault(image_id, set()).add(name)
        if len(exact) == 1:
            return next(iter(exact))
        named = exact or short
        if not named:
            return None
        every = "; ".join(f"{', '.join(sorted(n))} ({i})" for i, n in sorted(named.items()))
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=f"podman {ref}",
            detail=(
                f"{ref} names more than one local image in podman: {every}"
                if exact
                else f"{ref} is no local image's name in podman; podman would match it by "
                f"short name to {every}"
            ),
            recovery="pin the full name (e.g. localhost/…) or the ID of the one you mean",
        )

    def _listing(self) -> str:
        # podman 4.3's `images` fails whole when another process removes an image while it
        # lists ("checking if image … is dangling: … image not known"): list again.
        args = ["images", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"]
        for _ in range(3):
            done = self.run(args)
            if done.returncode == 0:
                return done.stdout
            if "image not known" not in done.stderr:
                break
        return self._ok(args, what="images")

    def inspect(self, refs: Sequence[str]) -> list[LocalImage]:
        if not refs:
            return []
        raw = json.loads(self._ok(["image", "inspect", *refs], what="image inspect") or "[]")
        return [self._image(item) for item in raw]

    def _image(self, item: Mapping[str, Any]) -> LocalImage:
        config = item.get("Config") or {}
        labels = config.get("Labels") or item.get("Labels") or {}
        env = [str(e) for e in config.get("Env") or ()]
        path = next((e.removeprefix("PATH=") for e in env if e.startswith("PATH=")), "")
        return LocalImage(
            engine=self.name,
            id=fixed_id(str(item["Id"])),
            tags=tuple(item.get("RepoTags") or ()),
            labels={str(k): str(v) for k, v in labels.items()},
            created=str(item.get("Created", "")),
            size=int(item.get("Size") or 0),
            path=path,
            user=str(config.get("User") or ""),
            workdir=str(config.get("WorkingDir") or ""),
        )

    def sprawl_images(self) -> list[LocalImage]:
        """Local images that carry the sprawl.recipe label (what `image build` made)."""
        out = self._ok(
            ["image", "ls", "--quiet", "--no-trunc", "--filter", f"label={LABEL_RECIPE}"],
            what="image ls",
        )
        ids = sorted({fixed_id(line) for line in out.split()})
        return sorted(self.inspect(ids), key=lambda i: i.created, reverse=True)

    def import_tar(
        self,
        tar: bytes | Path,
        *,
        labels: Mapping[str, str],
        changes: Sequence[str] = (),
        tag: str | None = None,
    ) -> str:
        """`<engine> import --change 'LABEL k="v"' … TAR [TAG]` -> the fixed ID."""
        args = ["import"]
        for change in [*changes, *(_label_change(k, v) for k, v in labels.items())]:
            args += ["--change", change]
        if self.name == "podman":
            args.append("--quiet")  # else podman prints its copy progress before the ID
        args.append("-" if isinstance(tar, bytes) else str(tar))
        if tag:
            args.append(tag)
        out = self._ok(args, what="import", stdin=tar if isinstance(tar, bytes) else None)
        image_id = fixed_id(out.split()[-1]) if out.split() else ""
        if not IMAGE_ID.match(image_id):
            raise SprawlError(
                ErrorCode.ENGINE_REFUSED,
                subject=f"{self.name} import",
                detail=f"expected a sha256 image ID, got {out.strip()[-200:]!r}",
                recovery=f"check `{self.name} images`; the import may have half-succeeded",
            )
        return image_id

    def remove(self, image_id: str) -> None:
        """Remove an image by ID with every tag on it; a container using it stops that.

        Docker refuses `rmi ID` for an ID with two tags unless forced, and its force still
        refuses while a running container uses the image. Podman's force would remove
        those containers, so there the tags go by ID first (`podman untag ID`) and the
        removal is unforced.
        """
        if self.name == "podman":
            self._ok(["untag", image_id], what="untag")
            self._ok(["image", "rm", image_id], what="image rm")
        else:
            self._ok(["image", "rm", "--force", image_id], what="image rm")


def _label_change(key: str, value: str) -> str:
    # A Dockerfile LABEL value in double quotes takes JSON's \" and \\ escapes.
    return f"LABEL {key}={json.dumps(value, ensure_ascii=False)}"


def _looks_unreachable(err: str) -> bool:
    return daemon_refused(err) or socket_denied(err)


def _last(err: str, limit: int = 400) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-limit:] if lines else "(no message)"
