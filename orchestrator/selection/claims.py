"""The claims table: what each arm (and each form of it) claims, from the arms' own assurances.

The README's table is this text (tests/unit/test_readme_claims.py fails when they drift and
rewrites it with `--write`), not a doctor run on one machine: an outsider found the old,
hand-copied table stale (podman's user axis was **yes** by then; issue 27, item 18). What a
machine really offers is `sprawl-orch doctor`'s; this is what each arm promises where it runs.
"""

from __future__ import annotations

from sprawl_orch.core.arms import (
    ASSURANCES,
    ArmName,
    container_assurances,
    landlock_assurances,
    linux_namespaces_assurances,
)
from sprawl_orch.core.assurances import Assurances, Guarantee

# (arm, the form it takes, its assurances), in the order `auto` tries them.
ROWS: tuple[tuple[str, str, Assurances], ...] = (
    (
        "container",
        "uids of its own: podman --userns=auto, a rootless engine, docker with userns-remap",
        container_assurances(uids_namespaced=True),
    ),
    (
        "container",
        "rootful, no uid namespacing (the command's uid is a host uid)",
        container_assurances(uids_namespaced=False),
    ),
    (
        "container",
        "rootless without delegated cgroup controllers (limits not enforced)",
        container_assurances(uids_namespaced=True, limits_enforced=False),
    ),
    (
        "linux_namespaces",
        "bwrap, root caller (the command runs as a uid of sprawl-orch's own)",
        linux_namespaces_assurances(own_principal=True),
    ),
    (
        "linux_namespaces",
        "bwrap, non-root caller (the command is your uid)",
        linux_namespaces_assurances(own_principal=False),
    ),
    (
        "landlock",
        "Landlock ABI ≥ 4 + seccomp, root caller (no user namespace needed)",
        landlock_assurances(abi=4, own_principal=True),
    ),
    (
        "landlock",
        "Landlock ABI 4-5 + seccomp, non-root caller (no signal scoping)",
        landlock_assurances(abi=4, own_principal=False),
    ),
    (
        "landlock",
        "Landlock ABI ≥ 6 + seccomp, non-root caller",
        landlock_assurances(abi=6, own_principal=False),
    ),
    ("macos_seatbelt", "sandbox-exec profile", ASSURANCES[ArmName.MACOS_SEATBELT]),
    ("windows_job", "Job Object + AppContainer", ASSURANCES[ArmName.WINDOWS_JOB]),
    (
        "python",
        "CPython 3.12 as a wasip1 guest under wasmtime (Python code only; never `auto`)",
        ASSURANCES[ArmName.PYTHON],
    ),
    ("copied_tree", "a synced copy, no namespace", ASSURANCES[ArmName.COPIED_TREE]),
    ("host", 'where = "host": in place, asked for by name', ASSURANCES[ArmName.HOST]),
)


def claims_table() -> str:
    """The table as Markdown: one row per arm form, the five axes yes/no."""
    axes = list(Guarantee)
    head = "| arm | form | " + " | ".join(a.value for a in axes) + " |"
    rule = "|---|---|" + "---|" * len(axes)
    lines = [head, rule]
    for arm, form, assurances in ROWS:
        held = assurances.axes()
        cells = " | ".join(held[a].value for a in axes)
        lines.append(f"| `{arm}` | {form} | {cells} |")
    return "\n".join(lines) + "\n"
