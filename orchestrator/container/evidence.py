"""Admission evidence kept on disk, so admission runs once per engine identity, not per call.

A passed admission (design §3.1: facts, local image, probe container) is written to
`<state>/admission/<key>.json`. The file name is a hash of what the admission was asked
(engine, endpoint, `[sandbox.container]`, the host's limits, sprawl-orch's version and a
stamp of the container arm's own sources, so an edited checkout re-admits); the file holds
the engine's *identity* at that moment. A later call reads the identity again -- cheaply,
see `ContainerEngine.identity` -- and reuses the admission only when it is equal:

- docker: the daemon's ID and every fact admission reads (`GET /info` + `GET /version`,
  ~10 ms over the socket; answered from memory while the same dockerd process with the
  same config file answers, engines/docker_daemon.py): a daemon restarted with other flags
  (userns-remap, another default runtime, cgroup driver) has other facts;
- podman (no service, `podman info` costs ~200 ms): stamps of the podman binary (its
  version), of each OCI runtime binary, of every containers.conf / storage.conf podman
  reads, and the storage root's device and inode (a reset store is a new directory);
- both: the kernel's boot ID (a reboot may change the cgroup layout the probe proved).

Refusals are never kept: a person who fixes the engine must not wait for anything. A real
command the engine then fails (create, inspect-verify or start) drops the file, and the
arm admits again once (`ContainerArm.start`). The verification before start still runs on
every command: reused evidence skips the probe container, nothing else.

Anyone who can write the state directory could forge a file here; it is the person's own
directory (mode 0700), which already holds their ledger and kept output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from sprawl_orch.config import ContainerConfig
from sprawl_orch.container.argv import HostLimits
from sprawl_orch.core.dist_version import installed_version
from sprawl_orch.core.private import private_dirs
from sprawl_orch.engines.engine import EngineFacts, stamp

FORMAT = 1
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# The arm's own folder and the engine interface it drives (engines/, moved out of container/ by
# the renovation of issue 28): admission's checks live in both.
_SOURCES = (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "engines")


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        # no boot id (not Linux): evidence then never outlives this stamp's other facts
        return ""


def version() -> str:
    """sprawl-orch's version, and a stamp of the container arm's sources: admission's
    checks are code, and an edited checkout keeps its version number."""
    number = installed_version()
    digest = hashlib.sha256()
    for source in sorted(p for folder in _SOURCES for p in folder.glob("*.py")):
        digest.update(f"{source.name}:{stamp(source)}".encode())
    return f"{number}+{digest.hexdigest()[:16]}"


def _plain(value: dict[str, Any]) -> Any:
    """As it reads back from JSON (tuples become lists), so it compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=list))


def _tuples(value: Any) -> Any:
    """JSON's lists back into the tuples they were (nested: uid maps, runtime paths)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _facts_of(data: dict[str, Any]) -> EngineFacts:
    tuples = {f.name for f in dataclasses.fields(EngineFacts) if "tuple" in str(f.type)}
    fields: dict[str, Any] = {k: _tuples(v) if k in tuples else v for k, v in data.items()}
    return EngineFacts(**fields)


class Evidence:
    """The admissions kept under one state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reused = 0  # admissions answered from disk by this process (tests, benchmarks)

    def key(self, engine: str, endpoint: str, config: ContainerConfig, host: HostLimits) -> str:
        asked = {
            "format": FORMAT,
            "engine": engine,
            "endpoint": endpoint,
            "config": config.model_dump(mode="json"),
            "host": dataclasses.asdict(host),
            "version": version(),
        }
        text = json.dumps(asked, sort_keys=True, default=str)
        return f"{engine}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def load(self, key: str, identity: dict[str, Any]) -> dict[str, Any] | None:
        """The kept admission's fields if the engine's identity is still the one it was
        proved on, else None (and the stale file is dropped)."""
        try:
            kept = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            # no kept evidence, or a torn one: probe again
            return None
        if not isinstance(kept, dict) or kept.get("identity") != _plain(identity):
            self.drop(key)
            return None
        admission = kept.get("admission")
        if not isinstance(admission, dict):
            return None
        try:
            admission["facts"] = _facts_of(admission["facts"])
        except (KeyError, TypeError):
            return None
        admission["notes"] = tuple(admission.get("notes") or ())
        admission["proved_at"] = kept.get("proved_at")
        self.reused += 1
        return admission

    def save(self, key: str, identity: dict[str, Any], admission: dict[str, Any]) -> None:
        """Keep it (atomically: a reader sees the old file or the new one). A state
        directory that cannot be written only costs the next call a probe."""
        body = {
            "identity": identity,
            "admission": admission,
            "proved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # the cache is an optimisation: unwritable means the next process probes again
        with contextlib.suppress(OSError):
            private_dirs(self.root)
            tmp = self.root / f".{key}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(body, out, default=list)
            os.replace(tmp, self.path(key))

    def drop(self, key: str) -> None:
        # gone already, or unwritable: the stale evidence fails its identity check anyway
        with contextlib.suppress(OSError):
            self.path(key).unlink()
