"""Helpers for the edge client tests: the real edge app in-process or on a socket, media files."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import text

from conclave.edge.app import create_app
from conclave.edge_client import EdgeClient, Envelope, RetryPolicy
from conclave.platform.runtime import Platform
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_settings

BASE_URL = "http://127.0.0.1"
# Retries due after 1-2 s of the (fake) clock: tests move the clock instead of waiting.
FAST_RETRY = RetryPolicy(base_seconds=2.0, max_seconds=60.0, jitter=0.5)


class FakeClock:
    """Unix seconds that only move when told to."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@asynccontextmanager
async def edge_server(backend: Backend, data_dir: Path, **overrides: Any) -> AsyncIterator[FastAPI]:
    """The real edge intake app on the backend, lifespan running (for in-process transports)."""
    settings = edge_settings(data_dir, **overrides)
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        app = create_app(settings, platform=platform)
        async with app.router.lifespan_context(app):
            yield app


def in_process_client(app: FastAPI, **kwargs: Any) -> EdgeClient:
    """An ``EdgeClient`` talking to ``app`` through ``httpx.ASGITransport``."""
    transport = kwargs.pop("transport", None) or httpx.ASGITransport(app=app)
    return EdgeClient(BASE_URL, transport=transport, **kwargs)


@asynccontextmanager
async def socket_server(app: FastAPI) -> AsyncIterator[int]:
    """Serve ``app`` (lifespan already running) with uvicorn on a free local port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


def free_port() -> int:
    """A local port nobody listens on (bound and released at once)."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def media_files(folder: Path, count: int, prefix: str = "shot") -> list[Path]:
    """``count`` distinct small PNG files."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"{prefix}-{index}.png"
        path.write_bytes(samples.png(8 + index % 64, 8 + index // 64))
        paths.append(path)
    return paths


def envelopes(paths: list[Path], **metadata: Any) -> list[Envelope]:
    """Image envelopes for ``paths``."""
    return [Envelope.for_file("image", path, metadata or None) for path in paths]


async def server_packs(backend: Backend) -> dict[str, list[str]]:
    """Evidence ids stored on the server, per idempotency key."""
    packs: dict[str, list[str]] = {}
    async with backend.engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT idempotency_key, evidence_id FROM edge_evidence_packs ORDER BY chain_seq")
        )
        for key, evidence_id in rows:
            packs.setdefault(key, []).append(evidence_id)
    return packs


class FailFirst(httpx.AsyncBaseTransport):
    """Answers the first ``count`` uploads with ``status`` itself (a broken proxy or an overloaded
    server in front of the app); everything else reaches the real app."""

    def __init__(self, inner: httpx.AsyncBaseTransport, count: int, status: int = 500) -> None:
        self.inner, self.count, self.status = inner, count, status
        self.uploads = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.uploads += 1
            if self.uploads <= self.count:
                await request.aread()
                body = {"status": self.status, "code": "UPSTREAM", "detail": "try later"}
                return httpx.Response(self.status, json=body, headers={"Retry-After": "1"})
        return await self.inner.handle_async_request(request)


class LoseResponse(httpx.AsyncBaseTransport):
    """Lets the first ``count`` uploads reach the real app and complete, then loses the answer,
    as when the connection breaks after the server committed."""

    def __init__(self, inner: httpx.AsyncBaseTransport, count: int = 1) -> None:
        self.inner, self.count = inner, count
        self.answers: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and len(self.answers) < self.count:
            await response.aread()
            self.answers.append(response)
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response
