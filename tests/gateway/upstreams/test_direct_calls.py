"""Direct calls: a governed ``tools/call`` to an HTTP upstream that answers JSON goes straight
over HTTP on the session the MCP SDK opened (``gateway/upstreams/direct_calls.py``), and behaves
as the SDK's path does. The upstream is the MCP SDK's own server (``json_response=True``, with
sessions), wrapped to record what arrives and to give a few answers on purpose."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Backend, eventually
from tests.gateway.conftest import audit_rows
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.json_mcp_server import JsonServer
from tests.httpserver import running_server

PROTOCOL = "2025-11-25"  # what the gateway's SDK client negotiates with the SDK's server


@asynccontextmanager
async def json_upstream(
    backend: Backend, tmp_path: Path, *, json_response: bool = True, **entry: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, JsonServer, str]]:
    server = JsonServer(json_response=json_response)
    async with running_server(server) as base:
        spec = {"name": "json", "transport": "http", "url": f"{base}/mcp", **entry}
        async with gateway(backend, tmp_path, spec) as client:

            async def ready() -> bool:
                listing = (await client.get("/upstreams")).json()["upstreams"]
                return listing[0]["state"] == "ready"

            await eventually(ready)
            yield client, server, base


async def _call(client: httpx.AsyncClient, tool: str, **args: Any) -> httpx.Response:
    return await client.post("/execute", json={"tool": f"json__{tool}", "args": args})


async def test_calls_go_direct_on_the_sdks_session_and_are_audited(
    backend: Backend, tmp_path: Path
):
    async with json_upstream(backend, tmp_path) as (client, server, _):
        answers = [await _call(client, "echo", message=f"hi {n}") for n in range(3)]
        [initialize] = [r for r in server.requests if r[0] == "initialize"]
    assert [a.json()["result"] for a in answers] == ["hi 0", "hi 1", "hi 2"]
    calls = server.calls()
    # The gateway's own request ids (never one of the SDK's integers on that session), on the
    # session the SDK opened, with the version it negotiated.
    assert [call[1] for call in calls] == ["direct-1", "direct-2", "direct-3"]
    session = calls[0][2]
    assert session is not None and initialize[2] is None
    assert all(call[2:] == (session, PROTOCOL) for call in calls)
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    assert [rows[a.json()["conclave_id"]].status for a in answers] == ["succeeded"] * 3


async def test_answers_are_read_and_refused_as_the_sdk_does(backend: Backend, tmp_path: Path):
    async with json_upstream(backend, tmp_path) as (client, _server, _):
        failed = await _call(client, "fail")
        rpc = await _call(client, "rpc_error_500")
        plain = await _call(client, "plain_500")
        streamed = await _call(client, "stream")
        redirect = await _call(client, "redirect")
        other = await _call(client, "other_id")
        after = await _call(client, "echo", message="still here")
    assert (failed.status_code, failed.json()["code"]) == (422, "UPSTREAM_TOOL_ERROR")
    assert (rpc.status_code, rpc.json()["code"]) == (502, "UPSTREAM_FAILED")
    assert "the database is on fire" in rpc.json()["detail"]
    assert (plain.status_code, plain.json()["code"]) == (502, "UPSTREAM_FAILED")
    assert "oops" not in plain.text
    assert streamed.status_code == 200 and streamed.json()["result"] == "streamed"
    # Not followed (the metadata address would be refused anyway): the call fails cleanly.
    assert (redirect.status_code, redirect.json()["code"]) == (502, "UPSTREAM_FAILED")
    assert (other.status_code, other.json()["code"]) == (502, "UPSTREAM_FAILED")
    assert after.status_code == 200 and after.json()["result"] == "still here"
    statuses = {row.conclave_id: row.status for row in await audit_rows(backend)}
    assert statuses[rpc.json()["conclave_id"]] == "failed"
    assert statuses[after.json()["conclave_id"]] == "succeeded"


async def test_an_answer_over_the_cap_is_cut_off(backend: Backend, tmp_path: Path):
    server = JsonServer()
    async with (
        running_server(server) as base,
        gateway(
            backend,
            tmp_path,
            {"name": "json", "transport": "http", "url": f"{base}/mcp"},
            upstream_max_message_bytes=65_536,
        ) as client,
    ):
        big = await _call(client, "echo", message="y" * 100_000)
        small = await _call(client, "echo", message="y")
    assert (big.status_code, big.json()["code"]) == (422, "RESULT_TOO_LARGE"), big.text
    assert small.status_code == 200 and small.json()["result"] == "y"
    assert [call[1] for call in server.calls()] == ["direct-1", "direct-2"]


async def test_a_time_out_cancels_the_upstreams_call(backend: Backend, tmp_path: Path):
    async with json_upstream(backend, tmp_path, timeout_seconds=1) as (client, server, _):
        slow = await _call(client, "slow", seconds=30)
        await eventually(lambda: _is_set(server))
        quick = await _call(client, "echo", message="next")
    assert (slow.status_code, slow.json()["code"]) == (504, "TOOL_TIMEOUT"), slow.text
    assert server.cancelled == ["direct-1"]
    assert quick.status_code == 200


async def _is_set(server: JsonServer) -> bool:
    return server.slow_cancelled.is_set()


@pytest.mark.parametrize("json_response", [True, False], ids=["direct", "sdk"])
async def test_a_session_the_upstream_ended_is_opened_again(
    backend: Backend, tmp_path: Path, json_response: bool
):
    # Over the SDK's path (an upstream answering event streams) as well: the SDK itself would
    # go on sending the session id the upstream no longer knows. The direct path knows its call
    # met the 404 and makes it again on the new session; the SDK words a 404 to the call as it
    # words the upstream's own -32600, so there the call fails (it may have run: it is never
    # sent twice) and the next ones work.
    async with json_upstream(backend, tmp_path, json_response=json_response) as (
        client,
        server,
        base,
    ):
        first = await _call(client, "echo", message="one")
        session = server.calls()[0][2]
        assert session is not None
        async with httpx.AsyncClient() as http:  # the upstream forgets the session
            ended = await http.delete(
                f"{base}/mcp",
                headers={"mcp-session-id": session, "mcp-protocol-version": PROTOCOL},
            )
            assert ended.status_code == 200, ended.text
        lost = await _call(client, "echo", message="two")

        async def answered() -> httpx.Response | None:
            again = await _call(client, "echo", message="three")
            return again if again.status_code == 200 else None

        again = await eventually(answered, timeout=60)
    assert first.status_code == 200
    if json_response:
        assert lost.status_code == 200 and lost.json()["result"] == "two", lost.text
        # "one" and "two" on the old session (404 for "two"), "two" again on the new one.
        calls = server.calls()
        assert [call[2] for call in calls[:2]] == [session, session]
        assert calls[2][2] not in (None, session)
    else:
        assert (lost.status_code, lost.json()["code"]) == (502, "UPSTREAM_FAILED"), lost.text
    assert again.json()["result"] == "three"
    assert server.calls()[-1][2] not in (None, session)  # a new session
