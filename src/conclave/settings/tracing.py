"""The OpenTelemetry settings every service shares: the standard variables
(opentelemetry.io/docs/specs/otel/configuration/), read like every other setting. Tracing needs
the optional ``otel`` extra."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import NoDecode, SettingsConfigDict

from conclave.settings.documented_names import DocumentedNamesSettings


class TracingSettings(DocumentedNamesSettings):
    """Where spans go, if anywhere: a base of :class:`~conclave.settings.common.CommonSettings`
    (which splits ``CONCLAVE_OTEL_EXCLUDED_PATHS`` at commas like its other lists)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    otel_exporter_otlp_endpoint: str | None = Field(
        None,
        alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="Base URL of an OTLP/HTTP receiver (spans go to <url>/v1/traces); setting "
        "it turns tracing on.",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        None,
        alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        description="Full OTLP/HTTP URL for spans; wins over OTEL_EXPORTER_OTLP_ENDPOINT and also "
        "turns tracing on.",
    )
    otel_exporter_otlp_headers: SecretStr = Field(
        SecretStr(""),
        alias="OTEL_EXPORTER_OTLP_HEADERS",
        description="Headers sent with every export, comma separated 'key=value' (e.g. an API "
        "key of a tracing vendor).",
    )
    otel_traces_exporter: str | None = Field(
        None,
        alias="OTEL_TRACES_EXPORTER",
        description="Span exporters, comma separated: 'otlp' and/or 'console' turn tracing on; "
        "'none' keeps it off even when an endpoint is set.",
    )
    otel_service_name: str | None = Field(
        None,
        alias="OTEL_SERVICE_NAME",
        description="service.name of the spans; default 'conclave-<service>'.",
    )
    otel_sdk_disabled: bool = Field(
        False, alias="OTEL_SDK_DISABLED", description="true turns tracing off whatever else is set."
    )
    otel_excluded_paths: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["/health", "/metrics"],
        alias="CONCLAVE_OTEL_EXCLUDED_PATHS",
        description="Request paths that get no span (probes and scrapes), comma separated.",
    )

    def traces_exporters(self) -> tuple[str, ...]:
        """The span exporters the OpenTelemetry settings ask for (``otlp``, ``console``); empty
        when tracing is off. Exporters this build does not ship are ignored."""
        if self.otel_sdk_disabled:
            return ()
        if self.otel_traces_exporter is not None:
            names = [n.strip().lower() for n in self.otel_traces_exporter.split(",")]
            if "none" in names:
                return ()
            return tuple(dict.fromkeys(n for n in names if n in ("otlp", "console")))
        if self.otel_exporter_otlp_traces_endpoint or self.otel_exporter_otlp_endpoint:
            return ("otlp",)
        return ()

    def otlp_traces_url(self) -> str:
        """Where OTLP/HTTP spans are sent (the specification's default: a local collector)."""
        if self.otel_exporter_otlp_traces_endpoint:
            return self.otel_exporter_otlp_traces_endpoint
        base = self.otel_exporter_otlp_endpoint or "http://localhost:4318"
        return base.rstrip("/") + "/v1/traces"
