"""Optional OpenTelemetry tracing of every service's HTTP requests, carrying Conclave's ids.

Tracing is off unless the standard OpenTelemetry variables ask for an exporter
(:meth:`CommonSettings.traces_exporters`) and the ``otel`` extra is installed
(``pip install 'conclave[otel]'``). Off, no SDK is imported, FastAPI's own telemetry is switched
off and no middleware is added: a request pays nothing for it.

On, FastAPI's native telemetry makes the SERVER span of each request (named ``METHOD /route``,
standard HTTP attributes, W3C ``traceparent`` honoured, sensitive query values redacted) and
Conclave adds the request and correlation ids to it. Per process, the first provider becomes the
global one, outgoing ``httpx`` requests carry ``traceparent`` (so a gateway → collector call is
one trace), and log records made inside a span gain ``trace_id`` / ``span_id`` fields.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conclave import __version__
from conclave.platform.logs import correlation_id_var, request_id_var
from conclave.settings import CommonSettings

if TYPE_CHECKING:  # FastAPI has had native telemetry since 0.14x; older ones ignore the argument
    from fastapi.telemetry import TelemetryConfig

log = logging.getLogger(__name__)

CORRELATION_ATTRIBUTE = "conclave.correlation_id"
_FLUSH_TIMEOUT_MS = 5_000  # an exporter that does not answer must not hold up a shutdown
REQUEST_ATTRIBUTE = "conclave.request_id"
SERVICE_ATTRIBUTE = "conclave.service"

# The OpenTelemetry SDK is an optional extra: it is imported inside the functions that run only
# when tracing is on, never at module level. (The API package is a dependency of FastAPI.)

# Process-wide state, filled on first use (never at import): one provider per service name
# (``conclave up`` runs four services in one process), and whether the process-wide hooks (global
# provider, httpx propagation, log fields) are in place.
_providers: dict[str, Any] = {}
_process_hooks: set[str] = set()


def tracing_available() -> bool:
    """Whether the OpenTelemetry SDK (the ``otel`` extra) is installed."""
    return importlib.util.find_spec("opentelemetry.sdk") is not None


@dataclass(frozen=True)
class Tracing:
    """How a service app traces its requests: ``provider`` is an OpenTelemetry SDK
    ``TracerProvider``, or ``None`` for off."""

    service: str
    provider: Any = None
    excluded_paths: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_settings(cls, settings: CommonSettings, service: str) -> Tracing:
        """Tracing as the settings configure it (one provider per service and process)."""
        excluded = frozenset(settings.otel_excluded_paths)
        if not settings.traces_exporters():
            return cls(service)
        if not tracing_available():
            log.warning(
                "OpenTelemetry exporting is configured but its SDK is not installed; "
                "install conclave[otel] to trace requests",
                extra={"service": service},
            )
            return cls(service)
        return cls(service, _default_provider(settings, service), excluded)

    @property
    def enabled(self) -> bool:
        """Whether requests are traced."""
        return self.provider is not None

    def fastapi_telemetry(self) -> TelemetryConfig:
        """The ``telemetry`` argument of ``FastAPI()``: its native request spans on this
        provider, or all of its telemetry off."""
        if not self.enabled:
            return {"tracing": False, "metrics": False, "logs": False}
        excluded = self.excluded_paths

        def exclude(scope: MutableMapping[str, Any]) -> bool:
            return scope.get("path") in excluded

        return {
            "tracer_provider": self.provider,
            "tracing": True,
            "metrics": False,  # Prometheus at /metrics is the metrics interface
            "logs": False,  # logs are JSON lines on stderr
            "auto_configure": False,  # exporters come from Conclave's settings
            "exclude": exclude,
        }

    async def flush(self) -> None:
        """Export the spans still buffered (called when the app stops).

        Exporters batch spans for a few seconds. The SDK flushes at interpreter exit, but uvicorn
        ends a graceful shutdown by raising the signal it caught again, so exit handlers never
        run and the last seconds of spans were lost.
        """
        if self.enabled:
            await asyncio.to_thread(self.provider.force_flush, _FLUSH_TIMEOUT_MS)

    def install(self, app: FastAPI) -> None:
        """Add the ids to each request's span; call it before the request-context middleware
        is added, so this middleware runs inside it and sees the ids."""
        if self.enabled:
            app.add_middleware(SpanIdsMiddleware, service=self.service)


class SpanIdsMiddleware:
    """Put the request id, correlation id, service name and route template on the request's
    span (the current one, made by FastAPI's telemetry around the whole middleware stack)."""

    def __init__(self, app: ASGIApp, service: str) -> None:
        from opentelemetry import trace

        self.app = app
        self.service = service
        self._current_span: Callable[[], Any] = trace.get_current_span

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        span = self._current_span() if scope["type"] == "http" else None
        if span is None or not span.is_recording():
            await self.app(scope, receive, send)
            return
        span.set_attribute(SERVICE_ATTRIBUTE, self.service)
        if (request_id := request_id_var.get()) is not None:
            span.set_attribute(REQUEST_ATTRIBUTE, request_id)
        if (correlation_id := correlation_id_var.get()) is not None:
            span.set_attribute(CORRELATION_ATTRIBUTE, correlation_id)

        async def send_naming(message: Message) -> None:
            # A route answered by a middleware short of the router (the gateway's fast lane)
            # is unknown to FastAPI's telemetry, which ends the span with the response: name it
            # after the route template before then.
            if message["type"] == "http.response.start":
                template = getattr(scope.get("route"), "path", None)
                if template:
                    span.set_attribute("http.route", template)
                    span.update_name(f"{scope.get('method', 'GET')} {template}")
            await send(message)

        await self.app(scope, receive, send_naming)


def _parse_headers(raw: str) -> dict[str, str]:
    headers = {}
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers[unquote(key.strip())] = unquote(value.strip())
    return headers


def _default_provider(settings: CommonSettings, service: str) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    name = settings.otel_service_name or f"conclave-{service}"
    if name in _providers:
        return _providers[name]
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        # The host process set OpenTelemetry up itself (e.g. ``opentelemetry-instrument``):
        # use its provider and exporters rather than exporting everything twice.
        _providers[name] = current
        return current
    provider = TracerProvider(
        resource=Resource.create({"service.name": name, "service.version": __version__})
    )
    for exporter_name in settings.traces_exporters():
        if exporter_name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter: Any = OTLPSpanExporter(
                endpoint=settings.otlp_traces_url(),
                headers=_parse_headers(settings.otel_exporter_otlp_headers.get_secret_value()),
            )
        else:
            exporter = ConsoleSpanExporter(service_name=name)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _providers[name] = provider
    _install_process_hooks(provider)
    return provider


def _install_process_hooks(provider: Any) -> None:
    if "installed" in _process_hooks:
        return
    _process_hooks.add("installed")
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    if importlib.util.find_spec("opentelemetry.instrumentation.httpx") is not None:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    else:
        log.warning("opentelemetry-instrumentation-httpx is missing: no trace context on calls")
    logging.setLogRecordFactory(trace_log_record_factory(logging.getLogRecordFactory()))


def trace_log_record_factory(
    factory: Callable[..., logging.LogRecord],
) -> Callable[..., logging.LogRecord]:
    """Wrap a log record factory so records made inside a span carry ``trace_id`` and
    ``span_id`` (hex, as tracing back-ends show them), which the JSON log format prints."""
    from opentelemetry import trace

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return record

    return make_record
