"""The catalogue: service description, health, and the three function-calling formats."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conclave.gateway.backends.catalogue import load_catalogue
from conclave.gateway.formats import wire_name
from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient

STRICT = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


async def test_root_describes_the_service_with_links(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        body = (await client.get("/")).json()
        assert body["mode"] == "generic"
        for link in ("/health", "/tools", "/execute", "/metrics"):
            assert link in body["links"].values()


async def test_health_reports_store_and_bus(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.get("/health")
        body = response.json()
        assert response.status_code == 200
        assert body["status"] == "healthy"
        assert body["checks"]["store"]["status"] == "up"
        assert body["checks"]["bus"]["status"] == "up"


async def test_openai_format_is_the_default(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        body = (await client.get("/tools")).json()
        assert body["format"] == "openai"
        # 4 built-in + 5 test tools + 6 platform tools + query_signals (answers from the store
        # without a backend); the four other entity tools have no backend and are not listed.
        assert body["count"] == len(body["tools"]) == 16
        echo = next(t for t in body["tools"] if t["function"]["name"] == "echo")
        assert echo["type"] == "function"
        assert echo["function"]["parameters"]["required"] == ["message"]
        assert all(STRICT.match(t["function"]["name"]) for t in body["tools"])


async def test_anthropic_and_mcp_formats(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        anthropic = (await client.get("/tools", params={"format": "anthropic"})).json()["tools"]
        echo = next(t for t in anthropic if t["name"] == "echo")
        assert set(echo) == {"name", "description", "input_schema"}
        assert all(STRICT.match(t["name"]) for t in anthropic)

        mcp = (await client.get("/tools", params={"format": "mcp"})).json()["tools"]
        echo = next(t for t in mcp if t["name"] == "echo")
        assert echo["inputSchema"]["type"] == "object"
        assert echo["outputSchema"]["required"] == ["message"]
        assert echo["annotations"]["readOnlyHint"] is True
        # MCP clients forward names to model providers: MCP lists the same alias as the others.
        assert all(STRICT.match(t["name"]) for t in mcp)
        assert wire_name("billing.count") in {t["name"] for t in mcp}

        bad = await client.get("/tools", params={"format": "xml"})
        assert bad.status_code == 422 and bad.json()["code"] == "VALIDATION_FAILED"


async def test_filter_by_tags_and_names(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        by_tag = (await client.get("/tools", params={"tags": "math,auth"})).json()["tools"]
        assert {t["function"]["name"] for t in by_tag} == {"evaluate_expression", "login"}
        by_name = (await client.get("/tools", params={"names": "echo,nope"})).json()
        assert by_name["count"] == 1


async def test_built_in_tools_work_without_a_backend(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        now = await client.post(
            "/execute", json={"tool": "current_time", "args": {"timezone": "Europe/Rome"}}
        )
        assert now.status_code == 200
        assert now.json()["result"]["utc"].endswith("Z")
        assert now.json()["result"]["local"][-6:] in ("+01:00", "+02:00")

        query = await client.post(
            "/execute",
            json={
                "tool": "json_query",
                "args": {"document": {"items": [{"n": 1}, {"n": 5}]}, "query": "items[?n > `2`].n"},
            },
        )
        assert query.json()["result"] == {"query": "items[?n > `2`].n", "result": [5]}
        nothing = await client.post(
            "/execute", json={"tool": "json_query", "args": {"document": {}, "query": "missing"}}
        )
        assert nothing.json()["orthodoxy_status"] == "purified"

        for expression, code in (
            ("__import__('os')", "INVALID_EXPRESSION"),
            ("9**99999", "RESULT_TOO_LARGE"),
        ):
            response = await client.post(
                "/execute", json={"tool": "evaluate_expression", "args": {"expression": expression}}
            )
            assert response.status_code == 422
            assert response.json()["code"] == code


def test_enum_from_is_read_only_where_a_schema_is(tmp_path: Path) -> None:
    """A property may be called ``enum_from`` and a default may hold one: only a schema's own
    ``enum_from`` names a list; a bad one is a catalogue error that says where."""
    spec = {
        "name": "lookup",
        "description": "d",
        "backend": "edge",
        "method": "GET",
        "path": "/x",
        "parameters": {
            "type": "object",
            "properties": {
                "enum_from": {"type": "string"},
                "kind": {"type": "string", "enum_from": "media_types"},
                "raw": {"type": "object", "default": {"enum_from": "media_types"}},
                "shown": {"type": "object", "example": {"enum_from": "media_types"}},
                "vendor": {"type": "string", "x-ui": {"enum_from": "free text"}},
                "nested": {"anyOf": [{"type": "string", "enum_from": "media_types"}]},
            },
            "dependencies": {"enum_from": ["kind"]},
        },
    }
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [spec]}))
    [loaded] = load_catalogue(path).tools
    properties = loaded.parameters["properties"]
    assert properties["enum_from"] == {"type": "string"}
    assert properties["kind"]["enum"][:2] == ["document", "image"]
    assert properties["raw"]["default"] == {"enum_from": "media_types"}
    assert properties["shown"]["example"] == {"enum_from": "media_types"}
    assert properties["vendor"]["x-ui"] == {"enum_from": "free text"}
    assert properties["nested"]["anyOf"][0]["enum"][-1] == "geo"
    assert loaded.parameters["dependencies"] == {"enum_from": ["kind"]}

    spec["parameters"]["properties"]["kind"]["enum_from"] = {"not": "a name"}
    path.write_text(json.dumps({"tools": [spec]}))
    with pytest.raises(ValueError, match=r"tool catalogue .*enum_from \{'not': 'a name'\}"):
        load_catalogue(path)


def test_a_catalogue_nested_too_deeply_is_refused_by_name(tmp_path: Path) -> None:
    deep: dict[str, object] = {"type": "string"}
    for _ in range(200):
        deep = {"anyOf": [deep]}
    spec = {"name": "deep", "description": "d", "backend": "edge", "parameters": deep}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [spec]}))
    with pytest.raises(ValueError, match=r"tool catalogue .*deeper than 64 levels"):
        load_catalogue(path)
