"""The egress policy for ``aiohttp``, the HTTP client of the gateway's direct upstream calls.

The same guarantee as :mod:`conclave.platform.egress` (httpx) and
:mod:`conclave.platform.egress_mcp` (the MCP SDK's httpx2) give: every connection the session
opens goes through :class:`GuardedResolver`, which resolves the host once, checks every address
with :class:`~conclave.platform.egress.EgressPolicy` and hands ``aiohttp`` the checked addresses
to connect to (no second resolution a rebinding DNS could answer differently; aiohttp's own DNS
cache is off, so a later connection is checked again). A refusal is a connection error. The
environment's proxies and ``.netrc`` are ignored, and redirects are never followed (callers pass
``allow_redirects=False`` and treat a 3xx as the answer it is).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from conclave.platform.egress import EgressDenied, EgressPolicy

log = logging.getLogger(__name__)


class GuardedResolver(AbstractResolver):
    """Answers only with addresses the policy allows (aiohttp's resolver interface)."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self._policy.addresses(host, port)
        except EgressDenied as exc:
            log.warning("outbound connection refused: %s", exc, extra={"host": host, "port": port})
            raise OSError(str(exc)) from exc
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


def guarded_aiohttp_session(
    policy: EgressPolicy, *, connect_timeout: float, max_connections: int, **options: Any
) -> aiohttp.ClientSession:
    """A session whose every connection is egress-checked; ``options`` go to
    :class:`aiohttp.ClientSession` (headers, ...)."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(policy), use_dns_cache=False, limit=max_connections
    )
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout),
        **options,
    )
