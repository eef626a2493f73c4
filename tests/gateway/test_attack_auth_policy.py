"""Attacks on the tool policy (attack-auth): places that still name or count the tools the
policy hides from a caller, and tokens the resource server accepts for another audience."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.tools import Tool
from tests.conftest import Backend
from tests.gateway.oauth_server import AuthorizationServer
from tests.gateway.test_oauth_resource_server import ECHO, bearer, oauth_gateway
from tests.gateway.test_tool_policy import ADA, BOB, OLGA, POLICY, _catalogue, _gateway

# Under POLICY, bob and ada may list only these; 'slow', 'crash', 'evaluate_expression', … are
# hidden from them (answered 404 UNKNOWN_TOOL, as if they did not exist).
HIDDEN_FROM_BOB = "slow"


async def test_attack_metrics_tell_a_hidden_tool_from_a_missing_one(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """An existence oracle for hidden tools, by the caller's own probes: bob calls a name; the
    answer is 404 UNKNOWN_TOOL whether the tool is hidden from him or does not exist, but the
    chain's rejection metric (service.py: ``known = self.registry.resolve(...)``, which ignores
    the policy) counts a hidden tool's probe under its real name and a missing one under
    ``__unknown__``. GET /metrics, open without a token, then tells bob which names exist."""
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        for name in (HIDDEN_FROM_BOB, "no_such_tool_at_all"):
            probe = await client.post("/execute", json={"tool": name, "args": {}}, headers=BOB)
            assert probe.status_code == 404, probe.text
        metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert f'tool="{HIDDEN_FROM_BOB}"' not in metrics.text, (
        "bob's probe of a hidden tool is labelled by its name"
    )


async def test_attack_metrics_name_tools_the_policy_hides(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """The policy hides ``slow`` from bob (a call is 404 UNKNOWN_TOOL, "a 403 would confirm to
    anyone probing names that the tool exists"), but once an operator called it, GET /metrics —
    open to any caller, even without a token — carries ``tool="slow"`` labels: the names (and
    call counts) of hidden tools leak to everyone."""
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        ran = await client.post(
            "/execute", json={"tool": HIDDEN_FROM_BOB, "args": {"seconds": 0}}, headers=OLGA
        )
        assert ran.status_code in (200, 422), ran.text  # the operator's call reached the tool
        probe = await client.post(
            "/execute", json={"tool": HIDDEN_FROM_BOB, "args": {}}, headers=BOB
        )
        assert probe.status_code == 404  # hidden: looks missing to bob
        anonymous = await client.get("/metrics")
        as_bob = await client.get("/metrics", headers=BOB)
    for answer in (anonymous, as_bob):
        if answer.status_code == 200:
            assert f'tool="{HIDDEN_FROM_BOB}"' not in answer.text


async def test_attack_tool_counts_reveal_hidden_tools(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """GET / and GET /health tell any caller how many tools the gateway serves, counting the ones
    the policy hides from them: bob compares it with his GET /tools count and learns that hidden
    tools exist and how many (the policy's premise is that hidden tools look missing)."""
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        listed = (await client.get("/tools", headers=BOB)).json()["count"]
        described = (await client.get("/", headers=BOB)).json()["tools"]
        health = (await client.get("/health", headers=BOB)).json()
    assert described <= listed, f"GET / counts {described} tools, bob may list {listed}"
    assert health.get("tools", 0) <= listed, f"GET /health counts {health.get('tools')}"


async def test_attack_openapi_does_not_name_hidden_tools(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """/openapi.json (and /docs) must not list the tool names the policy hides."""
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        spec = await client.get("/openapi.json", headers=BOB)
    assert spec.status_code in (200, 401, 403)
    assert '"evaluate_expression"' not in spec.text and '"slow"' not in spec.text


@pytest.fixture
def embedded(sqlite_engine: Any, memory_bus: Any) -> Backend:
    return Backend("embedded", sqlite_engine, memory_bus)


@pytest.fixture
async def issuer():
    from tests.gateway.oauth_server import SigningKey
    from tests.httpserver import running_server

    server = AuthorizationServer(keys=[SigningKey.rsa("k1")])
    async with running_server(server.app()) as url:
        server.issuer = url
        yield server


async def test_jwks_tokens_are_bound_to_an_audience_even_without_resource_url(
    embedded: Backend, issuer: AuthorizationServer
):
    """A JWT whose ``aud`` is another service's (any token a shared issuer minted for any of its
    clients) must not open the gateway: the token-passthrough / confused-deputy case the MCP
    authorization spec's audience binding exists to stop. With JWKS on, the gateway refuses to
    start without an audience (GATEWAY_RESOURCE_URL or CONCLAVE_JWT_AUDIENCE); with only
    CONCLAVE_JWT_AUDIENCE, a token for another resource is 401."""
    with pytest.raises(ValueError, match="GATEWAY_RESOURCE_URL"):
        async with oauth_gateway(embedded, issuer, resource_url=None):
            pass
    audience = "https://gateway.example.com/mcp"
    async with (
        oauth_gateway(embedded, issuer, resource_url=None, jwt_audience=audience) as url,
        httpx.AsyncClient() as client,
    ):
        other = issuer.token("https://payroll.example.com/api")
        refused = await client.post(f"{url}/execute", json=ECHO, headers=bearer(other))
        mine = issuer.token(audience)
        ours = await client.post(f"{url}/execute", json=ECHO, headers=bearer(mine))
    assert refused.status_code == 401, (refused.status_code, refused.text[:200])
    assert refused.json()["code"] == "INVALID_TOKEN"
    assert ours.status_code == 200, (ours.status_code, ours.text[:200])


async def test_attack_upstreams_list_servers_whose_tools_are_all_hidden(
    backend: Backend, tmp_path: Path
):
    """The policy hides every tool of the upstream ``time`` from bob (only ``echo`` is his), so
    its tools look missing to him on /tools, /mcp and /execute; yet GET /upstreams, open to any
    authenticated user, names the server, its state, its last error and how many tools it serves."""
    import json

    from tests.conftest import test_settings
    from tests.gateway.conftest import run_gateway
    from tests.gateway.upstream_fixtures import time_entry

    policy = {
        "rules": [
            {"effect": "allow", "subjects": ["role:operator"], "tools": ["*"]},
            {"effect": "allow", "subjects": ["*"], "tools": ["echo"]},
        ]
    }
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"mcp_servers": [time_entry()], "policy": policy}))
    settings = test_settings(
        tool_catalogues=str(path),
        auth="enabled",
        api_tokens="tok-bob=bob,tok-olga=olga",
        operators="olga",
    )
    async with run_gateway(backend, settings) as client:
        listed = (await client.get("/tools", params={"format": "mcp"}, headers=BOB)).json()
        servers = (await client.get("/upstreams", headers=BOB)).json()
    assert {tool["name"] for tool in listed["tools"]} == {"echo"}
    names = [entry["name"] for entry in servers["upstreams"]]
    assert "time" not in names, servers


async def test_attack_finance_normalize_and_config_reveal_hidden_alias_tools(
    backend: Backend, tmp_path: Path
):
    """In finance mode the policy hides ``screen_tickers`` (and its canonical ``screen_entities``)
    from ada: /execute answers 404 UNKNOWN_TOOL and /v1/finance/tools leaves it out. But
    POST /v1/finance/normalize, which asks no policy, answers 200 with the canonical tool and the
    rewritten arguments, and GET /v1/finance/config lists the alias and its canonical tool."""
    import json

    from tests.conftest import test_settings
    from tests.gateway.conftest import run_gateway

    policy = {
        "rules": [
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
    async with run_gateway(backend, settings) as client:
        call = await client.post(
            "/execute", json={"tool": "screen_tickers", "args": {"tickers": ["AAPL"]}}, headers=ADA
        )
        normalized = await client.post(
            "/v1/finance/normalize",
            json={"tool": "screen_tickers", "args": {"tickers": ["AAPL"]}},
            headers=ADA,
        )
        config = await client.get("/v1/finance/config", headers=ADA)
    assert call.status_code == 404 and call.json()["code"] == "UNKNOWN_TOOL"
    assert normalized.status_code == 404, normalized.text
    assert "screen_tickers" not in config.json()["aliases"], config.json()["aliases"]
