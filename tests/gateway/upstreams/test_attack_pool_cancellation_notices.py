"""Outside attack on the direct path's cancellation notices when calls wait for a connection.

A call whose caller gives up (or whose time-out passes) while it waits in the pool was never
sent, yet the gateway still sends ``notifications/cancelled`` for it. Each such notice waits in
the same full pool (up to the upstream's time-out) and holds one of the
``_MAX_PENDING_CANCELLATIONS`` (64) places: a user who abandons 64 waiting calls makes the gateway
skip the notices of the calls the upstream is really running, which then run to their end (and
keep the connections busy) -- the notices that matter are the ones dropped."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tests.conftest import Backend
from tests.gateway.upstreams.json_mcp_server import JsonServer
from tests.gateway.upstreams.test_pool_wait import _call, small_pool_upstream


async def test_notices_go_to_the_calls_the_upstream_ran_not_to_calls_never_sent(
    backend: Backend, tmp_path: Path
):
    server = JsonServer()  # answers JSON: the direct path
    async with small_pool_upstream(
        backend, tmp_path, server, 4, connect_timeout_seconds=2, timeout_seconds=4
    ) as (client, _):
        # Two slow calls hold both connections until their time-out (4 s).
        slow = [asyncio.create_task(_call(client, "slow", seconds=30)) for _ in range(2)]
        await asyncio.sleep(0.5)
        # 70 calls wait for a connection; their callers give up after 0.5 s.
        waiting = [asyncio.create_task(_call(client, "echo", message="x")) for _ in range(70)]
        await asyncio.sleep(0.5)
        for task in waiting:
            task.cancel()
        for task in waiting:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*slow)
        await asyncio.sleep(3)
    ran = {call[1] for call in server.calls()}
    cancelled = set(server.cancelled)
    # Observed: notices for ids the upstream never received (sent once the connections came
    # free), and none for the two calls it ran (skipped: 64 notices were already pending).
    assert cancelled - ran == set(), sorted(cancelled - ran)[:5]
    assert {call for call in ran if call in cancelled} == ran, (ran, sorted(cancelled)[:5])
