"""The five guarantees and the one way to state them (design §1).

`Assurances` has five required fields with no defaults: adding an axis breaks
every arm until each answers it. No arm writes its own sentence; `statement()`
derives it from the axes and the phrases below.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Guarantee(StrEnum):
    FILESYSTEM = "filesystem"
    NETWORK = "network"
    PROCESS_TREE = "process_tree"
    USER = "user"
    RESOURCES = "resources"


class Kept(StrEnum):
    YES = "yes"
    NO = "no"


class Assurances(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    filesystem: Kept
    network: Kept
    process_tree: Kept
    user: Kept
    resources: Kept

    def kept(self, axis: Guarantee) -> bool:
        return bool(getattr(self, axis.value) is Kept.YES)

    def axes(self) -> dict[Guarantee, Kept]:
        return {axis: getattr(self, axis.value) for axis in Guarantee}

    @classmethod
    def of(cls, *kept: Guarantee) -> Assurances:
        return cls(**{a.value: (Kept.YES if a in kept else Kept.NO) for a in Guarantee})

    @classmethod
    def none(cls) -> Assurances:
        return cls.of()


# One phrase per axis: (kept wording, unkept wording).
PHRASES: dict[Guarantee, tuple[str, str]] = {
    Guarantee.FILESYSTEM: (
        "writes land only in a copy of the working directory; your tree is untouched",
        # copied_tree runs in a copy, but a write by your tree's absolute path reaches it.
        "writes can reach your working directory",
    ),
    Guarantee.NETWORK: (
        "no network connection out, not even to loopback",
        "network connections are possible",
    ),
    Guarantee.PROCESS_TREE: (
        "nothing the command starts outlives it",
        "processes the command starts may outlive it",
    ),
    Guarantee.USER: (
        "it runs as a principal distinct from yours",
        # True of every arm that does not keep the axis: the host arms and a non-root
        # caller's bwrap run as your uid; a rootful container's non-root uid (65534) is the
        # host's `nobody`, shared with other processes. The arm's note() says which.
        "it is not a principal of its own: on the host it runs as your uid or as a uid "
        "other processes share",
    ),
    Guarantee.RESOURCES: (
        "CPU, memory and process limits are enforced",
        "no CPU, memory or process limits are enforced",
    ),
}


def phrase(axis: Guarantee, kept: Kept) -> str:
    yes, no = PHRASES[axis]
    return yes if kept is Kept.YES else no


def statement(
    arm: str, assurances: Assurances, note: str | None = None, network: str | None = None
) -> str:
    """The sentence shown to people and agents, derived from the axes only. `network`
    replaces the unkept network phrase with what exactly was possible (an allow-list)."""
    parts = [
        network if axis is Guarantee.NETWORK and network and kept is Kept.NO else phrase(axis, kept)
        for axis, kept in assurances.axes().items()
    ]
    text = f"Runs under {arm}: " + "; ".join(parts) + "."
    if note:
        text += f" {note}"
    return text
