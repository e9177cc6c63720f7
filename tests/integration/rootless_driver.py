"""Run the container arm's five-axis conformance as the process's own (non-root) user,
with rootless podman, and print what was claimed and observed as one JSON line.

    runuser -u sprawl-rootless -- /usr/bin/python3 -m tests.integration.rootless_driver IMAGE

Run by tests/integration/test_rootless.py (as root, which can switch to the account);
not a test module itself.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    from sprawl_orch.container.admission import clear_cache
    from tests.integration.container_support import make_engine
    from tests.integration.test_conformance_userns import conformance

    image = sys.argv[1]
    clear_cache()
    with tempfile.TemporaryDirectory(prefix="sprawl-rootless-") as tmp:
        arm, observed = conformance(
            Path(tmp), "container (rootless podman)", make_engine("podman"), image
        )
        admission = arm.admission()
        out = {
            "uid": os.getuid(),
            "claimed": {a.value: k.value for a, k in arm.assurances().axes().items()},
            "observed": {a.value: o.kept.value for a, o in observed.items()},
            "evidence": {a.value: o.evidence for a, o in observed.items()},
            "note": arm.note(),
            "userns": admission.userns.mode if admission.userns else None,
            "limits_enforced": admission.limits_enforced,
        }
        arm.close()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
