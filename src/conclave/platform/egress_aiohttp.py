"""The egress policy for ``aiohttp``, the HTTP client of the gateway's direct upstream calls.

The same guarantee as :mod:`conclave.platform.egress` (httpx) and
:mod:`conclave.platform.egress_mcp` (the MCP SDK's httpx2) give: every connection the session
opens goes through :class:`GuardedResolver`, which resolves the host once, checks every address
with :class:`~conclave.platform.egress.EgressPolicy` and hands ``aiohttp`` the checked addresses
to connect to (no second resolution a rebinding DNS could answer differently; aiohttp's own DNS
cache is off, so a later connection is checked again); a literal address in the URL, which
aiohttp never hands its resolver, is checked by the connector. A refusal is a connection error. The
environment's proxies and ``.netrc`` are ignored, and redirects are never followed (callers pass
``allow_redirects=False`` and treat a 3xx as the answer it is).

The connect time-out bounds what says something of the destination: resolving its name and
opening the socket (TLS included). It does not bound the wait for a free connection of the
session's pool: aiohttp's ``ClientTimeout.connect`` would, and a caller that keeps the pool busy
with slow, legitimate requests then made the next ones fail as connection errors of a healthy
destination. The pool's wait is bounded by each caller's own time-out.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from conclave.platform.egress import EgressDenied, EgressPolicy

log = logging.getLogger(__name__)


class GuardedResolver(AbstractResolver):
    """Answers only with addresses the policy allows (aiohttp's resolver interface)."""

    def __init__(self, policy: EgressPolicy, *, timeout: float | None = None) -> None:
        self._policy = policy
        self._timeout = timeout

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            async with asyncio.timeout(self._timeout):
                addresses = await self._policy.addresses(host, port)
        except TimeoutError:
            raise OSError(f"{host!r} did not resolve within {self._timeout} s") from None
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


class _GuardedConnector(aiohttp.TCPConnector):
    """aiohttp connects to a literal address without asking its resolver: that address is
    checked here. (``_resolve_host`` is aiohttp's one step every connection's host goes
    through; ``tests/gateway/upstreams/test_attack_direct_calls_2.py`` holds it to that.)"""

    def __init__(self, resolver: GuardedResolver, **options: Any) -> None:
        super().__init__(resolver=resolver, use_dns_cache=False, **options)
        self._guard = resolver

    async def _resolve_host(self, host: str, port: int, traces: Any = None) -> list[ResolveResult]:
        if _is_literal(host):
            await self._guard.resolve(host, port)  # raises OSError when the policy refuses it
        return await super()._resolve_host(host, port, traces)


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def guarded_aiohttp_session(
    policy: EgressPolicy, *, connect_timeout: float, max_connections: int, **options: Any
) -> aiohttp.ClientSession:
    """A session whose every connection is egress-checked; ``options`` go to
    :class:`aiohttp.ClientSession` (headers, ...). ``connect_timeout`` bounds resolving a name
    and opening a connection, each (a :class:`aiohttp.ClientError` past it); a request waiting
    for one of the ``max_connections`` to come free waits as long as its caller lets it."""
    resolver = GuardedResolver(policy, timeout=connect_timeout)
    connector = _GuardedConnector(resolver, limit=max_connections)
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        # `connect` would also bound the wait for the pool (aiohttp's connector waits for a free
        # connection within it): `sock_connect` is the socket's connect and TLS handshake alone.
        timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_timeout),
        **options,
    )
