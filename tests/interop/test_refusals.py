"""The gateway's refusals at /mcp as the official MCP Python SDK shows them to its user.

The SDK reads a non-2xx answer only as ``application/json`` holding a JSON-RPC error; every other
body became "Server returned an error response" (-32603), so a user could not tell an expired
token from a too-large argument from a gateway fault. The refusals are problems (RFC 9457) that
are also JSON-RPC errors, served as ``application/json`` to a client that does not accept
``application/problem+json``; a client that does (curl, a browser) still gets that type.
"""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.interop.conftest import Gateway

MCP_ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "refusals", "version": "1"},
    },
}
TOO_LARGE = "x" * (1_048_576 + 1)  # over the gateway's default body cap (1 MiB)


async def _sdk_error(url: str, headers: dict[str, str], arguments: dict[str, Any]) -> MCPError:
    """The error the SDK raises to its user: at ``initialize`` (a refused token), else at a
    ``tools/call`` of ``echo`` with ``arguments``."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        with pytest.raises(MCPError) as raised:
            await session.initialize()
            await session.call_tool("echo", arguments)
    return raised.value


async def test_the_sdk_user_is_told_the_token_was_refused(gateway_with_token: Gateway):
    error = await _sdk_error(gateway_with_token.mcp_url, {"Authorization": "Bearer wrong"}, {})
    assert error.error.code == -32600  # not the SDK's stand-in -32603
    assert error.error.data["code"] == "INVALID_TOKEN"
    assert error.error.data["status"] == 401
    assert "token" in error.error.message.lower()


async def test_the_sdk_user_is_told_the_argument_is_too_large(gateway: Gateway):
    error = await _sdk_error(gateway.mcp_url, {}, {"message": TOO_LARGE})
    assert error.error.code == -32600
    assert error.error.data["code"] == "PAYLOAD_TOO_LARGE"
    assert error.error.data["status"] == 413


def test_a_refusal_keeps_its_status_headers_and_problem_members(gateway_with_token: Gateway):
    answer = httpx.post(
        gateway_with_token.mcp_url,
        json=INITIALIZE,
        headers={"accept": MCP_ACCEPT, "authorization": "Bearer wrong"},
    )
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["www-authenticate"].startswith("Bearer")  # the OAuth discovery hint
    assert answer.headers["x-request-id"]
    body = answer.json()
    assert body["code"] == "INVALID_TOKEN" and body["status"] == 401  # still the problem
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["data"]["code"] == "INVALID_TOKEN"
    assert body["error"]["data"]["request_id"] == answer.headers["x-request-id"]


@pytest.mark.parametrize(
    "accept",
    [None, "*/*", "application/problem+json", "application/*;q=0.5", "APPLICATION/PROBLEM+JSON"],
)
def test_a_client_accepting_problems_gets_application_problem_json(
    gateway_with_token: Gateway, accept: str | None
):
    headers = {"authorization": "Bearer wrong"}
    with httpx.Client() as http:
        request = http.build_request("POST", gateway_with_token.mcp_url, json=INITIALIZE)
        request.headers.pop("accept", None)
        if accept is not None:
            request.headers["accept"] = accept
        request.headers.update(headers)
        answer = http.send(request)
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "INVALID_TOKEN"
    assert answer.json()["error"]["data"]["code"] == "INVALID_TOKEN"


@pytest.mark.parametrize(
    "accept",
    [
        MCP_ACCEPT,
        "application/problem+json;q=0, application/json",
        "application/problem+json; q=0.000, */*;q=0",
        "text/event-stream",
    ],
)
def test_a_client_not_accepting_problems_gets_application_json(
    gateway_with_token: Gateway, accept: str
):
    answer = httpx.post(
        gateway_with_token.mcp_url,
        json=INITIALIZE,
        headers={"accept": accept, "authorization": "Bearer wrong"},
    )
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["data"]["code"] == "INVALID_TOKEN"


def test_a_tool_call_that_succeeds_is_untouched(gateway: Gateway):
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}},
    }
    answer = httpx.post(gateway.mcp_url, json=call, headers={"accept": MCP_ACCEPT})
    assert answer.status_code == 200
    assert answer.json()["id"] == 7 and "error" not in answer.json()


def test_other_routes_keep_plain_problems(gateway_with_token: Gateway):
    answer = httpx.get(f"{gateway_with_token.url}/tools", headers={"accept": MCP_ACCEPT})
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/problem+json"
    assert "jsonrpc" not in answer.json()
