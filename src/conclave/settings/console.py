"""Operator console settings (issue 21): where the four services are, and the console's session."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from conclave.settings.common import CommonSettings

MIN_SESSION_KEY_CHARS = 32


class ConsoleSettings(CommonSettings):
    """The console holds no state of its own: it talks to the services over their public APIs
    with the signed-in user's credentials, kept in a sealed session cookie."""

    host: str = Field("127.0.0.1", alias="CONSOLE_HOST", description="Listen address.")
    port: int = Field(8090, alias="CONSOLE_PORT", description="Listen port.")
    gateway_url: str = Field(
        "http://127.0.0.1:8020", alias="CONSOLE_GATEWAY_URL", description="Tool gateway base URL."
    )
    collector_url: str = Field(
        "http://127.0.0.1:8008",
        alias="CONSOLE_COLLECTOR_URL",
        description="Expedition service base URL.",
    )
    graph_url: str = Field(
        "http://127.0.0.1:8004", alias="CONSOLE_GRAPH_URL", description="Graph dispatch base URL."
    )
    edge_url: str = Field(
        "http://127.0.0.1:8050", alias="CONSOLE_EDGE_URL", description="Edge intake base URL."
    )
    session_key: SecretStr = Field(
        SecretStr(""),
        alias="CONSOLE_SESSION_KEY",
        description=f"Secret (at least {MIN_SESSION_KEY_CHARS} characters) that seals the "
        "session cookie; the same on every console replica. Empty: a random key per process, "
        "so sessions end when the console restarts.",
    )
    session_hours: float = Field(
        8.0,
        gt=0,
        le=24 * 30,
        alias="CONSOLE_SESSION_HOURS",
        description="How long a sign-in lasts; a JWT's own expiry ends it sooner.",
    )
    secure_cookie: Literal["auto", "always", "never"] = Field(
        "auto",
        alias="CONSOLE_SECURE_COOKIE",
        description="Mark the session cookie Secure: 'auto' when the request came over HTTPS "
        "(directly or through a proxy's X-Forwarded-Proto).",
    )
    poll_seconds: float = Field(
        5.0,
        ge=1,
        le=3600,
        alias="CONSOLE_POLL_SECONDS",
        description="How often live parts of a page (the overview) refresh themselves.",
    )
    upstream_timeout_seconds: float = Field(
        10.0,
        gt=0,
        alias="CONSOLE_UPSTREAM_TIMEOUT_SECONDS",
        description="Time budget of one request to a service; past it the page shows the "
        "service as unavailable.",
    )
    max_upload_bytes: dict[str, int] = Field(
        default_factory=dict,
        alias="CONSOLE_MAX_UPLOAD_BYTES",
        description="Per-type file size limits of the upload form as JSON, the same as the "
        "edge's `EDGE_MAX_UPLOAD_BYTES` (set both alike); types not named keep their defaults.",
    )
    upload_timeout_seconds: float = Field(
        120.0,
        gt=0,
        alias="CONSOLE_UPLOAD_TIMEOUT_SECONDS",
        description="Longest the console waits for the edge's answer once an upload's last "
        "byte is sent on (the edge parses the file meanwhile).",
    )

    @field_validator("session_key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        secret = value.get_secret_value()
        if secret and len(secret) < MIN_SESSION_KEY_CHARS:
            raise ValueError(
                f"CONSOLE_SESSION_KEY must be at least {MIN_SESSION_KEY_CHARS} characters"
            )
        return value

    def service_urls(self) -> dict[str, str]:
        """Base URL of each service, by the name the console shows."""
        return {
            "gateway": self.gateway_url.rstrip("/"),
            "collector": self.collector_url.rstrip("/"),
            "graph": self.graph_url.rstrip("/"),
            "edge": self.edge_url.rstrip("/"),
        }
