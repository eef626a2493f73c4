"""The /mcp fast path answers exactly what the SDK's transport answers, and governs the same way."""

from __future__ import annotations

from typing import Any

import httpx

from conclave.gateway.tools import Tool
from tests.conftest import Backend, eventually
from tests.gateway.conftest import audit_rows, live_mcp, published

HEADERS = {
    "Authorization": "Bearer tok-ada",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


def _call(request_id: int | str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


REQUESTS: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    _call(2, {"name": "echo", "arguments": {"message": "hi"}}),
    _call("three", {"name": "echo", "arguments": {"message": 5}}),
    _call(4, {"name": "evaluate_expression", "arguments": {"expression": "1/0"}}),
    _call(5, {"name": "no_such_tool"}),
    _call(6, {"arguments": {}}),
    _call(7, {"name": 42}),
]


def _without_ids(value: Any) -> Any:
    """``value`` with every ``conclave_id`` (new for each call) blanked."""
    if isinstance(value, dict):
        return {k: "…" if k == "conclave_id" else _without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


async def _answers(url: str) -> list[tuple[int, str, Any]]:
    answers = []
    async with httpx.AsyncClient(headers=HEADERS) as client:
        for request in REQUESTS:
            response = await client.post(url, json=request)
            body = _without_ids(response.json())
            answers.append((response.status_code, response.headers["content-type"], body))
    return answers


async def test_fast_path_answers_like_the_sdk(backend: Backend, test_tools: tuple[Tool, ...]):
    async with live_mcp(backend, test_tools, fast=False) as url:
        through_sdk = await _answers(url)
    async with live_mcp(backend, test_tools, fast=True) as url:
        fast = await _answers(url)
    assert fast == through_sdk
    [listing, called, invalid, failed, unknown, nameless, bad_name] = fast
    assert called[2]["result"]["structuredContent"] == {"message": "hi"}
    assert invalid[2]["result"]["isError"] is True
    assert "division by zero" in failed[2]["result"]["content"][0]["text"]
    assert unknown[2]["error"]["code"] == -32602
    assert "error" in nameless[2] and "error" in bad_name[2]
    assert {tool["name"] for tool in listing[2]["result"]["tools"]} >= {"echo", "json_query"}
    # Both runs audited the same calls: succeeded, rejected, failed, unknown (rejected) each time.
    statuses = sorted(row.status for row in await audit_rows(backend))
    assert statuses == sorted(["succeeded", "rejected", "failed", "rejected"] * 2)


async def test_fast_path_call_is_audited_and_published(
    backend: Backend, test_tools: tuple[Tool, ...]
):
    async with (
        live_mcp(backend, test_tools, fast=True) as url,
        httpx.AsyncClient(headers=HEADERS) as client,
    ):
        response = await client.post(url, json=REQUESTS[1])
    conclave_id = response.json()["result"]["_meta"]["conclave"]["conclave_id"]
    [row] = await audit_rows(backend)
    assert (row.conclave_id, row.tool_name, row.user_id) == (conclave_id, "echo", "ada")

    async def event() -> list[Any]:
        return [e for e in await published(backend) if e.payload["conclave_id"] == conclave_id]

    [found] = await eventually(event, timeout=60)
    assert found.payload["args"] == {"message": "hi"}


async def test_requests_it_does_not_know_go_to_the_sdk(
    backend: Backend, test_tools: tuple[Tool, ...]
):
    async with (
        live_mcp(backend, test_tools, fast=True) as url,
        httpx.AsyncClient(headers=HEADERS) as client,
    ):
        batch = await client.post(url, json=[REQUESTS[0], REQUESTS[1]])
        wrong_host = await client.post(url, json=REQUESTS[1], headers={"Host": "evil.example"})
        not_json = await client.post(url, content=b"{", headers={"Content-Type": "text/plain"})
    assert batch.status_code == 400  # the SDK does not take batches on this protocol version
    assert wrong_host.status_code in (403, 421)  # the SDK's DNS-rebinding guard
    assert 400 <= not_json.status_code < 500  # worded by the SDK
    assert await audit_rows(backend) == []
