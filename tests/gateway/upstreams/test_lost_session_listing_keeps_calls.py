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
from pathlib import Path

from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.session_404_server import (
    ForgetfulServer,
    upstream_ready,
    upstream_status,
)
from tests.httpserver import running_server


async def test_a_listing_that_meets_the_404_does_not_cut_the_calls_in_flight(
    backend: Backend, tmp_path: Path
):
    server = ForgetfulServer()
    server.forget_listings = True
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp", "refresh_seconds": 1}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
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
            status = await upstream_status(client)
    seen = [(a.status_code, a.json().get("result") or a.json().get("detail")) for a in answers]
    assert server.answered_404 >= 1, "the listing never met the 404"
    # Observed: [(502, ...connection lost...)] * 3: the connection was closed under them.
    assert seen == [(200, "slept")] * 3, (seen, status)
    assert status["circuit"] == "closed", status


async def _running(server: ForgetfulServer, calls: int) -> bool:
    return len(server.calls()) >= calls
