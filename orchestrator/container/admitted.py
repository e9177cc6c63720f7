"""Admission: what an engine's admission found (design §3.1) -- the facts, image, runtime,
user namespace and limits of an admitted engine, or the refusal with its recovery and what an
arm misses -- and which of its fields are kept on disk (container/evidence.py). admission.py
does the admitting.
"""

from __future__ import annotations

from dataclasses import dataclass

from sprawl_orch.container.gvisor import KERNEL_NOTE
from sprawl_orch.container.userns import Userns
from sprawl_orch.core import arms
from sprawl_orch.core.arms import Missing
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.engines.engine import EngineFacts


@dataclass(frozen=True)
class Admission:
    engine: str
    admitted: bool
    # admitted
    facts: EngineFacts | None = None
    image: str | None = None
    runtime: str | None = None  # passed as --runtime; None = the engine's default
    runtime_used: str | None = None  # what inspect reports the containers ran under
    gvisor: bool = False  # runsc: the command runs on gVisor's kernel
    uids_namespaced: bool = False
    userns_why: str = ""
    notes: tuple[str, ...] = ()
    userns: Userns | None = None  # the user namespace every container is put in
    limits_enforced: bool = True  # False: the probe saw the engine drop the limits
    limits_why: str = ""
    seccomp: str | None = None  # the profile file every container is created with
    # refused
    code: ErrorCode | None = None
    reason: str = ""
    recovery: str = ""
    missing: Missing | None = None
    # When the kept evidence this admission was read from was proved (None: probed now).
    proved_at: str | None = None

    def summary(self) -> str:
        if not self.admitted:
            return f"{self.engine}: refused — {self.reason}"
        assert self.facts is not None
        user = (
            f"user namespace: {self.userns_why}"
            if self.uids_namespaced
            else f"no user namespace: {self.userns_why}"
        )
        if not self.limits_enforced:
            user += f"; no resource limits: {self.limits_why}"
        runs = f"runs under {self.runtime_used}"
        if self.gvisor:
            runs += f" ({KERNEL_NOTE[:1].lower()}{KERNEL_NOTE[1:]})"
        return f"{self.facts.summary()}; {runs}; {user}" + (
            "; " + "; ".join(self.notes) if self.notes else ""
        )

    def error(self) -> SprawlError:
        return SprawlError(
            self.code or ErrorCode.TOOL_UNAVAILABLE,
            f"container engine {self.engine}",
            self.reason,
            self.recovery,
        )

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"engine": self.engine, "admitted": self.admitted}
        if self.admitted and self.facts is not None:
            out |= {
                "server_version": self.facts.server_version,
                "cgroup_version": self.facts.cgroup_version,
                "cgroup_driver": self.facts.cgroup_driver,
                "runtime": self.runtime_used,
                "kernel": "gvisor" if self.gvisor else "host",
                "image": self.image,
                "uids_namespaced": self.uids_namespaced,
                "userns_why": self.userns_why,
                "userns": self.userns.as_dict() if self.userns else None,
                "limits_enforced": self.limits_enforced,
                "limits_why": self.limits_why,
                "seccomp": self.seccomp,
                "notes": list(self.notes),
                "proved_at": self.proved_at,
            }
        else:
            out |= {
                "code": self.code.value if self.code else None,
                "reason": self.reason,
                "recovery": self.recovery,
            }
        return out


def refused(
    engine: str, code: ErrorCode, reason: str, recovery: str, missing: Missing | None = None
) -> Admission:
    return Admission(
        engine,
        False,
        code=code,
        reason=reason,
        recovery=recovery,
        missing=missing or arms.container_runtime(f"{engine}: {reason}", f"{engine}: {recovery}"),
    )


# The fields of an admitted Admission that are kept on disk (container/evidence.py).
KEPT = (
    "engine",
    "admitted",
    "facts",
    "image",
    "runtime",
    "runtime_used",
    "gvisor",
    "uids_namespaced",
    "userns_why",
    "notes",
    "userns",
    "limits_enforced",
    "limits_why",
    "seccomp",
)
