"""One container engine's offer: its admission reduced to what choosing an arm needs.

A leaf of its own: `offerings` (the machine's value) holds these, and `container.offer`
(which makes them from admissions) is imported by `offerings` while it samples -- the type
living in `offerings` made the two import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from sprawl_orch.core.arms import Missing


@dataclass(frozen=True)
class EngineOffer:
    """One container engine's admission, reduced to what choosing an arm needs."""

    engine: str
    admitted: bool
    detail: str  # admitted: facts and notes; refused: the engine's own words
    recovery: str = ""
    # Set when the engine itself works but the pinned image is not local.
    image_missing: Missing | None = None
    # Set when the config asks what this machine can't give (arms.config_invalid).
    config_fault: Missing | None = None
    image: str | None = None
    uids_namespaced: bool = False
    notes: tuple[str, ...] = ()
    limits_enforced: bool = True
