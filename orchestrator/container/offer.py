"""Admissions reduced to `EngineOffer`s, the part of `Offerings` choosing an arm needs."""

from __future__ import annotations

from sprawl_orch.config import Config
from sprawl_orch.container.admission import admit_each, hand_over
from sprawl_orch.container.admitted import Admission
from sprawl_orch.container.evidence import Evidence
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.runs.launch import Watcher


def offer_of(admission: Admission) -> EngineOffer:
    missing = admission.missing
    image_missing = missing if missing is not None and missing.kind == "image_not_local" else None
    fault = missing if missing is not None and missing.kind == "config_invalid" else None
    return EngineOffer(
        engine=admission.engine,
        admitted=admission.admitted,
        detail=admission.summary() if admission.admitted else admission.reason,
        recovery=admission.recovery,
        image_missing=image_missing,
        config_fault=fault,
        image=admission.image,
        uids_namespaced=admission.uids_namespaced,
        limits_enforced=admission.limits_enforced,
        notes=admission.notes,
    )


def offer_engines(
    config: Config,
    *,
    every: bool = False,
    evidence: Evidence | None = None,
    watcher: Watcher | None = None,
) -> tuple[EngineOffer, ...]:
    """`engine = "auto"`: docker, then podman, stopping at the first admitted one (each
    admission runs a probe container, unless `evidence` still holds) unless `every`
    (doctor). A named engine: only it."""
    found = admit_each(
        config.sandbox.container, first_only=not every, evidence=evidence, watcher=watcher
    )
    for engine, admission in found:
        if admission.admitted:
            hand_over(engine)  # the arm made from this offer drives the same client
    return tuple(offer_of(admission) for _, admission in found)
