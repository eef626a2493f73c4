"""Which credential an upstream call presents, and keeping it out of what the call leaves behind.

For an HTTP upstream with a ``credential:`` section (docs/gateway.md, "Credentials"):

- ``accept: user`` — the acting user's own credential, or the call is refused (403
  ``UPSTREAM_CREDENTIAL_REQUIRED``, audited, nothing sent);
- ``accept: service`` — the service credential of the catalogue entry;
- ``accept: user_or_service`` — the user's own when they registered one, else the service
  credential, else refused.

The audit row records the kind presented (``user``, ``service``, ``none``). Whatever the upstream
answers — a result, an error text — has every credential the call presented (the user's or the
service's, the entry's static header values) replaced by ``[redacted]`` in the spellings
:mod:`.redaction` knows, before the chain stores, publishes or answers it: an upstream that
echoes its request headers must not write a token into the audit trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from conclave.gateway.tools import ToolExecutionError
from conclave.gateway.upstreams.config import CredentialSpec
from conclave.gateway.upstreams.connection import Upstream
from conclave.gateway.upstreams.credentials import CredentialUnreadable, CredentialVault
from conclave.gateway.upstreams.user_sessions import UserSessions
from conclave.platform.problem_types import ProblemCode

CredentialKind = Literal["user", "service", "none"]


@dataclass(frozen=True)
class Presented:
    """The credential a call presents: its kind, and (for ``user``) the header value."""

    kind: CredentialKind
    secret: str | None = None
    """The credential's text, to scrub from what the upstream answers."""
    header_value: str | None = None
    generation: int = 0
    """The user's credential generation when it was read (:meth:`UserSessions.generation`): a
    session is not opened with a credential replaced or deleted since."""


@dataclass
class UpstreamAccess:
    """The credential rules of one HTTP upstream."""

    server: str
    spec: CredentialSpec
    service_credential: str | None
    """The service credential's text (resolved from its secret reference), when configured."""
    vault: CredentialVault | None
    sessions: UserSessions | None

    async def presented(self, user_id: str) -> Presented:
        """What ``user_id``'s call presents; :class:`ToolExecutionError` when nothing will do."""
        if self.spec.accepts_user and self.vault is not None:
            # Read before the store: a change after it is seen by the session it would open.
            generation = self.sessions.generation(user_id) if self.sessions is not None else 0
            try:
                credential = await self.vault.get(self.server, user_id)
            except CredentialUnreadable as exc:
                raise ToolExecutionError(
                    f"Your credential for upstream {self.server!r} cannot be read; "
                    "register it again.",
                    code=ProblemCode.UPSTREAM_CREDENTIAL_REQUIRED,
                    status=403,
                ) from exc
            if credential is not None:
                header_value = self.spec.header_value(credential)
                return Presented("user", credential, header_value, generation)
        if self.spec.accept != "user" and self.service_credential is not None:
            return Presented("service", self.service_credential)
        raise ToolExecutionError(
            f"Upstream {self.server!r} needs your own credential: register it with "
            f"PUT /upstreams/{self.server}/credential.",
            code=ProblemCode.UPSTREAM_CREDENTIAL_REQUIRED,
            status=403,
        )


@dataclass(frozen=True)
class CredentialSettings:
    """What the gateway's settings say about upstream credentials."""

    vault: CredentialVault | None
    """None when no key is available (PostgreSQL without ``GATEWAY_UPSTREAM_CREDENTIAL_KEYS``)."""
    secrets: dict[str, str]
    """``GATEWAY_UPSTREAM_SECRETS``: service credentials by name."""
    max_user_sessions: int = 256
    user_session_idle_seconds: float = 300.0


def access_for(upstream: Upstream, settings: CredentialSettings) -> UpstreamAccess | None:
    """The credential rules of ``upstream`` (None without a ``credential:`` section); sets the
    service credential's header on its shared session. :class:`ValueError` for a secret
    reference naming no secret, or users' credentials without a key to store them."""
    spec = upstream.spec
    rules = spec.credential
    if rules is None:
        return None
    service = None
    if rules.service is not None:
        name = rules.service.secret
        if name not in settings.secrets:
            raise ValueError(
                f"mcp server {spec.name!r}: credential.service names {name!r}, which is not in "
                "GATEWAY_UPSTREAM_SECRETS"
            )
        service = settings.secrets[name]
        header_value = rules.header_value(service)
        upstream.service_headers = {rules.header: header_value}
        upstream.scrubber = upstream.scrubber.extended(service)  # within its header value
    sessions = None
    if rules.accepts_user:
        if settings.vault is None:
            raise ValueError(
                f"mcp server {spec.name!r} accepts users' credentials: set "
                "GATEWAY_UPSTREAM_CREDENTIAL_KEYS to store them"
            )
        sessions = UserSessions(
            upstream,
            rules.header,
            max_sessions=settings.max_user_sessions,
            idle_seconds=settings.user_session_idle_seconds,
        )
    return UpstreamAccess(spec.name, rules, service, settings.vault, sessions)
