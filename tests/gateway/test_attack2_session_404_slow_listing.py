"""Attack: a healthy upstream restarts (forgets its session) and lists its tools in longer than
``connect_timeout_seconds`` (a big catalogue, several pages; well within ``timeout_seconds``).

docs/gateway.md ("A session the upstream ended") promises the call that meets the 404 "a slower
answer, not a failure". But it waits in ``Upstream._reopened`` for first backoff +
``connect_timeout_seconds`` only, while the supervisor marks the new session ready after its
whole listing (``_refresh``, bounded by ``timeout_seconds``): the call fails 503 and counts as a
breaker failure (caef61e), though the upstream never failed. Five such calls (or one restart
with five calls waiting) open the circuit for every user for 30 s."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Backend, eventually
from tests.gateway.upstreams.test_attack_session_404 import (
    _call,
    _ready,
    _upstream,
    forgetful_upstream,
)


async def test_a_call_meeting_a_restart_fails_when_the_new_listing_is_slow(
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
        await eventually(lambda: _ready(client), timeout=30)
        status = await _upstream(client)
    seen = (answer.status_code, answer.json().get("detail"), status["circuit"], status["state"])
    # Observed: (503, "Upstream 'json' ended its session; none is open yet.", 'closed', 'ready')
    # with one breaker failure recorded; the new session was ready ~0.5 s later.
    assert answer.status_code == 200, seen
