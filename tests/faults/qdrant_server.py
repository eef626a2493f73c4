"""A stand-in Qdrant server: the REST routes the collector uses, served by qdrant-client's own
local engine (in memory).

No Qdrant server can be installed from the package registries this project uses, and local mode
(a folder one process holds) cannot be shared by the collector's HTTP process and its worker
processes. This server speaks Qdrant's REST protocol, so the collector runs its real production
code path (``CONCLAVE_SEMANTIC_MEMORY_URL``, qdrant-client over HTTP) against it; the fault tests
put a cuttable proxy in front of it to make semantic memory unavailable and bring it back.

Run: ``python -m tests.faults.qdrant_server PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import httpx
import uvicorn
from qdrant_client import AsyncQdrantClient, models
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# Claim the client's own version, so its compatibility check at start-up is satisfied.
VERSION = version("qdrant-client")
# (engine, collection) -> field -> type of the payload indexes made through the server.
_INDEXES: dict[tuple[int, str], dict[str, models.PayloadSchemaType]] = {}
Handler = Callable[[AsyncQdrantClient, Request], Awaitable[Any]]


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(item) for item in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=False)
    return value


def _name(request: Request) -> str:
    return str(request.path_params["collection_name"])


def _completed() -> dict[str, Any]:
    return {"operation_id": 0, "status": "completed"}


async def _root(_engine: AsyncQdrantClient, _request: Request) -> Any:
    return None  # replaced by the version body in :func:`_route`


async def _list(engine: AsyncQdrantClient, _request: Request) -> Any:
    return await engine.get_collections()


async def _exists(engine: AsyncQdrantClient, request: Request) -> Any:
    return {"exists": await engine.collection_exists(_name(request))}


async def _create(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.CreateCollection(**await request.json())
    return await engine.create_collection(_name(request), vectors_config=body.vectors)


async def _upsert(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.PointsList(**await request.json())
    await engine.upsert(_name(request), points=body.points, wait=True)
    return _completed()


async def _delete(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.PointIdsList(**await request.json())
    await engine.delete(_name(request), points_selector=body, wait=True)
    return _completed()


async def _info(engine: AsyncQdrantClient, request: Request) -> Any:
    info = await engine.get_collection(_name(request))
    # Local mode keeps no payload indexes: report the ones created through this server.
    indexed = _INDEXES.get((id(engine), _name(request)), {})
    schema = {
        field: models.PayloadIndexInfo(data_type=kind, points=0) for field, kind in indexed.items()
    }
    return info.model_copy(update={"payload_schema": schema})


async def _index(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.CreateFieldIndex(**await request.json())
    await engine.get_collection(_name(request))  # 404 for an unknown collection
    schema: Any = body.field_schema
    kind = schema if isinstance(schema, models.PayloadSchemaType) else schema.type
    indexes = _INDEXES.setdefault((id(engine), _name(request)), {})
    indexes[body.field_name] = models.PayloadSchemaType(kind)
    return _completed()


async def _count(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.CountRequest(**await request.json())
    return await engine.count(_name(request), count_filter=body.filter, exact=True)


async def _scroll(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.ScrollRequest(**await request.json())
    points, offset = await engine.scroll(
        _name(request),
        limit=body.limit or 10,
        offset=body.offset,
        scroll_filter=body.filter,
        with_payload=body.with_payload if body.with_payload is not None else True,
        with_vectors=body.with_vector or False,
    )
    return {"points": _dump(points), "next_page_offset": offset}


async def _query(engine: AsyncQdrantClient, request: Request) -> Any:
    body = models.QueryRequest(**await request.json())
    return await engine.query_points(
        _name(request),
        query=body.query,
        query_filter=body.filter,
        limit=body.limit or 10,
        with_payload=body.with_payload if body.with_payload is not None else True,
    )


def _route(path: str, method: str, handler: Handler, engine: AsyncQdrantClient) -> Route:
    async def endpoint(request: Request) -> JSONResponse:
        started = time.perf_counter()
        if handler is _root:
            return JSONResponse({"title": "qdrant - vector search engine", "version": VERSION})
        try:
            result = await handler(engine, request)
        except (ValueError, KeyError) as exc:
            status = 404 if "not found" in str(exc).lower() else 400
            return JSONResponse({"status": {"error": str(exc)}, "time": 0.0}, status_code=status)
        return JSONResponse(
            {"result": _dump(result), "status": "ok", "time": time.perf_counter() - started}
        )

    return Route(path, endpoint, methods=[method])


def create_app() -> Starlette:
    """The stand-in server over a fresh in-memory engine."""
    engine = AsyncQdrantClient(location=":memory:")
    base = "/collections/{collection_name}"
    table: list[tuple[str, str, Handler]] = [
        ("/", "GET", _root),
        ("/collections", "GET", _list),
        (base + "/exists", "GET", _exists),
        (base, "GET", _info),
        (base, "PUT", _create),
        (base + "/index", "PUT", _index),
        (base + "/points", "PUT", _upsert),
        (base + "/points/delete", "POST", _delete),
        (base + "/points/count", "POST", _count),
        (base + "/points/scroll", "POST", _scroll),
        (base + "/points/query", "POST", _query),
    ]
    return Starlette(routes=[_route(path, method, fn, engine) for path, method, fn in table])


def start(port: int, **popen: Any) -> subprocess.Popen[bytes]:
    """The stand-in server as a process on ``port`` (see :func:`ready`)."""
    command = [sys.executable, "-m", "tests.faults.qdrant_server", str(port)]
    return subprocess.Popen(command, **popen)


async def ready(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait until the stand-in server on ``port`` answers."""
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(int(timeout * 10)):
            if process.poll() is not None:
                raise AssertionError("the Qdrant-protocol server exited at start")
            with contextlib.suppress(httpx.TransportError):
                await client.get(f"http://127.0.0.1:{port}/collections")
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the Qdrant-protocol server did not start")


if __name__ == "__main__":
    uvicorn.run(
        create_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False
    )
