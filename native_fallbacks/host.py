"""`where: host`: the command runs in place, in the working directory itself, with no
confinement at all -- not an arm of the sandbox, all five axes NO (design §1, §5).

It runs as the copied tree's host process does (yielding, its own process group, the
guardian's lifeline), only without the copy: the exec tool gives it the working directory
as the cwd. A module of its own so that copied_tree.py holds only the copied tree.
"""

from __future__ import annotations

from sprawl_orch.core.arms import ArmName
from sprawl_orch.native_fallbacks.copied_tree import CopiedTreeArm


class HostArm(CopiedTreeArm):
    """`where: host` — not an arm of the sandbox: runs in place, all five axes NO."""

    name = ArmName.HOST

    def note(self) -> str | None:
        return None
