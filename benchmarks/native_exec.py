"""Per-command cost of the host-process arms against the raw mechanism, side by side in one run.

    python benchmarks/native_exec.py [--reps N] [--files F]

Each repetition runs `true` four ways, interleaved so all see the same machine state:

- sprawl-orch's bwrap arm: `ExecTool.exec(["true"])` in-process (probe, copy sync, yielding
  prefix, bwrap, wait, result), against raw bwrap with the same arguments on the same copy:
  the same explicit view, tmpfs mounts, copy at the working directory's path, a fresh fd
  with the same seccomp program, and, for a root caller, started as the same sandbox uid;
- sprawl-orch's copied tree: `ExecTool.exec(["true"])`, against a plain `subprocess.run(["true"])`;
- the landlock mechanism (`[sandbox.native] mechanism = "landlock"`): `ExecTool.exec(["true"])`
  against the bwrap arm's, the same command through the same tool (issue 32: <= 1.2).

Also reported, to explain the difference: the arm alone (`BwrapArm.start` -> wait -> finish
on the synced copy: view, seccomp fd, uid drop, yielding prefix, bwrap; no probe, no sync,
no result), the bwrap probe alone (it runs before every command, by design never cached:
design §6), and the no-change resync of the working directory (F small files).
Prints medians in ms and ratios (ours / raw).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os

from sprawl_orch.config import parse_config
from sprawl_orch.copy.sync import sync
from sprawl_orch.native_fallbacks.bwrap import BwrapArm, drop_uid, probe_argv
from sprawl_orch.native_fallbacks.probe import run_probe
from sprawl_orch.native_fallbacks.seccomp_filter import program_fd
from sprawl_orch.runs.launch import Launch
from sprawl_orch.tool.exec_tool import ExecTool


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000


def must_run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def raw_bwrap(argv_with_fd: Callable[[int], list[str]], user: int | None) -> None:
    fd = program_fd()
    try:
        subprocess.run(
            argv_with_fd(fd),
            check=True,
            stdin=subprocess.DEVNULL,
            pass_fds=(fd,),
            user=user,
            group=user,
            extra_groups=None if user is None else [],
        )
    finally:
        os.close(fd)


def arm_alone(
    arm: BwrapArm, copy: Path, tree: Path, env: dict[str, str], out: Path, true: str
) -> None:
    launch = Launch(
        argv=(true,), cwd=copy, env=env, outputs=out, tag="bench", session="bench", workdir=tree
    )
    running = arm.start(launch)
    running.wait(None)
    if running.finish().exit_code != 0:
        sys.exit("the arm alone did not run true")


def probe_once(bwrap: str, tree: Path, user: int | None) -> None:
    fd = program_fd()
    try:
        run_probe(probe_argv(bwrap, tree, fd), "bwrap", pass_fds=(fd,), user=user)
    finally:
        os.close(fd)


def tool_for(tmp: Path, tree: Path, arm: str, mechanism: str = "auto") -> ExecTool:
    scratch = tmp / f"scratch-{arm}-{mechanism}"
    scratch.mkdir()
    sandbox = {"arm": arm, "scratch_dir": str(scratch), "shell": False}
    config = parse_config(
        {
            "sandbox": {**sandbox, "native": {"mechanism": mechanism}},
            "state": {"dir": str(tmp / f"state-{arm}-{mechanism}")},
        }
    )
    return ExecTool(config, tree)


def settled(tool: ExecTool) -> None:
    result = tool.exec(["true"])
    if result.outcome != "settled" or result.exit_code != 0:
        sys.exit(f"{tool.choice.arm} did not run true: {result.code}: {result.detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        sys.exit("bwrap is not installed (apt-get install -y bubblewrap)")
    true = shutil.which("true") or "/bin/true"

    with tempfile.TemporaryDirectory(prefix="sprawl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "tree"
        tree.mkdir()
        for i in range(args.files):
            (tree / f"f{i:03d}.txt").write_text(f"file {i}\n" * 20)
        ns, ct = tool_for(tmp, tree, "native"), tool_for(tmp, tree, "copied_tree")
        if ns.choice.arm.value != "linux_namespaces":
            sys.exit(f"the native arm is not bwrap here: {ns.choice.reason()}")
        ll = tool_for(tmp, tree, "native", "landlock")
        if ll.choice.arm.value != "landlock":
            sys.exit(f"the landlock mechanism is not offered here: {ll.choice.reason()}")
        settled(ns)  # warm-up: the arm, the copy and the page cache
        settled(ct)
        settled(ll)
        # The persistent copy the bwrap tool synced (copy_store: copies/<key>/<slot>/tree).
        copy = next((tmp / "state-native-auto" / "copies").glob("*/*/tree"))
        arm = ns.arm()
        assert isinstance(arm, BwrapArm)
        user = drop_uid()
        env = dict(os.environ)

        def raw_argv(fd: int) -> list[str]:
            return arm.argv_for([true], copy, tree, env, fd)

        resync_dest = tmp / "resync"
        sync(tree, resync_dest)

        samples: dict[str, list[float]] = {
            k: []
            for k in (
                "ours_bwrap",
                "ours_landlock",
                "raw_bwrap",
                "arm",
                "ours_copied",
                "raw_process",
                "probe",
                "resync",
            )
        }
        for _ in range(args.reps):
            samples["ours_bwrap"].append(timed(lambda: settled(ns)))
            samples["ours_landlock"].append(timed(lambda: settled(ll)))
            samples["raw_bwrap"].append(timed(lambda: raw_bwrap(raw_argv, user)))
            samples["arm"].append(timed(lambda: arm_alone(arm, copy, tree, env, tmp / "out", true)))
            samples["ours_copied"].append(timed(lambda: settled(ct)))
            samples["raw_process"].append(timed(lambda: must_run([true])))
            samples["probe"].append(timed(lambda: probe_once(bwrap, tree, user)))
            samples["resync"].append(timed(lambda: sync(tree, resync_dest)))
        ns.close()
        ct.close()
        ll.close()

    med = {k: statistics.median(v) for k, v in samples.items()}
    rows = [
        (
            "bwrap arm, per command",
            "ExecTool.exec(true)",
            med["ours_bwrap"],
            "bwrap <same args> true",
            med["raw_bwrap"],
        ),
        (
            "landlock arm, per command",
            "ExecTool.exec(true)",
            med["ours_landlock"],
            "the bwrap arm's",
            med["ours_bwrap"],
        ),
        (
            "copied tree, per command",
            "ExecTool.exec(true)",
            med["ours_copied"],
            "subprocess.run(true)",
            med["raw_process"],
        ),
        (
            "  of which: the arm alone",
            "start->finish(true)",
            med["arm"],
            "bwrap <same args> true",
            med["raw_bwrap"],
        ),
        (
            "  of which: bwrap probe",
            "run_probe(workdir)",
            med["probe"],
            "bwrap <same args> true",
            med["raw_bwrap"],
        ),
        (
            "  of which: resync",
            f"sync() {args.files} files",
            med["resync"],
            "subprocess.run(true)",
            med["raw_process"],
        ),
    ]
    who = f"as uid {drop_uid()}" if drop_uid() is not None else "as the caller"
    print(
        f"`true`, median of {args.reps} interleaved repetitions, {args.files}-file tree, "
        f"bwrap {who}"
    )
    print(f"{'case':<27}{'ours':<24}{'ms':>7}  {'raw':<24}{'ms':>7}  {'ratio':>6}")
    for case, ours_name, ours_ms, raw_name, raw_ms in rows:
        print(
            f"{case:<27}{ours_name:<24}{ours_ms:>7.1f}  {raw_name:<24}{raw_ms:>7.1f}  "
            f"{ours_ms / raw_ms:>6.2f}"
        )


if __name__ == "__main__":
    main()
