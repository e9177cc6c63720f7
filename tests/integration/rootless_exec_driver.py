"""Run commands through ExecTool as the process's own (non-root) user with rootless
podman, several in one persistent copy, and print each result as one JSON line.

    runuser -u sprawl-rootless -- /usr/bin/python3 -m tests.integration.rootless_exec_driver \
        IMAGE {cold|warm}

Run by tests/integration/test_rootless_exec.py (as root, which can switch to the
account); not a test module itself.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

# Each command leaves a file in the copy, reads the last one and the person's file, and
# says who it ran as: the second and third run in the copy the first one handed back.
COMMANDS = (
    "id -u; echo one > one.txt; cat a.txt",
    "id -u; echo two > two.txt; cat a.txt; ls",
    "id -u; mkdir -p sub/deeper && echo three > sub/deeper/three.txt; cat a.txt",
)


def main() -> None:
    from sprawl_orch.config import Config
    from sprawl_orch.container.admission import clear_cache
    from sprawl_orch.tool.exec_tool import ExecTool

    image, mode = sys.argv[1], sys.argv[2]
    clear_cache()
    with tempfile.TemporaryDirectory(prefix="sprawl-rootless-exec-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "a.txt").write_text("original\n")
        config = Config.model_validate(
            {
                "sandbox": {
                    "arm": "container",
                    "scratch_dir": str(Path(tmp) / "scratch"),
                    "container": {
                        "engine": "podman",
                        "images": {"podman": image},
                        "warm": mode == "warm",
                    },
                },
                "state": {"dir": str(Path(tmp) / "state")},
            }
        )
        with ExecTool(config, work) as tool:
            for line in COMMANDS:
                result = tool.exec(line, shell=True)
                print("RESULT " + json.dumps(result.as_json_dict()), flush=True)
        print("TREE " + json.dumps(sorted(p.name for p in work.iterdir())), flush=True)


if __name__ == "__main__":
    main()
