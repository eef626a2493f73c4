"""Finance mode: alias tools over the canonical entity tools, and the /v1/finance endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from conclave.gateway.store import signals
from conclave.platform.clock import utc_now
from tests.conftest import Backend, eventually, test_settings
from tests.gateway.conftest import audit_rows, published, run_gateway

FINANCE = {"mcp_domain": "finance"}


async def _add_signal(backend: Backend, entity: str, kind: str, value: float, age: timedelta):
    async with backend.engine.begin() as connection:
        await connection.execute(
            signals.insert().values(
                signal_id=str(uuid.uuid4()),
                entity_id=entity,
                signal_type=kind,
                value=value,
                observed_at=utc_now() - age,
                source="test-feed",
            )
        )


async def test_generic_mode_has_no_finance_surface(backend: Backend):
    async with run_gateway(backend, test_settings()) as client:
        for path in ("/v1/finance/config", "/v1/finance/tools"):
            assert (await client.get(path)).status_code == 404
        assert (await client.post("/v1/finance/normalize", json={"tool": "x"})).status_code == 404
        names = {t["function"]["name"] for t in (await client.get("/tools")).json()["tools"]}
        assert not names & {"screen_tickers", "compare_tickers", "query_sentiment"}
        response = await client.post(
            "/execute", json={"tool": "query_sentiment", "args": {"tickers": ["AAPL"]}}
        )
        assert response.status_code == 404


async def test_finance_config_and_catalogue(backend: Backend):
    settings = test_settings(**FINANCE, neural_engine_api="http://127.0.0.1:9")
    async with run_gateway(backend, settings) as client:
        config = (await client.get("/v1/finance/config")).json()
        assert config["aliases"] == {
            "screen_tickers": "screen_entities",
            "compare_tickers": "compare_entities",
            "query_sentiment": "query_signals",
        }
        assert config["defaults"]["days"] == 7
        tools = (await client.get("/v1/finance/tools", params={"format": "anthropic"})).json()
        assert {t["name"] for t in tools["tools"]} == set(config["aliases"])
        listed = {t["function"]["name"] for t in (await client.get("/tools")).json()["tools"]}
        assert {"screen_tickers", "compare_tickers", "query_sentiment"} <= listed


async def test_normalize_rewrites_without_executing(backend: Backend):
    async with run_gateway(backend, test_settings(**FINANCE)) as client:
        response = await client.post(
            "/v1/finance/normalize",
            json={"tool": "query_sentiment", "args": {"tickers": ["aapl", "BRK.B"], "days": 30}},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["canonical_tool"] == "query_signals"
        arguments = body["arguments"]
        assert arguments["entity_ids"] == ["ticker:AAPL", "ticker:BRK.B"]
        assert arguments["signal_types"] == ["sentiment"]
        since = datetime.fromisoformat(arguments["since"].replace("Z", "+00:00"))
        until = datetime.fromisoformat(arguments["until"].replace("Z", "+00:00"))
        assert until - since == timedelta(days=30)

        screen = await client.post(
            "/v1/finance/normalize",
            json={"tool": "screen_tickers", "args": {"profile": "aggressive", "max_pe": 20}},
        )
        assert screen.json()["arguments"] == {"criteria": {"risk": "high", "pe_max": 20}}
        assert await audit_rows(backend) == []  # nothing ran


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"tool": "query_sentiment", "args": {"tickers": ["$$$"]}}, 422, "VALIDATION_FAILED"),
        (
            {"tool": "query_sentiment", "args": {"tickers": ["AAPL"], "days": 0}},
            422,
            "VALIDATION_FAILED",
        ),
        ({"tool": "compare_tickers", "args": {"tickers": ["AAPL"]}}, 422, "VALIDATION_FAILED"),
        ({"tool": "screen_tickers", "args": {"profile": "yolo"}}, 422, "VALIDATION_FAILED"),
        ({"tool": "query_signals", "args": {}}, 404, "UNKNOWN_ALIAS"),
        ({"tool": "query_sentiment", "args": "AAPL"}, 422, "VALIDATION_FAILED"),
    ],
)
async def test_normalize_bad_values_are_4xx(backend: Backend, body, status, code):
    async with run_gateway(backend, test_settings(**FINANCE)) as client:
        response = await client.post("/v1/finance/normalize", json=body)
        assert response.status_code == status, response.text
        assert response.json()["code"] == code


async def test_alias_call_runs_canonical_tool_and_audits_both(backend: Backend):
    await _add_signal(backend, "ticker:AAPL", "sentiment", 0.8, timedelta(days=1))
    await _add_signal(backend, "ticker:AAPL", "sentiment", -0.2, timedelta(days=3))
    await _add_signal(backend, "ticker:AAPL", "sentiment", 0.5, timedelta(days=40))  # too old
    await _add_signal(backend, "ticker:AAPL", "volume", 1e6, timedelta(days=1))  # other type
    await _add_signal(backend, "ticker:MSFT", "sentiment", 0.1, timedelta(days=1))  # other entity
    async with run_gateway(backend, test_settings(**FINANCE)) as client:
        response = await client.post(
            "/execute", json={"tool": "query_sentiment", "args": {"tickers": ["aapl"], "days": 7}}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["tool"] == "query_signals"
        result = body["result"]
        assert [s["value"] for s in result["signals"]] == [0.8, -0.2]  # newest first
        assert result["count"] == 2 and result["source"] == "store"

        [row] = await audit_rows(backend)
        assert (row.requested_tool, row.tool_name) == ("query_sentiment", "query_signals")
        assert row.args == {"tickers": ["aapl"], "days": 7}
        assert row.canonical_args["entity_ids"] == ["ticker:AAPL"]

        async def event():
            found = [
                e for e in await published(backend) if e.payload["conclave_id"] == row.conclave_id
            ]
            return found

        [found] = await eventually(event)
        names = (found.payload["requested_tool"], found.payload["tool"])
        assert names == ("query_sentiment", "query_signals")

        nothing = await client.post(
            "/execute", json={"tool": "query_sentiment", "args": {"tickers": ["ZZZZ"]}}
        )
        assert nothing.json()["result"] == {"signals": [], "count": 0, "source": "store"}
