"""Filesystem escapes (axis: filesystem): writes by absolute path, through links, hard
links, FIFOs and device nodes planted in the source tree before the sync, and planted in
the copy by a first command for the host's resync or a second command.

The resync probes attack the orchestrator rather than the sandbox: the command replaces
a file of its copy with a link to a host file; the person then edits that file in the
source tree; the next sync must replace the link, never write through it (a host write
the command chose).
"""

from __future__ import annotations

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.bait import Bait
from tests.escapes.probe import Judge, Probe, exists, file_has, fill

F = Guarantee.FILESYSTEM


def _write(pid: str, target: str, judge_path: str | None = None) -> Probe:
    # The host judges: a sandbox's own /tmp taking the write is no escape.
    sh = f'echo "$id" > "{target}" && echo "NOT $id wrote {target} (judged by the host)" || echo "NOT $id"'
    return Probe(pid, "writes by absolute path", F, sh, judge=exists(judge_path or target))


def _through(pid: str, link: str, judged: Judge) -> Probe:
    sh = f'echo "$id" >> {link} && echo "NOT $id (judged by the host)" || echo "NOT $id"'
    return Probe(pid, "planted links and nodes", F, sh, judge=judged)


def _applied(template: str) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        return file_has(template, f"applied-{bait.tok[::-1]}")(bait, out)

    return seen


def link_out_applied(bait: Bait, out: str) -> str | None:
    import os

    path = os.path.join(bait.values["TREE"], "link-out-new")
    if os.path.islink(path):
        return f"apply put {path} -> {os.readlink(path)} into the tree"
    return None


APPLIED = 'echo "applied-$(echo @TOK@ | $b rev)"'


def applied_link_out(name: str) -> Judge:
    """A link apply put into the tree that resolves (now, by the kernel) out of it."""

    def seen(bait: Bait, out: str) -> str | None:
        import os

        path = os.path.join(bait.values["TREE"], name)
        if not os.path.islink(path):
            return None
        real, tree = os.path.realpath(path), os.path.realpath(bait.values["TREE"])
        if real == tree or real.startswith(tree + os.sep):
            return None
        return f"apply put {name} -> {os.readlink(path)} into the tree; it resolves to {real}"

    return seen


def mtime_changed(template: str) -> Judge:
    """The file's mtime was set back to 2001 (the plant made it now)."""

    def seen(bait: Bait, out: str) -> str | None:
        import os

        path = fill(template, bait.values)
        try:
            year = os.stat(path).st_mtime
        except OSError:
            return None
        return f"{path}'s mtime is {year:.0f} now" if year < 1_000_000_000 else None

    return seen


def mode_changed(template: str, mode: int) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        import os
        import stat

        path = fill(template, bait.values)
        try:
            now = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            return None
        return None if now == mode else f"{path} is mode {now:04o} now, was {mode:04o}"

    return seen


def parent_write(bait: Bait, out: str) -> str | None:
    """The copy's parent, wherever the copy was: a scratch copy, a persistent copy's slot
    in the state directory (beside its stamps record), or the tree itself."""
    import glob

    pattern = fill("@STATE@/copies/*/*/esc-parent-@TOK@", bait.values)
    for where in ("@SCRATCH@", "@TREE@/.."):
        seen = exists(f"{where}/esc-parent-@TOK@")(bait, out)
        if seen:
            return seen
    found = glob.glob(pattern)
    return f"{found[0]} was created beside the copy" if found else None


def probes() -> list[Probe]:
    return [
        _write("write-source-tree-abs", "@TREE@/esc-write-src-@TOK@"),
        _write("write-home", "@HOMED@/esc-write-home"),
        _write("write-home-direct", "@HOME@/.esc-@TOK@-direct"),
        _write("write-tmp", "@TMPD@/esc-write-tmp"),
        _write("write-tmp-worldwritable", "@WWD@/esc-write-ww"),
        _write("write-tmp-direct", "/tmp/.esc-@TOK@-direct"),
        _write("write-var-tmp", "@VARTMPD@/esc-write-vartmp"),
        _write("write-dev-shm", "@SHMD@/esc-write-shm"),
        _write("write-run", "@RUND@/esc-write-run"),
        _write("write-beside-tree", "@OUTSIDE@/esc-write-outside"),
        _write("write-sibling-copy", "@VICTIM@/esc-write-victim"),
        _write("write-state-dir", "@STATE@/esc-write-state"),
        _write("write-other-workdir-copy", "@OTHERCOPY@/esc-write-other-copy"),
        Probe(
            "write-ledger",
            "writes by absolute path",
            F,
            # The ledger records each command line, this one included: the mark written
            # is computed, so only a write by the command can put it there.
            'echo "forged-$(echo @TOK@ | $b rev)" >> @LEDGER@ && echo "NOT $id (judged by the host)" || echo "NOT $id"',
            judge=lambda b, o: file_has("@LEDGER@", f"forged-{b.tok[::-1]}")(b, o),
        ),
        Probe(
            "write-copy-parent",
            "writes by absolute path",
            F,
            'echo "$id" > ../esc-parent-@TOK@ && echo "NOT $id (judged by the host)" || echo "NOT $id"',
            judge=parent_write,
        ),
        Probe(
            "write-host-binary",
            "writes by absolute path",
            F,
            # opened for appending, nothing written: proves write access, changes nothing; the
            # same device:inode as the host's file, or it is a sandbox's own copy
            'if ( : >> @BINPATH@ ) 2>/dev/null && [ "$($b stat -L -c %d:%i @BINPATH@)" = "@BINID@" ]; then echo "ESC $id the host binary @BINPATH@ opened for writing"; else echo "NOT $id"; fi',
        ),
        Probe(
            "write-etc-passwd",
            "writes by absolute path",
            F,
            'if ( : >> /etc/passwd ) 2>/dev/null && [ "$($b stat -L -c %d:%i /etc/passwd)" = "@PWID@" ]; then echo "ESC $id the host /etc/passwd opened for writing"; else echo "NOT $id"; fi',
        ),
        _through("link-abs-from-source", "link-abs", file_has("@TMPD@/target-abs", "link-abs")),
        _through("link-rel-from-source", "link-rel", file_has("@OUTSIDE@/target-rel", "link-rel")),
        Probe(
            "link-dir-from-source",
            "planted links and nodes",
            F,
            'echo "$id" > link-dir/esc && echo "NOT $id (judged by the host)" || echo "NOT $id"',
            judge=exists("@LINKD@/esc"),
        ),
        _through("hardlink-from-source", "hard", file_has("@TMPD@/target-hard", "hardlink")),
        _through("link-to-source-file", "link-src", file_has("@TREE@/a.txt", "link-to-source")),
        Probe(
            "fifo-from-source",
            "planted links and nodes",
            F,
            'echo "$id" | $b timeout 3 $b dd of=fifo 2>/dev/null; echo "NOT $id (judged by the host)"',
            judge=lambda b, o: (
                f"the host's FIFO reader got {b.fifo_got[:1]}" if b.fifo_got else None
            ),
        ),
        Probe(
            "device-node-from-source",
            "planted links and nodes",
            F,
            'if $b dd if=@DEVNODE@ of=/dev/null bs=512 count=1 2>/dev/null; then echo "ESC $id read the host /dev/kmsg through a synced device node"; else echo "NOT $id"; fi',
        ),
        # planted by a first command, for the host's resync or a second command
        Probe(
            "resync-through-symlink",
            "planted by a first command",
            F,
            'echo "NOT $id (judged by the host)"',
            plant="rm -f a.txt; $b ln -s @TMPD@/resync-target a.txt",
            judge=file_has("@TMPD@/resync-target", "RESYNC-@TOK@"),
        ),
        Probe(
            "resync-through-hardlink",
            "planted by a first command",
            F,
            'echo "NOT $id (judged by the host)"',
            plant="rm -f b.txt; $b ln @TMPD@/resync-hard b.txt",
            judge=file_has("@TMPD@/resync-hard", "RESYNC-@TOK@"),
        ),
        Probe(
            "resync-through-dir-symlink",
            "planted by a first command",
            F,
            'echo "NOT $id (judged by the host)"',
            plant="rm -rf sub; $b ln -s @RESYNCD@ sub",
            judge=exists("@RESYNCD@/c.txt"),
        ),
        Probe(
            "second-command-through-symlink",
            "planted by a first command",
            F,
            'echo "$id" >> lnk2; echo "NOT $id (judged by the host)"',
            plant="$b ln -s @TMPD@/second-target lnk2",
            judge=file_has("@TMPD@/second-target", "second-command"),
        ),
        Probe(
            "second-command-into-source",
            "planted by a first command",
            F,
            'echo "$id" >> via-src; echo "NOT $id (judged by the host)"',
            plant="$b ln -s @TREE@/keep.txt via-src",
            judge=file_has("@TREE@/keep.txt", "second-command-into-source"),
        ),
        # The copy must be exact again for the next command: same size, mtime put back
        # (ctime and inode can't be), the racy-clean resync must still see the change.
        # No axis claims a command's view of the next one's copy: reported as open.
        Probe(
            "poison-survives-resync",
            "planted by a first command",
            None,
            'if $b grep -q POISONED poison.txt; then echo "ESC $id the next command saw the first one\'s file"; else echo "NOT $id resynced"; fi',
            plant='$b touch -r poison.txt .esc-ref; printf "POISONED\\n" > poison.txt; $b touch -r .esc-ref poison.txt; rm -f .esc-ref',
        ),
        # `apply` (the person keeps a command's changes) must never write outside the tree:
        # the command turns the tree's links into a file and a directory, and adds a link
        # out; only arms with a copy have an apply (@APPLY@), the runner applies everything.
        Probe(
            "apply-file-over-tree-link",
            "apply of a command's changes",
            F,
            f'rm -f link-abs && {APPLIED} > link-abs; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=_applied("@TMPD@/target-abs"),
        ),
        Probe(
            "apply-dir-over-tree-dir-link",
            "apply of a command's changes",
            F,
            f'rm -rf link-dir && $b mkdir link-dir && {APPLIED} > link-dir/applied; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=_applied("@LINKD@/applied"),
        ),
        Probe(
            "apply-new-link-out-of-tree",
            "apply of a command's changes",
            F,
            '$b ln -s @TMPD@/target-abs link-out-new; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=link_out_applied,
        ),
        # A link that looks inside while a name on its way is a directory or absent, and
        # leads out once that name is a link to `.` which the same apply writes (attack).
        Probe(
            "apply-link-through-new-link",
            "apply of a command's changes",
            F,
            '$b ln -s . apply-up && $b ln -s apply-up/../outside-@TOK@/target-rel apply-via; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=applied_link_out("apply-via"),
        ),
        Probe(
            "apply-link-through-dir-made-link",
            "apply of a command's changes",
            F,
            'rmdir apply-d && $b ln -s . apply-d && $b ln -s apply-d/../outside-@TOK@/target-rel apply-via2; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=applied_link_out("apply-via2"),
        ),
        # The tree's file shares its inode with one outside (a hard link: pnpm's store, cp -al);
        # apply of a mode change must not chmod that inode.
        Probe(
            "apply-mode-through-hardlink",
            "apply of a command's changes",
            F,
            'chmod 0777 hard-mode; echo "NOT $id (judged after apply)"; : @APPLY@',
            judge=mode_changed("@TMPD@/mode-target", 0o644),
        ),
        Probe(
            "second-command-mknod",
            "planted by a first command",
            F,
            'if $b dd if=esc-dev of=/dev/null bs=512 count=1 2>/dev/null; then echo "ESC $id read /dev/kmsg through a node a first command made"; else echo "NOT $id"; fi',
            plant="$b mknod esc-dev c @MAJMIN@",
        ),
        # Without a mount namespace (the landlock mechanism) the host's files are on the same
        # filesystem as the copy: a hard link made from inside would write through to one.
        Probe(
            "hardlink-host-file",
            "writes by absolute path",
            F,
            '$b ln @OUTSIDE@/target-hl ./esc-hl-@TOK@ 2>&1 && echo "$id" >> ./esc-hl-@TOK@; echo "NOT $id (judged by the host)"',
            judge=file_has("@OUTSIDE@/target-hl", "hardlink-host-file"),
        ),
        # Landlock governs no chmod, chown, utime or xattr: only the uid stops these.
        Probe(
            "chmod-host-file",
            "writes by absolute path",
            F,
            '$b chmod 0600 @OUTSIDE@/chmod-target 2>&1; echo "NOT $id (judged by the host)"',
            judge=mode_changed("@OUTSIDE@/chmod-target", 0o644),
        ),
        Probe(
            "touch-host-file",
            "writes by absolute path",
            F,
            '$b touch -d "2001-01-01 00:00" @OUTSIDE@/chmod-target 2>&1; echo "NOT $id (judged by the host)"',
            judge=mtime_changed("@OUTSIDE@/chmod-target"),
        ),
    ]


def edit_source(tree_values: dict[str, str]) -> None:
    """The person edits their tree between the two commands: in place, as editors do, so
    on `where: host` (no copy) the write follows whatever the first command planted."""
    import contextlib
    import os

    tree = tree_values["TREE"]
    marker = f"RESYNC-{tree_values['TOK']}\n"
    for rel in ("a.txt", "b.txt", "sub/c.txt"):
        path = os.path.join(tree, rel)
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(marker)
