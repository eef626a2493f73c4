"""All configuration of Conclave. This is the only module that reads the environment.

Each service has one settings class; they share :class:`CommonSettings`. Settings are read once at
startup (``XSettings()``) and handed down; nothing else looks at ``os.environ``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class CommonSettings(BaseSettings):
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
        description="HS256 secret for JWT bearer tokens.",
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

    max_body_bytes: int = Field(
        1_048_576,
        alias="CONCLAVE_MAX_BODY_BYTES",
        description="Largest JSON request body accepted (413 beyond it).",
    )
    max_json_depth: int = Field(
        32, alias="CONCLAVE_MAX_JSON_DEPTH", description="Deepest nesting accepted in JSON input."
    )
    log_level: str = Field("INFO", alias="CONCLAVE_LOG_LEVEL", description="Logging level.")
    log_format: Literal["json", "text"] = Field(
        "json", alias="CONCLAVE_LOG_FORMAT", description="Structured JSON logs or plain text."
    )

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

    def resolved_bus_url(self) -> str:
        """The bus URL: explicit URL, else Redis from BUS_HOST/BUS_PORT, else in-process."""
        if self.bus_url:
            return self.bus_url
        if self.bus_host:
            return f"redis://{self.bus_host}:{self.bus_port}/0"
        return "memory://"

    def auth_configured(self) -> bool:
        """True when at least one way to authenticate a caller is configured."""
        return bool(
            self.api_tokens.get_secret_value()
            or self.jwt_secret.get_secret_value()
            or self.jwt_public_key.get_secret_value()
        )

    def auth_active(self) -> bool:
        """Whether requests must carry credentials."""
        return self.auth == "enabled" and self.auth_configured()


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
        description="Extra HTTP tool catalogue files (YAML or JSON), comma separated.",
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
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        alias="GATEWAY_MCP_ALLOWED_HOSTS",
        description="Host headers /mcp accepts (DNS-rebinding guard), comma separated; '*' = any.",
    )

    _split_lists = field_validator(
        "tool_modules", "mcp_allowed_hosts", "tool_catalogues", mode="before"
    )(_split_csv)

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


class CollectorSettings(CommonSettings):
    """Expedition (collector) service settings (spec 001)."""

    host: str = Field("127.0.0.1", alias="COLLECTOR_API_HOST", description="Listen address.")
    port: int = Field(8008, alias="COLLECTOR_API_PORT", description="Listen port.")
    api_base: str | None = Field(
        None, alias="COLLECTOR_API_BASE", description="Address the service advertises."
    )
    run_workers: bool = Field(
        True,
        alias="COLLECTOR_RUN_WORKERS",
        description="Whether the HTTP process also runs expeditions (extra workers: "
        "`conclave worker collector`).",
    )
    worker_concurrency: int = Field(
        4,
        ge=1,
        alias="COLLECTOR_WORKER_CONCURRENCY",
        description="Expeditions one worker process runs at the same time.",
    )
    expedition_timeout_seconds: float = Field(
        3600.0,
        gt=0,
        alias="COLLECTOR_EXPEDITION_TIMEOUT_SECONDS",
        description="Longest an expedition may run (a request may ask for less); then it fails.",
    )
    lease_seconds: float = Field(
        30.0,
        gt=0,
        alias="COLLECTOR_LEASE_SECONDS",
        description="A running expedition whose worker has not renewed its lease for this long "
        "is queued again for another worker.",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        alias="COLLECTOR_MAX_ATTEMPTS",
        description="Claims of one expedition (lost workers included) before it fails.",
    )
    poll_seconds: float = Field(
        0.5,
        gt=0,
        alias="COLLECTOR_POLL_SECONDS",
        description="How often an idle worker looks for queued expeditions of other processes.",
    )
    semantic_memory_url: str | None = Field(
        None,
        alias="CONCLAVE_SEMANTIC_MEMORY_URL",
        description="Qdrant server URL; unset = Qdrant local mode on disk under the data folder.",
    )
    semantic_memory_api_key: SecretStr = Field(
        SecretStr(""), alias="CONCLAVE_SEMANTIC_MEMORY_API_KEY", description="Qdrant API key."
    )
    semantic_memory_path: Path | None = Field(
        None,
        alias="COLLECTOR_SEMANTIC_MEMORY_PATH",
        description="Folder of the local-mode semantic memory; default <CONCLAVE_DATA_DIR>/qdrant.",
    )
    semantic_collection_prefix: str = Field(
        "conclave_",
        alias="COLLECTOR_SEMANTIC_COLLECTION_PREFIX",
        description="Prefix of every Qdrant collection name.",
    )
    embedder: str = Field(
        "hashing",
        alias="COLLECTOR_EMBEDDER",
        description="'hashing' (built in, lexical) or 'package.module:factory' for another model.",
    )
    embedding_dimensions: int = Field(
        384, ge=16, alias="COLLECTOR_EMBEDDING_DIMENSIONS", description="Hashing embedder size."
    )
    file_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        alias="COLLECTOR_FILE_ROOTS",
        description="Folders the `file` source may read, comma separated; default: the working "
        "folder and the data folder.",
    )
    edge_api_base: str = Field(
        "http://127.0.0.1:8050",
        alias="COLLECTOR_EDGE_API_BASE",
        description="Edge intake service address, for the `evidence` source.",
    )
    edge_api_token: SecretStr = Field(
        SecretStr(""),
        alias="COLLECTOR_EDGE_API_TOKEN",
        description="Bearer token the `evidence` source sends to the edge service.",
    )
    bridge_channels: dict[str, str] = Field(
        default_factory=lambda: {"edge_intake.evidence.created": "evidence_ingest"},
        alias="COLLECTOR_BRIDGE_CHANNELS",
        description='Bus channels turned into expeditions, JSON {"channel": "expedition_type"}; '
        "{} turns the bridge off.",
    )
    scheduler_poll_seconds: float = Field(
        1.0,
        gt=0,
        alias="COLLECTOR_SCHEDULER_POLL_SECONDS",
        description="How often schedules are checked for due ticks.",
    )
    load_entry_points: bool = Field(
        True,
        alias="COLLECTOR_LOAD_ENTRY_POINTS",
        description="Load expedition types and sources from the 'conclave.expeditions' and "
        "'conclave.sources' entry point groups.",
    )

    _split_roots = field_validator("file_roots", mode="before")(_split_csv)

    def resolved_semantic_memory_path(self) -> Path:
        """Where the local-mode semantic memory lives."""
        if self.semantic_memory_path is not None:
            return self.semantic_memory_path
        return self.data_dir / "qdrant"

    def resolved_file_roots(self) -> list[Path]:
        """Folders the `file` source may read."""
        return [root.resolve() for root in (self.file_roots or [Path.cwd(), self.data_dir])]


class GraphSettings(CommonSettings):
    """Graph dispatch service settings (spec 002, graph part)."""

    host: str = Field("127.0.0.1", alias="GRAPH_HOST", description="Listen address.")
    port: int = Field(8004, alias="GRAPH_PORT", description="Listen port.")


class EdgeSettings(CommonSettings):
    """Edge media intake service settings (spec 002, edge part)."""

    host: str = Field("127.0.0.1", alias="EDGE_HOST", description="Listen address.")
    port: int = Field(8050, alias="EDGE_PORT", description="Listen port.")
    blob_dir: Path | None = Field(
        None,
        alias="EDGE_BLOB_DIR",
        description="Content-addressed blob folder (shared volume in production); "
        "default <CONCLAVE_DATA_DIR>/blobs.",
    )
    max_upload_bytes: dict[str, int] = Field(
        default_factory=dict,
        alias="EDGE_MAX_UPLOAD_BYTES",
        description='Per-type file size limits as JSON, e.g. {"video": 4294967296}; '
        "types not named keep their defaults.",
    )
    max_files_per_request: int = Field(
        16, alias="EDGE_MAX_FILES_PER_REQUEST", description="Most file parts in one upload."
    )
    max_metadata_bytes: int = Field(
        65_536, alias="EDGE_MAX_METADATA_BYTES", description="Largest `metadata` form field."
    )
    parse_timeout_seconds: float = Field(
        30.0,
        alias="EDGE_PARSE_TIMEOUT_SECONDS",
        description="Longest a media parser may run on one file before the upload gets a 422.",
    )
    parse_memory_bytes: int = Field(
        2 * 1024**3,
        alias="EDGE_PARSE_MEMORY_BYTES",
        description="Address-space limit of each parser worker process.",
    )
    parser_workers: int = Field(
        2, alias="EDGE_PARSER_WORKERS", description="Parser worker processes per service process."
    )
    device_secrets: SecretStr = Field(
        SecretStr(""),
        alias="EDGE_DEVICE_SECRETS",
        description="HMAC signing secrets, comma separated 'device_id=secret'; a device listed "
        "here must sign its uploads.",
    )
    require_signature: bool = Field(
        False,
        alias="EDGE_REQUIRE_SIGNATURE",
        description="Refuse unsigned uploads from every device, not only those with a secret.",
    )
    signature_window_seconds: int = Field(
        300,
        alias="EDGE_SIGNATURE_WINDOW_SECONDS",
        description="Largest clock difference accepted in a signed request's timestamp.",
    )
    fsync_blobs: bool = Field(
        True,
        alias="EDGE_FSYNC_BLOBS",
        description="Flush each blob to disk before its Evidence Pack commits.",
    )

    def resolved_blob_dir(self) -> Path:
        """Where blobs live: ``EDGE_BLOB_DIR`` or ``<data_dir>/blobs``."""
        return self.blob_dir if self.blob_dir is not None else self.data_dir / "blobs"


class EdgeClientSettings(BaseSettings):
    """Edge client (``conclave edge``) settings: where the server is and where the outbox lives."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    api_url: str = Field(
        "http://127.0.0.1:8050",
        alias="CORE_EDGE_API_URL",
        description="Base URL of the edge intake service.",
    )
    api_token: SecretStr | None = Field(
        None,
        alias="CORE_EDGE_API_TOKEN",
        description="Bearer token of this device; no Authorization header when unset.",
    )
    outbox: Path | None = Field(
        None,
        alias="CONCLAVE_EDGE_OUTBOX",
        description="Outbox SQLite file; default edge-outbox.sqlite3 in the user's data directory.",
    )
    signing_secret: SecretStr | None = Field(
        None,
        alias="CONCLAVE_EDGE_SIGNING_SECRET",
        description="Per-device HMAC secret (the server's EDGE_DEVICE_SECRETS entry); signs "
        "every upload when set.",
    )
    timeout_seconds: float = Field(
        30.0,
        alias="CONCLAVE_EDGE_TIMEOUT_SECONDS",
        description="Connect, read and write time-out of each request.",
    )
    sync_every_seconds: float = Field(
        900.0,
        alias="CONCLAVE_EDGE_SYNC_SECONDS",
        description="Period of `conclave edge daemon`.",
    )
