"""Exhaustion (axis: resources) and privilege probes (the container-specific class).

Exhaustion runs in its own command (`exhaust`): past a limit the kernel may kill the whole
command, and a probe that printed `TRY` but neither `ESC` nor `NOT` was killed -- blocked.
Each goes past the arm's limit by 2x: 2 * LIMIT_BYTES of memory, of tmpfs, of /dev/shm,
2 * LIMIT_PIDS processes. Disk in the copy is claimed by no axis (the resources phrase
names CPU, memory and processes): it is reported, never fails a claim.

Privilege probes never change the host even where they succeed (host control, copied
tree as root): sysctl and sysfs writes write back the value just read, a mount goes on a
directory of the copy and comes off again, the cgroup probe moves only a short-lived
child, kernel modules are judged by the capability (this kernel may have no loader).
"""

from __future__ import annotations

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.probe import Probe

F, U, R = Guarantee.FILESYSTEM, Guarantee.USER, Guarantee.RESOURCES
LIMIT_BYTES = 64 * 1024 * 1024
LIMIT_PIDS = 64
PRIV = "privileges"


def _fill(pid: str, where: str) -> Probe:
    mb = 2 * LIMIT_BYTES // (1024 * 1024)
    sh = f"""f="{where}/esc-fill-@TOK@"
if $b dd if=/dev/zero of="$f" bs=1M count={mb} 2>/dev/null && [ "$($b stat -c %s "$f")" -ge {2 * LIMIT_BYTES} ]; then r=ESC; else r=NOT; fi
rm -f "$f"; echo "$r $id {mb} MiB into {where}" """
    return Probe(pid, "exhaustion", R, sh, step="exhaust")


def probes() -> list[Probe]:
    return [
        Probe(
            "exhaust-memory",
            "exhaustion",
            R,
            f"""if $b dd if=/dev/zero of=/dev/null bs={2 * LIMIT_BYTES} count=1 2>/dev/null; then echo "ESC $id held {2 * LIMIT_BYTES} bytes"; else echo "NOT $id"; fi""",
            step="exhaust",
        ),
        _fill("exhaust-tmp-tmpfs", "/tmp"),
        _fill("exhaust-dev-shm", "/dev/shm"),
        Probe("exhaust-disk-in-copy", "exhaustion", None, _fill("x", ".").sh, step="exhaust"),
        # last: the processes it leaves behind (when a fork is refused) hold the pids
        Probe(
            "exhaust-pids",
            "exhaustion",
            R,
            f"""i=0; pids=
while [ $i -lt {2 * LIMIT_PIDS} ]; do $b sleep 20 </dev/null >/dev/null 2>&1 & pids="$pids $!"; i=$((i+1)); done
$b kill $pids 2>/dev/null
[ $i -ge {2 * LIMIT_PIDS} ] && echo "ESC $id started {2 * LIMIT_PIDS} processes" """,
            step="exhaust",
        ),
        Probe(
            "capabilities",
            PRIV,
            U,
            'c=$(capeff); [ -n "$c" ] && [ "$c" != 0000000000000000 ] && echo "ESC $id CapEff=$c" || echo "NOT $id CapEff=$c"',
        ),
        Probe(
            "kernel-module-load",
            PRIV,
            U,
            ': > esc.ko; r=$($b insmod ./esc.ko 2>&1); rm -f esc.ko; if hascap 16; then echo "ESC $id CAP_SYS_MODULE held ($r)"; else echo "NOT $id $r"; fi',
        ),
        Probe(
            "mount",
            PRIV,
            F,
            """if hostmnt; then hascap 21 && echo "ESC $id CAP_SYS_ADMIN in the host's mount namespace" || echo "NOT $id"; exit; fi
$b mkdir -p .esc-mnt && $b mount -t tmpfs none .esc-mnt 2>/dev/null && { echo "ESC $id mounted"; $b umount .esc-mnt; } || echo "NOT $id"
rmdir .esc-mnt 2>/dev/null""",
        ),
        Probe(
            "unshare-mount-ns",
            PRIV,
            F,
            """if hostmnt; then hascap 21 && echo "ESC $id CAP_SYS_ADMIN in the host's mount namespace" || echo "NOT $id"; exit; fi
$b unshare -m true 2>/dev/null && echo "ESC $id unshare -m worked" || echo "NOT $id" """,
        ),
        Probe(
            "keyring-of-caller",
            PRIV,
            U,
            '$b grep -q "@KEYNAME@" /proc/keys 2>/dev/null && echo "ESC $id the caller\'s key is visible" || echo "NOT $id"',
        ),
        Probe(
            "sysctl-write",
            PRIV,
            F,
            'v=$($b cat /proc/sys/vm/overcommit_ratio) && echo "$v" > /proc/sys/vm/overcommit_ratio 2>/dev/null && echo "ESC $id wrote /proc/sys/vm/overcommit_ratio" || echo "NOT $id"',
        ),
        Probe(
            "sysfs-write",
            PRIV,
            F,
            'v=$($b cat /sys/kernel/mm/ksm/run 2>/dev/null) && echo "$v" > /sys/kernel/mm/ksm/run 2>/dev/null && echo "ESC $id wrote /sys/kernel/mm/ksm/run" || echo "NOT $id"',
        ),
        Probe(
            "cgroup-move-out",
            PRIV,
            R,
            """for h in /sys/fs/cgroup/memory /sys/fs/cgroup/pids /sys/fs/cgroup/unified /sys/fs/cgroup; do
  [ -w $h/cgroup.procs ] || continue
  $b sh -c "echo \\$\\$ > $h/cgroup.procs" 2>/dev/null && { echo "ESC $id moved a process into $h"; exit; }
done; echo "NOT $id" """,
        ),
        Probe(
            "cgroup-raise-limit",
            PRIV,
            R,
            """c=$($b sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
f=/sys/fs/cgroup/memory$c/memory.limit_in_bytes
v=$($b cat $f 2>/dev/null) && echo "$v" > $f 2>/dev/null && echo "ESC $id wrote $f" || echo "NOT $id $f" """,
        ),
    ]
