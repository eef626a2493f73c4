"""Who may send a request: the Host and Origin guard of every route, and CORS.

A service on loopback with authentication off is still reachable by every web page its user
opens: a browser sends a cross-site ``POST`` with a ``text/plain``, form or multipart body without
asking first (no CORS preflight), and a page on a name the attacker points at 127.0.0.1 (DNS
rebinding) even reads the answers, as its requests are same-origin. So every request of every
service passes :class:`RequestGuardMiddleware` before anything reads it:

* its ``Host`` must be one the service answers for (``CONCLAVE_ALLOWED_HOSTS``; by default the
  loopback names on any port): 421 ``HOST_NOT_ALLOWED`` otherwise. Rebinding uses a name of the
  attacker's, so it fails here. A missing, repeated or malformed ``Host`` is refused the same way.
* an ``Origin``, when present, must be the request's own (a page the service itself served, such
  as ``/docs``) or allowed (``CONCLAVE_ALLOWED_ORIGINS``, ``CONCLAVE_CORS_ORIGINS``): 403
  ``ORIGIN_NOT_ALLOWED`` otherwise. Browsers send ``Origin`` on every cross-origin request that
  could change something; CLIs, SDKs and servers send none and pass.

The third half of the defence, JSON routes refusing other media types (415), is
:func:`conclave.platform.bodies.require_json_body`: a cross-site page cannot send
``application/json`` without a preflight, which fails while CORS is off.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from conclave.platform.problem_types import ProblemCode
from conclave.platform.problems import problem
from conclave.settings import CommonSettings

log = logging.getLogger(__name__)

# A Host is a registered name or an IPv4 address, or an IPv6 address in brackets, with an optional
# port. Anything else (NUL, spaces, user info, non-ASCII, paths) is refused before any matching.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?")
_ORIGIN = re.compile(r"(https?)://(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}|\*))?")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_MAX_HOST = 262  # a DNS name (253) plus a port
_MAX_ORIGIN = 300

# What a browser may send cross-origin once CORS allows it, and what its script may read.
CORS_HEADERS = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "X-Request-ID",
    "X-Correlation-ID",
    "X-Conclave-Acting-User",
    "X-Conclave-Signature",
    "X-Conclave-Timestamp",
    "X-Conclave-Nonce",
    "Mcp-Session-Id",
    "Mcp-Protocol-Version",
    "Last-Event-ID",
)
CORS_EXPOSED_HEADERS = (
    "X-Request-ID",
    "X-Correlation-ID",
    "Retry-After",
    "WWW-Authenticate",
    "Idempotent-Replayed",
    "Mcp-Session-Id",
    "Location",
)


def _address(name: str) -> str:
    """An IPv6 literal in its one canonical spelling (``[0:0::1]`` is ``[::1]``)."""
    if name.startswith("["):
        try:
            return f"[{ipaddress.IPv6Address(name[1:-1]).compressed}]"
        except ValueError:
            return name
    return name


def parse_host(value: str) -> tuple[str, str] | None:
    """``(name, port)`` of a ``Host`` value (port ``""`` when absent), lower-cased; ``None`` when
    it is no host at all."""
    if len(value) > _MAX_HOST or not value.isascii():
        return None
    match = _HOST.fullmatch(value.lower())
    if match is None:
        return None
    return _address(match[1]), match[2] or ""


@dataclass(frozen=True)
class _Origin:
    scheme: str
    name: str
    port: str  # the scheme's default when the origin names none; "*" in a pattern

    @classmethod
    def parse(cls, value: str) -> _Origin | None:
        if len(value) > _MAX_ORIGIN or not value.isascii():
            return None
        match = _ORIGIN.fullmatch(value.lower())
        if match is None:
            return None
        scheme = match[1]
        return cls(scheme, _address(match[2]), match[3] or _DEFAULT_PORTS[scheme])


class RequestSources:
    """The hosts and origins a service accepts requests from (see the module docstring)."""

    def __init__(
        self, hosts: Iterable[str], origins: Iterable[str] = (), cors: Iterable[str] = ()
    ) -> None:
        hosts = list(hosts)
        self.any_host = "*" in hosts
        self._exact_hosts: set[tuple[str, str]] = set()
        self._any_port_hosts: set[str] = set()
        for pattern in hosts:
            name, _, port = pattern.rpartition(":") if _has_port(pattern) else (pattern, "", "")
            if port == "*":
                self._any_port_hosts.add(_address(name))
            else:
                self._exact_hosts.add((_address(name), port))
        all_origins = [*origins, *cors]
        self.any_origin = "*" in all_origins
        self._origins = {o for o in map(_Origin.parse, all_origins) if o is not None}
        self.cors_origins = tuple(cors)

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> RequestSources:
        """The sources the settings allow."""
        return cls(settings.allowed_hosts, settings.allowed_origins, settings.cors_origins)

    def host_names(self) -> set[str]:
        """The host names (and addresses) the allowed hosts name, without ports."""
        return self._any_port_hosts | {name for name, _port in self._exact_hosts}

    def host_allowed(self, host: tuple[str, str]) -> bool:
        """Whether a parsed ``Host`` is one this service answers for."""
        name, _port = host
        return self.any_host or name in self._any_port_hosts or host in self._exact_hosts

    def origin_allowed(self, value: str, host: tuple[str, str] | None) -> bool:
        """Whether a page of origin ``value`` may send a request for ``host`` (the request's own
        parsed ``Host``, already allowed)."""
        if self.any_origin:
            return True
        origin = _Origin.parse(value)  # "null" and anything malformed: None
        if origin is None:
            return False
        # The service's own origin (a page it served: /docs). A Host without a port is the
        # scheme's default port, and behind a proxy that ends TLS the scheme seen here is not the
        # browser's: either default port is the service's own then.
        own_name, own_port = host if host is not None else ("", "")
        if origin.name == own_name and origin.port == (own_port or _DEFAULT_PORTS[origin.scheme]):
            return True
        for allowed in self._origins:
            same_host = allowed.scheme == origin.scheme and allowed.name == origin.name
            if same_host and allowed.port in ("*", origin.port):
                return True
        return False


def _has_port(pattern: str) -> bool:
    return ":" in pattern.rpartition("]")[2]


def _header_values(scope: Scope, name: bytes) -> list[str]:
    # Whitespace around a field value is not part of it (RFC 9110 §5.5).
    return [
        value.decode("latin-1").strip(" \t")
        for key, value in scope.get("headers", ())
        if key == name
    ]


def _shown(value: str) -> str:
    """A client's header value, safe and short enough for a log line or a problem detail."""
    return ascii(value[:80] + ("…" if len(value) > 80 else ""))


class RequestGuardMiddleware:
    """Refuse a request whose ``Host`` or ``Origin`` is not allowed (421 ``HOST_NOT_ALLOWED``,
    403 ``ORIGIN_NOT_ALLOWED``) before anything reads it."""

    def __init__(self, app: ASGIApp, sources: RequestSources) -> None:
        self.app = app
        self.sources = sources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan (the services have no WebSocket route)
            await self.app(scope, receive, send)
            return
        sources = self.sources
        hosts = _header_values(scope, b"host")
        host = parse_host(hosts[0]) if len(hosts) == 1 else None
        if not sources.any_host and (host is None or not sources.host_allowed(host)):
            shown = "no Host" if not hosts else ", ".join(_shown(h) for h in hosts)
            log.info("refused a request for host %s", shown, extra={"path": scope.get("path")})
            detail = (
                f"This service does not answer for the host {shown}: list the names it is "
                "reached by in CONCLAVE_ALLOWED_HOSTS."
            )
            await self._refuse(scope, receive, send, 421, ProblemCode.HOST_NOT_ALLOWED, detail)
            return
        origins = _header_values(scope, b"origin")
        if origins and (len(origins) > 1 or not sources.origin_allowed(origins[0], host)):
            shown = ", ".join(_shown(o) for o in origins)
            log.info("refused a request from origin %s", shown, extra={"path": scope.get("path")})
            detail = (
                f"Pages of the origin {shown} may not send requests to this service: list "
                "trusted origins in CONCLAVE_ALLOWED_ORIGINS (or CONCLAVE_CORS_ORIGINS)."
            )
            await self._refuse(scope, receive, send, 403, ProblemCode.ORIGIN_NOT_ALLOWED, detail)
            return
        await self.app(scope, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, code: str, detail: str
    ) -> None:
        response = problem(status, code, detail, instance=scope.get("path"))
        await response(scope, receive, send)


def loopback_only_warning(sources: RequestSources, bind: str) -> str | None:
    """The warning to log when a service listens beyond loopback (``bind``) but answers only for
    loopback names: every caller that reaches it by another name or address gets 421."""
    if sources.any_host or _is_loopback(bind):
        return None
    names = sources.host_names()
    if not names or not all(_is_loopback(name) for name in names):
        return None
    return (
        f"listening on {bind}, but CONCLAVE_ALLOWED_HOSTS admits only loopback names "
        f"({', '.join(sorted(names))}): requests that reach this service by another name or "
        "address are refused with 421 HOST_NOT_ALLOWED. List the names and addresses clients "
        "use (e.g. CONCLAVE_ALLOWED_HOSTS=gateway.internal:*,10.0.0.5:*), or '*' behind a proxy "
        "that checks the Host."
    )


def _is_loopback(name: str) -> bool:
    name = name.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cors_middleware(sources: RequestSources) -> dict[str, Any] | None:
    """Options of Starlette's ``CORSMiddleware`` for the configured CORS origins; ``None`` when
    CORS is off (no origin configured)."""
    if not sources.cors_origins:
        return None
    exact = [o for o in sources.cors_origins if o != "*" and not o.endswith(":*")]
    wildcard_ports = [
        re.escape(o[:-2]) + r"(:[0-9]{1,5})?" for o in sources.cors_origins if o.endswith(":*")
    ]
    return {
        "allow_origins": ["*"] if "*" in sources.cors_origins else exact,
        "allow_origin_regex": "|".join(wildcard_ports) or None,
        "allow_methods": ["GET", "POST", "PUT", "PATCH", "DELETE"],
        "allow_headers": list(CORS_HEADERS),
        "expose_headers": list(CORS_EXPOSED_HEADERS),
        # Bearer tokens travel in a header a script sets: no cookies, so no credentialed CORS.
        "allow_credentials": False,
        "max_age": 600,
    }
