"""How coarse a filesystem's file timestamps are: the margin of the racy-clean rule (copy_stamps).

Linux stamps files on the local filesystems below with the kernel's coarse clock, which is
advanced once per tick: a stamp lags the real time by less than one tick, at most 10 ms (HZ is
100, 250, 300 or 1000; since 6.13 "multigrain" timestamps can be finer, never coarser). The
margin is twice that. The filesystem type comes from /proc/self/mountinfo, matched by the
device number ``stat`` reports, so bind mounts and overlay roots are found too.

Anything else -- FAT's 2 s stamps, NFS/SMB/FUSE whose stamps come from another clock, or a
platform without mountinfo (macOS, Windows, where ``st_ctime`` was long the creation time and
cannot vouch for a write) -- has no known margin: ``None``, and the sync compares bytes.
"""

from __future__ import annotations

import os

TICK_MARGIN_NS = 20_000_000
LOCAL_NS_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs"}
)
_MOUNTINFO = "/proc/self/mountinfo"
_types: dict[int, str | None] = {}


def _scan_mountinfo() -> None:
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        # no mountinfo (not Linux, /proc hidden): every margin stays unknown, so bytes are compared
        return
    for line in lines:
        # "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw" (proc(5)): the
        # optional fields end at " - ", after which comes the filesystem type.
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 3 or ":" not in fields[2]:
            continue
        major, _, minor = fields[2].partition(":")
        try:
            dev = os.makedev(int(major), int(minor))
        except ValueError:
            continue
        fstype = right.split(" ", 1)[0]
        _types.setdefault(dev, fstype)


def fs_type(dev: int) -> str | None:
    """The type of the mounted filesystem with device number ``dev`` (None: not known)."""
    if dev not in _types:
        _scan_mountinfo()
        _types.setdefault(dev, None)
    return _types[dev]


def granularity_ns(*devs: int) -> int | None:
    """The racy-clean margin for files on the devices ``devs``; None when any is not known."""
    for dev in devs:
        kind = fs_type(dev)
        if kind is None or kind not in LOCAL_NS_FILESYSTEMS:
            return None
    return TICK_MARGIN_NS
