"""A command in a workspace against a command in today's persistent copy (issue 23), side by side.

    python benchmarks/workspace_exec.py [--files N] [--size BYTES] [--reps R] [--arm ARM]
                                        [--engine docker|podman]

Builds a tree of N files (default 10 000 of 1 KiB in ~100 directories), then times the median
of R no-change commands (`true`) through ExecTool on one arm (default copied_tree, the arm
with the least fixed cost, so the copy work shows; `--arm container --engine docker` builds
and pins the busybox image first): plain exec (the persistent copy, resynced)
against exec in a workspace (the person's tree synced into its base, the agent's tree compared
with the base, the result's changes from that comparison). The target is ratio <= 1.1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from copy_sync import build_tree

from sprawl_orch.config import parse_config
from sprawl_orch.tool.exec_tool import ExecTool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--arm", default="copied_tree")
    parser.add_argument("--engine", default="docker", choices=("docker", "podman"))
    args = parser.parse_args()
    container: dict[str, object] = {}
    if args.arm == "container":
        from sprawl_orch.images.build import build_busybox

        image = build_busybox(args.engine)
        container = {"container": {"engine": args.engine, "images": {args.engine: image}}}
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-ws-") as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "tree"
        tree.mkdir()
        build_tree(tree, args.files, args.size)
        (tmp / "scratch").mkdir()
        config = parse_config(
            {
                "sandbox": {"arm": args.arm, "scratch_dir": str(tmp / "scratch"), **container},
                "state": {"dir": str(tmp / "state")},
            }
        )
        plain: list[float] = []
        ws: list[float] = []
        with ExecTool(config, tree, record=False) as tool:
            for w in (None, "bench", None, "bench"):  # first copies, then settled stamps
                tool.exec(["true"], workspace=w)
            time.sleep(0.1)
            for _ in range(args.reps):
                for w, into in ((None, plain), ("bench", ws)):
                    start = time.perf_counter()
                    result = tool.exec(["true"], workspace=w)
                    into.append((time.perf_counter() - start) * 1000)
                    if result.exit_code != 0 or (result.changes and result.changes.total):
                        sys.exit(f"not a no-change command: {result}")
    med = statistics.median
    arm = f"{args.arm} ({args.engine})" if container else args.arm
    print(f"{args.files} files x {args.size} B, arm {arm}, median of {args.reps}")
    print(f"persistent copy command {med(plain):8.0f} ms")
    print(f"workspace command       {med(ws):8.0f} ms   ratio {med(ws) / med(plain):.2f}")


if __name__ == "__main__":
    main()
