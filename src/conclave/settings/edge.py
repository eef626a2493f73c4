"""Edge media intake service settings (spec 002, edge part)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from conclave.settings.common import CommonSettings


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
    parse_request_seconds: float = Field(
        120.0,
        alias="EDGE_PARSE_REQUEST_SECONDS",
        description="Longest the parsers may spend on all the files of one upload together; "
        "past it the upload gets a 422 (each file also has its own time-out).",
    )
    parser_queue_seconds: float = Field(
        10.0,
        alias="EDGE_PARSER_QUEUE_SECONDS",
        description="Longest an upload waits for a free parser worker before it is refused with "
        "503 PARSERS_BUSY and Retry-After.",
    )
    parse_memory_bytes: int = Field(
        2 * 1024**3,
        alias="EDGE_PARSE_MEMORY_BYTES",
        description="Address-space limit of each parser worker process.",
    )
    parser_workers: int = Field(
        2, alias="EDGE_PARSER_WORKERS", description="Parser worker processes per service process."
    )
    parser_prestart: bool = Field(
        True,
        alias="EDGE_PARSER_PRESTART",
        description="Start one parser worker in the background at start-up instead of at the "
        "first upload (which then waits about a second for it).",
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

    pack_log: bool = Field(
        True,
        alias="EDGE_PACK_LOG",
        description="Queue every new Evidence Pack for the transparency log 'packs' in the "
        "transaction that stores it and publish the log under /logs/packs (docs/transparency.md). "
        "On PostgreSQL the log's signer key must be in CONCLAVE_TLOG_SIGNER_KEYS (the edge does "
        "not start without it); embedded, a key is generated in the data folder.",
    )

    def transparency_logs(self) -> dict[str, str]:
        """The log of Evidence Packs, ``packs``, unless ``EDGE_PACK_LOG`` is off."""
        return {"packs": "EDGE_PACK_LOG"} if self.pack_log else {}

    def resolved_blob_dir(self) -> Path:
        """Where blobs live: ``EDGE_BLOB_DIR`` or ``<data_dir>/blobs``."""
        return self.blob_dir if self.blob_dir is not None else self.data_dir / "blobs"
