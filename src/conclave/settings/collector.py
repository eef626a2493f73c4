"""Expedition (collector) service settings (spec 001)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from conclave.settings.common import CommonSettings, _split_csv


class SourceSecret(BaseModel):
    """A credential expedition parameters may name (``{"secret": "<name>"}``) without holding it."""

    value: SecretStr = Field(description="The header value sent, e.g. 'Bearer abc…'.")
    hosts: list[str] = Field(
        min_length=1,
        description="Host names the secret may be sent to (exact, case-insensitive): a source "
        "whose URL points elsewhere cannot use it.",
    )


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
        description="Qdrant server URL; unset = an embedded Qdrant Edge shard in the data folder.",
    )
    semantic_memory_api_key: SecretStr = Field(
        SecretStr(""), alias="CONCLAVE_SEMANTIC_MEMORY_API_KEY", description="Qdrant API key."
    )
    semantic_memory_path: Path | None = Field(
        None,
        alias="COLLECTOR_SEMANTIC_MEMORY_PATH",
        description="Folder of the embedded Qdrant Edge shard; default <CONCLAVE_DATA_DIR>/qdrant.",
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
        description="Extra folders the `file` source may read besides its inbox "
        "(<CONCLAVE_DATA_DIR>/inbox), comma separated; default none.",
    )
    file_max_bytes: int = Field(
        100 * 1024 * 1024,
        ge=1,
        alias="COLLECTOR_FILE_MAX_BYTES",
        description="Largest file the `file` source reads; a larger one fails the expedition.",
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
    source_secrets: dict[str, SourceSecret] = Field(
        default_factory=dict,
        alias="COLLECTOR_SOURCE_SECRETS",
        description='Named credentials for source headers, JSON {"name": {"value": "…", '
        '"hosts": ["api.example.org"]}}; parameters reference them as {"secret": "name"} and '
        "never hold the value.",
    )
    shared_collections: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["evidence"],
        alias="COLLECTOR_SHARED_COLLECTIONS",
        description="Collections every authenticated user may read and search (only operators "
        "and internal callers such as the Evidence bridge write them), comma separated.",
    )
    http_json_max_pages: int = Field(
        1000,
        ge=1,
        alias="COLLECTOR_HTTP_JSON_MAX_PAGES",
        description="Most pages one `http_json` source may read (its `max_pages` default); a "
        "request asking for more is refused.",
    )
    http_json_max_timeout_seconds: float = Field(
        60.0,
        gt=0,
        alias="COLLECTOR_HTTP_JSON_MAX_TIMEOUT_SECONDS",
        description="Longest `timeout_seconds` an `http_json` source may ask for (a whole page: "
        "connect, redirects, headers and body).",
    )
    http_json_max_retries: int = Field(
        5,
        ge=0,
        alias="COLLECTOR_HTTP_JSON_MAX_RETRIES",
        description="Most `retries` an `http_json` source may ask for.",
    )
    http_json_max_response_bytes: int = Field(
        10_485_760,
        ge=1024,
        alias="COLLECTOR_HTTP_JSON_MAX_RESPONSE_BYTES",
        description="Largest page body (after decompression) an `http_json` source reads; a "
        "larger one fails the source.",
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
    _split_shared = field_validator("shared_collections", mode="before")(_split_csv)

    def resolved_semantic_memory_path(self) -> Path:
        """Where the embedded semantic memory lives."""
        if self.semantic_memory_path is not None:
            return self.semantic_memory_path
        return self.data_dir / "qdrant"

    def resolved_file_inbox(self) -> Path:
        """The folder the `file` source reads by default (relative paths are taken inside it)."""
        return self.data_dir / "inbox"

    def resolved_file_roots(self) -> list[Path]:
        """Folders the `file` source may read: the inbox first, then the configured extras."""
        return [self.resolved_file_inbox(), *self.file_roots]
