"""Root filesystems made on this host, and their tars.

- busybox: the host's static busybox, its applet links, the recipe's dirs and files. Its tar
  is deterministic: same binary and recipe -> same bytes.
- debian: `debootstrap --variant=minbase SUITE DIR MIRROR`, from Debian's mirror.
No step talks to a container registry.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import shutil
import struct
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.removal import delete_quietly
from sprawl_orch.images.recipe import BusyboxRootfs, DebianRootfs

OnLine = Callable[[str], None]

_PT_INTERP = 3


def _inside(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _needs_loader(binary: Path) -> str | None:
    """The ELF program interpreter (e.g. /lib64/ld-linux-x86-64.so.2), None when static."""
    with binary.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return f"{binary} is not an ELF executable"
        little = head[5] == 1
        end = "<" if little else ">"
        if head[4] == 2:  # 64-bit
            phoff, phentsize, phnum = (
                struct.unpack(end + "Q", head[32:40])[0],
                *struct.unpack(end + "HH", head[54:58]),
            )
        else:
            phoff, phentsize, phnum = (
                struct.unpack(end + "I", head[28:32])[0],
                *struct.unpack(end + "HH", head[42:46]),
            )
        for index in range(phnum):
            f.seek(phoff + index * phentsize)
            if struct.unpack(end + "I", f.read(4))[0] == _PT_INTERP:
                return f"{binary} is dynamically linked (it needs a program interpreter)"
    return None


def busybox_info(binary: Path) -> tuple[str, str]:
    """(banner, sha256) of the host busybox, e.g. ("BusyBox v1.35.0 (Debian …)", "ab12…")."""
    if not binary.is_file():
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject=str(binary),
            detail=f"{binary} does not exist; the busybox recipe copies the host's static busybox",
            recovery="install busybox-static (apt-get install busybox-static, or "
            "bash .ci/setup-engines)",
        )
    problem = _needs_loader(binary)
    if problem:
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=str(binary),
            detail=f"{problem}; the image has no libc, so only a static busybox runs in it",
            recovery="install busybox-static (its /usr/bin/busybox is static) or point "
            "[rootfs] busybox in the recipe at a static build",
        )
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    banner = subprocess.run(
        [str(binary)], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    name = banner[0].removesuffix(" multi-call binary.") if banner else "busybox"
    return name, digest


def applets(binary: Path) -> list[str]:
    """The applet names `busybox --list` prints, without `busybox` itself."""
    out = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=f"{binary} --list",
            detail=f"exit {out.returncode}: {out.stderr.strip()[-300:]}",
            recovery="install busybox-static (a busybox built with applet listing)",
        )
    # `--list` names busybox itself; linking it onto the real binary would replace the
    # binary with a self-referencing symlink.
    return sorted({a for a in out.stdout.split() if a and a != "busybox" and "/" not in a})


def make_busybox(spec: BusyboxRootfs, root: Path) -> None:
    """Fill the empty directory `root` with the busybox rootfs. Modes are set explicitly so
    the umask can't change the tar."""
    busybox_info(spec.busybox)
    names = applets(spec.busybox)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    bindir = _inside(root, spec.applet_dir)
    parents = {str(Path(p).parent) for p in spec.files}
    for directory in sorted({spec.applet_dir, *spec.dirs, *parents}):
        target = _inside(root, directory)
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, int(spec.dirs.get(directory, "0755"), 8))
    shutil.copyfile(spec.busybox, bindir / "busybox")
    os.chmod(bindir / "busybox", 0o755)
    for name in names:
        (bindir / name).symlink_to("busybox")
    for path, content in sorted(spec.files.items()):
        target = _inside(root, path)
        target.write_text(content.lstrip("\n"), encoding="utf-8")
        os.chmod(target, 0o644)


def tar_tree(root: Path, mtime: int = 0) -> bytes:
    """A deterministic tar of `root`: sorted names, owner 0:0, no owner names, fixed mtime."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        paths = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
        for name in paths:
            info = tar.gettarinfo(str(root / name), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isfile():
                with (root / name).open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def make_debian(spec: DebianRootfs, root: Path, suite: str, mirror: str, on_line: OnLine) -> None:
    """`debootstrap --variant=VARIANT [--include=…] SUITE ROOT MIRROR`, then the recipe's
    dirs and removals. Each line debootstrap prints goes to `on_line` (progress)."""
    if shutil.which("debootstrap") is None:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject="debootstrap",
            detail="debootstrap is not on PATH; the debian recipe is made with it",
            recovery="apt-get install debootstrap (or bash .ci/setup-engines)",
        )
    if os.geteuid() != 0:
        raise SprawlError(
            ErrorCode.TOOL_UNAVAILABLE,
            subject="debootstrap",
            detail=f"running as uid {os.geteuid()}; debootstrap chroots and makes device nodes",
            recovery="run `sprawl-orch image build debian` as root",
        )
    argv = ["debootstrap", f"--variant={spec.variant}"]
    if spec.include:
        argv.append(f"--include={','.join(spec.include)}")
    argv += [suite, str(root), mirror]
    tail: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                on_line(line)
                tail = [*tail[-9:], line]
    if proc.returncode != 0:
        log = root / "debootstrap" / "debootstrap.log"
        extra = log.read_text(errors="replace").splitlines()[-5:] if log.is_file() else []
        raise SprawlError(
            ErrorCode.IMAGE_INVALID,
            subject=" ".join(argv),
            detail=f"debootstrap exited {proc.returncode}: " + " | ".join(tail[-4:] + extra),
            recovery=f"check that {mirror} is reachable and serves suite {suite!r} "
            "(--mirror URL, --suite NAME)",
        )
    for pattern in spec.remove:
        for found in glob.glob(str(_inside(root, pattern))):
            Path(found).unlink(missing_ok=True)
    for directory, mode in spec.dirs.items():
        target = _inside(root, directory)
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, int(mode, 8))


def tar_file(root: Path, out: Path) -> None:
    """Tar a large tree with GNU tar: numeric owners, xattrs (file capabilities), sorted."""
    argv = [
        "tar",
        "--numeric-owner",
        "--xattrs",
        "--xattrs-include=*",
        "--sort=name",
        "-C",
        str(root),
        "-cf",
        str(out),
        ".",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SprawlError(
            ErrorCode.STORAGE_FATAL,
            subject=str(out),
            detail=f"tar exited {done.returncode}: {done.stderr.strip()[-400:]}",
            recovery=f"free space where {out.parent} lives, or set TMPDIR to a larger disk",
        )


def _mounts_below(root: Path) -> list[Path]:
    base = os.path.realpath(root)
    found: list[Path] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash as octal (\040 …).
            point = point.encode().decode("unicode_escape")
            if point == base or point.startswith(base + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_tree(root: Path) -> None:
    """Remove a rootfs. A debootstrap killed half-way can leave /proc or /sys mounted
    inside it; rmtree would then walk into the host's /proc, so unmount those first."""
    if not root.exists():
        return
    for point in _mounts_below(root):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    delete_quietly(root)
