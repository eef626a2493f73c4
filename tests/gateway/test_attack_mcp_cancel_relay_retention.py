"""Attack: every ``notifications/cancelled`` naming an id that does not run on the replica it
reaches (any id: the client chooses it) was kept on the bus channel ``conclave.mcp.cancel`` up to
the bus's ``maxlen`` (100,000 entries), although a relayed cancellation is worthless after
``MAX_AGE`` (5 s: every reader ignores it then). Any authenticated user could thereby park ~80 MB
(256-character ids; ~810 B per entry in the in-process bus) in Redis, or, in embedded mode, in
the gateway's own memory, where nothing reads those entries at all (a process ignores what it
published itself)."""

from __future__ import annotations

import asyncio

import httpx

from conclave.gateway.mcp_cancel_relay import CHANNEL, MAX_AGE, TRIM_SECONDS
from tests.conftest import Backend, eventually
from tests.gateway.test_attack_mcp_cancel_relay import ADA, Naps, cancel, replicas

SENT = 300


async def _send(url: str, count: int) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(count):
            answer = await http.post(f"{url}/mcp", content=cancel(f"{n:0256d}"), headers=ADA)
            assert answer.status_code == 202, answer.text


async def test_relayed_cancellations_are_deleted_once_too_old_to_be_used(backend: Backend):
    async with replicas(backend, Naps(1).tool(), 2) as [url, _other]:
        await _send(url, SENT)

        async def relayed() -> bool:  # the other replica reads the channel: they are published
            return len(await backend.bus.read(CHANNEL, count=10 * SENT)) > 0

        await eventually(relayed)
        await asyncio.sleep(MAX_AGE.total_seconds() + 3 * TRIM_SECONDS)
        kept = await backend.bus.read(CHANNEL, count=10 * SENT)
    # Before: all 300 entries stayed, until 100,000 newer ones pushed them out.
    assert kept == [], (backend.name, len(kept))


async def test_a_gateway_that_no_other_one_reads_relays_nothing(backend: Backend):
    """One gateway process on the bus (embedded mode, or a single replica): nobody else would
    read a relayed cancellation, so none is published."""
    async with replicas(backend, Naps(1).tool(), 1) as [url]:
        await _send(url, 50)
        await asyncio.sleep(1.0)  # the publisher's batch would be on the bus by now
        kept = await backend.bus.read(CHANNEL, count=100)
    assert kept == [], (backend.name, len(kept))
