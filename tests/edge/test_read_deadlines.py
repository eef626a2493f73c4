"""Read deadlines of the served app (slowloris): a real uvicorn server, as ``conclave serve`` and
``conclave up`` configure it, and a raw socket client that sends its request slowly."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from conclave.edge.app import create_app
from conclave.edge.blobs import SMALL_PART_BYTES
from conclave.platform.runtime import Platform
from conclave.platform.serving import server_config
from conclave.settings import EdgeSettings
from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import edge_settings

HEADER_SECONDS = 0.5
BODY_IDLE_SECONDS = 1.0
BODY_SECONDS = 2.0
MIN_RATE = 2000  # bytes per second
# "Cut off soon after the deadline", generous for a loaded 2-core CI machine; and not before it
# (the server's clock for a connection starts a moment before the client's does).
SLACK = 4.0
BOUNDARY = "slow-boundary"


@pytest.fixture
def embedded(sqlite_engine, memory_bus) -> Backend:
    """Deadlines do not depend on the store: SQLite is enough."""
    return Backend("embedded", sqlite_engine, memory_bus)


def _settings(data_dir: Path) -> EdgeSettings:
    return edge_settings(
        data_dir,
        header_timeout_seconds=HEADER_SECONDS,
        body_idle_timeout_seconds=BODY_IDLE_SECONDS,
        body_timeout_seconds=BODY_SECONDS,
        body_min_bytes_per_second=MIN_RATE,
    )


@asynccontextmanager
async def served(backend: Backend, settings: EdgeSettings) -> AsyncIterator[int]:
    """The edge app on a real socket, configured as the CLI serves it; yields the port."""
    async with served_app(backend, settings) as (port, _app):
        yield port


@asynccontextmanager
async def served_app(
    backend: Backend, settings: EdgeSettings
) -> AsyncIterator[tuple[int, FastAPI]]:
    """:func:`served`, yielding the app too."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        app = create_app(settings, platform=platform)
        server = uvicorn.Server(
            server_config(app, settings, host="127.0.0.1", port=port, lifespan="on")
        )
        task = asyncio.create_task(server.serve())

        async def started() -> bool:
            return server.started

        await eventually(started)
        try:
            yield port, app
        finally:
            server.should_exit = True
            await task


async def _drip(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """Send ``data`` one byte at a time; stops quietly when the server has closed."""
    try:
        for index in range(len(data)):
            writer.write(data[index : index + 1])
            await writer.drain()
            await asyncio.sleep(every)
    except ConnectionError:
        return


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed."""
    data = await asyncio.wait_for(reader.read(), timeout=30)
    return data, time.monotonic()


def _problem(answer: bytes) -> dict:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"application/problem+json" in head
    return json.loads(body)


def _upload_head(length: int) -> bytes:
    return (
        "POST /api/edge-intake/document HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {length}\r\n\r\n"
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="file"; filename="report.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
        "Field report: "
    ).encode()


def _temp_files(data_dir: Path) -> list[Path]:
    return list((data_dir / "blobs" / "tmp").glob("*.part"))


async def test_dripped_missing_and_huge_headers_are_cut_off(
    embedded: Backend, tmp_path: Path
) -> None:
    async with served(embedded, _settings(tmp_path)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        opened = time.monotonic()
        request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 10_000
        dripping = asyncio.create_task(_drip(writer, request, 0.05))
        answer, closed = await _answer(reader)
        dripping.cancel()
        writer.close()
        assert HEADER_SECONDS * 0.8 <= closed - opened < HEADER_SECONDS + SLACK
        assert _problem(answer)["code"] == "HEADER_TIMEOUT"

        # A connection that never sends a byte is closed too.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        opened = time.monotonic()
        answer, closed = await _answer(reader)
        writer.close()
        assert HEADER_SECONDS * 0.8 <= closed - opened < HEADER_SECONDS + SLACK
        assert _problem(answer)["code"] == "HEADER_TIMEOUT"

        # Headers far larger than any client needs are refused as soon as they pass the cap,
        # however fast they come.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        huge = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(1000))
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + huge)
        answer, _closed = await _answer(reader)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "HEADERS_TOO_LARGE"

        # A kept-alive connection serves request after request, each in time, for longer than
        # the header deadline; headers of a normal size pass.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(4):
                response = await client.get("/health", headers={"X-Big": "b" * 16_000})
                assert response.status_code == 200
                await asyncio.sleep(HEADER_SECONDS / 2)


@pytest.mark.parametrize("pace", ["dripped", "idle"])
async def test_a_slow_body_gets_408_and_its_temporary_file_is_removed(
    embedded: Backend, tmp_path: Path, pace: str
) -> None:
    async with served(embedded, _settings(tmp_path)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Past the size a part is held in memory: the edge holds a temporary file for it.
        writer.write(_upload_head(1_000_000) + b"x" * (SMALL_PART_BYTES + 1))
        await writer.drain()
        started = time.monotonic()
        await eventually(lambda: _async(_temp_files(tmp_path)))
        if pace == "dripped":  # one byte every 0.1 s: never idle, far below the minimum rate
            sending = asyncio.create_task(_drip(writer, b"x" * 100_000, 0.1))
            deadline = BODY_SECONDS
        else:
            sending = None
            deadline = BODY_IDLE_SECONDS
        answer, closed = await _answer(reader)
        if sending is not None:
            sending.cancel()
        writer.close()
        assert deadline * 0.8 <= closed - started < deadline + SLACK
        assert _problem(answer)["code"] == "BODY_TIMEOUT"
        await eventually(lambda: _async(not _temp_files(tmp_path)))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            events = (await client.get("/api/edge-intake/events")).json()
    assert events["count"] == 0


async def test_uploads_at_a_fair_rate_are_not_cut(embedded: Backend, tmp_path: Path) -> None:
    report = b"Field report: the dam is intact.\n" * 600  # ~20 KB
    body = (
        (
            f"--{BOUNDARY}\r\n"
            'Content-Disposition: form-data; name="file"; filename="report.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + report
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )

    async def paced() -> AsyncIterator[bytes]:
        # ~7 KB/s for about 3 s: longer than BODY_SECONDS, well above MIN_RATE.
        for start in range(0, len(body), 2000):
            yield body[start : start + 2000]
            await asyncio.sleep(0.3)

    async with (
        served(embedded, _settings(tmp_path)) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        started = time.monotonic()
        response = await client.post(
            "/api/edge-intake/document",
            content=paced(),
            headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
        )
        assert time.monotonic() - started > BODY_SECONDS
        assert response.status_code == 200, response.text
        image = await client.post(
            "/api/edge-intake/image", files={"file": ("a.png", samples.png())}
        )
        assert image.status_code == 200, image.text
        evidence_id = response.json()["evidence_ids"][0]
        content = await client.get(f"/api/edge-intake/evidence/{evidence_id}/content")
    assert content.content == report
    assert _temp_files(tmp_path) == []


async def _async(value: object) -> object:
    return value
