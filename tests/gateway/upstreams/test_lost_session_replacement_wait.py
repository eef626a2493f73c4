"""Calls made while a lost session is being replaced wait for the new one.

Attack (outside review of 6b65019): calls made while a lost session is being replaced are
refused 503 at once, unless a call happened to be in flight on the lost session.

docs/gateway.md: "Calls that meet the 404 of one lost session a moment apart, and calls made
while it is being replaced, all wait for the same new session"; ``Upstream._serve``'s comment:
"It stays the current session until the next one opens". But ``_serve`` awaits
``opened.drained(...)``, which returns at once when no call is in flight on the lost session
(the call that met the 404 left ``calling()`` already), then its ``finally`` sets
``self._current = None`` while the supervisor still sleeps its backoff (~1 s) and the next
``initialize`` runs. ``Upstream.call`` reads ``_current is None`` and ``_call_once`` raises
``UpstreamDown`` "not connected (restarting)" at once: every call of every user in that window
(each upstream restart or session expiry) fails 503, instead of "a slower answer"."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.gateway.upstreams.test_attack_session_404 import _call, forgetful_upstream


def _seen(answer: httpx.Response) -> tuple[int, object]:
    body = answer.json()
    return answer.status_code, body.get("result") or body.get("detail")


async def test_calls_made_while_a_lost_session_is_replaced_wait_for_the_new_one(
    backend: Backend, tmp_path: Path
):
    async with forgetful_upstream(backend, tmp_path) as (client, server):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        server.forgotten.add(server.calls()[0][2])  # the upstream restarted
        one = asyncio.create_task(_call(client, "one"))  # meets the 404, waits, made again
        await asyncio.sleep(0.3)  # the supervisor is in its backoff before the next session
        two = await _call(client, "two")  # another user's call, a moment later
        answers = [await one, two]
        status = (await client.get("/upstreams")).json()["upstreams"][0]
    # Observed: (200, "one"), (503, "Upstream 'json' is not connected (restarting).")
    assert [_seen(a) for a in answers] == [(200, "one"), (200, "two")], [_seen(a) for a in answers]
    assert status["circuit"] == "closed", status
    lost = server.calls()[0][2]
    assert [call[2] for call in server.calls() if call[2] != lost], "no call on a new session"
