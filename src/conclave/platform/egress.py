"""The egress policy: which addresses an outbound request that a caller can steer may reach.

A caller who names a URL (the collector's ``http_json`` source) must not be able to make a
service talk to itself, its neighbours on the private network or the cloud metadata endpoint
(server-side request forgery), nor learn which of those ports are open. The policy therefore
refuses every address that is not globally routable (loopback, private, carrier-grade NAT,
link-local with 169.254.169.254, unique-local, multicast, unspecified, reserved, broadcast and the
IPv6 forms that embed one of those), the metadata host names, ``localhost``, and numeric host forms
other than the canonical dotted quad (``2130706433``, ``0x7f000001``, ``017700000001``, ``127.1``:
resolvers read those as addresses, differently from one another). Operators open it on purpose
with an allow-list of host names and networks.

The check runs where the connection is made, inside the HTTP client's network backend: the host
is resolved once, every address it resolves to is checked, and the socket is opened to a checked
address. There is no second resolution an attacker's DNS could answer differently (rebinding),
every redirect hop opens its connection through the same check, and TLS still verifies the
certificate against the host *name* (the connection pool passes it as SNI).

A refusal is raised as a connection error, so callers see exactly what a closed port, a failed
lookup or a silent host gives them: the errors are no port-scan oracle. The reason is logged.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore
import httpx

from conclave.settings import CommonSettings

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> addresses``: how host names become addresses (tests inject their own)."""

UNREACHABLE = "could not be reached (the address is not allowed, or it did not answer)"
"""The one text for every target a caller cannot reach, whatever the reason."""

# Names that lead to a cloud provider's instance metadata service or to this machine, refused
# before any lookup (the addresses they resolve to are refused as well).
_DENIED_NAMES = frozenset(
    {
        "localhost",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
# A host whose last label is a number is an IPv4 address to URL parsers and resolvers
# (WHATWG URL: "ends in a number"); only its canonical dotted-quad form is accepted.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)\Z", re.IGNORECASE)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_POOL_LIMITS = httpx.Limits(max_connections=10, max_keepalive_connections=5)
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


class EgressDenied(httpcore.ConnectError):
    """The policy refused a destination. A connection error on purpose: see the module text."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (``getaddrinfo``), run off the event loop."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def normalise_host(host: str) -> str:
    """``host`` as the policy compares it: lower case, no brackets, no final dot."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") else host


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and that routers or stacks would reach."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or ``None`` when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = address_refusal(embedded)
            return f"embeds {embedded}, {reason}" if reason else None
        if address in _LOCAL_NAT64:
            return "local-use NAT64"
        if address.is_site_local:
            return "site-local"
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local (cloud metadata)", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        # Carrier-grade NAT (100.64.0.0/10), 240.0.0.0/4, broadcast, benchmarking, documentation,
        # IPv4-compatible IPv6 (::a.b.c.d, inside ::/8): not private, not public either.
        ("reserved", address.is_reserved or not address.is_global),
    )
    return next((reason for reason, hit in checks if hit), None)


def _split_entries(value: str | Iterable[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    return [item.strip() for item in items if item.strip()]


@dataclass(frozen=True)
class EgressPolicy:
    """Public addresses only, plus the host names and networks an operator allows."""

    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def build(
        cls,
        hosts: str | Iterable[str] = (),
        networks: str | Iterable[str] = (),
        *,
        resolver: Resolver = system_resolver,
    ) -> EgressPolicy:
        """A policy allowing ``hosts`` (names or literal addresses) and ``networks`` (CIDRs);
        ``ValueError`` for a network that is not one."""
        return cls(
            allowed_hosts=frozenset(normalise_host(host) for host in _split_entries(hosts)),
            allowed_networks=tuple(
                ipaddress.ip_network(net, strict=False) for net in _split_entries(networks)
            ),
            resolver=resolver,
        )

    @classmethod
    def from_settings(
        cls, settings: CommonSettings, *, resolver: Resolver = system_resolver
    ) -> EgressPolicy:
        """The policy ``CONCLAVE_EGRESS_ALLOW_HOSTS`` / ``_ALLOW_NETWORKS`` describe."""
        return cls.build(
            settings.egress_allow_hosts, settings.egress_allow_networks, resolver=resolver
        )

    def _allowed_network(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            candidates += [embedded] if embedded is not None else []
        return any(
            candidate in network for candidate in candidates for network in self.allowed_networks
        )

    def refusal(self, address: IPAddress) -> str | None:
        """Why the policy refuses ``address``, or ``None`` when it may be reached."""
        if self._allowed_network(address):
            return None
        return address_refusal(address)

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses a connection to ``host`` may use, all of them checked; raises
        :class:`EgressDenied` when any one is refused or the name does not resolve."""
        name = normalise_host(host)
        if not 0 < port < 65536:  # the socket layer would raise OverflowError, not OSError
            raise EgressDenied(f"egress: port {port} does not exist")
        if name in self.allowed_hosts:
            return await self._resolve(name, port)
        if name in _DENIED_NAMES or name.endswith(".localhost"):
            raise EgressDenied(f"egress: {name!r} is a local or metadata host name")
        try:
            literal: IPAddress | None = ipaddress.ip_address(name)
        except ValueError:
            if _NUMERIC_LABEL.match(name.rsplit(".", 1)[-1]):
                raise EgressDenied(f"egress: {name!r} is not a canonical IP address") from None
            literal = None
        found = [literal] if literal is not None else await self._resolve(name, port)
        for address in found:
            reason = self.refusal(address)
            if reason is not None:
                raise EgressDenied(f"egress: {name!r} -> {address} is {reason}")
        return found

    async def _resolve(self, name: str, port: int) -> list[IPAddress]:
        try:
            found = [ipaddress.ip_address(item) for item in await self.resolver(name, port)]
        except (OSError, UnicodeError, ValueError) as exc:
            raise EgressDenied(f"egress: {name!r} does not resolve ({exc})") from exc
        if not found:
            raise EgressDenied(f"egress: {name!r} resolves to no address")
        return list(dict.fromkeys(found))


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the policy allows."""

    def __init__(
        self, policy: EgressPolicy, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve and check ``host``, then connect to its first address that answers."""
        try:
            with anyio.fail_after(timeout):
                addresses = await self._policy.addresses(host, port)
                failure: Exception | None = None
                for address in addresses:
                    try:
                        return await self._inner.connect_tcp(
                            str(address), port, timeout, local_address, socket_options
                        )
                    except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                        failure = exc
                assert failure is not None  # addresses() never returns an empty list
                raise failure
        except EgressDenied as exc:
            log.warning("outbound connection refused: %s", exc, extra={"host": host, "port": port})
            raise
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"no connection to {host!r} within {timeout} s") from exc

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: a local socket is not an outbound destination."""
        raise EgressDenied("egress: unix sockets are not outbound destinations")

    async def sleep(self, seconds: float) -> None:
        """Sleep the way the wrapped backend does."""
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, with its connection pool opening connections through the policy."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits = _POOL_LIMITS,
    ) -> None:
        super().__init__(verify=verify, limits=limits, trust_env=False)
        # httpx offers no parameter for the pool's network backend, so the pool httpx just built
        # is replaced by the same one with the guarded backend; the request handling, stream
        # wrapping and exception mapping of the parent class stay as they are.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedNetworkBackend(policy),
        )


def guarded_client(
    policy: EgressPolicy,
    *,
    timeout: float,
    max_redirects: int,
    headers: dict[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """An HTTP client for caller-steered requests: every connection (redirects included) checked
    by ``policy``; proxies and ``.netrc`` from the environment ignored (a proxy would make the
    connection, not the policy). ``verify`` is httpx's: certificates are checked against the
    host name of the URL, although the socket goes to the address the policy checked."""
    return httpx.AsyncClient(
        transport=GuardedTransport(policy, verify=verify),
        timeout=timeout,
        headers=headers,
        follow_redirects=max_redirects > 0,
        max_redirects=max_redirects,
        trust_env=False,
    )
