"""Helpers for the expedition service tests: settings, a served app, a local JSON API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from conclave.collector.app import create_app
from conclave.collector.registry import ExpeditionRegistry
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings
from tests.conftest import Backend, eventually, serve_app

TERMINAL = ("completed", "failed", "cancelled")
# JsonApi listens on loopback, which the egress policy refuses by default: tests that fetch from
# it allow that one address, the way a deployment allows a local backend on purpose.
LOCAL_API = {"egress_allow_networks": ["127.0.0.1/32"]}
LOCAL_API_ENV = {"CONCLAVE_EGRESS_ALLOW_NETWORKS": "127.0.0.1/32"}


def collector_settings(data_dir: Path, **overrides: Any) -> CollectorSettings:
    """Collector settings for tests: fixtures migrate, auth off, fast loops; the `file` source
    reads only its default inbox (:func:`inbox`)."""
    values: dict[str, Any] = {
        "auto_migrate": False,
        "auth": "disabled",
        "outbox_poll_seconds": 0.05,
        "outbox_max_backoff_seconds": 0.2,
        "data_dir": data_dir,
        "poll_seconds": 0.05,
        "lease_seconds": 3.0,
        "scheduler_poll_seconds": 0.1,
        "load_entry_points": False,
    }
    values.update(overrides)
    return CollectorSettings(**values)


@asynccontextmanager
async def collector_app(
    backend: Backend, settings: CollectorSettings, registry: ExpeditionRegistry | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The collector app on the backend's store and bus, with a client; ``registry`` replaces
    the types and sources the app would load."""
    async with Platform.open(settings, engine=backend.engine, bus=backend.bus) as platform:
        app = create_app(settings, platform=platform, registry=registry)
        async with serve_app(app) as client:
            yield client, app


async def wait_terminal(client: httpx.AsyncClient, expedition_id: str, timeout: float = 60):
    """The expedition's record once it has finished."""

    async def check() -> Any:
        body = (await client.get(f"/expedition/status/{expedition_id}")).json()
        return body if body["status"] in TERMINAL else None

    return await eventually(check, timeout=timeout)


async def wait_status(client: httpx.AsyncClient, expedition_id: str, status: str, timeout=60):
    """The expedition's record once it is in ``status``."""

    async def check() -> Any:
        body = (await client.get(f"/expedition/status/{expedition_id}")).json()
        return body if body["status"] == status else None

    return await eventually(check, timeout=timeout)


def inbox(data_dir: Path) -> Path:
    """The `file` source's inbox of a collector whose data folder is ``data_dir`` (made now:
    tests write their files before the service starts and creates it)."""
    folder = data_dir / "inbox"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> Path:
    """Write ``items`` as JSON Lines."""
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


class JsonApi:
    """A small real HTTP server standing in for an external JSON API we do not own.

    Serves ``pages`` (one list per ``?page=N``, 1-based; empty past the end). ``delay`` slows
    every answer; ``garbage`` answers non-JSON.
    """

    def __init__(self, pages: list[list[dict[str, Any]]], *, delay: float = 0.0) -> None:
        self.pages = pages
        self.delay = delay
        self.garbage = False
        self.requests = 0
        self.headers: list[dict[str, str]] = []  # each request's headers, names lower-cased
        self.next_url: str | None = None  # when set, every answer links it as its "next" page
        self._server: asyncio.Server | None = None
        self.url = ""

    def source(self, key: str | None = "id") -> dict[str, Any]:
        """This API as an ``http_json`` source read page by page."""
        source: dict[str, Any] = {
            "type": "http_json",
            "url": self.url,
            "records_path": "data",
            "pagination": {"type": "page"},
        }
        if key is not None:
            source["key"] = key
        return source

    def discovery(self, *collections: str, key: str | None = "id", **extra: Any) -> dict[str, Any]:
        """A discovery request over this API into ``collections`` (the default one if none)."""
        body: dict[str, Any] = {
            "expedition_type": "discovery",
            "parameters": {"sources": [self.source(key)]},
            **extra,
        }
        if collections:
            body["target_collections"] = list(collections)
        return body

    async def __aenter__(self) -> JsonApi:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/items"
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode()
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            self.headers.append(headers)
            self.requests += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            target = request_line.split(" ")[1]
            page = 1
            if "page=" in target:
                page = int(target.split("page=")[1].split("&")[0])
            if self.garbage:
                body, kind = b"<html>oops</html>", "text/html"
            else:
                items = self.pages[page - 1] if 0 < page <= len(self.pages) else []
                answer: dict[str, Any] = {"data": items}
                if self.next_url is not None:
                    answer["next"] = self.next_url
                body, kind = json.dumps(answer).encode(), "application/json"
            writer.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
