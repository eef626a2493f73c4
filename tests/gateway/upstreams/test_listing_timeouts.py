"""A periodic listing that times out is skipped, as a call's time-out is: the connection and the
tools listed before stay (one user's slow calls can make the gateway's own listing wait for a
connection of the session's pool, which says nothing of the upstream). Three in a row end the
connection, so a session that answers nothing is still reopened. The upstream answers with event
streams, as the attack's did: its listings are then timed by the SDK, not by the HTTP client."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import JsonServer, read_body
from tests.gateway.upstreams.test_pool_wait import _call, _seen, _status, small_pool_upstream


async def test_a_listing_that_times_out_keeps_the_connection_and_its_tools(
    backend: Backend, tmp_path: Path
):
    server = JsonServer(json_response=False)
    entry = {"timeout_seconds": 1, "refresh_seconds": 1}
    async with small_pool_upstream(backend, tmp_path, server, 8, **entry) as (client, _):
        before = await _status(client)
        server.list_delays = [1.6]  # the next listing outlasts its 1 s time-out

        async def timed_out() -> bool:
            return "tools/list timed out" in str((await _status(client))["last_error"])

        await eventually(timed_out, timeout=20)
        during = _seen(await _call(client, "echo", message="still there"))
        refreshes = (await _status(client))["refreshes"]

        async def listed_again() -> bool:
            return (await _status(client))["refreshes"] > refreshes

        await eventually(listed_again, timeout=20)
        after = await _status(client)
    # Before: the time-out ended the connection (a restart; its calls cut, 503 meanwhile).
    assert after["restarts"] == before["restarts"] and after["state"] == "ready", after
    assert during == (200, "still there"), during


async def test_listings_that_keep_timing_out_end_the_connection(backend: Backend, tmp_path: Path):
    server = JsonServer(json_response=False)
    entry = {"timeout_seconds": 0.5, "refresh_seconds": 0.5}
    async with small_pool_upstream(backend, tmp_path, server, 8, **entry) as (client, _):
        restarts = (await _status(client))["restarts"]
        server.list_delays = [5.0] * 1000  # every listing times out, a new session's first too

        async def restarted() -> bool:
            return (await _status(client))["restarts"] > restarts

        await eventually(restarted, timeout=30)
        status = await _status(client)
    assert "timed out" in str(status["last_error"]), status


class _AnswersTimedOut(JsonServer):
    """Answers the next ``refusals`` ``tools/list`` at once with the SDK's time-out code."""

    refusals = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and self.refusals:
            body = await read_body(receive)
            message = json.loads(body)
            if message.get("method") == "tools/list":
                self.refusals -= 1
                error = {"code": types.REQUEST_TIMEOUT, "message": "Request timed out"}
                answer = {"jsonrpc": "2.0", "id": message["id"], "error": error}
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
                return
            receive = replay_body(body, receive)
        await super().__call__(scope, receive, send)


async def test_an_upstream_answering_the_time_out_code_has_not_timed_out(
    backend: Backend, tmp_path: Path
):
    # An outside attack: the code alone made an upstream's own error a skipped listing, so one
    # failing two listings in three was never reconnected (its tools stale meanwhile). One such
    # answer is a failed listing: the connection ends (before: skipped, no restart).
    server = _AnswersTimedOut()
    entry = {"timeout_seconds": 5, "refresh_seconds": 0.5}
    async with small_pool_upstream(backend, tmp_path, server, 8, **entry) as (client, _):
        restarts = (await _status(client))["restarts"]
        server.refusals = 1

        async def restarted() -> bool:
            return (await _status(client))["restarts"] > restarts

        await eventually(restarted, timeout=30)
        status = await _status(client)
    assert "tools kept" not in str(status["last_error"]), status


async def test_a_stdio_server_whose_listings_hang_is_restarted_after_three(
    backend: Backend, tmp_path: Path
):
    # The skip applies to local processes too: a hung one is still replaced, later than before
    # (three listing periods instead of one), and answers calls meanwhile if it can.
    spec = {
        "name": "hang",
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.gateway.upstreams.hang_list_server"],
        "timeout_seconds": 1,
        "refresh_seconds": 1,
    }
    async with gateway(backend, tmp_path, spec) as client:

        async def status() -> dict[str, Any]:
            return dict((await client.get("/upstreams")).json()["upstreams"][0])

        async def ready() -> bool:
            return (await status())["state"] == "ready"

        async def restarted() -> bool:
            return (await status())["restarts"] > 0

        await eventually(ready)
        first = await client.post("/execute", json={"tool": "hang__pid", "args": {}})
        await eventually(restarted)
        await eventually(ready)
        second = await client.post("/execute", json={"tool": "hang__pid", "args": {}})
    assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)
    assert first.json()["result"] != second.json()["result"]  # another process
