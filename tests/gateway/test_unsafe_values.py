"""Values no store, bus or answer can carry: refused and still audited when a caller sends them,
failed (row and answer agreeing) when a tool or its backend returns them (issue 15, defect 1)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool, ToolContext
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows, published, run_gateway
from tests.httpserver import running_server

UNSAFE_TEXT = [("\ud800", "\\ud800"), ("a\x00b", "a\\u0000b")]  # (sent, as audited)
MCP_HEADERS = {
    "Authorization": "Bearer tok-ada",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}
# The content type of a body sent as bytes (_json).
JSON_BODY = {"Content-Type": "application/json"}


def _json(document: Any) -> bytes:
    # ASCII JSON: the lone surrogate travels as the escape "\ud800", as an attacker sends it.
    return json.dumps(document).encode()


@pytest.mark.parametrize(("text", "escaped"), UNSAFE_TEXT)
async def test_unsafe_arguments_are_refused_and_audited_escaped(
    backend: Backend, text: str, escaped: str
):
    async with run_gateway(backend, test_settings()) as client:
        response = await client.post(
            "/execute",
            content=_json({"tool": "echo", "args": {"message": text}}),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        problem = response.json()
        assert (problem["code"], problem["orthodoxy_status"]) == ("UNSAFE_INPUT", "heretical")
        assert problem["errors"][0]["field"] == "body.args.message"

        (row,) = await audit_rows(backend)
        assert row.conclave_id == problem["conclave_id"]
        assert (row.tool_name, row.status, row.orthodoxy_status) == (
            "echo",
            "rejected",
            "heretical",
        )
        assert (row.error_code, row.http_status) == ("UNSAFE_INPUT", 422)
        assert row.args == {"message": escaped}

        (event,) = await eventually(lambda: published(backend))
        assert event.payload["conclave_id"] == problem["conclave_id"]
        assert event.payload["args"] == {"message": escaped}
        assert event.payload["orthodoxy_status"] == "heretical"

        call = await client.get(f"/calls/{problem['conclave_id']}")
        assert call.status_code == 200 and call.json()["args"] == {"message": escaped}


async def test_unsafe_tool_name_is_audited_escaped(backend: Backend):
    async with run_gateway(backend, test_settings()) as client:
        response = await client.post(
            "/execute",
            content=_json({"tool": "ec\ud800ho", "args": {}}),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422 and response.json()["code"] == "UNSAFE_INPUT"
        (row,) = await audit_rows(backend)
        assert (row.requested_tool, row.orthodoxy_status) == ("ec\\ud800ho", "heretical")


async def test_call_id_holding_nul_is_refused(backend: Backend):
    async with run_gateway(backend, test_settings()) as client:
        response = await client.get("/calls/a%00b")  # was a 500 on PostgreSQL
        assert response.status_code == 422 and response.json()["code"] == "UNSAFE_INPUT"
        assert response.json()["errors"][0]["field"] == "path.conclave_id"


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk"])
@pytest.mark.parametrize(("text", "escaped"), [*UNSAFE_TEXT, ("a\x00\ud800", "a\\u0000\\ud800")])
async def test_unsafe_mcp_arguments_are_refused_and_audited(
    backend: Backend, fast_path: bool, text: str, escaped: str
):
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada", mcp_fast_path=fast_path)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with running_server(app) as url, httpx.AsyncClient(headers=MCP_HEADERS) as client:
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": text}},
            }
            response = await client.post(f"{url}/mcp", content=_json(request), headers=JSON_BODY)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("UNSAFE_INPUT: arguments.message")
    (row,) = await audit_rows(backend)
    assert (row.user_id, row.status, row.orthodoxy_status) == ("ada", "rejected", "heretical")
    assert (row.error_code, row.args) == ("UNSAFE_INPUT", {"message": escaped})
    assert "structuredContent" not in result
    assert result["_meta"]["conclave"]["conclave_id"] == row.conclave_id


async def test_mcp_request_id_that_cannot_be_answered_is_refused_before_the_call(
    backend: Backend,
):
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada")
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with running_server(app) as url, httpx.AsyncClient(headers=MCP_HEADERS) as client:
            request = {
                "jsonrpc": "2.0",
                "id": "\ud800",  # the answer repeats it: it could not be encoded (was a 500)
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "hi"}},
            }
            response = await client.post(f"{url}/mcp", content=_json(request), headers=JSON_BODY)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700  # the SDK's parse error: nothing ran
    assert await audit_rows(backend) == []


# What a backend (or a plug-in) may answer that no store or answer can carry, and how the call
# then ends: the same code in the answer and in the audit row.
BACKEND_ANSWERS: dict[str, tuple[bytes, str, int]] = {
    "surrogate": (b'{"text": "\\ud800"}', "OUTPUT_INVALID", 502),
    "nul": (b'{"text": "a\\u0000b"}', "OUTPUT_INVALID", 502),
    "nan": (b'{"value": NaN}', "OUTPUT_INVALID", 502),
    "big_int": (b'{"n": 123456789012345678901234567890}', "OUTPUT_INVALID", 502),
    "huge_int": (b'{"n": ' + b"9" * 5000 + b"}", "BACKEND_FAILED", 502),
    "large": (_json({"text": "x" * 20_000}), "RESULT_TOO_LARGE", 422),
}
CATALOGUE_ENTRY = """
  - name: {name}
    description: Answers {name}.
    url: {url}
    path: /{name}
    parameters: {{type: object}}
"""


async def _answer(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "reject":
        return Response(b"unknown \x00 entity", status_code=404)
    return Response(BACKEND_ANSWERS[name][0], media_type="application/json")


@pytest.fixture
async def hostile_backend(tmp_path: Path) -> AsyncIterator[Path]:
    """A catalogue of tools whose backend answers each hostile value (and a refusal holding
    NUL): side-effect tools, recorded ``running`` before they run."""
    app = Starlette(routes=[Route("/{name}", _answer, methods=["POST"])])
    async with running_server(app) as url:
        catalogue = tmp_path / "hostile.yaml"
        entries = [
            CATALOGUE_ENTRY.format(name=name, url=url) for name in [*BACKEND_ANSWERS, "reject"]
        ]
        catalogue.write_text("tools:" + "".join(entries))
        yield catalogue


async def _plugin_surrogate(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    return {"text": "\udfff"}


PLUGIN = Tool(
    name="plugin_surrogate",
    description="Returns a lone surrogate.",
    executor=_plugin_surrogate,
    parameters={"type": "object"},
)


async def test_unstorable_answers_fail_alike_in_row_and_answer(
    backend: Backend, hostile_backend: Path
):
    settings = test_settings(tool_catalogues=[hostile_backend], max_result_bytes=10_000)
    async with run_gateway(backend, settings, (PLUGIN,)) as client:
        expected = {name: (code, status) for name, (_, code, status) in BACKEND_ANSWERS.items()}
        expected["plugin_surrogate"] = ("OUTPUT_INVALID", 502)
        answers = {}
        for name in expected:
            response = await client.post("/execute", json={"tool": name, "args": {}})
            answers[name] = (response.json()["code"], response.status_code)
        assert answers == expected

        rows = {row.tool_name: row for row in await audit_rows(backend)}
        stored = {name: (rows[name].error_code, rows[name].http_status) for name in expected}
        assert stored == expected
        assert {(rows[name].status, rows[name].result) for name in expected} == {("failed", None)}

        refused = await client.post("/execute", json={"tool": "reject", "args": {}})
        assert refused.status_code == 422 and refused.json()["code"] == "BACKEND_REJECTED"
        assert "unknown \\u0000 entity" in refused.json()["detail"]
        assert (await audit_rows(backend))[-1].error_message == refused.json()["detail"]
