"""Outside attack: a call abandoned by its caller while it waits for a free connection to the
upstream. On the direct path (aiohttp) the wait ends with the caller: the request is never sent.
On the SDK's path the request's POST runs in a task of the SDK's transport that the caller's
cancellation does not reach: it keeps waiting in the pool (for as long as the upstream's
time-out) and is sent once a connection comes free -- the tool runs after its caller was told
the call was cancelled (a retry runs it twice). The gateway's cancellation notice for it goes out
after it, or not at all."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.conftest import Backend
from tests.gateway.upstreams.json_mcp_server import JsonServer
from tests.gateway.upstreams.test_pool_wait import _call, small_pool_upstream


class NamingServer(JsonServer):
    """Records the name and arguments of every tool it runs."""

    def __init__(self, **options: Any) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        super().__init__(**options)

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        self.ran.append((params.name, dict(params.arguments or {})))
        return await super()._call(ctx, params)


@pytest.mark.parametrize(
    ("json_response", "connections"),
    [(True, 4), (False, 4)],  # two connections for calls, two kept for the stream and listings
    ids=["direct", "sdk"],
)
async def test_a_call_abandoned_while_waiting_for_a_connection_is_never_sent(
    backend: Backend, tmp_path: Path, json_response: bool, connections: int
):
    server = NamingServer(json_response=json_response)
    async with small_pool_upstream(
        backend, tmp_path, server, connections, connect_timeout_seconds=2, timeout_seconds=4
    ) as (client, _):
        # One user's two slow calls hold both connections for their time-out (4 s).
        slow = [asyncio.create_task(_call(client, "slow", seconds=30)) for _ in range(2)]
        await asyncio.sleep(0.5)
        # Another call waits for a connection; its caller gives up after 0.5 s.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_call(client, "echo", message="abandoned"), 0.5)
        await asyncio.gather(*slow)
        await asyncio.sleep(2)  # the connections came free at 4 s
    abandoned = [ran for ran in server.ran if ran[0] == "echo"]
    # Observed on the SDK's path: [("echo", {"message": "abandoned"})], run about 3 s after
    # its caller had gone.
    assert abandoned == [], abandoned
