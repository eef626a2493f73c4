"""Settings every service shares, and the helpers the service classes use."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from conclave.settings.credentials import jwks_url_problem, jwt_secret_problem
from conclave.settings.roles import BUILT_IN_ROLES, declared_roles
from conclave.settings.tracing import TracingSettings


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""The default of CONCLAVE_ALLOWED_HOSTS: this machine's loopback names, on any port."""


_HOST = r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(:([0-9]{1,5}|\*))?"
_HOST_PATTERN = re.compile(_HOST)
_ORIGIN_PATTERN = re.compile(r"https?://" + _HOST)


def host_pattern(entry: str) -> str:
    """``entry`` of CONCLAVE_ALLOWED_HOSTS checked and lower-cased (host names have no case)."""
    pattern = entry.strip().lower()
    if pattern != "*" and not _HOST_PATTERN.fullmatch(pattern):
        raise ValueError(f"allowed host {entry!r} is not 'name', 'name:port', 'name:*' or '*'")
    return pattern


def origin_pattern(entry: str) -> str:
    """``entry`` of CONCLAVE_ALLOWED_ORIGINS / CONCLAVE_CORS_ORIGINS checked and lower-cased."""
    pattern = entry.strip().lower().rstrip("/")
    if pattern == "null":
        # Sandboxed frames, local files and redirected requests all send "null": allowing it
        # would allow pages of any site.
        raise ValueError("the origin 'null' cannot be allowed (pages of any site can send it)")
    if pattern != "*" and not _ORIGIN_PATTERN.fullmatch(pattern):
        raise ValueError(f"allowed origin {entry!r} is not 'http(s)://name[:port|:*]' or '*'")
    return pattern


class CommonSettings(TracingSettings):
    """Settings every service shares: where state lives, the bus, auth, limits, logging."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(
        Path(".conclave"),
        alias="CONCLAVE_DATA_DIR",
        description="Folder for embedded-mode state: SQLite file, blobs, local semantic memory.",
    )
    database_url: str | None = Field(
        None,
        alias="CONCLAVE_DATABASE_URL",
        description="SQLAlchemy async URL of the relational store; wins over RELDB_*.",
    )
    reldb_host: str | None = Field(None, alias="RELDB_HOST", description="PostgreSQL host.")
    reldb_port: int = Field(5432, alias="RELDB_PORT", description="PostgreSQL port.")
    reldb_db: str = Field("conclave", alias="RELDB_DB", description="PostgreSQL database.")
    reldb_user: str = Field("postgres", alias="RELDB_USER", description="PostgreSQL user.")
    reldb_password: SecretStr = Field(
        SecretStr(""), alias="RELDB_PASSWORD", description="PostgreSQL password."
    )
    database_schema: str | None = Field(
        None,
        alias="CONCLAVE_DATABASE_SCHEMA",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        description="PostgreSQL schema to use (its search_path) instead of the server default; "
        "lets several deployments or test runs share one database. Ignored on SQLite.",
    )
    database_pool_size: int = Field(
        10, alias="CONCLAVE_DATABASE_POOL_SIZE", description="Connections per process (Postgres)."
    )
    auto_migrate: bool = Field(
        True,
        alias="CONCLAVE_AUTO_MIGRATE",
        description="Apply pending migrations at startup (serialised by an advisory lock).",
    )

    bus_url: str | None = Field(
        None,
        alias="CONCLAVE_BUS_URL",
        description="redis://host:port/db or memory://; wins over BUS_HOST/BUS_PORT.",
    )
    bus_host: str | None = Field(None, alias="BUS_HOST", description="Redis host of the bus.")
    bus_port: int = Field(6379, alias="BUS_PORT", description="Redis port of the bus.")
    bus_stream_prefix: str = Field(
        "", alias="BUS_STREAM_PREFIX", description="Prefix of every stream key on Redis."
    )
    bus_stream_maxlen: int = Field(
        100_000, alias="BUS_STREAM_MAXLEN", description="Approximate length streams are trimmed to."
    )
    bus_max_deliveries: int = Field(
        5,
        alias="BUS_MAX_DELIVERIES",
        description="Deliveries of one entry before it moves to the <channel>.dlq stream.",
    )
    bus_claim_idle_seconds: float = Field(
        60.0,
        alias="BUS_CLAIM_IDLE_SECONDS",
        description="Idle time after which another consumer reclaims an unacknowledged entry.",
    )
    bus_max_event_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        alias="BUS_MAX_EVENT_BYTES",
        description="Largest encoded event the bus takes; a larger one is refused as the event's "
        "own fault (its outbox row is quarantined) instead of breaking the connection to Redis.",
    )

    db_committers: int = Field(
        2,
        ge=1,
        le=16,
        alias="CONCLAVE_DB_COMMITTERS",
        description="Group commits in flight at once on PostgreSQL (SQLite always has one): "
        "while one batch waits for its commit to reach disk, the next gathers and commits.",
    )
    outbox_poll_seconds: float = Field(
        1.0,
        alias="CONCLAVE_OUTBOX_POLL_SECONDS",
        description="How often the outbox relay looks for events it was not woken for.",
    )
    outbox_max_backoff_seconds: float = Field(
        10.0,
        alias="CONCLAVE_OUTBOX_MAX_BACKOFF_SECONDS",
        description="Longest wait between two publish attempts while the bus is down.",
    )
    outbox_quarantine_after_attempts: int = Field(
        3,
        ge=1,
        le=100,
        alias="CONCLAVE_OUTBOX_QUARANTINE_AFTER_ATTEMPTS",
        description="Failed attempts after which an outbox event the bus refuses (its entry, not "
        "an outage) is quarantined; an event that cannot be encoded at all is quarantined at once.",
    )
    outbox_retention_hours: float = Field(
        168.0,
        alias="CONCLAVE_OUTBOX_RETENTION_HOURS",
        description="Published outbox rows (the emitter audit log) are kept this long.",
    )

    auth: Literal["enabled", "disabled"] = Field(
        "enabled",
        alias="CONCLAVE_AUTH",
        description="'disabled' turns authentication off explicitly (never for the internet).",
    )
    api_tokens: SecretStr = Field(
        SecretStr(""),
        alias="CONCLAVE_API_TOKENS",
        description="Static bearer tokens, comma separated 'token=user_id' entries.",
    )
    jwt_secret: SecretStr = Field(
        SecretStr(""),
        alias="CONCLAVE_JWT_SECRET",
        description="HS256 secret for JWT bearer tokens: at least 32 bytes (RFC 7518 §3.2), "
        "e.g. the output of `openssl rand -base64 32`.",
    )
    jwt_public_key: SecretStr = Field(
        SecretStr(""),
        alias="CONCLAVE_JWT_PUBLIC_KEY",
        description="PEM public key for RS256 JWT bearer tokens.",
    )
    jwt_audience: str | None = Field(
        None, alias="CONCLAVE_JWT_AUDIENCE", description="Required `aud` claim, if set."
    )
    jwt_issuer: str | None = Field(
        None, alias="CONCLAVE_JWT_ISSUER", description="Required `iss` claim, if set."
    )
    jwt_max_lifetime_seconds: float = Field(
        86_400.0,
        gt=0,
        alias="CONCLAVE_JWT_MAX_LIFETIME_SECONDS",
        description="Longest JWT lifetime accepted: a token whose `exp` is further than this "
        "from now or from its `iat` is refused (401 INVALID_TOKEN).",
    )
    jwt_jwks_url: str | None = Field(
        None,
        alias="CONCLAVE_JWT_JWKS_URL",
        description="JWKS URL of the OAuth authorization server whose JWTs are accepted "
        "(RS/PS/ES256-512, EdDSA; the key each token's `kid` names). https (plain http only to "
        "a loopback host); needs an audience (CONCLAVE_JWT_AUDIENCE, or GATEWAY_RESOURCE_URL on "
        "the gateway). Fetched through the egress policy: an issuer on a private address must "
        "be in CONCLAVE_EGRESS_ALLOW_HOSTS.",
    )
    jwt_jwks_cache_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        alias="CONCLAVE_JWT_JWKS_CACHE_SECONDS",
        description="How long a fetched JWKS is used before it is fetched again.",
    )
    jwt_jwks_min_refresh_seconds: float = Field(
        30.0,
        ge=0,
        le=3_600,
        alias="CONCLAVE_JWT_JWKS_MIN_REFRESH_SECONDS",
        description="Least time between two JWKS fetches, whatever key ids tokens name (a flood "
        "of unknown `kid`s costs no more fetches than this allows).",
    )
    jwt_roles_claim: str = Field(
        "roles",
        alias="CONCLAVE_JWT_ROLES_CLAIM",
        description="JWT claim naming the caller's roles ('operator', 'service' and those of "
        "CONCLAVE_ROLES; other names are ignored): a list of names or one space-separated string.",
    )
    operators: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_OPERATORS",
        description="User ids with the operator role (see and act on every user's expeditions, "
        "schedules and collections), comma separated.",
    )
    service_users: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_SERVICE_USERS",
        description="User ids of service identities (e.g. the gateway's GATEWAY_SERVICE_TOKEN "
        "user) that may act on behalf of a user with the X-Conclave-Acting-User header, comma "
        "separated.",
    )
    roles: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        alias="CONCLAVE_ROLES",
        description="The deployment's own roles, for the gateway's tool policy ('role:<name>'), "
        'as a JSON object of role name to member user ids: {"analyst": ["alice"], "auditor": []}'
        ". A JWT's roles claim may also name them. Names: lower case, at most 64 characters, "
        "not 'operator' or 'service'; at most 100 roles of 1000 users. They grant nothing else.",
    )

    max_body_bytes: int = Field(
        1_048_576,
        alias="CONCLAVE_MAX_BODY_BYTES",
        description="Largest JSON request body accepted (413 beyond it).",
    )
    max_json_depth: int = Field(
        32, alias="CONCLAVE_MAX_JSON_DEPTH", description="Deepest nesting accepted in JSON input."
    )
    egress_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_EGRESS_ALLOW_HOSTS",
        description="Host names (or literal addresses) that requests a caller steers may reach "
        "although they resolve to a local, private or reserved address, comma separated; "
        "exact names, compared without case.",
    )
    egress_allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_EGRESS_ALLOW_NETWORKS",
        description="Networks (CIDR, e.g. 10.20.0.0/16 or fd00:1::/64) that requests a caller "
        "steers may reach although the egress policy refuses them by default, comma separated.",
    )
    egress_max_redirects: int = Field(
        5,
        ge=0,
        le=20,
        alias="CONCLAVE_EGRESS_MAX_REDIRECTS",
        description="Redirects a caller-steered request follows (each hop checked by the egress "
        "policy); 0 follows none.",
    )
    # Which requests a service answers at all: the defence against web pages (any site a user
    # visits can make their browser send requests to a loopback service) and DNS rebinding (a
    # foreign name that resolves to this machine). See docs/security.md.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(LOOPBACK_HOSTS),
        alias="CONCLAVE_ALLOWED_HOSTS",
        description="Host headers every route accepts (421 HOST_NOT_ALLOWED otherwise), comma "
        "separated: 'name' (no port), 'name:port', 'name:*' (any port or none); '*' accepts any "
        "host (only behind a proxy that checks it). Default: the loopback names on any port. A "
        "service reached by another name or address must list it.",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_ALLOWED_ORIGINS",
        description="Origin headers (web pages) that may send requests, beyond the service's own "
        "origin, comma separated: 'https://app.example.com', 'http://localhost:*' (any port); "
        "'*' accepts any. A request with another Origin is refused (403 ORIGIN_NOT_ALLOWED); "
        "requests without one (CLIs, SDKs, servers) pass.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="CONCLAVE_CORS_ORIGINS",
        description="Origins whose pages may also read the answers (CORS), comma separated, in "
        "the CONCLAVE_ALLOWED_ORIGINS format; each is an allowed origin too. Empty (the "
        "default): CORS is off and no Access-Control-* header is sent.",
    )
    # Read deadlines of the HTTP server (``conclave serve`` and ``conclave up``): a client that
    # sends its request slowly must not hold a connection (and a temporary upload file) for as
    # long as it likes.
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        alias="CONCLAVE_HEADER_TIMEOUT_SECONDS",
        description="Longest a request's line and headers may take to arrive, from the "
        "connection's opening (or the request's first byte on a kept-alive connection); the "
        "connection is then answered 408 and closed.",
    )
    max_header_bytes: int = Field(
        65_536,
        ge=1024,
        alias="CONCLAVE_MAX_HEADER_BYTES",
        description="Largest request line plus headers accepted (431, connection closed).",
    )
    body_idle_timeout_seconds: float = Field(
        30.0,
        gt=0,
        alias="CONCLAVE_BODY_IDLE_TIMEOUT_SECONDS",
        description="Longest pause between two pieces of a request body (408, connection closed).",
    )
    body_timeout_seconds: float = Field(
        60.0,
        gt=0,
        alias="CONCLAVE_BODY_TIMEOUT_SECONDS",
        description="Time a request body may take beyond what CONCLAVE_BODY_MIN_BYTES_PER_SECOND "
        "earns it: a body must arrive within this many seconds plus one second per that many "
        "bytes received (408, connection closed).",
    )
    body_min_bytes_per_second: int = Field(
        4096,
        gt=0,
        alias="CONCLAVE_BODY_MIN_BYTES_PER_SECOND",
        description="Slowest average rate a long request body may arrive at: each such amount of "
        "bytes received extends the body deadline by one second.",
    )
    keep_alive_seconds: int = Field(
        5,
        gt=0,
        alias="CONCLAVE_KEEP_ALIVE_SECONDS",
        description="How long an idle kept-alive connection stays open between two requests.",
    )
    # Transparency logs (docs/transparency.md, "Keys"): each named log's origin is
    # "<CONCLAVE_TLOG_ORIGIN>/<log name>", and its checkpoints are signed by the keys named so.
    tlog_origin: str = Field(
        "conclave.localhost",
        alias="CONCLAVE_TLOG_ORIGIN",
        # No ',' either: the key lists are split on commas, so a key named after such an origin
        # could never be configured.
        pattern=r"^[!-*.-~-]{1,190}$",
        description="Deployment origin of the transparency logs (e.g. 'conclave.example.com'): "
        "a log's origin, and its key's name, is '<this>/<log name>'. Printable ASCII without "
        "space, '+' or ','. Changing it starts new logs: a stored log keeps the origin it began "
        "with.",
    )
    tlog_signer_keys: SecretStr = Field(
        SecretStr(""),
        alias="CONCLAVE_TLOG_SIGNER_KEYS",
        description="Signer keys of the transparency logs in Go's 'PRIVATE+KEY+<name>+<id>+<key>' "
        "form, separated by spaces, commas or newlines; a key signs the log whose origin is its "
        "name, two keys of one name both sign (key rotation). A log without a key here gets one "
        "generated on first start in embedded mode (kept under <CONCLAVE_DATA_DIR>/tlog-keys, "
        "mode 0600); on PostgreSQL it must be given.",
    )
    tlog_retired_verifier_keys: str = Field(
        "",
        alias="CONCLAVE_TLOG_RETIRED_VERIFIER_KEYS",
        description="Verifier keys ('<name>+<id>+<key>') that no longer sign but are still "
        "published beside the current ones, so older checkpoints keep verifying; separated by "
        "spaces, commas or newlines.",
    )
    tlog_checkpoint_interval_seconds: float = Field(
        1.0,
        gt=0,
        le=3600,
        alias="CONCLAVE_TLOG_CHECKPOINT_INTERVAL_SECONDS",
        description="Shortest time between two checkpoints of a log while leaves arrive (none "
        "while nothing is appended): how long a new leaf may wait to be provable.",
    )
    tlog_poll_seconds: float = Field(
        5.0,
        gt=0,
        alias="CONCLAVE_TLOG_POLL_SECONDS",
        description="How often the integrator looks for leaves appended by other processes "
        "(appends in its own process wake it at once).",
    )
    log_level: str = Field("INFO", alias="CONCLAVE_LOG_LEVEL", description="Logging level.")
    log_format: Literal["json", "text"] = Field(
        "json", alias="CONCLAVE_LOG_FORMAT", description="Structured JSON logs or plain text."
    )

    _split_request_sources = field_validator(
        "allowed_hosts", "allowed_origins", "cors_origins", mode="before"
    )(_split_csv)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_are_patterns(cls, value: list[str]) -> list[str]:
        return [host_pattern(entry) for entry in value]

    @field_validator("allowed_origins", "cors_origins")
    @classmethod
    def _origins_are_patterns(cls, value: list[str]) -> list[str]:
        return [origin_pattern(entry) for entry in value]

    _split_excluded_paths = field_validator("otel_excluded_paths", mode="before")(_split_csv)
    _split_role_lists = field_validator("operators", "service_users", mode="before")(_split_csv)
    _declared_roles = field_validator("roles", mode="before")(declared_roles)
    _split_egress = field_validator("egress_allow_hosts", "egress_allow_networks", mode="before")(
        _split_csv
    )

    @field_validator("egress_allow_networks")
    @classmethod
    def _networks_are_cidrs(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # ValueError names the bad entry
        return value

    @field_validator("jwt_jwks_url")
    @classmethod
    def _jwks_url_is_https(cls, value: str | None) -> str | None:
        problem = None if value is None else jwks_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("jwt_secret")
    @classmethod
    def _jwt_secret_is_long_enough(cls, value: SecretStr) -> SecretStr:
        problem = jwt_secret_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _jwks_tokens_are_bound_to_an_audience(self) -> CommonSettings:
        # An issuer mints tokens for all its clients: without an `aud` check, a token issued for
        # any other service that trusts it would open this one (RFC 8707, RFC 9068 §4).
        if self.jwt_jwks_url and self.jwks_audience() is None:
            raise ValueError(
                "CONCLAVE_JWT_JWKS_URL needs the audience tokens must carry: set "
                f"{self._audience_settings_hint()}"
            )
        return self

    def jwks_audience(self) -> str | None:
        """The `aud` a token from the JWKS issuer must carry (``None``: none configured)."""
        return self.jwt_audience

    def _audience_settings_hint(self) -> str:
        return "CONCLAVE_JWT_AUDIENCE"

    def resolved_database_url(self) -> str:
        """The store URL: explicit URL, else PostgreSQL from RELDB_*, else the embedded SQLite."""
        if self.database_url:
            return self.database_url
        if self.reldb_host:
            user = quote(self.reldb_user, safe="")
            password = quote(self.reldb_password.get_secret_value(), safe="")
            credentials = f"{user}:{password}" if password else user
            return (
                f"postgresql+asyncpg://{credentials}@{self.reldb_host}:{self.reldb_port}/"
                f"{self.reldb_db}"
            )
        return f"sqlite+aiosqlite:///{(self.data_dir / 'conclave.db').resolve()}"

    def tlog_key_dir(self) -> Path:
        """Where embedded mode keeps the transparency log keys it generated."""
        return self.data_dir / "tlog-keys"

    def transparency_logs(self) -> dict[str, str]:
        """The transparency logs this service keeps, by name, each with the setting that turns
        it off (``conclave serve`` checks their signer keys before starting). None by default."""
        return {}

    def resolved_bus_url(self) -> str:
        """The bus URL: explicit URL, else Redis from BUS_HOST/BUS_PORT, else in-process."""
        if self.bus_url:
            return self.bus_url
        if self.bus_host:
            return f"redis://{self.bus_host}:{self.bus_port}/0"
        return "memory://"

    def known_roles(self) -> frozenset[str]:
        """The roles a policy may name and a JWT may claim: built-in and CONCLAVE_ROLES."""
        return BUILT_IN_ROLES | frozenset(self.roles)

    def auth_configured(self) -> bool:
        """True when at least one way to authenticate a caller is configured."""
        return bool(
            self.api_tokens.get_secret_value()
            or self.jwt_secret.get_secret_value()
            or self.jwt_public_key.get_secret_value()
            or self.jwt_jwks_url
        )

    def auth_active(self) -> bool:
        """Whether requests must carry credentials."""
        return self.auth == "enabled" and self.auth_configured()
