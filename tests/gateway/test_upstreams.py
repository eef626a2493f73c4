"""Upstream MCP servers as a governed tool source, against real servers (no fakes of them):
``mcp-server-time`` over stdio, ``server-everything`` over streamable HTTP and stdio, and a small
hostile server built with the MCP SDK's own server API for what real servers will not do."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool, ToolContext
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows, published
from tests.gateway.upstream_fixtures import (
    catalogue,
    everything_stdio_entry,
    hostile_entry,
    time_entry,
)
from tests.gateway.upstream_fixtures import gateway as plain_gateway
from tests.httpserver import running_server

PROVIDER_SAFE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


async def _clash(_args: dict[str, Any], _ctx: ToolContext) -> str:
    return "plug-in"


# A plug-in whose name is what the hostile server's tool `clash` would be served as.
CLASHING_PLUGIN = Tool(name="hostile__clash", description="A plug-in.", executor=_clash)
gateway = functools.partial(plain_gateway, extra_tools=(CLASHING_PLUGIN,))


async def _upstream(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    listing = (await client.get("/upstreams")).json()
    [entry] = [item for item in listing["upstreams"] if item["name"] == name]
    return dict(entry)


async def _event_of(backend: Backend, conclave_id: str) -> Any:
    async def found() -> list[Any]:
        return [e for e in await published(backend) if e.payload["conclave_id"] == conclave_id]

    [event] = await eventually(found)
    return event


async def test_http_upstream_discovered_listed_called_audited(
    backend: Backend, tmp_path: Path, everything_http: str
):
    secret = "Bearer upstream-secret-value"
    entry = {
        "name": "everything",
        "transport": "http",
        "url": everything_http,
        "headers": {"Authorization": secret},
    }
    async with gateway(backend, tmp_path, entry) as client:
        status = await _upstream(client, "everything")
        assert status["state"] == "ready" and status["tools"] >= 10
        assert status["transport"] == "http" and status["last_refresh"].endswith("Z")
        listing = (await client.get("/upstreams")).text
        assert secret not in listing and everything_http not in listing
        for fmt in ("openai", "anthropic", "mcp"):
            tools = (await client.get("/tools", params={"format": fmt})).json()["tools"]
            names = [t["function"]["name"] if fmt == "openai" else t["name"] for t in tools]
            assert "everything__get-structured-content" in names
            assert all(PROVIDER_SAFE.match(name) for name in names)
        mcp_tools = (await client.get("/tools", params={"format": "mcp"})).json()["tools"]
        [structured] = [t for t in mcp_tools if t["name"] == "everything__get-structured-content"]
        assert structured["outputSchema"]["required"] == ["temperature", "conditions", "humidity"]

        answer = await client.post(
            "/execute",
            json={"tool": "everything__get-structured-content", "args": {"location": "Chicago"}},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["conditions"] == "Light rain / drizzle"
        invalid = await client.post(
            "/execute",
            json={"tool": "everything__get-structured-content", "args": {"location": "Paris"}},
        )
        assert invalid.status_code == 422 and invalid.json()["code"] == "VALIDATION_FAILED"
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    done = rows[answer.json()["conclave_id"]]
    assert (done.tool_name, done.status, done.orthodoxy_status) == (
        "everything__get-structured-content",
        "succeeded",
        "blessed",
    )
    assert rows[invalid.json()["conclave_id"]].status == "rejected"
    event = await _event_of(backend, done.conclave_id)
    assert event.payload["tool"] == "everything__get-structured-content"
    assert event.payload["args"] == {"location": "Chicago"}


async def test_stdio_time_server_through_mcp_with_the_sdk_client(backend: Backend, tmp_path: Path):
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, time_entry()),
        auth="enabled",
        api_tokens="tok-ada=ada",
    )
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with (
            running_server(app) as url,
            httpx2.AsyncClient(headers={"Authorization": "Bearer tok-ada"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
        ):
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"time__get_current_time", "time__convert_time"} <= names
            result = await mcp.call_tool("time__get_current_time", {"timezone": "Asia/Tokyo"})
            refused = await mcp.call_tool("time__get_current_time", {"timezone": "Not/AZone"})
    assert result.is_error is False, result
    assert result.structured_content is not None
    assert result.structured_content["timezone"] == "Asia/Tokyo"
    assert refused.is_error is True
    rows = sorted(await audit_rows(backend), key=lambda row: row.created_at)
    assert [(row.tool_name, row.user_id) for row in rows] == [("time__get_current_time", "ada")] * 2
    assert rows[0].status == "succeeded"
    assert (rows[1].status, rows[1].error_code) in {
        ("failed", "UPSTREAM_TOOL_ERROR"),
        ("failed", "UPSTREAM_REJECTED"),
    }
    event = await _event_of(backend, rows[0].conclave_id)
    assert event.payload["user_id"] == "ada"


async def test_hostile_names_schemas_and_answers(backend: Backend, tmp_path: Path):
    async with gateway(backend, tmp_path, hostile_entry("--page", "4")) as client:
        status = await _upstream(client, "hostile")
        listed = (await client.get("/tools", params={"tags": "upstream"})).json()["tools"]
        names = {t["function"]["name"] for t in listed}
        assert all(PROVIDER_SAFE.match(name) for name in names), names
        # Plain when safe and free; hashed when sanitised, cut, or taken by the plug-in.
        assert "hostile__dotted_name" in names
        hashed = [n for n in names if re.fullmatch(r"hostile__.*_[0-9a-f]{8}", n)]
        assert len(hashed) == 4, hashed  # dotted.name, spaces, 120 characters, clash
        plugin = await client.post("/execute", json={"tool": "hostile__clash", "args": {}})
        assert plugin.json()["result"] == "plug-in"  # the built-in kept its name
        # The refused schemas are skipped and said; the others (through 4 pages) are served.
        notes = " ".join(status["notes"])
        for skipped in ("deep", "huge_integer_schema"):
            assert skipped in notes
        assert "'long_nnn" in notes and "longer than 128 characters" in notes
        assert status["tools"] == 16 and status["refreshes"] == 1

        async def call(tool: str, **args: Any) -> dict[str, Any]:
            response = await client.post("/execute", json={"tool": tool, "args": args})
            return {"http": response.status_code, **response.json()}

        bad = await call("hostile__bad_output")
        assert (bad["http"], bad["code"], bad["orthodoxy_status"]) == (
            502,
            "OUTPUT_INVALID",
            "heretical",
        )
        big = await call("hostile__big_number")
        assert (big["http"], big["code"]) == (502, "OUTPUT_INVALID")
        nul = await call("hostile__nul")
        assert (nul["http"], nul["code"]) == (502, "OUTPUT_INVALID")
        fails = await call("hostile__fails")
        assert (fails["http"], fails["code"]) == (422, "UPSTREAM_TOOL_ERROR")
        assert "the upstream tool failed" in fails["detail"]
        refuses = await call("hostile__refuses")
        assert (refuses["http"], refuses["code"]) == (422, "UPSTREAM_REJECTED")
        started = time.monotonic()
        huge = await call("hostile__huge", size=5_000_000)
        assert (huge["http"], huge["code"]) == (422, "RESULT_TOO_LARGE")
        assert time.monotonic() - started < 10
        after = await call("hostile__huge", size=10)
        assert (after["http"], after["result"]) == (200, "x" * 10)
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    assert rows[bad["conclave_id"]].result is None
    assert rows[bad["conclave_id"]].error_code == "OUTPUT_INVALID"
    assert rows[huge["conclave_id"]].status == "failed"


async def test_crash_mid_call_is_a_clean_audited_error_and_the_server_restarts(
    backend: Backend, tmp_path: Path
):
    async with gateway(backend, tmp_path, hostile_entry()) as client:
        first = await client.post("/execute", json={"tool": "hostile__pid", "args": {}})
        started = time.monotonic()
        crashed = await client.post(
            "/execute", json={"tool": "hostile__crash", "args": {"seconds": 0.3}}
        )
        assert time.monotonic() - started < 5  # not the 10 s time-out: the exit is seen
        assert crashed.status_code == 502, crashed.text
        assert crashed.json()["code"] == "UPSTREAM_CONNECTION_LOST"

        async def restarted() -> bool:
            status = await _upstream(client, "hostile")
            return status["state"] == "ready" and status["restarts"] >= 1

        await eventually(restarted, timeout=60)
        second = await client.post("/execute", json={"tool": "hostile__pid", "args": {}})
        assert second.status_code == 200
        assert second.json()["result"] != first.json()["result"]  # a new process
        assert "exited" in (await _upstream(client, "hostile"))["last_error"]
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    row = rows[crashed.json()["conclave_id"]]
    assert (row.status, row.error_code) == ("failed", "UPSTREAM_CONNECTION_LOST")
    await _event_of(backend, row.conclave_id)


async def test_killed_upstream_answers_503_until_it_is_back(backend: Backend, tmp_path: Path):
    async with gateway(backend, tmp_path, hostile_entry()) as client:
        pid = int(
            (await client.post("/execute", json={"tool": "hostile__pid", "args": {}})).json()[
                "result"
            ]
        )
        os.kill(pid, signal.SIGKILL)

        async def down() -> bool:
            return (await _upstream(client, "hostile"))["state"] == "restarting"

        await eventually(down, timeout=60)
        refused = await client.post("/execute", json={"tool": "hostile__pid", "args": {}})
        if refused.status_code != 200:  # unless the restart was already done
            assert (refused.status_code, refused.json()["code"]) == (503, "UPSTREAM_UNAVAILABLE")


async def test_list_changed_storm_is_debounced(backend: Backend, tmp_path: Path):
    async with gateway(backend, tmp_path, hostile_entry(), upstream_debounce_seconds=0.5) as client:
        storm = await client.post("/execute", json={"tool": "hostile__storm", "args": {}})
        assert storm.status_code == 200

        async def refreshed() -> bool:
            return (await _upstream(client, "hostile"))["refreshes"] >= 2

        await eventually(refreshed, timeout=60)
        await asyncio.sleep(1.5)
        assert (await _upstream(client, "hostile"))["refreshes"] <= 3  # not 200


async def test_listing_bounds(backend: Backend, tmp_path: Path):
    many = hostile_entry("--tools", "500", "--page", "7", name="paged")
    flood = hostile_entry("--tools", "100000", "--page", "0", name="flood")
    abyss = hostile_entry("--abyss", name="abyss")
    async with gateway(
        backend, tmp_path, many, flood, abyss, upstream_max_tools=50, upstream_max_pages=5
    ) as client:
        # The unreadable page fails its request at once (not at the 10 s time-out).
        deep = await _upstream(client, "abyss")
        assert deep["state"] != "ready" and "could not read" in deep["last_error"]
        paged = await _upstream(client, "paged")
        assert paged["tools"] <= 50
        assert any("stopped after 5 pages" in note for note in paged["notes"])

        async def flood_refused() -> dict[str, Any] | None:
            flooded = await _upstream(client, "flood")
            return flooded if flooded["last_error"] else None

        # Start-up waits for the first listings at most GATEWAY_UPSTREAM_START_WAIT_SECONDS; on a
        # busy machine (parallel test processes) making and reading the flood takes longer.
        flooded = await eventually(flood_refused, timeout=60)
        # 100,000 tools in one answer pass the message cap: cut off, never parsed.
        assert flooded["tools"] == 0 and flooded["state"] != "ready"
        assert "larger than the gateway accepts" in flooded["last_error"]
        health = await client.get("/health")
        assert health.status_code == 200


async def test_egress_policy_guards_http_upstreams(backend: Backend, tmp_path: Path):
    metadata = {"name": "metadata", "transport": "http", "url": "http://169.254.169.254/mcp"}
    async with gateway(backend, tmp_path, metadata, upstream_start_wait_seconds=5) as client:
        status = await _upstream(client, "metadata")
        assert status["state"] != "ready" and status["tools"] == 0
        assert status["last_error"]


async def test_rate_limit_of_an_upstreams_tools(backend: Backend, tmp_path: Path):
    async with gateway(backend, tmp_path, {**time_entry(), "rate_limit": "1/60"}) as client:
        body = {"tool": "time__get_current_time", "args": {"timezone": "UTC"}}
        first = await client.post("/execute", json=body)
        second = await client.post("/execute", json=body)
    assert first.status_code == 200, first.text
    assert (second.status_code, second.json()["code"]) == (429, "RATE_LIMITED")
    assert len(await audit_rows(backend)) == 1


async def test_everything_over_stdio_with_idempotency(backend: Backend, tmp_path: Path):
    async with gateway(backend, tmp_path, everything_stdio_entry()) as client:
        headers = {"Idempotency-Key": "sum-1"}
        body = {"tool": "everything__get-sum", "args": {"a": 2, "b": 3}}
        first = await client.post("/execute", json=body, headers=headers)
        again = await client.post("/execute", json=body, headers=headers)
        long = await client.post(
            "/execute",
            json={
                "tool": "everything__trigger-long-running-operation",
                "args": {"duration": 1, "steps": 2},
            },
        )
    assert first.status_code == 200, first.text
    assert "5" in str(first.json()["result"])
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["conclave_id"] == first.json()["conclave_id"]
    assert long.status_code == 200, long.text
    assert len(await audit_rows(backend)) == 2


async def test_http_answer_over_the_cap_is_cut_off(
    backend: Backend, tmp_path: Path, everything_http: str
):
    entry = {"name": "everything", "transport": "http", "url": everything_http}
    async with gateway(backend, tmp_path, entry, upstream_max_message_bytes=65_536) as client:
        big = await client.post(
            "/execute", json={"tool": "everything__echo", "args": {"message": "y" * 100_000}}
        )
        small = await client.post(
            "/execute", json={"tool": "everything__echo", "args": {"message": "y"}}
        )
    assert (big.status_code, big.json()["code"]) == (422, "RESULT_TOO_LARGE"), big.text
    assert small.status_code == 200 and small.json()["result"] == "Echo: y"


async def test_periodic_refresh(backend: Backend, tmp_path: Path):
    entry = {**hostile_entry(), "refresh_seconds": 1}
    async with gateway(backend, tmp_path, entry, upstream_debounce_seconds=0) as client:

        async def relisted() -> bool:
            return (await _upstream(client, "hostile"))["refreshes"] >= 3

        await eventually(relisted, timeout=60)
