"""The tool policy over the other sources of tools: a real upstream MCP server (selected by server
and tool-name pattern), finance alias tools (an alias is never a way around a rule about its
canonical tool), and the glob matcher every selector uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conclave.gateway.policy import PolicyRuleSpec, Subject, ToolPolicy, glob_matches
from conclave.gateway.tools import Tool
from tests.conftest import Backend, test_settings
from tests.gateway.conftest import audit_rows, run_gateway
from tests.gateway.upstream_fixtures import time_entry

ADA = {"Authorization": "Bearer tok-ada"}
BOB = {"Authorization": "Bearer tok-bob"}
OLGA = {"Authorization": "Bearer tok-olga"}
AUTH = {
    "auth": "enabled",
    "api_tokens": "tok-ada=ada,tok-bob=bob,tok-olga=olga",
    "operators": "olga",
}


def _with_policy(tmp_path: Path, policy: dict[str, Any]) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps({"policy": policy}))  # JSON is YAML
    return str(path)


async def test_upstream_tools_by_server_and_tool_pattern(backend: Backend, tmp_path: Path):
    policy = {
        "rules": [
            {
                "effect": "deny",
                "subjects": ["user:bob"],
                "actions": ["call"],
                "tools": ["upstream:time/convert_*"],
            },
            {"effect": "allow", "subjects": ["*"], "tools": ["upstream:t?me/*", "echo"]},
        ]
    }
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"mcp_servers": [time_entry()], "policy": policy}))
    async with run_gateway(backend, test_settings(tool_catalogues=str(path), **AUTH)) as client:
        listing = await client.get("/tools", params={"format": "mcp"}, headers=ADA)
        called = await client.post(
            "/execute",
            json={"tool": "time__get_current_time", "args": {"timezone": "Asia/Tokyo"}},
            headers=BOB,
        )
        refused = await client.post(
            "/execute",
            json={
                "tool": "time__convert_time",
                "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"},
            },
            headers=BOB,
        )
        dry_run = await client.get(
            "/policy/check", params={"tool": "time__convert_time", "user": "bob"}, headers=OLGA
        )
    names = {tool["name"] for tool in listing.json()["tools"]}
    assert names == {"echo", "time__get_current_time", "time__convert_time"}
    assert called.status_code == 200, called.text
    assert called.json()["result"]["timezone"] == "Asia/Tokyo"
    assert refused.status_code == 403 and refused.json()["code"] == "TOOL_FORBIDDEN"
    assert dry_run.json()["rule"] == {
        "index": 0,
        "effect": "deny",
        "text": "deny call of upstream:time/convert_* to user:bob",
    }
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    row = rows[refused.json()["conclave_id"]]
    assert (row.tool_name, row.user_id, row.error_code) == (
        "time__convert_time",
        "bob",
        "TOOL_FORBIDDEN",
    )


async def test_an_alias_tool_follows_the_rules_of_its_canonical_tool(
    backend: Backend, tmp_path: Path
):
    policy = {
        "rules": [
            {"effect": "deny", "subjects": ["*"], "tools": ["screen_entities"]},
            {"effect": "allow", "subjects": ["*"], "tools": ["*"]},
        ]
    }
    settings = test_settings(
        tool_catalogues=_with_policy(tmp_path, policy), mcp_domain="finance", **AUTH
    )
    async with run_gateway(backend, settings) as client:
        aliases = await client.get("/v1/finance/tools", params={"format": "mcp"}, headers=ADA)
        listed = await client.get("/tools", params={"include_unavailable": "true"}, headers=ADA)
        call = await client.post(
            "/execute",
            json={"tool": "screen_tickers", "args": {"tickers": ["AAPL"]}},
            headers=ADA,
        )
        dry_run = await client.get(
            "/policy/check", params={"tool": "screen_tickers", "user": "ada"}, headers=OLGA
        )
    alias_names = {tool["name"] for tool in aliases.json()["tools"]}
    assert "screen_tickers" not in alias_names and "compare_tickers" in alias_names
    names = {tool["function"]["name"] for tool in listed.json()["tools"]}
    assert "screen_tickers" not in names and "screen_entities" not in names
    assert call.status_code == 404 and call.json()["code"] == "UNKNOWN_TOOL"
    assert dry_run.json()["allowed"] is False
    assert dry_run.json()["reason"].startswith("rule 0 denies call of 'screen_entities'")


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("echo", "echo", True),
        ("echo", "echo2", False),
        ("ec?o", "echo", True),
        ("e*", "echo", True),
        ("*o", "echo", True),
        ("*", "", True),
        ("?", "", False),
        ("billing.*", "billing.count", True),
        ("billing.*", "billingXcount", False),  # '.' is a character, not "any"
        ("[ab]", "a", False),  # brackets are characters too
        ("[ab]", "[ab]", True),
        ("a*b*c", "aXXbYYc", True),
        ("a*b*c", "aXXbYY", False),
        ("*a*a*a*a*a*a*a*a*b", "a" * 128, False),  # no backtracking blow-up
        ("*a*a*a*a*a*a*a*a*a", "a" * 128, True),
    ],
)
def test_glob_matching(pattern: str, text: str, matches: bool):
    assert glob_matches(pattern, text) is matches


def test_a_tool_replaced_under_the_same_name_is_judged_anew():
    # An upstream refresh serves new Tool objects under the same names: what the policy worked out
    # for the old one (which rules select it) must not decide for the new one.
    rule = PolicyRuleSpec(effect="allow", subjects=["*"], tools=["tag:public"])
    policy = ToolPolicy([rule])
    anyone = Subject("ada")
    before = Tool(name="srv__report", description="", tags=("public",))
    after = Tool(name="srv__report", description="", tags=())
    assert policy.allows(anyone, before, "call") is True
    assert policy.allows(anyone, after, "call") is False
    assert policy.decide(anyone, after, "call").rule is None
