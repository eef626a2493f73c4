"""Attack: a healthy upstream restarts (forgets its session) and lists its tools in longer than
``connect_timeout_seconds`` (a big catalogue, several pages; well within ``timeout_seconds``).

docs/gateway.md promises the call that meets the 404 "a slower answer, not a failure". It waited
for first backoff + ``connect_timeout_seconds`` while the supervisor marked the new session
ready only after its whole listing: the call failed 503 and counted as a breaker failure, though
the upstream never failed; five such calls opened the circuit for everyone for 30 s. The call is
now made again as soon as the new session is open (``initialize`` answered), and a lost session
that is not replaced in time costs one breaker failure, however many calls waited for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import Backend, eventually
from tests.gateway.upstreams.session_404_server import upstream_ready, upstream_status
from tests.gateway.upstreams.test_attack_session_404 import _call, forgetful_upstream


async def test_a_call_meeting_a_restart_is_answered_while_the_new_session_lists_its_tools(
    backend: Backend, tmp_path: Path
):
    async with forgetful_upstream(backend, tmp_path, connect_timeout_seconds=2) as (
        client,
        server,
    ):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        server.forgotten.add(server.calls()[0][2])  # the upstream restarted...
        server.slow_list_seconds = 2.5  # ...and lists its tools in 2.5 s (its time-out: 30 s)
        answer = await _call(client, "one")
        await eventually(lambda: upstream_ready(client))
        status = await upstream_status(client)
    seen = (answer.status_code, answer.json(), status)
    # Before: (503, "Upstream 'json' ended its session; none is open yet."), a breaker failure.
    assert (answer.status_code, answer.json().get("result")) == (200, "one"), seen
    assert (status["circuit"], status["state"]) == ("closed", "ready"), seen


async def test_calls_waiting_for_a_session_that_does_not_open_count_as_one_failure(
    backend: Backend, tmp_path: Path
):
    """Five calls meet the 404 of one lost session and the upstream opens no new one within
    their wait: each answers 503, and the circuit stays closed (one failure: one session lost,
    not five). Before, each waiting call was a failure and the five opened the circuit."""
    async with forgetful_upstream(backend, tmp_path, connect_timeout_seconds=1) as (
        client,
        server,
    ):
        first = await _call(client, "zero")
        assert first.status_code == 200, first.text
        server.refuse_initialize = True
        server.forgotten.add(server.calls()[0][2])
        answers = await asyncio.gather(*(_call(client, f"m{n}") for n in range(5)))
        status = await upstream_status(client)
        server.refuse_initialize = False
        await eventually(lambda: upstream_ready(client), timeout=60)
        later = await _call(client, "later")
    waited = "Upstream 'json' ended its session; none is open yet."
    assert [(a.status_code, a.json().get("code"), a.json().get("detail")) for a in answers] == [
        (503, "UPSTREAM_UNAVAILABLE", waited)
    ] * 5, [a.text for a in answers]
    assert status["circuit"] == "closed", status
    assert (later.status_code, later.json().get("result")) == (200, "later"), later.text
