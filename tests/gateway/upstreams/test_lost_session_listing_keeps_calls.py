"""A listing that meets a lost session's 404 hands the session over like a call: the calls in
flight on it finish.

Attack (outside review of 6b65019..c338a1e): a lost session's calls in flight are kept only
when a ``tools/call`` is the request that meets the upstream's 404.

docs/gateway.md ("A session the upstream ended") and the test next to it
(``test_calls_in_flight_on_a_lost_session_finish_and_the_circuit_stays_closed``) promise that a
session the upstream ended takes no new call but is closed only once the calls already sent on
it have ended: the upstream answers those it accepted. But when the first request to meet the
404 is the supervisor's own listing (the periodic refresh, or one after
``notifications/tools/list_changed``), ``_refresh`` raises the SDK's ``MCPError`` ("Session
terminated"), not ``SessionLost``: ``_watch``'s ``except SessionLost`` does not catch it, and
``_serve`` leaves ``_connected`` at once, closing the session under every call in flight (502,
though the upstream was running them and would have answered)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import read_body
from tests.gateway.upstreams.session_404_server import ForgetfulServer
from tests.httpserver import running_server


class ListingForgetful(ForgetfulServer):
    """A forgotten session's ``tools/list`` is answered 404 too (as any request on it is by an
    upstream that expired it); calls it accepted before run on."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            session = (dict(scope["headers"]).get(b"mcp-session-id") or b"").decode() or None
            message = json.loads(body)
            if message.get("method") == "tools/list" and session in self.forgotten:
                self.answered_404 += 1
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            receive = replay_body(body, receive)
        await super().__call__(scope, receive, send)


async def _upstream(client: httpx.AsyncClient) -> dict:
    return (await client.get("/upstreams")).json()["upstreams"][0]


async def test_a_listing_that_meets_the_404_does_not_cut_the_calls_in_flight(
    backend: Backend, tmp_path: Path
):
    server = ListingForgetful()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp", "refresh_seconds": 1}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: _ready(client))
            first = await client.post(
                "/execute", json={"tool": "json__echo", "args": {"message": "zero"}}
            )
            assert first.status_code == 200, first.text
            session = server.calls()[0][2]
            slow = [
                asyncio.create_task(
                    client.post("/execute", json={"tool": "json__slow", "args": {"seconds": 4}})
                )
                for _ in range(3)
            ]
            await eventually(lambda: _running(server, 4))
            # The upstream expires the session: new requests on it are answered 404, the calls
            # it accepted run on. The next periodic listing (within ~1.5 s) meets the 404 first.
            server.forgotten.add(session)
            answers = await asyncio.gather(*slow)
            status = await _upstream(client)
    seen = [(a.status_code, a.json().get("result") or a.json().get("detail")) for a in answers]
    assert server.answered_404 >= 1, "the listing never met the 404"
    # Observed: [(502, ...connection lost...)] * 3: the connection was closed under them.
    assert seen == [(200, "slept")] * 3, (seen, status)
    assert status["circuit"] == "closed", status


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await _upstream(client))["state"] == "ready"


async def _running(server: ForgetfulServer, calls: int) -> bool:
    return len(server.calls()) >= calls
