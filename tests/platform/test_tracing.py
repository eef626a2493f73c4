"""Optional OpenTelemetry tracing: off unless configured; on, a server span per request carrying
the request and correlation ids, exported over OTLP by a real service process."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from conclave.platform.logs import JsonFormatter
from conclave.platform.tracing import (
    CORRELATION_ATTRIBUTE,
    REQUEST_ATTRIBUTE,
    SpanIdsMiddleware,
    Tracing,
    trace_log_record_factory,
    tracing_available,
)
from conclave.settings import CommonSettings
from tests.conftest import serve_app
from tests.httpserver import free_port
from tests.platform.conftest import demo_app

needs_sdk = pytest.mark.skipif(
    not tracing_available(),
    reason="the OpenTelemetry SDK is not installed (pip install -e '.[otel]')",
)
OTEL_VARIABLES = [
    field.alias
    for field in CommonSettings.model_fields.values()
    if field.alias and field.alias.startswith(("OTEL_", "CONCLAVE_OTEL_"))
]


@pytest.fixture(autouse=True)
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start from an environment that configures no tracing."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("environment", "exporters"),
    [
        ({}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://otel:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel"}, ()),
    ],
    ids=["nothing", "endpoint", "traces-endpoint", "console", "two", "none", "sdk-disabled"],
)
def test_standard_variables_decide_whether_tracing_is_on(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], exporters: tuple[str, ...]
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert CommonSettings().traces_exporters() == exporters


def test_traces_endpoint_wins_over_the_base_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/")
    assert CommonSettings().otlp_traces_url() == "http://otel:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://vendor.example/traces")
    assert CommonSettings().otlp_traces_url() == "https://vendor.example/traces"


def build_app(tracing: Tracing | None = None) -> FastAPI:
    app = demo_app(tracing)

    @app.get("/items/{item_id}")
    async def read_item(item_id: int) -> dict[str, int]:
        """Read an item."""
        logging.getLogger("demo").info("reading an item")
        return {"id": item_id}

    @app.get("/boom")
    async def boom() -> None:
        """Fail unexpectedly."""
        raise RuntimeError("boom")

    return app


def test_unconfigured_tracing_adds_nothing_to_the_request_path() -> None:
    app = build_app()
    assert all(m.cls is not SpanIdsMiddleware for m in app.user_middleware)


@pytest.fixture
def exporter() -> Any:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
async def traced(exporter: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The demo service with tracing on, exporting to memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing("demo", provider, frozenset({"/health", "/metrics"}))
    async with serve_app(build_app(tracing)) as client:
        yield client
    provider.shutdown()


def server_spans(exporter: Any) -> list[Any]:
    from opentelemetry.trace import SpanKind

    return [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]


@needs_sdk
async def test_request_span_carries_the_correlation_and_request_ids(
    traced: httpx.AsyncClient, exporter: Any
) -> None:
    response = await traced.get("/items/7", headers={"X-Correlation-ID": "upload-42"})

    [span] = server_spans(exporter)
    assert span.name == "GET /items/{item_id}"
    assert span.attributes[CORRELATION_ATTRIBUTE] == "upload-42"
    assert span.attributes[REQUEST_ATTRIBUTE] == response.headers["x-request-id"]
    assert span.attributes["http.route"] == "/items/{item_id}"
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["conclave.service"] == "demo"


@needs_sdk
async def test_incoming_trace_context_is_continued(
    traced: httpx.AsyncClient, exporter: Any
) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    await traced.get("/items/1", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})

    [span] = server_spans(exporter)
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == parent_id


@needs_sdk
async def test_failed_request_span_is_an_error_and_probes_get_none(
    traced: httpx.AsyncClient, exporter: Any
) -> None:
    from opentelemetry.trace import StatusCode

    failed = await traced.get("/boom")
    await traced.get("/metrics")  # excluded, like /health

    [span] = server_spans(exporter)
    assert span.name == "GET /boom"
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["http.response.status_code"] == 500
    assert span.attributes[REQUEST_ATTRIBUTE] == failed.headers["x-request-id"]


@needs_sdk
async def test_log_lines_inside_a_span_carry_its_trace_id(
    traced: httpx.AsyncClient, exporter: Any
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("demo")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    original = logging.getLogRecordFactory()
    logging.setLogRecordFactory(trace_log_record_factory(original))
    try:
        await traced.get("/items/3", headers={"X-Correlation-ID": "c-3"})
    finally:
        logging.setLogRecordFactory(original)
        logger.removeHandler(handler)

    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    [span] = server_spans(exporter)
    assert line["message"] == "reading an item"
    assert line["correlation_id"] == "c-3"
    assert line["trace_id"] == format(span.context.trace_id, "032x")


class _OtlpReceiver(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A real OTLP/HTTP endpoint on loopback that keeps what it receives."""
    bodies: list[bytes] = []
    handler = type("Receiver", (_OtlpReceiver,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def _execute_spans(bodies: list[bytes]) -> list[tuple[str, str, dict[str, Any]]]:
    """The exported server spans of the test's ``POST /execute``."""
    return [
        span
        for span in _spans(bodies)
        if span[2].get("url.path") == "/execute"
        and span[2].get(CORRELATION_ATTRIBUTE) == "otel-e2e-1"
    ]


def _spans(bodies: list[bytes]) -> list[tuple[str, str, dict[str, Any]]]:
    """(service.name, span name, attributes) of every exported span."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    found = []
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {
                        a.key: a.value.string_value or a.value.int_value for a in span.attributes
                    }
                    found.append((resource["service.name"], span.name, attributes))
    return found


@asynccontextmanager
async def served_gateway(
    tmp_path: Path, endpoint: str, schedule_delay_ms: int, stderr: list[bytes]
) -> AsyncIterator[httpx.AsyncClient]:
    """``conclave serve gateway`` exporting to ``endpoint``; stopped with SIGTERM at the end."""
    port = free_port()
    environment = {
        **os.environ,
        "CONCLAVE_DATA_DIR": str(tmp_path),
        "CONCLAVE_AUTH": "disabled",
        "CONCLAVE_DATABASE_URL": "",
        "CONCLAVE_BUS_URL": "memory://",
        "GATEWAY_LOAD_ENTRY_POINTS": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": str(schedule_delay_ms),  # read by the SDK
    }
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "conclave.cli.main", "serve", "gateway", "--port", str(port)],
        env=environment,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for _ in range(300):
                try:
                    if (await client.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            yield client
    finally:
        process.terminate()
        _, error = await asyncio.wait_for(process.communicate(), timeout=30)
        stderr.append(error)


async def _traced_execute(client: httpx.AsyncClient) -> httpx.Response:
    response = await client.post(
        "/execute",
        json={"tool": "echo", "args": {"message": "hi"}},
        headers={"X-Correlation-ID": "otel-e2e-1"},
    )
    assert response.status_code == 200, response.text
    return response


@needs_sdk
async def test_served_gateway_exports_its_spans_over_otlp(
    tmp_path: Path, otlp_receiver: tuple[str, list[bytes]]
) -> None:
    endpoint, bodies = otlp_receiver
    stderr: list[bytes] = []
    async with served_gateway(tmp_path, endpoint, 100, stderr) as client:  # export within 0.1 s
        response = await _traced_execute(client)
        for _ in range(100):
            if _execute_spans(bodies):
                break
            await asyncio.sleep(0.1)
    [(service, name, attributes)] = _execute_spans(bodies)
    assert name == "POST /execute"
    assert service == "conclave-gateway"
    assert attributes[REQUEST_ATTRIBUTE] == response.headers["x-request-id"]
    assert attributes["http.response.status_code"] == 200
    assert not [s for s in _spans(bodies) if s[2].get("url.path") == "/health"], "not traced"
    assert b"Traceback" not in stderr[0], stderr[0].decode()


@needs_sdk
async def test_spans_still_buffered_are_exported_when_the_service_stops(
    tmp_path: Path, otlp_receiver: tuple[str, list[bytes]]
) -> None:
    endpoint, bodies = otlp_receiver
    stderr: list[bytes] = []
    async with served_gateway(tmp_path, endpoint, 600_000, stderr) as client:  # no timed export
        await _traced_execute(client)
        await asyncio.sleep(0.5)
        assert _execute_spans(bodies) == []  # still in the exporter's buffer
    [(_, name, _)] = _execute_spans(bodies)  # SIGTERM: exported on the way out
    assert name == "POST /execute"
