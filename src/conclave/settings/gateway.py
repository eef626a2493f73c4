"""Tool gateway settings (spec 000)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from conclave.settings.common import CommonSettings, _split_csv, host_pattern


class GatewaySettings(CommonSettings):
    """Tool gateway settings (spec 000)."""

    host: str = Field("127.0.0.1", alias="GATEWAY_HOST", description="Listen address.")
    port: int = Field(8020, alias="GATEWAY_PORT", description="Listen port.")
    mcp_domain: Literal["generic", "finance"] = Field(
        "generic", alias="MCP_DOMAIN", description="Runtime mode: generic or finance."
    )
    tool_timeout_seconds: float = Field(
        30.0,
        alias="GATEWAY_TOOL_TIMEOUT_SECONDS",
        description="Default time-out of one tool execution (tools may set their own).",
    )
    tool_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GATEWAY_TOOL_MODULES",
        description="Extra tool plug-ins, comma separated 'package.module[:attribute]'.",
    )
    load_entry_points: bool = Field(
        True,
        alias="GATEWAY_LOAD_ENTRY_POINTS",
        description="Load tool plug-ins registered under the 'conclave.tools' entry point group.",
    )
    max_batch: int = Field(
        256,
        alias="GATEWAY_AUDIT_MAX_BATCH",
        description="Most audit writes grouped into one database commit.",
    )

    orchestrator_url: str | None = Field(
        None, alias="ORCHESTRATOR_URL", description="Base URL of the orchestrator backend."
    )
    orchestrator_api: str = Field(
        "", alias="ORCHESTRATOR_API", description="API path prefix on the orchestrator."
    )
    neural_engine_api: str | None = Field(
        None, alias="NEURAL_ENGINE_API", description="Base URL of the neural engine backend."
    )
    vee_engine_api: str | None = Field(
        None, alias="VEE_ENGINE_API", description="Base URL of the VEE engine backend."
    )
    pattern_weavers_api: str | None = Field(
        None, alias="PATTERN_WEAVERS_API", description="Base URL of the pattern weavers backend."
    )
    edge_url: str = Field(
        "http://127.0.0.1:8050", alias="GATEWAY_EDGE_URL", description="Edge intake service."
    )
    collector_url: str = Field(
        "http://127.0.0.1:8008", alias="GATEWAY_COLLECTOR_URL", description="Expedition service."
    )
    graph_url: str = Field(
        "http://127.0.0.1:8004", alias="GATEWAY_GRAPH_URL", description="Graph dispatch service."
    )
    service_token: SecretStr = Field(
        SecretStr(""),
        alias="GATEWAY_SERVICE_TOKEN",
        description="Bearer token the platform tools present to Conclave's other services.",
    )
    tool_catalogues: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        alias="GATEWAY_TOOL_CATALOGUES",
        description="Extra tool catalogue files (YAML or JSON), comma separated: HTTP tools "
        "('tools:'), upstream MCP servers ('mcp_servers:') and the tool policy ('policy:'; "
        "docs/gateway.md).",
    )
    user_rate_limit: str = Field(
        "",
        alias="GATEWAY_USER_RATE_LIMIT",
        description="Calls per user, '<requests>/<seconds>[:<burst>]' ('600/60'); empty = off.",
    )
    max_args_bytes: int = Field(
        262_144,
        alias="GATEWAY_MAX_ARGS_BYTES",
        description="Largest arguments object accepted, in bytes of JSON (413 beyond it).",
    )
    max_result_bytes: int = Field(
        1_048_576,
        alias="GATEWAY_MAX_RESULT_BYTES",
        gt=0,
        description="Largest tool result stored in the audit row and answered, in bytes of JSON "
        "(beyond it the call fails with 422 RESULT_TOO_LARGE).",
    )
    tool_workers: int = Field(
        2,
        alias="GATEWAY_TOOL_WORKERS",
        ge=1,
        description="Worker processes running CPU-bound tools (cpu_executor), so their time-out "
        "stops them; calls beyond this many wait for a free worker.",
    )
    upstream_max_message_bytes: int = Field(
        2_162_688,
        alias="GATEWAY_UPSTREAM_MAX_MESSAGE_BYTES",
        ge=65_536,
        description="Largest message an upstream MCP server may send (one stdio line, one HTTP "
        "answer or event), in bytes; a longer one is cut off as it arrives and the call it "
        "answers fails with 422 RESULT_TOO_LARGE. Default: twice GATEWAY_MAX_RESULT_BYTES's "
        "default plus 64 KiB, room for a result's JSON text and its structured copy.",
    )
    metrics_name_every_tool: bool = Field(
        False,
        alias="GATEWAY_METRICS_NAME_EVERY_TOOL",
        description="Label every tool by its name in /metrics. Off: with a tool policy, the "
        'tools it hides from anyone are counted as tool="__restricted__", since /metrics is '
        "public; turn it on where only the operators can reach /metrics.",
    )
    upstream_max_tools: int = Field(
        1000,
        alias="GATEWAY_UPSTREAM_MAX_TOOLS",
        ge=1,
        le=100_000,
        description="Most tools served from one upstream MCP server; its listing is cut there "
        "(and GET /upstreams says so).",
    )
    upstream_max_pages: int = Field(
        20,
        alias="GATEWAY_UPSTREAM_MAX_PAGES",
        ge=1,
        le=10_000,
        description="Most tools/list pages (nextCursor) read from one upstream per refresh.",
    )
    policy_reload_seconds: float = Field(
        5.0,
        alias="GATEWAY_POLICY_RELOAD_SECONDS",
        ge=0,
        le=3600,
        description="How often the catalogue files are looked at for a changed tool policy "
        "(at least 0.1 s; SIGHUP: at once); 0 looks on SIGHUP only.",
    )
    upstream_debounce_seconds: float = Field(
        1.0,
        alias="GATEWAY_UPSTREAM_DEBOUNCE_SECONDS",
        ge=0,
        le=600,
        description="An upstream's notifications/tools/list_changed is acted on after this "
        "long, once for all that arrived meanwhile: a storm costs one listing per interval.",
    )
    upstream_start_wait_seconds: float = Field(
        15.0,
        alias="GATEWAY_UPSTREAM_START_WAIT_SECONDS",
        ge=0,
        le=600,
        description="How long start-up waits for the upstream MCP servers' first connection and "
        "listing before serving (one that is slower is served once it answers).",
    )
    upstream_credential_keys: SecretStr = Field(
        SecretStr(""),
        alias="GATEWAY_UPSTREAM_CREDENTIAL_KEYS",
        description="Keys encrypting the users' upstream credentials at rest (AES-256-GCM): "
        "32 random bytes each in URL-safe base64, separated by spaces, commas or newlines; the "
        "first encrypts, all decrypt (key rotation, docs/security.md). Unset in embedded mode: "
        "one is generated on first start under <CONCLAVE_DATA_DIR>/upstream-credential.key "
        "(mode 0600); on PostgreSQL a gateway whose upstreams accept users' credentials does "
        "not start without it.",
    )
    upstream_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        alias="GATEWAY_UPSTREAM_SECRETS",
        description='Named service credentials of upstream MCP servers, JSON {"name": "value"}; '
        "a server's catalogue entry references one as credential.service: {secret: name} and "
        "never holds the value.",
    )
    upstream_max_connections: int = Field(
        100,
        alias="GATEWAY_UPSTREAM_MAX_CONNECTIONS",
        ge=3,
        le=10_000,
        description="Most HTTP connections open at once to one upstream MCP server, per session "
        "and process, two of them kept for the session's event stream and the gateway's own "
        "listings; a call beyond the rest waits for one to come free, within its own time-out "
        "(a wait that says nothing of the upstream: never a circuit breaker failure).",
    )
    upstream_max_user_sessions: int = Field(
        256,
        alias="GATEWAY_UPSTREAM_MAX_USER_SESSIONS",
        ge=1,
        le=100_000,
        description="Most sessions one HTTP upstream keeps open with users' own credentials in "
        "one process; beyond it the least recently used idle one is closed.",
    )
    upstream_user_session_idle_seconds: float = Field(
        300.0,
        alias="GATEWAY_UPSTREAM_USER_SESSION_IDLE_SECONDS",
        gt=0,
        le=86_400,
        description="A session opened with a user's own credential is closed after this long "
        "without a call.",
    )
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        alias="GATEWAY_MCP_ALLOWED_HOSTS",
        description="Superseded by CONCLAVE_ALLOWED_HOSTS, which guards every route: when set, "
        "its entries are added to the gateway's allowed hosts; '*' = any.",
    )
    mcp_fast_path: bool = Field(
        True,
        alias="GATEWAY_MCP_FAST_PATH",
        description="Answer plain stateless tools/call and tools/list requests without building "
        "an SDK session per request (false: every /mcp request goes through the SDK transport).",
    )
    call_log: bool = Field(
        False,
        alias="GATEWAY_CALL_LOG",
        description="Queue every governed tool call for the transparency log 'calls' in its audit "
        "row's transaction and publish the log under /logs/calls (docs/transparency.md). On "
        "PostgreSQL the log's signer key must be in CONCLAVE_TLOG_SIGNER_KEYS (the gateway does "
        "not start without it); embedded, a key is generated in the data folder. Off by default "
        "until it costs less: on a 2-core machine governed /execute ran at 0.49 of a bare "
        "endpoint with it, 0.67 without (bench/run_all, 2026-11-27; docs/gateway.md, 'Receipts "
        "on answers').",
    )

    resource_url: str | None = Field(
        None,
        alias="GATEWAY_RESOURCE_URL",
        description="The canonical URL of the gateway's MCP endpoint as clients reach it (e.g. "
        "https://gateway.example.com/mcp; RFC 8707 resource indicator). Published in the OAuth "
        "protected resource metadata, and JWTs must carry it in `aud` (it is the JWT audience "
        "unless CONCLAVE_JWT_AUDIENCE says the same). Unset: derived from each request's URL "
        "and no audience is required beyond CONCLAVE_JWT_AUDIENCE; with CONCLAVE_JWT_JWKS_URL "
        "one of the two must be set.",
    )
    authorization_servers: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GATEWAY_AUTHORIZATION_SERVERS",
        description="Issuer URLs of the OAuth authorization servers that grant tokens for the "
        "gateway, comma separated (protected resource metadata); defaults to CONCLAVE_JWT_ISSUER.",
    )
    oauth_scopes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GATEWAY_OAUTH_SCOPES",
        description="Scopes clients should request, comma separated (`scopes_supported` of the "
        "protected resource metadata); none by default.",
    )

    _split_lists = field_validator(
        "tool_modules",
        "mcp_allowed_hosts",
        "tool_catalogues",
        "authorization_servers",
        "oauth_scopes",
        mode="before",
    )(_split_csv)

    @field_validator("resource_url", "authorization_servers")
    @classmethod
    def _absolute_urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        for url in [value] if isinstance(value, str) else value or []:
            parsed = urlsplit(url)
            if parsed.scheme not in ("https", "http") or not parsed.netloc or parsed.fragment:
                raise ValueError(f"{url!r} must be an absolute http(s) URL without a fragment")
            # It is quoted in WWW-Authenticate challenges and compared as text by clients.
            if any(c in url for c in '"\\ ') or not (url.isascii() and url.isprintable()):
                raise ValueError(f"{url!r} must be a URL of printable ASCII without quotes")
        return value

    @field_validator("oauth_scopes")
    @classmethod
    def _scope_tokens(cls, value: list[str]) -> list[str]:
        # RFC 6749 §3.3 scope-token: printable ASCII without space, '"' or '\\', so a scope fits
        # the quoted `scope` parameter of the WWW-Authenticate challenge unchanged.
        for scope in value:
            if not all(c == "!" or "#" <= c <= "[" or "]" <= c <= "~" for c in scope):
                raise ValueError(f"{scope!r} is not an OAuth scope token")
        return value

    @model_validator(mode="after")
    def _resource_is_the_audience(self) -> GatewaySettings:
        # The MCP authorization spec binds a token to the resource it was issued for (RFC 8707):
        # a token for another service that trusts the same issuer must not open the gateway.
        if self.resource_url is not None:
            if self.jwt_audience is not None and self.jwt_audience != self.resource_url:
                raise ValueError(
                    "CONCLAVE_JWT_AUDIENCE must equal GATEWAY_RESOURCE_URL when both are set"
                )
            self.jwt_audience = self.resource_url
        return self

    @model_validator(mode="after")
    def _no_service_token_without_auth(self) -> GatewaySettings:
        # With auth off a caller names their own user, and the platform tools would present that
        # name to the other services with a credential they trust to act for anyone.
        if self.auth == "disabled" and self.service_token.get_secret_value():
            raise ValueError(
                "GATEWAY_SERVICE_TOKEN is set while CONCLAVE_AUTH is disabled: anyone reaching "
                "this gateway could act as any user at the services that trust the token. Enable "
                "authentication, or unset the token."
            )
        return self

    @model_validator(mode="after")
    def _mcp_hosts_are_allowed_hosts(self) -> GatewaySettings:
        # The setting predates the guard of every route: a deployment that set it keeps working.
        if "mcp_allowed_hosts" in self.model_fields_set:
            merged = [*self.allowed_hosts, *map(host_pattern, self.mcp_allowed_hosts)]
            self.allowed_hosts = list(dict.fromkeys(merged))
        return self

    def jwks_audience(self) -> str | None:
        """The resource URL, when set, is the audience (see ``resource_url``)."""
        return self.resource_url or self.jwt_audience

    def _audience_settings_hint(self) -> str:
        return "GATEWAY_RESOURCE_URL (the gateway's MCP endpoint URL) or CONCLAVE_JWT_AUDIENCE"

    def upstream_credential_key_file(self) -> Path:
        """Where embedded mode keeps the upstream credential key it generated."""
        return self.data_dir / "upstream-credential.key"

    def transparency_logs(self) -> dict[str, str]:
        """The log of governed calls, ``calls``, unless ``GATEWAY_CALL_LOG`` is off."""
        return {"calls": "GATEWAY_CALL_LOG"} if self.call_log else {}

    def backend_urls(self) -> dict[str, str | None]:
        """Base URL of each named backend (``None`` when its variable is unset)."""
        orchestrator = None
        if self.orchestrator_url:
            prefix = self.orchestrator_api.strip("/")
            orchestrator = self.orchestrator_url.rstrip("/") + (f"/{prefix}" if prefix else "")
        return {
            "orchestrator": orchestrator,
            "neural_engine": self.neural_engine_api or None,
            "vee_engine": self.vee_engine_api or None,
            "pattern_weavers": self.pattern_weavers_api or None,
            "edge": self.edge_url or None,
            "collector": self.collector_url or None,
            "graph": self.graph_url or None,
        }
