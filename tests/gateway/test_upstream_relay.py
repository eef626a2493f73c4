"""Progress and cancellation relayed between the gateway's MCP clients and upstream MCP servers.

Real components throughout: ``server-everything`` (its long-running tool reports progress) over
streamable HTTP, the hostile server (a progress flood; a slow tool that records being
cancelled) over stdio, the gateway on a real socket, driven by the MCP Python SDK's ``Client``
and by plain HTTP where the wire itself is the point."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conclave.gateway.app import create_app
from conclave.gateway.progress import MAX_MESSAGE_CHARS, MIN_INTERVAL_SECONDS, checked
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows, published
from tests.gateway.upstream_fixtures import ALLOW_LOOPBACK, catalogue, hostile_entry
from tests.httpserver import running_server

LONG_RUNNING = "everything__trigger-long-running-operation"
HEADERS = {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
BOTH = "application/json, text/event-stream"


@asynccontextmanager
async def live_gateway(
    backend: Backend, tmp_path: Path, *servers: dict[str, Any]
) -> AsyncIterator[tuple[str, Any]]:
    """The gateway on a real socket (bearer tokens ``tok-ada``, ``tok-bob``) with ``servers``
    upstream: (URL of ``/mcp``, app)."""
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, *servers),
        auth="enabled",
        api_tokens="tok-ada=ada,tok-bob=bob",
        **ALLOW_LOOPBACK,
    )
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with running_server(app) as url:
            async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-ada"}) as http:

                async def ready() -> bool:
                    listing = (await http.get(f"{url}/upstreams")).json()["upstreams"]
                    return all(item["state"] == "ready" for item in listing)

                await eventually(ready, timeout=60)
            yield f"{url}/mcp", app


@asynccontextmanager
async def sdk_client(url: str, **options: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": "Bearer tok-ada"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


def call(request_id: int | str, tool: str, args: dict[str, Any], meta: Any = None) -> str:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def rows_of(backend: Backend, tool: str) -> list[Any]:
    return [row for row in await audit_rows(backend) if row.tool_name == tool]


def test_reports_are_checked_before_they_are_relayed():
    assert checked(math.nan, 1, None) is None
    assert checked(math.inf, None, None) is None
    assert checked(2**70, None, None) is None
    assert checked(True, None, None) is None
    assert checked("3", None, None) is None
    kept = checked(3, math.inf, "a\x00b\ud800" + "x" * 10_000)
    assert kept is not None and (kept.progress, kept.total) == (3.0, None)
    assert kept.message is not None and len(kept.message) == MAX_MESSAGE_CHARS
    assert kept.message.startswith("a\\u0000b\\ud800")
    kept.message.encode("utf-8")  # storable and sendable


async def test_upstream_progress_reaches_the_client_with_its_own_token(
    backend: Backend, tmp_path: Path, everything_http: str
):
    entry = {"name": "everything", "transport": "http", "url": everything_http}
    async with live_gateway(backend, tmp_path, entry) as (url, _app):
        received: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            received.append((progress, total, message))

        async with sdk_client(url) as mcp:
            args = {"duration": 1.2, "steps": 4}
            result = await mcp.call_tool(LONG_RUNNING, args, progress_callback=on_progress)
            silent = await mcp.call_tool(LONG_RUNNING, {"duration": 0.2, "steps": 2})
        # The wire: an event stream of notifications with the client's token, then the result.
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-ada"}) as http:
            token = "token-é-1"
            streamed = await http.post(
                url,
                content=call(7, LONG_RUNNING, args, {"progressToken": token}),
                headers={**HEADERS, "Accept": BOTH},
            )
            json_only = await http.post(
                url,
                content=call(8, LONG_RUNNING, {"duration": 0.2, "steps": 2}, {"progressToken": 1}),
                headers={**HEADERS, "Accept": "application/json"},
            )
            plain = await http.post(
                url,
                content=call(9, LONG_RUNNING, {"duration": 0.2, "steps": 2}),
                headers={**HEADERS, "Accept": BOTH},
            )
    assert result.is_error is False and "completed" in str(result.content[0])
    assert silent.is_error is False
    # Arrived through the SDK's callback: it matched the token the client chose.
    assert len(received) >= 2, received
    assert [p for p, _t, _m in received] == sorted({p for p, _t, _m in received})
    assert {total for _p, total, _m in received} == {4.0}
    assert streamed.headers["content-type"].startswith("text/event-stream")
    *notes, answer = sse_messages(streamed.text)
    assert notes and {n["method"] for n in notes} == {"notifications/progress"}
    assert {n["params"]["progressToken"] for n in notes} == {token}
    assert answer["id"] == 7 and answer["result"]["isError"] is False
    # No token, or no event stream accepted: one JSON answer, no progress (the fast path).
    for response, request_id in ((json_only, 8), (plain, 9)):
        assert response.headers["content-type"].startswith("application/json"), response.text
        assert response.json()["id"] == request_id and "result" in response.json()
    rows = await rows_of(backend, LONG_RUNNING)
    assert len(rows) == 5 and {row.status for row in rows} == {"succeeded"}


async def test_a_progress_flood_is_coalesced_and_cleaned(backend: Backend, tmp_path: Path):
    async with live_gateway(backend, tmp_path, hostile_entry()) as (url, _app):
        received: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            received.append((progress, total, message))

        async with sdk_client(url, mode="legacy") as mcp:  # 2025-11-25; the other test: 2026
            started = asyncio.get_running_loop().time()
            result = await mcp.call_tool(
                "hostile__progress_flood", {"count": 3000}, progress_callback=on_progress
            )
            elapsed = asyncio.get_running_loop().time() - started
    assert result.is_error is False, result
    # 3001 sent by the upstream; at most one per interval (and the first) reach the client.
    assert 1 <= len(received) <= elapsed / MIN_INTERVAL_SECONDS + 2, (len(received), elapsed)
    progresses = [p for p, _t, _m in received]
    assert progresses == sorted(set(progresses))
    for _p, _t, message in received:
        assert message is None or ("\x00" not in message and len(message) <= MAX_MESSAGE_CHARS)
    [row] = await rows_of(backend, "hostile__progress_flood")
    assert row.status == "succeeded"


# The SDK's two ways of giving up: at 2025-11-25 (its "legacy" handshake) it POSTs
# notifications/cancelled and leaves the request open; at 2026-07-28 it closes the request.
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("with_progress", [False, True], ids=["json", "event-stream"])
async def test_a_client_that_cancels_cancels_the_upstream_call(
    backend: Backend, tmp_path: Path, with_progress: bool, mode: str
):
    marker = tmp_path / "cancelled.txt"
    async with live_gateway(backend, tmp_path, hostile_entry()) as (url, _app):

        async def on_progress(_progress: float, _total: float | None, _message: str | None) -> None:
            return None

        async with sdk_client(url, mode=mode) as mcp:

            async def started() -> bool:
                return bool(await rows_of(backend, "hostile__slow"))

            async def slow_call() -> None:
                await mcp.call_tool(
                    "hostile__slow",
                    {"seconds": 30, "marker": str(marker)},
                    progress_callback=on_progress if with_progress else None,
                )

            async with anyio.create_task_group() as group:
                group.start_soon(slow_call)
                await eventually(started, timeout=60)  # recorded `running`: the upstream has it
                group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            await eventually(lambda: _read(marker), timeout=60)
            still = await mcp.call_tool("hostile__pid", {})  # the session carries on
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-ada"}) as http:
            [upstream] = (await http.get(url.removesuffix("/mcp") + "/upstreams")).json()[
                "upstreams"
            ]

    # The upstream's own handler was cancelled by the notification (its connection never broke).
    assert (upstream["state"], upstream["restarts"]) == ("ready", 0)
    assert still.is_error is False
    assert marker.read_text() == "cancelled"
    [row, _pid] = await rows_of(backend, "hostile__slow") + await rows_of(backend, "hostile__pid")
    assert (row.status, row.error_code, row.http_status) == ("failed", "CALL_CANCELLED", 409)
    assert row.user_id == "ada" and row.completed_at is not None

    async def event() -> list[Any]:
        return [e for e in await published(backend) if e.payload["conclave_id"] == row.conclave_id]

    [cancelled] = await eventually(event)
    assert cancelled.payload["status"] == "failed"


async def _read(path: Path) -> str:
    marker = anyio.Path(path)
    return await marker.read_text() if await marker.exists() else ""


async def test_only_the_caller_can_cancel_its_call(backend: Backend, tmp_path: Path):
    marker = tmp_path / "cancelled.txt"
    async with live_gateway(backend, tmp_path, hostile_entry()) as (url, _app):
        ada = {"Authorization": "Bearer tok-ada", **HEADERS, "Accept": BOTH}
        bob = {**ada, "Authorization": "Bearer tok-bob"}
        cancel = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
        )
        async with httpx.AsyncClient(timeout=30) as http:
            slow = asyncio.create_task(
                http.post(
                    url,
                    content=call(5, "hostile__slow", {"seconds": 30, "marker": str(marker)}),
                    headers=ada,
                )
            )

            async def running() -> bool:
                return bool(await rows_of(backend, "hostile__slow"))

            await eventually(running, timeout=60)
            by_bob = await http.post(url, content=cancel, headers=bob)
            await asyncio.sleep(0.5)
            assert not slow.done() and not marker.exists()
            by_ada = await http.post(url, content=cancel, headers=ada)
            answer = await asyncio.wait_for(slow, 20)  # the call itself would take 30 s
            await eventually(lambda: _read(marker), timeout=60)
    assert by_bob.status_code == by_ada.status_code == 202
    # The fast path answers the cancelled request as the SDK does on this protocol version.
    assert answer.json()["id"] == 5 and answer.json()["error"]["code"] == -32800
    [row] = await rows_of(backend, "hostile__slow")
    assert (row.status, row.error_code) == ("failed", "CALL_CANCELLED")


async def test_a_dropped_connection_at_2025_11_25(backend: Backend, tmp_path: Path):
    """A JSON answer's call runs to its end (a disconnect is no cancellation on that wire); an
    event stream's call ends with its stream, which no session can resume."""
    markers = {kind: tmp_path / f"{kind}.txt" for kind in ("json", "stream")}
    async with live_gateway(backend, tmp_path, hostile_entry()) as (url, _app):
        headers = {"Authorization": "Bearer tok-ada", **HEADERS, "Accept": BOTH}
        async with httpx.AsyncClient(timeout=30) as http:
            for request_id, kind in enumerate(markers):
                meta = {"progressToken": "p"} if kind == "stream" else None
                args = {"seconds": 2, "marker": str(markers[kind])}
                body = call(request_id, "hostile__slow", args, meta)
                async with http.stream("POST", url, content=body, headers=headers) as response:
                    assert response.headers["content-type"].startswith(
                        "text/event-stream" if kind == "stream" else "application/json"
                    )
                    await asyncio.sleep(0.5)  # then the client goes away

            async def settled() -> list[str]:
                rows = await rows_of(backend, "hostile__slow")
                statuses = sorted(row.status for row in rows)
                return statuses if "running" not in statuses and len(rows) == 2 else []

            await eventually(settled, timeout=60)
    statuses = {row.error_code or row.status for row in await rows_of(backend, "hostile__slow")}
    assert statuses == {"succeeded", "CALL_CANCELLED"}
    assert not markers["json"].exists() and markers["stream"].read_text() == "cancelled"
