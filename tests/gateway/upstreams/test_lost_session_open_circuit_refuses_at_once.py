"""While an upstream's circuit is open, its calls are refused at once, even while a lost session
is the current one.

docs/gateway.md: an upstream that forgets every session opens the circuit "and its calls are
refused at once while it is open". A lost session stays current until the next is installed, and
a call meeting it waits for that one (up to ``first_backoff + connect_timeout_seconds``): an
outside attack found the wait came before the breaker's check, so with an upstream that forgets
every session each call held its caller for seconds only to be refused 503.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from starlette.types import Send

from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.session_404_server import ToolServer, upstream_ready, upstream_status
from tests.httpserver import running_server


class BreakingServer(ToolServer):
    """``custom`` breaks its connection half-way through its answer (a breaker failure)."""

    async def on_call(self, message: dict[str, Any], send: Send) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"jsonrpc"', "more_body": True})
        raise RuntimeError("the upstream fell over mid-answer")


async def _call(client: Any, tool: str) -> Any:
    return await client.post("/execute", json={"tool": f"json__{tool}", "args": {"message": "x"}})


async def test_calls_are_refused_at_once_while_the_circuit_is_open(
    backend: Backend, tmp_path: Path
):
    server = BreakingServer()
    async with running_server(server) as base:
        spec = {
            "name": "json",
            "transport": "http",
            "url": f"{base}/mcp",
            "connect_timeout_seconds": 3,
            "refresh_seconds": 1,
        }
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            broken = [await _call(client, "custom") for _ in range(5)]
            status = await upstream_status(client)
            assert status["circuit"] == "open", ([b.status_code for b in broken], status)
            # The upstream now forgets every session (its listings too).
            server.forget_all = True
            server.forget_listings = True
            restarts = status["restarts"]

            async def lost_once() -> bool:
                return bool((await upstream_status(client))["restarts"] > restarts)

            await eventually(lost_once)
            timings = []
            for _ in range(4):
                started = time.monotonic()
                answer = await _call(client, "echo")
                timings.append((round(time.monotonic() - started, 2), answer.status_code))
            status = await upstream_status(client)
    # Before the fix: up to ~4 s (first_backoff + connect_timeout) each before their 503.
    assert all(code == 503 for _, code in timings), timings
    assert answer.json()["code"] == "UPSTREAM_UNAVAILABLE", answer.text
    assert "calls are paused" in answer.json()["detail"], answer.text
    assert max(seconds for seconds, _ in timings) < 0.5, (timings, status)
