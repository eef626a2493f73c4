"""Attack: every ``notifications/cancelled`` naming an id that does not run on the replica it
reaches (any id: the client chooses it) is kept on the bus channel ``conclave.mcp.cancel`` up to
the bus's ``maxlen`` (100,000 entries), although a relayed cancellation is worthless after
``MAX_AGE`` (5 s: every reader ignores it then). Any authenticated user can thereby park ~80 MB
(256-character ids; measured ~810 B per entry in the in-process bus) in Redis, or, in embedded
mode, in the gateway's own memory, where nothing reads those entries at all (the memory bus lives
in one process, and a process ignores what it published itself)."""

from __future__ import annotations

import asyncio

import httpx

from conclave.gateway.mcp_cancel_relay import CHANNEL, MAX_AGE
from tests.conftest import Backend
from tests.gateway.test_attack_mcp_cancel_relay import ADA, Naps, cancel, replicas

SENT = 300


async def test_relayed_cancellations_are_not_kept_past_their_age(backend: Backend):
    async with replicas(backend, Naps(1).tool(), 1) as [url]:
        async with httpx.AsyncClient(timeout=30) as http:
            for n in range(SENT):
                answer = await http.post(f"{url}/mcp", content=cancel(f"{n:0256d}"), headers=ADA)
                assert answer.status_code == 202
        await asyncio.sleep(MAX_AGE.total_seconds() + 1.5)
        kept = await backend.bus.read(CHANNEL, count=10 * SENT)
    # Observed: all 300 entries (each a 256-character id) are still on the channel, and would
    # stay until 100,000 newer ones push them out.
    assert len(kept) < SENT / 10, (backend.name, len(kept))
