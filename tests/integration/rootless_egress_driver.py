"""An allow-list on rootless podman, run as the non-root account: a plain HTTP upstream on
127.0.0.1 in this process, one command through ExecTool that fetches it (listed) and an
unlisted host, its result printed as one JSON line.

    runuser -u sprawl-rootless -- /usr/bin/python3 -m tests.integration.rootless_egress_driver IMAGE

Run by tests/integration/test_rootless.py (as root, which can switch to the account); not a
test module itself.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def main() -> None:
    from sprawl_orch.config import Config
    from sprawl_orch.container.admission import clear_cache
    from sprawl_orch.tool.exec_tool import ExecTool
    from tests.egress.upstream import upstream

    image = sys.argv[1]
    clear_cache()
    with (
        tempfile.TemporaryDirectory(prefix="sprawl-rootless-egress-") as tmp,
        upstream(tls=False) as up,
    ):
        work = Path(tmp) / "work"
        work.mkdir()
        config = Config.model_validate(
            {
                "sandbox": {
                    "arm": "container",
                    "scratch_dir": str(Path(tmp) / "scratch"),
                    "container": {"engine": "podman", "images": {"podman": image}},
                    "network": {"allow": [f"localhost:{up.port}", "127.0.0.1", "::1"]},
                },
                "state": {"dir": str(Path(tmp) / "state")},
            }
        )
        line = (
            f"wget -q -O- http://localhost:{up.port}/; echo wget=$?; "
            "wget -q -O- http://evil.example.org/; echo unlisted=$?"
        )
        with ExecTool(config, work) as tool:
            result = tool.exec(line, shell=True)
        print("RESULT " + json.dumps(result.as_json_dict()), flush=True)


if __name__ == "__main__":
    main()
