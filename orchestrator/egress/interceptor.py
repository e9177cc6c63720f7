"""What the proxy asks of an interception (issue 25's secrets/run.py is the one there is): kept
here so egress/ stands below it and knows it only by this shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sprawl_orch.egress.flows import Flow


class Interceptor(Protocol):
    def wants(self, host: str, port: int) -> bool:
        """Whether a checked tunnel to (host, port) is intercepted instead of relayed."""
        ...

    async def relay(self, flow: Flow, first: bytes) -> None: ...

    def plain_request(
        self, host: str, target: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None: ...

    def report(self) -> dict[str, Any]: ...

    def sentence(self) -> str: ...
