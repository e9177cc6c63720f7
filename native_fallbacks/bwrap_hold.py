"""bwrap held before the program until the egress proxy's listener exists in its namespace.

`--info-fd` reports the sandbox's pid once its namespaces exist; `--block-fd` makes bwrap wait
for a byte (or EOF) before it execs the command. Between the two the listener is made inside
the namespace (egress/netns.py), then the byte is written. Verified with bwrap 0.8: the info
JSON arrives (`{"child-pid": N, "mnt-namespace": ..., "net-namespace": ...}`, in several
writes: read to EOF) while the command has not started.
"""

from __future__ import annotations

import contextlib
import json
import os

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.runs.launch import Running


class Hold:
    def __init__(self) -> None:
        self.info_r, self.info_w = os.pipe()
        self.block_r, self.block_w = os.pipe()

    def flags(self) -> list[str]:
        return ["--info-fd", str(self.info_w), "--block-fd", str(self.block_r)]

    def fds(self) -> tuple[int, int]:
        return (self.info_w, self.block_r)

    def close_theirs(self) -> None:
        for fd in (self.info_w, self.block_r):
            # Closing our copy of the child's ends: EBADF only if already closed, nothing to tell.
            with contextlib.suppress(OSError):
                os.close(fd)

    def _pid(self) -> int:
        raw = b""
        with os.fdopen(self.info_r, "rb") as info:
            raw = info.read()
        try:
            return int(json.loads(raw)["child-pid"])
        except (ValueError, KeyError, TypeError) as err:
            raise SprawlError(
                ErrorCode.SANDBOX_DENIED,
                "bwrap",
                f"bwrap did not report its sandbox's pid (--info-fd said {raw[:200]!r})",
                "see the command's stderr for bwrap's own message",
            ) from err

    def release(self, process: Running, plan: EgressPlan) -> Running:
        """The proxy serving inside the held sandbox, then the program let go. On any failure
        the sandbox is killed before the program ever ran."""
        # Imported here: the proxy's TLS parser (tlslite-ng) costs ~140 ms to import, paid
        # only by a command that has an allow-list.
        from sprawl_orch.runs.proxied import ProxiedRunning, proxy_for

        try:
            proxy = proxy_for(plan, self._pid())
        except BaseException:
            process.kill()
            process.wait(None)
            os.close(self.block_w)
            with contextlib.suppress(Exception):
                process.finish()
            raise
        os.write(self.block_w, b"g")
        os.close(self.block_w)
        return ProxiedRunning(process, proxy)
