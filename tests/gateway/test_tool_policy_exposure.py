"""What the public and shared pages say about the tools a tool policy hides (docs/gateway.md,
"Tool policy", "Nothing else tells"; "Metrics"): they name and count only what the reader may
see, and still name what everyone may see."""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conclave.gateway.app import create_app
from conclave.gateway.policy import glob_matches
from conclave.gateway.tools import Tool
from tests.conftest import Backend, open_platform, serve_app, test_settings
from tests.gateway.conftest import run_gateway
from tests.gateway.test_tool_policy import ADA, BOB, OLGA, POLICY, _catalogue, _settings
from tests.gateway.upstream_fixtures import time_entry


@asynccontextmanager
async def _gateway(
    backend: Backend, tools: tuple[Tool, ...], catalogue: Path, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    settings = _settings(catalogue, **overrides)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tools)
        async with serve_app(app) as client:
            yield client


def _calls_by_tool(metrics: str) -> dict[tuple[str, str], float]:
    """``conclave_gateway_tool_calls_total`` by (tool, status)."""
    counted: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name == "conclave_gateway_tool_calls":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["tool"], sample.labels["status"])
                    counted[key] = sample.value
    return counted


async def _traffic(client: httpx.AsyncClient) -> None:
    """olga (operator) calls a tool everyone may list and one hidden from bob; bob probes the
    hidden one and a name no tool has (both answered 404)."""
    public = await client.post(
        "/execute", json={"tool": "echo", "args": {"message": "hi"}}, headers=OLGA
    )
    assert public.status_code == 200, public.text
    # crash (it raises) is listed to operators only and callable by ada: hidden from bob.
    restricted = await client.post("/execute", json={"tool": "crash", "args": {}}, headers=OLGA)
    assert (restricted.status_code, restricted.json()["code"]) == (502, "TOOL_FAILED")
    for name in ("crash", "no_such_tool"):
        probe = await client.post("/execute", json={"tool": name, "args": {}}, headers=BOB)
        assert (probe.status_code, probe.json()["code"]) == (404, "UNKNOWN_TOOL")


async def test_metrics_name_public_tools_and_count_the_others_together(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        await _traffic(client)
        metrics = (await client.get("/metrics")).text
    counted = _calls_by_tool(metrics)
    assert counted[("echo", "succeeded")] == 1  # every user may list echo: named
    assert counted[("__restricted__", "failed")] == 1  # olga's call of crash
    assert counted[("__unknown__", "rejected")] == 2  # bob's probes look alike
    assert not any(tool == "crash" for tool, _ in counted)


async def test_metrics_name_every_tool_where_only_operators_read_them(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    catalogue = _catalogue(tmp_path, POLICY)
    async with _gateway(backend, test_tools, catalogue, metrics_name_every_tool=True) as client:
        await _traffic(client)
        metrics = (await client.get("/metrics")).text
    counted = _calls_by_tool(metrics)
    assert counted[("crash", "failed")] == 1
    # A call answered as unknown is still counted as unknown: its caller was told so.
    assert counted[("__unknown__", "rejected")] == 2
    assert ("crash", "rejected") not in counted


async def test_service_and_health_count_what_every_user_may_list(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        # ada has no role and no rule lists anything to her alone: she sees what everyone sees.
        everyone = (await client.get("/tools", headers=ADA)).json()["count"]
        operator = (await client.get("/tools", headers=OLGA)).json()["count"]
        described = (await client.get("/")).json()["tools"]
        health = (await client.get("/health")).json()["tools"]
    assert described == health == everyone < operator


async def test_service_counts_every_tool_without_a_policy(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    settings = test_settings(auth="enabled", api_tokens="tok-ada=ada")
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=test_tools)
        async with serve_app(app) as client:
            described = (await client.get("/")).json()["tools"]
            health = (await client.get("/health")).json()["tools"]
    assert described == health == len(app.state.gateway.registry)


async def test_upstreams_show_a_user_the_servers_and_tools_they_may_see(
    backend: Backend, tmp_path: Path
):
    policy = {
        "rules": [
            {"effect": "allow", "subjects": ["role:operator"], "tools": ["*"]},
            {"effect": "allow", "subjects": ["user:bob"], "tools": ["upstream:time/get_*"]},
            {"effect": "allow", "subjects": ["*"], "tools": ["echo"]},
        ]
    }
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"mcp_servers": [time_entry()], "policy": policy}))
    settings = test_settings(
        tool_catalogues=str(path),
        auth="enabled",
        api_tokens="tok-ada=ada,tok-bob=bob,tok-olga=olga",
        operators="olga",
    )
    async with run_gateway(backend, settings) as client:
        seen = {}
        for who, headers in (("ada", ADA), ("bob", BOB), ("olga", OLGA)):
            answer = (await client.get("/upstreams", headers=headers)).json()
            seen[who] = {entry["name"]: entry["tools"] for entry in answer["upstreams"]}
        # The credential routes tell a hidden server from a missing one no more than the list.
        hidden = await client.put(
            "/upstreams/time/credential", json={"credential": "secret-123"}, headers=ADA
        )
        visible = await client.put(
            "/upstreams/time/credential", json={"credential": "secret-123"}, headers=BOB
        )
        missing = await client.put(
            "/upstreams/nothing/credential", json={"credential": "secret-123"}, headers=ADA
        )
    assert seen["ada"] == {}
    assert seen["bob"] == {"time": 1}  # get_current_time, not convert_time
    assert seen["olga"]["time"] >= 2
    assert (hidden.status_code, hidden.json()["code"]) == (404, "UPSTREAM_NOT_FOUND")
    assert hidden.json()["detail"].replace("'time'", "'nothing'") == missing.json()["detail"]
    assert (visible.status_code, visible.json()["code"]) == (
        409,
        "UPSTREAM_CREDENTIALS_NOT_ACCEPTED",
    )


async def test_finance_config_and_normalize_follow_the_policy(backend: Backend, tmp_path: Path):
    policy = {
        "rules": [
            {"effect": "allow", "subjects": ["role:operator"], "tools": ["*"]},
            {"effect": "deny", "subjects": ["*"], "tools": ["screen_entities"]},
            {"effect": "allow", "subjects": ["*"], "tools": ["*"]},
        ]
    }
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"policy": policy}))
    settings = test_settings(
        tool_catalogues=str(path),
        mcp_domain="finance",
        auth="enabled",
        api_tokens="tok-ada=ada,tok-olga=olga",
        operators="olga",
    )
    screen = {"tool": "screen_tickers", "args": {"tickers": ["AAPL"]}}
    compare = {"tool": "compare_tickers", "args": {"tickers": ["AAPL", "MSFT"]}}
    async with run_gateway(backend, settings) as client:
        ada_config = (await client.get("/v1/finance/config", headers=ADA)).json()
        olga_config = (await client.get("/v1/finance/config", headers=OLGA)).json()
        ada_screen = await client.post("/v1/finance/normalize", json=screen, headers=ADA)
        ada_compare = await client.post("/v1/finance/normalize", json=compare, headers=ADA)
        olga_screen = await client.post("/v1/finance/normalize", json=screen, headers=OLGA)
        unknown = await client.post(
            "/v1/finance/normalize", json={"tool": "screen_tickerz", "args": {}}, headers=ADA
        )
    assert "screen_tickers" not in ada_config["aliases"]
    assert "screen_tickers" not in ada_config["mappings"]
    assert ada_config["aliases"]["compare_tickers"] == "compare_entities"
    assert olga_config["aliases"]["screen_tickers"] == "screen_entities"
    assert "screen_tickers" in olga_config["mappings"]
    # A hidden alias is answered exactly like an unknown one (bar the name in the detail).
    assert (ada_screen.status_code, ada_screen.json()["code"]) == (404, "UNKNOWN_ALIAS")
    assert (
        ada_screen.json()["detail"].replace("screen_tickers", "screen_tickerz")
        == (unknown.json()["detail"])
    )
    assert ada_compare.status_code == 200, ada_compare.text
    assert ada_compare.json()["arguments"]["entity_ids"] == ["ticker:AAPL", "ticker:MSFT"]
    assert olga_screen.status_code == 200, olga_screen.text
    assert olga_screen.json()["canonical_tool"] == "screen_entities"


def _reference(pattern: str, text: str) -> bool:
    translated = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(translated, text, re.DOTALL) is not None


def test_glob_matching_agrees_with_the_textbook_definition():
    """The piece-by-piece matcher answers as ``*`` = any run and ``?`` = one character would,
    on every small pattern and name over a two-letter alphabet (where pieces overlap most)."""
    assert not glob_matches("*b??*?a", "baa")  # a piece with no room left in the name
    assert glob_matches("upstream_*_a?min_*", "upstream_x_admin_tool")
    chooser = random.Random(20261127)
    for _ in range(100_000):
        pattern = "".join(chooser.choice("ab*?") for _ in range(chooser.randint(0, 8)))
        text = "".join(chooser.choice("ab") for _ in range(chooser.randint(0, 10)))
        assert glob_matches(pattern, text) == _reference(pattern, text), (pattern, text)
