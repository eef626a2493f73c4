"""The ``mcp_servers:`` section of a catalogue file: one entry per upstream MCP server.

Format::

    mcp_servers:
      - name: time                      # [A-Za-z0-9-]{1,32}: the prefix of its tools' names
        transport: stdio
        command: mcp-server-time        # looked up on PATH
        args: [--local-timezone, UTC]
        env: {TZ: UTC}                  # added to a minimal environment (PATH, HOME, ...)
      - name: everything
        transport: http                 # streamable HTTP
        url: https://mcp.example.org/mcp
        headers: {Authorization: Bearer ...}
        timeout_seconds: 30             # one tools/call (the chain's time-out for its tools)
        connect_timeout_seconds: 10     # connecting and the initialize handshake
        refresh_seconds: 300            # tools/list again this often (0: only on list_changed)
        max_concurrency: 8              # calls running at once in one process (429 beyond)
        rate_limit: 10/1                # each of its tools, all users together (429 beyond)
        trust_read_only_hint: false     # see below
        credential:                     # optional: how calls authenticate (http only)
          header: Authorization         # the header carrying it (default Authorization)
          scheme: Bearer                # written before it ("Bearer <credential>"); "" for none
          accept: user_or_service       # user | service | user_or_service
          service: {secret: docs-token} # a name of GATEWAY_UPSTREAM_SECRETS, never the value;
                                        # with accept: user it only lists the tools

Headers and environment values are never listed (``GET /upstreams`` shows neither) nor logged.
An upstream's tool annotations are hints from a server the gateway does not control:
``readOnlyHint`` decides whether the gateway records a call as ``running`` before it runs (no side
effect without an audit row), so it is honoured only with ``trust_read_only_hint: true``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from conclave.platform.ratelimit import Rate

SERVER_NAME_PATTERN = r"^[A-Za-z0-9-]{1,32}$"
# RFC 9110 token: what a header name may be.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}\Z")
# Headers the HTTP client and the MCP transport set themselves: a credential there would be
# overwritten or would break the session.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "cookie",
    }
)
Accepts = Literal["user", "service", "user_or_service"]


class SecretReference(BaseModel):
    """``{secret: <name>}``: a name of ``GATEWAY_UPSTREAM_SECRETS``."""

    model_config = {"extra": "forbid"}

    secret: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")


class CredentialSpec(BaseModel):
    """How an HTTP upstream's calls present a credential, and which ones it accepts."""

    model_config = {"extra": "forbid"}

    header: str = "Authorization"
    scheme: str = Field("Bearer", pattern=r"^[A-Za-z0-9._~+/-]{0,32}$")
    accept: Accepts = "user_or_service"
    service: SecretReference | None = None

    @field_validator("header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _HEADER_NAME.match(value) or value.lower() in _RESERVED_HEADERS:
            raise ValueError(f"credential header {value[:64]!r} is not a header name one may set")
        return value

    @model_validator(mode="after")
    def _service_when_accepted(self) -> CredentialSpec:
        if self.accept == "service" and self.service is None:
            raise ValueError("credential accept 'service' needs credential.service")
        return self

    @property
    def accepts_user(self) -> bool:
        """Whether users may register their own credential for the server."""
        return self.accept in ("user", "user_or_service")

    def header_value(self, credential: str) -> str:
        """What the header carries for ``credential``."""
        return f"{self.scheme} {credential}" if self.scheme else credential


class McpServerSpec(BaseModel):
    """One upstream MCP server of a catalogue."""

    model_config = {"extra": "forbid"}

    # No underscore: the alias `<server>__<tool>` then splits at its first `__` unambiguously.
    name: str = Field(pattern=SERVER_NAME_PATTERN)
    transport: Literal["http", "stdio"]
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    timeout_seconds: float = Field(30.0, gt=0, le=600)
    connect_timeout_seconds: float = Field(10.0, gt=0, le=120)
    refresh_seconds: float = Field(300.0, ge=0, le=86_400)
    max_concurrency: int | None = Field(None, ge=1, le=10_000)
    rate_limit: str = ""
    """``<requests>/<seconds>[:<burst>]`` for each of its tools across all users; empty: none."""
    trust_read_only_hint: bool = False
    tags: list[str] = Field(default_factory=list)
    credential: CredentialSpec | None = None
    """How calls authenticate: the acting user's credential, a service credential or either."""

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSpec:
        Rate.parse(self.rate_limit)  # ValueError names the expected form
        if self.transport == "http":
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError(f"mcp server {self.name!r}: http needs an http(s) 'url'")
            if self.command or self.args or self.env or self.cwd:
                raise ValueError(f"mcp server {self.name!r}: command/args/env/cwd are for stdio")
        else:
            if not self.command:
                raise ValueError(f"mcp server {self.name!r}: stdio needs a 'command'")
            if self.url or self.headers:
                raise ValueError(f"mcp server {self.name!r}: url/headers are for http")
            if self.credential is not None:
                # One process serves every user: a user's credential cannot be given to it per
                # call. A stdio server's own credential goes in its `env`.
                raise ValueError(f"mcp server {self.name!r}: 'credential' is for http servers")
        if self.credential is not None:
            header = self.credential.header.lower()
            if any(name.lower() == header for name in self.headers):
                raise ValueError(f"mcp server {self.name!r}: {header!r} is set in 'headers' too")
        for text in (self.command or "", *self.args, *self.env, *self.env.values()):
            if "\x00" in text:
                raise ValueError(f"mcp server {self.name!r}: NUL in command, args or env")
        return self


@dataclass(frozen=True)
class UpstreamLimits:
    """Bounds on what one upstream may send (settings ``GATEWAY_UPSTREAM_*``)."""

    max_message_bytes: int
    max_tools: int
    max_pages: int
    debounce_seconds: float
    max_connections: int = 100
    """HTTP connections open at once on one session (each of its two HTTP clients)."""
    first_backoff_seconds: float = 1.0
