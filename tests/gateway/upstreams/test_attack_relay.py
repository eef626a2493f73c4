"""Attacks on the progress relay and cancellation through the gateway's /mcp (branch attack-relay).

Each test here FAILS on the code at the time of writing: it demonstrates a defect."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from tests.conftest import Backend
from tests.gateway.conftest import audit_rows
from tests.gateway.upstreams.credential_mcp_server import OBJECT, CredentialServer
from tests.gateway.upstreams import test_upstream_credentials as creds

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
        return listed

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != "leak_progress":
            return await super()._call(ctx, params)
        header = self._header(ctx)
        token = progress_token_from_params(ctx.params)
        if token is not None:
            await ctx.session.send_progress_notification(
                token, 1, 2, f"connecting with Authorization: {header}",
                related_request_id=ctx.request_id,
            )
            await anyio.sleep(0.5)
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])


def _call(request_id: int, tool: str, args: dict[str, Any], meta: Any = None) -> str:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


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
