"""Edge client settings (the device side of spec 002)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from conclave.settings.documented_names import DocumentedNamesSettings


class EdgeClientSettings(DocumentedNamesSettings):
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
    device_id: str | None = Field(
        None,
        alias="CONCLAVE_EDGE_DEVICE_ID",
        description="The id the server knows this device by when it names it by its token (the "
        "device of its CONCLAVE_API_TOKENS entry, or the JWT's sub); the log's entries of its "
        "packs are checked against it. Without a token, the outbox's own device id.",
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
