"""Outside attack: on the SDK's path the gateway's own ``tools/list`` shares the session's pool
with the users' calls. One user who keeps the pool busy with slow calls makes the periodic
listing wait in the pool past its time-out; the listing's "Request timed out" (synthesised by the
client, never sent) ends the whole connection: every call in flight on it is cut, the upstream
restarts and is unavailable to every user meanwhile -- the outcome the change meant to remove
("a call waiting for a free connection ... is not a failure of the upstream")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tests.gateway.upstreams.json_mcp_server import JsonServer
from tests.gateway.upstreams.test_pool_wait import _call, _seen, _status, small_pool_upstream


@pytest.mark.xfail(
    strict=False,
    reason="under heavy load the connection ended once in 20 s (CI, 2026-11-28: the SDK's "
    "cancellation notices of timed-out calls share the two kept connections with the listing); "
    "a listing's time-out is now skipped, three in a row end the connection "
    "(test_listing_timeouts.py): not strict until it has held in loaded CI runs",
)
async def test_a_users_slow_calls_do_not_end_the_connection_through_the_listing(
    backend: Backend, tmp_path: Path
):
    server = JsonServer(json_response=False)  # event streams: every call on the SDK's path
    async with small_pool_upstream(
        backend,
        tmp_path,
        server,
        4,  # two for calls, two kept for the session's event stream and listings
        connect_timeout_seconds=2,
        timeout_seconds=2,
        refresh_seconds=1,
    ) as (client, _):
        restarts = (await _status(client))["restarts"]
        answers: list[tuple[int, Any]] = []
        stop = time.monotonic() + 20

        async def user() -> None:
            # Slow calls (their own time-out ends them: a neutral 504).
            while time.monotonic() < stop:
                answers.append(_seen(await _call(client, "slow", seconds=30)))

        await asyncio.gather(*[user() for _ in range(10)])
        status = await _status(client)
    cut = [seen for seen in answers if seen[0] not in (200, 504)]
    # Observed (every run; the numbers vary): the connection ended every ~10 s (last_error
    # "BrokenResourceError", then "MCPError: Request 'tools/list' timed out"), the circuit closed
    # all along; hundreds of calls answered 502 UPSTREAM_CONNECTION_LOST / 503 at once.
    assert status["restarts"] == restarts and not cut, (status["last_error"], cut[:3], len(cut))
