"""Attack tests of a9247be: a direct call to an HTTP upstream answering JSON that meets a 404
for its MCP session waits for the supervisor's new session and is made once more there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.session_404_server import (
    ForgetfulServer,
    upstream_ready,
    upstream_status,
)
from tests.httpserver import running_server


@asynccontextmanager
async def forgetful_upstream(
    backend: Backend, tmp_path: Path, **entry: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ForgetfulServer]]:
    server = ForgetfulServer()
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp", **entry}
        async with gateway(backend, tmp_path, spec) as client:
            await eventually(lambda: upstream_ready(client))
            yield client, server


async def _call(client: httpx.AsyncClient, message: str) -> httpx.Response:
    return await client.post("/execute", json={"tool": "json__echo", "args": {"message": message}})


async def test_every_call_that_meets_the_404_is_made_again_on_the_new_session(
    backend: Backend, tmp_path: Path
):
    """Two calls meet the 404 of a session the upstream forgot, while the supervisor is busy
    with a (periodic) tools/list of that session, the second call a moment after the first.

    docs/gateway.md promises "its caller sees a slower answer, not a failure". A user sees the
    second call answered and the first fail with 503 UPSTREAM_UNAVAILABLE ("ended its session;
    none is open yet") after waiting the whole budget (backoff + connect_timeout_seconds),
    although the new session was ready long before: each 404 makes ``Upstream._lose_session``
    replace ``self._reopen`` with a new Event (connection.py), and the first call already
    waits in ``_reopened`` on the Event the second 404 replaced, which nothing ever sets."""
    async with forgetful_upstream(
        backend, tmp_path, connect_timeout_seconds=4, refresh_seconds=1
    ) as (client, server):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        session = server.calls()[0][2]
        assert session is not None
        server.forgotten.add(session)
        server.slow_list_seconds = 1.0
        server.listing.clear()
        await asyncio.wait_for(server.listing.wait(), 10)  # the periodic listing is under way
        server.slow_list_seconds = 0.0  # the new session's own listing is quick
        one = asyncio.create_task(_call(client, "one"))
        await asyncio.sleep(0.3)  # "one" met its 404 and waits for the new session
        two = asyncio.create_task(_call(client, "two"))
        answers = await asyncio.gather(one, two)
    results = [(a.status_code, a.json().get("result") or a.json().get("code")) for a in answers]
    # The second call is not sent on the session known lost: it waits for the new one too.
    assert server.answered_404 == 1
    assert results == [(200, "one"), (200, "two")], results


async def test_an_upstream_that_404s_every_session_opens_the_circuit(
    backend: Backend, tmp_path: Path
):
    """An upstream answering 404 to every call on every session (broken, or hostile).

    Before a9247be each such call counted as a lost connection and after 5 the circuit opened
    (calls paused, the upstream left alone). Now ``_call_once`` records every ``SessionGone`` as
    neutral (connection.py, ``except SessionGone: self.breaker.record_neutral()``), so the
    circuit never opens: every call waits ~1 s for a new session, fails 502, and costs the
    upstream two new sessions (two 404s, two initialize + tools/list handshakes) — forever, for
    every user of every tool of that upstream."""
    async with forgetful_upstream(backend, tmp_path) as (client, server):
        server.forget_all = True
        codes = []
        for n in range(6):
            await eventually(lambda: upstream_ready(client), timeout=20)
            answer = await _call(client, f"m{n}")
            codes.append((answer.status_code, answer.json().get("code")))
        status = await upstream_status(client)
        initializes = sum(1 for request in server.requests if request[0] == "initialize")
    assert all(code[0] >= 500 for code in codes), codes
    assert status["circuit"] == "open", (status, codes, initializes, server.answered_404)
