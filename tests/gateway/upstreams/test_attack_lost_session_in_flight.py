"""Attack: one lost MCP session (a 404 on it) tore down the gateway's whole connection to the
upstream, cutting every call still running on it (502 ``UPSTREAM_CONNECTION_LOST``), and each
cut call counted as a breaker failure: five calls in flight when an upstream expired one session
opened the circuit of that upstream for everyone (30 s), though the upstream answered nothing but
that one 404 and was running (and would have answered) the five calls.

A lost session now takes no new call; the supervisor opens the next one at once, and closes the
lost one when its calls in flight have ended."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import Backend, eventually
from tests.gateway.upstreams.session_404_server import (
    ForgetfulServer,
    upstream_status,
)
from tests.gateway.upstreams.test_attack_session_404 import _call, forgetful_upstream


def _answers(answers: list[httpx.Response]) -> list[tuple[int, object]]:
    return [(a.status_code, a.json().get("result") or a.json().get("detail")) for a in answers]


async def test_calls_in_flight_on_a_lost_session_finish_and_the_circuit_stays_closed(
    backend: Backend, tmp_path: Path
):
    async with forgetful_upstream(backend, tmp_path) as (client, server):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        session = server.calls()[0][2]
        slow = [
            asyncio.create_task(
                client.post("/execute", json={"tool": "json__slow", "args": {"seconds": 2}})
            )
            for _ in range(5)
        ]
        await eventually(lambda: _running(server, 1 + len(slow)))
        # The upstream expires the session: new calls on it are answered 404 (those already
        # accepted run on, as the SDK's server runs them).
        server.forgotten.add(session)
        retried = await _call(client, "after")
        answers = await asyncio.gather(*slow)
        status = await upstream_status(client)
    # Before: (503, "Upstream 'json' is failing; calls are paused.") for "after", the circuit
    # open, and (502, UPSTREAM_CONNECTION_LOST) for each slow call: opened by the gateway itself.
    assert _answers([retried]) == [(200, "after")], (_answers([retried]), status)
    assert _answers(answers) == [(200, "slept")] * 5, _answers(answers)
    assert (status["circuit"], server.answered_404) == ("closed", 1), status


async def _running(server: ForgetfulServer, calls: int) -> bool:
    return len(server.calls()) >= calls


async def test_calls_meeting_one_restart_together_are_all_made_again(
    backend: Backend, tmp_path: Path
):
    """docs/gateway.md: calls that meet the 404 of one lost session all wait for the same new
    session ("a slower answer, not a failure"). Before, of five calls sent together after the
    upstream restarted, the first 404 tore the connection down and the others were cut
    mid-answer: 502 and a breaker failure each."""
    async with forgetful_upstream(backend, tmp_path) as (client, server):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        server.forgotten.add(server.calls()[0][2])  # the upstream restarted
        answers = await asyncio.gather(*(_call(client, f"m{n}") for n in range(5)))
        status = await upstream_status(client)
    assert _answers(answers) == [(200, f"m{n}") for n in range(5)], _answers(answers)
    assert status["circuit"] == "closed", status
