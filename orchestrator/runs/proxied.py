"""A started command with its proxy: the listener made inside its network namespace before the
program runs, the proxy closed with the command, and what went out in its Finished record."""

from __future__ import annotations

from collections.abc import Callable

from sprawl_orch.egress.netns import listener_in
from sprawl_orch.egress.plan import EgressPlan
from sprawl_orch.egress.proxy import EgressProxy
from sprawl_orch.egress.record import POSSIBLE_ALLOW_LIST, Egress
from sprawl_orch.runs.launch import Finished, Running


def proxy_for(
    plan: EgressPlan, pid: int, observe: Callable[[Egress], None] | None = None
) -> EgressProxy:
    """A started proxy serving a listener inside `pid`'s network namespace; closed again (and
    the SprawlError raised) when the listener cannot be made."""
    proxy = EgressProxy(plan.rules, observe=observe, secrets=plan.secrets)
    proxy.start()
    try:
        proxy.serve(listener_in(pid))
    except BaseException:
        proxy.close()
        raise
    return proxy


class ProxiedRunning:
    """`Running` of the arm, plus the proxy that is its only way out."""

    def __init__(
        self, inner: Running, proxy: EgressProxy, after: Callable[[], None] | None = None
    ) -> None:
        self.inner = inner
        self.proxy = proxy
        self._after = after

    def wait(self, timeout: float | None) -> bool:
        return self.inner.wait(timeout)

    def kill(self) -> None:
        self.inner.kill()
        self.proxy.close()

    def pids(self) -> list[int]:
        return self.inner.pids()

    def finish(self) -> Finished:
        finished = self.inner.finish()
        self.proxy.close()
        if self._after is not None:
            self._after()
        tally = self.proxy.tally()
        network: dict[str, object] = {
            "possible": POSSIBLE_ALLOW_LIST,
            "egress": [r.as_dict() for r in tally.kept],
            "egress_dropped": tally.dropped,
            "summary": tally.summary(),
        }
        if self.proxy.secrets is not None:
            network["secrets"] = self.proxy.secrets.report()
            network["summary"] = f"{network['summary']} {self.proxy.secrets.sentence()}"
        if self.proxy.failure:
            network["proxy_failure"] = self.proxy.failure
        extra = dict(finished.extra)
        extra["network"] = network
        return Finished(
            exit_code=finished.exit_code,
            stdout_path=finished.stdout_path,
            stderr_path=finished.stderr_path,
            killed=finished.killed,
            oom_killed=finished.oom_killed,
            pids_hit=finished.pids_hit,
            extra=extra,
            refusal=finished.refusal,
        )
