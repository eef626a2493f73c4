"""The audit trail's search, ``GET /calls``: a user pages through their own calls, newest first,
filtered; an operator through anyone's; nobody through another user's by asking."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from conclave.gateway.store import mcp_tool_calls
from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient, audit_rows

AUTH = {
    "auth": "enabled",
    "api_tokens": "tok-ada=ada,tok-bob=bob,tok-root=root",
    "operators": "root",
}
ADA = {"Authorization": "Bearer tok-ada"}
BOB = {"Authorization": "Bearer tok-bob"}
ROOT = {"Authorization": "Bearer tok-root"}


def _echo(message: str) -> dict[str, object]:
    return {"tool": "echo", "args": {"message": message}}


async def _all_pages(client: object, headers: dict[str, str], **params: object) -> list[dict]:
    seen: list[dict] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await client.get("/calls", params=query, headers=headers)  # type: ignore[attr-defined]
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["count"] == len(page["calls"])
        seen += page["calls"]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


async def test_a_user_pages_through_their_own_calls_newest_first(
    backend: Backend, gateway: GatewayClient
) -> None:
    async with gateway(**AUTH) as client:
        mine = [
            (await client.post("/execute", json=_echo(f"ada {n}"), headers=ADA)).json()
            for n in range(7)
        ]
        await client.post("/execute", json=_echo("bob's"), headers=BOB)
        bad = await client.post("/execute", json={"tool": "echo", "args": {}}, headers=ADA)
        assert bad.status_code == 422

        calls = await _all_pages(client, ADA, limit=3)
        # A last page holding exactly `limit` calls says it is the last.
        whole = (await client.get("/calls", params={"limit": 8}, headers=ADA)).json()
        assert (whole["count"], whole["next_cursor"]) == (8, None)

        rows = {row.conclave_id: row for row in await audit_rows(backend)}
        expected = sorted(
            (row for row in rows.values() if row.user_id == "ada"),
            key=lambda row: (row.created_at, row.conclave_id),
            reverse=True,
        )
        assert [call["conclave_id"] for call in calls] == [row.conclave_id for row in expected]
        assert len(calls) == 8 and {call["user_id"] for call in calls} == {"ada"}
        newest_success = next(call for call in calls if call["status"] == "succeeded")
        assert newest_success["conclave_id"] == mine[-1]["conclave_id"]
        assert newest_success["tool_name"] == "echo" and "args" not in newest_success
        assert calls[0]["status"] == "rejected"
        assert calls[0]["orthodoxy_status"] == "heretical"
        assert calls[0]["http_status"] == 422


async def test_filters_keep_only_the_calls_asked_for(backend: Backend, gateway: GatewayClient):
    async with gateway(**AUTH) as client:
        tagged = {**ADA, "X-Correlation-ID": "case-42"}
        first = (await client.post("/execute", json=_echo("one"), headers=tagged)).json()
        await client.post("/execute", json=_echo("two"), headers=ADA)
        await client.post("/execute", json={"tool": "echo", "args": {}}, headers=ADA)
        # One call of ada's, an hour ago.
        async with backend.engine.begin() as connection:
            await connection.execute(
                update(mcp_tool_calls)
                .where(mcp_tool_calls.c.conclave_id == first["conclave_id"])
                .values(created_at=datetime.now(UTC) - timedelta(hours=1))
            )

        by_correlation = await _all_pages(client, ADA, correlation_id="case-42")
        assert [call["conclave_id"] for call in by_correlation] == [first["conclave_id"]]
        rejected = await _all_pages(client, ADA, status="rejected")
        assert [call["status"] for call in rejected] == ["rejected"]
        heretical = await _all_pages(client, ADA, orthodoxy_status="heretical")
        assert [call["conclave_id"] for call in heretical] == [rejected[0]["conclave_id"]]
        assert await _all_pages(client, ADA, tool="no-such-tool") == []
        assert len(await _all_pages(client, ADA, tool="echo")) == 3
        since = (datetime.now(UTC) - timedelta(minutes=30)).isoformat()
        recent = await _all_pages(client, ADA, since=since)
        assert first["conclave_id"] not in {call["conclave_id"] for call in recent}
        assert len(recent) == 2
        older = await _all_pages(client, ADA, until=since)
        assert [call["conclave_id"] for call in older] == [first["conclave_id"]]


async def test_nobody_lists_another_users_calls_but_an_operator(
    backend: Backend, gateway: GatewayClient
) -> None:
    async with gateway(**AUTH) as client:
        await client.post("/execute", json=_echo("ada"), headers=ADA)
        await client.post("/execute", json=_echo("bob"), headers=BOB)

        assert [call["user_id"] for call in await _all_pages(client, BOB)] == ["bob"]
        refused = await client.get("/calls", params={"user_id": "ada"}, headers=BOB)
        assert refused.status_code == 403
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["code"] == "FORBIDDEN"
        own = await _all_pages(client, BOB, user_id="bob")
        assert [call["user_id"] for call in own] == ["bob"]

        everyone = await _all_pages(client, ROOT)
        assert sorted(call["user_id"] for call in everyone) == ["ada", "bob"]
        # An operator opens any call the search lists; a user only their own.
        adas_call = next(call["conclave_id"] for call in everyone if call["user_id"] == "ada")
        assert (await client.get(f"/calls/{adas_call}", headers=ROOT)).status_code == 200
        assert (await client.get(f"/calls/{adas_call}", headers=BOB)).status_code == 404
        adas = await _all_pages(client, ROOT, user_id="ada")
        assert [call["user_id"] for call in adas] == ["ada"]
        assert (await client.get("/calls")).status_code == 401


async def test_a_cursor_positions_but_does_not_widen_the_search(
    backend: Backend, gateway: GatewayClient
) -> None:
    """A cursor made by hand (another user's call, a time far ahead) moves the page, never past
    the caller's own calls."""
    async with gateway(**AUTH) as client:
        await client.post("/execute", json=_echo("ada"), headers=ADA)
        bobs = (await client.post("/execute", json=_echo("bob"), headers=BOB)).json()
        forged = base64.urlsafe_b64encode(
            f"9999-12-31T00:00:00Z|{bobs['conclave_id']}".encode()
        ).decode()
        page = (await client.get("/calls", params={"cursor": forged}, headers=ADA)).json()
        assert [call["user_id"] for call in page["calls"]] == ["ada"]


async def test_bad_search_input_is_a_clear_problem(backend: Backend, gateway: GatewayClient):
    def cursor(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode()

    async with gateway(**AUTH) as client:
        await client.post("/execute", json=_echo("ada"), headers=ADA)
        cases = [
            ({"cursor": "not a cursor"}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00|x")}, 400, "INVALID_CURSOR"),  # no zone
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|x\x00y")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|\xff")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|" + b"k" * 260)}, 400, "INVALID_CURSOR"),
            # A time with no UTC moment (a 500 until an outside attack found it).
            ({"cursor": cursor(b"0001-01-01T00:00:00+14:00|x")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"9999-12-31T23:59:59-14:00|x")}, 400, "INVALID_CURSOR"),
            ({"cursor": "x" * 401}, 422, "VALIDATION_FAILED"),
            ({"limit": 0}, 422, "VALIDATION_FAILED"),
            ({"limit": 101}, 422, "VALIDATION_FAILED"),
            ({"limit": 10**40}, 422, "VALIDATION_FAILED"),
            ({"status": "sideways"}, 422, "VALIDATION_FAILED"),
            ({"since": "yesterday"}, 422, "VALIDATION_FAILED"),
            ({"since": "9999-12-31T23:59:59-14:00"}, 422, "VALIDATION_FAILED"),
            ({"until": "0001-01-01T00:00:00+14:00"}, 422, "VALIDATION_FAILED"),
            ({"tool": "e" * 129}, 422, "VALIDATION_FAILED"),
            ({"tool": "echo\x00"}, 422, "UNSAFE_INPUT"),
        ]
        for params, status, code in cases:
            response = await client.get("/calls", params=params, headers=ADA)
            assert response.status_code == status, (params, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == code, params
        # A lone surrogate, as its UTF-8-style bytes (no client library encodes one itself).
        surrogate = await client.get("/calls?correlation_id=%ED%A0%80", headers=ADA)
        assert (surrogate.status_code, surrogate.json()["code"]) == (422, "UNSAFE_INPUT")
