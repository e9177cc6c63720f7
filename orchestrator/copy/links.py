"""Which source links the synced copy keeps as links (design §5).

A relative symbolic link whose every resolution step stays inside the tree is copied as the
same link: in the copy it resolves to the copy's own entry, exactly as it does in the source
(``.venv/lib64 -> lib`` is one directory, not two). Anything else -- an absolute target, or a
step that climbs out of the tree with ``..``, directly or through another link -- keeps the
content rule: the source side follows it and the copy gets what it points at, never a door
back into the person's tree.

The resolution is done here, component by component, with ``lstat`` on the source: each link
met on the way is expanded the way the kernel would (its target is resolved relative to the
directory holding it), and must itself be relative and stay inside. A link chain that loops
(``a -> b``, ``b -> a``) or is longer than the kernel's 40-link budget fails the same way in
the copy as in the source, so it stays a link. Once a component is missing, the rest of the
target is checked by its text only: the link dangles in both trees, and must not be able to
climb out of the copy should a command later create the missing part.
"""

from __future__ import annotations

import os
import stat

from sprawl_orch.core import fs_clock

MAX_LINKS = 40  # Linux's MAXSYMLINKS since 4.2; an endless chain stops here as in the kernel


def _parts(target: str) -> list[str]:
    return [p for p in target.split(os.sep) if p not in ("", ".")]


def stays_inside(root: str, where: tuple[str, ...], target: str) -> bool:
    """Whether link ``target``, held by directory ``root/where...``, resolves inside ``root``
    through every step (see the module docstring). ``where`` must have no links in it."""
    if os.path.isabs(target):
        return False
    stack = list(where)
    pending = list(reversed(_parts(target)))
    expanded = 0
    missing = False
    while pending:
        part = pending.pop()
        if part == "..":
            if not stack:
                return False
            stack.pop()
            continue
        stack.append(part)
        if missing:
            continue
        try:
            st = os.lstat(os.path.join(root, *stack))
        except OSError:
            missing = True  # ENOENT, ENOTDIR, EACCES: it dangles; check the rest by text
            continue
        if not stat.S_ISLNK(st.st_mode):
            continue
        expanded += 1
        if expanded > MAX_LINKS:
            return True  # ELOOP in the source and, identically, in the copy
        try:
            inner = os.readlink(os.path.join(root, *stack))
        except OSError:
            return False
        if os.path.isabs(inner):
            return False
        stack.pop()
        pending.extend(reversed(_parts(inner)))
    return True


# The kernel's view of processes and devices, not files of the tree: a tree's link
# `env -> /proc/self/environ` copied sprawl-orch's own environment (every credential the
# person's shell holds) into the copy, where the sandboxed command read it -- a command whose
# environment is the floor plus declared names (tests/escapes/test_shaping.py).
KERNEL_FILESYSTEMS = frozenset(
    {"proc", "sysfs", "debugfs", "tracefs", "securityfs", "configfs", "efivarfs", "bpf"}
    | {"cgroup", "cgroup2", "pstore", "fusectl", "binfmt_misc", "mqueue"}
    # a namespace handle (docker's /run/.../netns/default): read() is EINVAL, and a tree's
    # link to /run/sprawl-orch made every command fail with E_STORAGE_FATAL
    | {"nsfs", "devpts", "autofs"}
)
KERNEL_ROOTS: tuple[str, ...] = ("/proc", "/sys")


def kernel_state(path: str, st: os.stat_result) -> bool:
    """Whether followed ``path`` (stat ``st``) leads into /proc, /sys or another kernel
    filesystem: its content is some process's or the kernel's state, the sync's own included,
    never something to copy. Such a link is left out like a dangling one."""
    if fs_clock.fs_type(st.st_dev) in KERNEL_FILESYSTEMS:
        return True
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r + "/") for r in KERNEL_ROOTS)
