"""The python arm's first command on an empty cache, before and after tiering (wasi_tiering.py).

    python benchmarks/python_tiering.py [--reps N]

Each measurement is a fresh Python (as a CLI call) on a fresh state directory running one
`ExecTool.exec(["python", "-c", "pass"])`: "before" compiles the Cranelift entry in the
command (tiering off: wasi_tiering.ENABLED), "after" compiles the Winch one and starts the
Cranelift compile in the background. Printed per run, alternating before/after so both see
the same load: the first command's wall time and the calling process's CPU during it (the
compile; the runtime process's own start is in neither), and -- after -- how long from the
command's start until the Cranelift entry exists (the background compile waited for before
the next run, so it never competes with a measurement). Load (`os.getloadavg`) per run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sprawl_orch.native_fallbacks import wasi_module

CHILD = """\
import json, resource, sys, time
from pathlib import Path
from sprawl_orch import Config, ExecTool
from sprawl_orch.native_fallbacks import wasi_tiering
state, tree, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
wasi_tiering.ENABLED[0] = mode == "after"
config = Config(sandbox={"arm": "python"}, state={"dir": str(state)})
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
with ExecTool(config, tree) as tool:
    began, c0, w0 = time.time(), cpu(), time.perf_counter()
    result = tool.exec(["python", "-c", "pass"])
    wall, used = time.perf_counter() - w0, cpu() - c0
assert result.exit_code == 0 and result.python is not None, result
print(json.dumps({"began": began, "wall": wall, "cpu": used,
                  "compiler": result.python["compiler"]}))
"""


def once(base: Path, mode: str, n: int) -> dict[str, float | str]:
    state, tree = base / f"state-{mode}-{n}", base / f"tree-{mode}-{n}"
    state.mkdir(mode=0o700)
    tree.mkdir()
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(state), str(tree), mode],
        capture_output=True,
        text=True,
        check=True,
    )
    row: dict[str, float | str] = json.loads(done.stdout.strip().splitlines()[-1])
    row["load"] = load
    if mode == "after":
        wasi_module.compiled(state)  # waits on the background compile's lock, then maps it
        row["optimized"] = time.time() - float(row["began"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sprawl-bench-tier-"))
    rows: dict[str, list[dict[str, float | str]]] = {"before": [], "after": []}
    try:
        for n in range(args.reps):
            for mode in ("before", "after") if n % 2 == 0 else ("after", "before"):
                row = once(base, mode, n)
                rows[mode].append(row)
                extra = (
                    f", Cranelift entry there after {float(row['optimized']):6.2f} s"
                    if mode == "after"
                    else ""
                )
                print(
                    f"{mode:6} ({row['compiler']:9}) first command: wall "
                    f"{float(row['wall']):6.2f} s, CPU {float(row['cpu']):6.2f} s{extra} "
                    f"(load {float(row['load']):.1f})"
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in rows[mode])

    for key in ("wall", "cpu"):
        print(
            f"first command {key}, median: before {med('before', key):.2f} s, after "
            f"{med('after', key):.2f} s, ratio after / before "
            f"{med('after', key) / med('before', key):.2f}"
        )
    print(f"Cranelift entry there after (median): {med('after', 'optimized'):.2f} s")


if __name__ == "__main__":
    main()
