"""What every service's HTTP edge guarantees: problem+json errors, body limits, ids, metrics."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from conclave.platform.problems import PROBLEM_MEDIA_TYPE
from tests.conftest import serve_app
from tests.httpserver import running_server
from tests.platform.conftest import demo_app

MAX_BODY = 200_000


class Item(BaseModel):
    name: str


def build_app() -> FastAPI:
    app = demo_app(max_body_bytes=MAX_BODY)

    @app.post("/items")
    async def create_item(item: Item) -> Item:
        """Echo an item."""
        return item

    @app.get("/items/{item_id}")
    async def read_item(item_id: int) -> dict[str, int]:
        """Read an item."""
        return {"id": item_id}

    @app.get("/boom")
    async def boom() -> None:
        """Fail unexpectedly."""
        raise RuntimeError("connection string postgres://admin:hunter2@db")

    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(build_app()) as client:
        yield client


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body: dict[str, object] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["request_id"] == response.headers["x-request-id"]
    return body


async def test_body_over_the_limit_is_refused_by_content_length(
    client: httpx.AsyncClient,
) -> None:
    body = b'{"name": "' + b"x" * MAX_BODY + b'"}'
    response = await client.post("/items", content=body)
    assert_problem(response, 413, "PAYLOAD_TOO_LARGE")


async def test_chunked_body_over_the_limit_is_refused(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": "'
        for _ in range(30):
            yield b"x" * 10_000
        yield b'"}'

    response = await client.post(
        "/items", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "PAYLOAD_TOO_LARGE")


def _send_whole_request(url: str, head: bytes, body_chunks: list[bytes]) -> bytes:
    """Write the whole request, as a client that does not read while it sends, then read the
    answer to its end; the connection error, if any, is raised."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(head)
        for chunk in body_chunks:
            connection.sendall(chunk)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_client_still_sending_reads_its_413(chunked: bool) -> None:
    # Answered and closed while the client still sent, the connection was reset under the
    # client (often before it read the 413: an MCP SDK saw a read error half of the time). The
    # rest of the body is read and dropped first (up to 8 MiB beyond the limit).
    body = b'{"name": "' + b"x" * (4 * MAX_BODY) + b'"}'
    if chunked:
        framing = b"transfer-encoding: chunked\r\n"
        pieces = [body[i : i + 50_000] for i in range(0, len(body), 50_000)]
        chunks = [b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces] + [b"0\r\n\r\n"]
    else:
        framing = b"content-length: %d\r\n" % len(body)
        chunks = [body]
    head = b"POST /items HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    async with running_server(build_app()) as url:
        for _ in range(5):  # the reset was a race: lost about every other time
            answer = await asyncio.to_thread(
                _send_whole_request, url, head + framing + b"\r\n", chunks
            )
            assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
            assert b'"code":"PAYLOAD_TOO_LARGE"' in answer.replace(b" ", b"")


async def test_body_under_the_limit_is_accepted(client: httpx.AsyncClient) -> None:
    response = await client.post("/items", json={"name": "x" * (MAX_BODY - 100)})
    assert response.status_code == 200


@pytest.mark.parametrize("body", [b'{"name": ', b"[" * 100_000], ids=["truncated", "deep"])
async def test_unparseable_json_is_a_400(client: httpx.AsyncClient, body: bytes) -> None:
    response = await client.post(
        "/items", content=body, headers={"content-type": "application/json"}
    )
    assert_problem(response, 400, "MALFORMED_JSON")


async def test_schema_violation_is_a_422_with_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/items", json={"name": 5})
    body = assert_problem(response, 422, "VALIDATION_FAILED")
    assert body["errors"] == [
        {"field": "body.name", "message": "Input should be a valid string", "type": "string_type"}
    ]


async def test_unknown_route_is_a_404_problem(client: httpx.AsyncClient) -> None:
    body = assert_problem(await client.get("/nowhere"), 404, "NOT_FOUND")
    assert body["instance"] == "/nowhere"


async def test_unexpected_error_is_a_500_without_its_details(client: httpx.AsyncClient) -> None:
    response = await client.get("/boom")
    body = assert_problem(response, 500, "INTERNAL_ERROR")
    assert body["detail"] == "An unexpected error occurred."
    assert "hunter2" not in response.text
    assert "RuntimeError" not in response.text


async def test_request_and_correlation_ids(client: httpx.AsyncClient) -> None:
    plain = await client.get("/items/1")
    assert plain.headers["x-request-id"]
    assert plain.headers["x-correlation-id"] == plain.headers["x-request-id"]

    traced = await client.get("/items/1", headers={"X-Correlation-ID": "trace-42"})
    assert traced.headers["x-correlation-id"] == "trace-42"
    assert traced.headers["x-request-id"] != plain.headers["x-request-id"]

    forged = await client.get("/items/1", headers={"X-Correlation-ID": "bad id\twith spaces"})
    assert forged.headers["x-correlation-id"] == forged.headers["x-request-id"]


async def test_metrics_count_requests_by_route_template(client: httpx.AsyncClient) -> None:
    for item_id in (1, 2, 3):
        await client.get(f"/items/{item_id}")
    await client.get("/boom")

    text = (await client.get("/metrics")).text

    assert (
        'conclave_demo_http_requests_total{method="GET",route="/items/{item_id}",status="200"} 3.0'
        in text
    )
    assert 'conclave_demo_http_requests_total{method="GET",route="/boom",status="500"} 1.0' in text
    assert "/items/1" not in text
