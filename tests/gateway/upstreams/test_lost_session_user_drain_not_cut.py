"""A user's session the upstream forgot, draining its calls in flight, is not cut to make room.

Attack (outside review of 329015b): another user's first call cuts a user's calls in flight
on a session the upstream forgot.

329015b keeps a forgotten user session open until the calls in flight on it have ended ("the
upstream answers those it accepted"). But ``UserSessions._close(after_calls=True)`` puts that
draining session in ``_closing``, and ``_make_room`` cuts the oldest ``_closing`` task *first*,
before it looks for an idle session to close: with the bound reached, any other user's first
call cancels the draining session's task and the calls still running on it fail 502 — although
an idle session (here the same user's fresh replacement) could have been closed instead, and an
open session with a call in flight is never closed for room (503 "every session ... is busy")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import Backend, eventually
from tests.gateway.upstreams.test_credential_attacks import bearer, execute, gateway, register


async def test_a_draining_session_with_calls_in_flight_is_not_cut_for_room(
    backend: Backend, tmp_path: Path
):
    async with gateway(backend, tmp_path, upstream_max_user_sessions=2) as (client, upstream):
        assert (await register(client, "tok-ada", "ada-token-0001")).status_code == 204
        assert (await register(client, "tok-bob", "bob-token-0001")).status_code == 204
        assert (await execute(client, "tok-ada", "whoami")).status_code == 200
        slow = asyncio.create_task(execute(client, "tok-ada", "slow"))

        async def running() -> bool:
            return getattr(upstream, "slow_calls", 0) == 1

        await eventually(running)
        upstream.restart()  # Ada's session is forgotten; her slow call runs on
        lost = await execute(client, "tok-ada", "whoami")  # 404 (not sent again); old drains
        after = await execute(client, "tok-ada", "whoami")  # a new session
        # Table: Ada's new (idle) session; closing: Ada's old one, its slow call in flight.
        bob = await execute(client, "tok-bob", "whoami")
        slow_answer = await slow
        listed = await client.get("/upstreams", headers=bearer("tok-ada"))
        status = listed.json()["upstreams"][0]
    seen = [(a.status_code, a.text[:160]) for a in (lost, after, bob, slow_answer)]
    assert (lost.status_code, lost.json()["code"]) == (502, "UPSTREAM_FAILED"), seen
    # Observed: Ada's slow call 502 (UPSTREAM_CONNECTION_LOST): Bob's call made room by
    # cancelling the draining session, not by closing Ada's idle one.
    assert [a.status_code for a in (after, bob, slow_answer)] == [200, 200, 200], seen
    assert after.json()["result"] == slow_answer.json()["result"] != bob.json()["result"], seen
    assert status["circuit"] == "closed", status
