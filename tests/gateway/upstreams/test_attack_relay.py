"""Attacks on the progress relay and cancellation through the gateway's /mcp, kept as
regression tests: each failed on the code it was written against (the docstrings describe the
defect) and guards its fix (docs/gateway.md, "Progress" and "Cancellation")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from tests.conftest import Backend, eventually
from tests.gateway.conftest import audit_rows
from tests.gateway.upstreams import test_upstream_credentials as creds
from tests.gateway.upstreams.credential_mcp_server import OBJECT, CredentialServer

HEADERS = {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
BOTH = "application/json, text/event-stream"


class ProgressEchoServer(CredentialServer):
    """The credential server plus ``leak_progress``: an upstream that echoes the request's
    Authorization header in a progress message (as a debug/verbose server does), then answers
    with something harmless."""

    async def _list(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await super()._list(ctx, params)
        listed.tools.append(
            types.Tool(name="leak_progress", description="leak_progress", input_schema=OBJECT)
        )
        for name in ("huge_progress", "slow_ok"):
            listed.tools.append(types.Tool(name=name, description=name, input_schema=OBJECT))
        return listed

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "slow_ok":
            self.seen.append(("tools/call", self._header(ctx)))
            await anyio.sleep(1.5)
            return types.CallToolResult(content=[types.TextContent(type="text", text="slept")])
        if params.name == "huge_progress":
            token = progress_token_from_params(ctx.params)
            if token is not None:
                # 10**400: a valid JSON number, beyond any float. Sent unvalidated, as a plain
                # dict: the SDK's typed notification would fail to serialise it here, in the
                # upstream, which then fails the call itself (and proves nothing of the gateway).
                await ctx.session._request_outbound.notify(
                    "notifications/progress", {"progressToken": token, "progress": 10**400}
                )
            await anyio.sleep(0.5)
            return types.CallToolResult(content=[types.TextContent(type="text", text="done")])
        if params.name != "leak_progress":
            return await super()._call(ctx, params)
        header = self._header(ctx)
        token = progress_token_from_params(ctx.params)
        if token is not None:
            await ctx.session.send_progress_notification(
                token,
                1,
                2,
                f"connecting with Authorization: {header}",
                related_request_id=ctx.request_id,
            )
            await anyio.sleep(0.5)
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])


def _call(request_id: int, tool: str, args: dict[str, Any], meta: Any = None) -> str:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


async def test_attack_progress_message_leaks_the_service_credential(
    backend: Backend, tmp_path: Path, monkeypatch: Any
):
    """A result and an error text are scrubbed of the credential the call presented
    (``scrub(result, presented.secret)``), but a progress message of the same upstream goes to
    the caller untouched: any user without a credential of their own (carol) calls with the
    operator's *service* credential and reads it from the progress stream."""
    monkeypatch.setattr(creds, "CredentialServer", ProgressEchoServer)
    async with creds.credential_gateway(backend, tmp_path) as (client, _upstream, url):
        streamed = await client.post(
            f"{url}/mcp",
            content=_call(1, "creds__leak_progress", {}, {"progressToken": "p"}),
            headers={**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-carol"},
            timeout=30,
        )
    assert streamed.headers["content-type"].startswith("text/event-stream"), streamed.text
    assert "notifications/progress" in streamed.text  # the relay did its job...
    assert creds.SERVICE not in streamed.text  # ...and handed carol the service credential


async def test_attack_huge_progress_value_fails_the_call_over_http(
    backend: Backend, tmp_path: Path, monkeypatch: Any
):
    """A progress of 10**400 from the upstream: the gateway's own check (``progress._number``)
    never sees it, because the SDK's client dispatcher calls ``float(progress)`` in its receive
    loop (only when a progress callback is registered, i.e. since the relay), which raises
    OverflowError. Over streamable HTTP the SDK contains it to the call (bob is fine), but the
    call that asked for progress fails instead of its bad report being dropped (low)."""
    monkeypatch.setattr(creds, "CredentialServer", ProgressEchoServer)
    async with creds.credential_gateway(backend, tmp_path) as (client, _upstream, url):
        bob = asyncio.create_task(creds.execute(client, "tok-bob", "slow_ok"))
        await asyncio.sleep(0.3)  # bob's call is on the shared session
        carol = await client.post(
            f"{url}/mcp",
            content=_call(1, "creds__huge_progress", {}, {"progressToken": "p"}),
            headers={**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-carol"},
            timeout=30,
        )
        bob_answer = await asyncio.wait_for(bob, 60)
        listed = (await client.get("/upstreams", headers=creds.bearer("tok-bob"))).json()
    [upstream] = listed["upstreams"]
    assert bob_answer.status_code == 200, bob_answer.json()  # held over HTTP: bob is fine
    assert upstream["restarts"] == 0, upstream
    # But carol's own call fails (UPSTREAM_FAILED "int too large to convert to float") where
    # progress.py promises an unusable progress is dropped and the call goes on.
    assert '"isError":false' in carol.text, carol.text


@pytest.mark.parametrize(
    "rest",
    [
        None,  # "progress": 10**400
        '"progress":1,"total":1' + "0" * 400,
    ],
    ids=["huge-progress", "huge-total"],  # NaN, 1e400/-Infinity, "\ud800\u0000": held
)
async def test_attack_huge_progress_value_kills_a_shared_stdio_upstream(
    backend: Backend, tmp_path: Path, rest: str | None
):
    """The same over stdio, where one connection and one SDK dispatcher receive loop carry every
    user's calls: ``float(10**400)`` in that loop (only reached because the relay registers a
    progress callback) raises OverflowError, the loop ends, the connection is torn down. Any
    user whose call asks for progress from a hostile or buggy upstream breaks every other
    user's in-flight call on it (UPSTREAM_CONNECTION_LOST) and forces a reconnect/restart."""
    from tests.gateway.test_upstream_relay import live_gateway
    from tests.gateway.upstream_fixtures import hostile_entry

    entry = hostile_entry(name="raw")
    entry["args"] = ["-m", "tests.gateway.upstreams.raw_progress_server"]
    async with (
        live_gateway(backend, tmp_path, entry) as (url, _app),
        httpx.AsyncClient(timeout=30) as http,
    ):
        bob = asyncio.create_task(
            http.post(
                url,
                content=_call(1, "raw__slow_ok", {}),
                headers={**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-bob"},
            )
        )
        await asyncio.sleep(0.3)
        ada = await http.post(
            url,
            content=_call(
                2, "raw__huge_progress", {"rest": rest} if rest else {}, {"progressToken": "p"}
            ),
            headers={**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-ada"},
        )
        bob_answer = await asyncio.wait_for(bob, 60)
        [upstream] = (
            await http.get(
                url.removesuffix("/mcp") + "/upstreams",
                headers={"Authorization": "Bearer tok-bob"},
            )
        ).json()["upstreams"]
    assert "slow_ok done" in bob_answer.text, bob_answer.text  # bob did nothing wrong
    assert upstream["restarts"] == 0, upstream  # the shared connection was never torn down
    assert '"isError":false' in ada.text, ada.text


async def test_attack_a_huge_progress_token_is_echoed_in_every_notification(
    backend: Backend, tmp_path: Path, everything_http: str
):
    """The client's ``progressToken`` has no length bound of its own (only the 1 MiB body
    limit), and every relayed notification repeats it. One request of ~0.9 MB to a real
    upstream tool whose progress the caller paces (server-everything's long-running operation,
    ``steps`` chosen by the caller) makes the gateway encode and send ~0.9 MB five times a
    second for as long as the call runs: tens of MB out (and as many JSON encodings of it on
    the event loop) per request, multiplied by the caller's concurrency."""
    from tests.gateway.test_upstream_relay import LONG_RUNNING, live_gateway

    entry = {"name": "everything", "transport": "http", "url": everything_http}
    token = "t" * 900_000
    body = _call(3, LONG_RUNNING, {"duration": 4, "steps": 40}, {"progressToken": token})
    async with (
        live_gateway(backend, tmp_path, entry) as (url, _app),
        httpx.AsyncClient(timeout=60) as http,
    ):
        received = 0
        async with http.stream(
            "POST",
            url,
            content=body,
            headers={**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-ada"},
        ) as response:
            async for chunk in response.aiter_bytes():
                received += len(chunk)
        short = {"duration": 0.4, "steps": 2}
        headers = {**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-ada"}
        at_bound = {
            json.dumps(t): await http.post(
                url, content=_call(4, LONG_RUNNING, short, {"progressToken": t}), headers=headers
            )
            for t in ("b" * 256, 2**53)
        }
        beyond = await http.post(
            url,
            content=_call(5, LONG_RUNNING, short, {"progressToken": 2**53 + 1}),
            headers=headers,
        )
    # Tokens at the bound still get their progress, with the token they chose.
    for token_json, streamed in at_bound.items():
        assert streamed.headers["content-type"].startswith("text/event-stream"), token_json
        assert f'"progressToken":{token_json}' in streamed.text, streamed.text[:300]
    assert beyond.headers["content-type"].startswith("application/json"), beyond.text
    assert beyond.json()["result"]["isError"] is False
    # A token beyond the bound (a string of more than 256 characters) gets no progress: the call
    # runs and is answered as JSON, once, within a small multiple of what was sent.
    assert response.headers["content-type"].startswith("application/json")
    assert received <= 4 * len(body), (received, len(body))


async def test_attack_a_cancelled_upstream_call_is_audited_without_its_credential_kind(
    backend: Backend, tmp_path: Path, monkeypatch: Any
):
    """``_run`` records ``CALL_CANCELLED`` with ``_finish(call, ending)``, dropping the
    ``upstream_credential=context.upstream_credential`` every other ending passes. The call
    reached the upstream carrying ada's own credential, yet its audit row (and event) say
    ``upstream_credential: null`` -- which docs/gateway.md defines as "the gateway's own tools".
    A user who wants a call made with their credential to leave no credential trail cancels it."""
    monkeypatch.setattr(creds, "CredentialServer", ProgressEchoServer)
    async with creds.credential_gateway(backend, tmp_path) as (client, upstream, url):
        assert (await creds.register(client, "tok-ada", creds.ADA)).status_code == 204
        ada = {**HEADERS, "Accept": BOTH, "Authorization": "Bearer tok-ada"}
        cancel = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        )
        slow = asyncio.create_task(
            client.post(f"{url}/mcp", content=_call(9, "creds__slow_ok", {}), headers=ada)
        )

        async def arrived() -> bool:
            return bool(upstream.calls())

        await eventually(arrived)  # the upstream has the call, with ada's credential
        assert (await client.post(f"{url}/mcp", content=cancel, headers=ada)).status_code == 202
        answer = await asyncio.wait_for(slow, 60)
        await asyncio.sleep(0.5)
    assert answer.json()["error"]["code"] == -32800
    assert upstream.calls() == [f"Bearer {creds.ADA}"]  # it was sent with ada's credential
    [row] = [r for r in await audit_rows(backend) if r.tool_name == "creds__slow_ok"]
    assert row.error_code == "CALL_CANCELLED"
    assert row.upstream_credential == "user", row.upstream_credential


async def test_attack_cancel_right_after_the_call_leaves_running_rows_without_slowing_anything(
    backend: Backend, tmp_path: Path
):
    """The same race with nothing slowed down: a client that sends its cancellation within a
    few milliseconds of its call (an agent giving up at once; the SDK does it on a timeout or a
    task cancelled early) leaves a third of its calls ``running`` after being told -32800 (in a
    trial: 23 of 60 on SQLite, 16 of 60 on PostgreSQL)."""
    from tests.gateway.test_upstream_relay import live_gateway
    from tests.gateway.upstream_fixtures import hostile_entry

    async with live_gateway(backend, tmp_path, hostile_entry()) as (url, _app):
        ada = {"Authorization": "Bearer tok-ada", **HEADERS, "Accept": BOTH}
        async with httpx.AsyncClient(timeout=30) as http:

            async def one(i: int, delay: float) -> Any:
                args = {"seconds": 5, "marker": str(tmp_path / f"m{i}")}
                call = asyncio.create_task(
                    http.post(url, content=_call(i, "hostile__slow", args), headers=ada)
                )
                await asyncio.sleep(delay)
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": i},
                }
                await http.post(url, content=json.dumps(cancel), headers=ada)
                return (await call).json().get("error", {}).get("code")

            codes = [await one(i, 0.002 * (i % 15)) for i in range(40)]
            await asyncio.sleep(1.5)  # every answer is in; nothing is left to commit
        rows = [r for r in await audit_rows(backend) if r.tool_name == "hostile__slow"]
    assert codes.count(-32800) == 40  # every call was answered "cancelled"
    stuck = [r.conclave_id for r in rows if r.status == "running"]
    assert stuck == [], f"{len(stuck)} of {len(rows)} rows left running"
