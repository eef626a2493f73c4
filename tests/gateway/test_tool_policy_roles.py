"""The deployment's own roles (CONCLAVE_ROLES) in the tool policy (docs/gateway.md, "Subjects"):
held through a JWT's roles claim or given to users by the setting, they open exactly what the
policy allows them and nothing else; a policy naming a role nobody can hold stops the start."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool
from tests.conftest import Backend, open_platform, serve_app, test_settings
from tests.gateway.conftest import Calls, audit_rows
from tests.gateway.test_tool_policy import SECRET, _catalogue, _jwt

ROLES = json.dumps({"analyst": ["ann"], "auditor": []})
TOKENS = "tok-ann=ann,tok-bob=bob,tok-olga=olga,tok-svc=svc"
ANN = {"Authorization": "Bearer tok-ann"}  # an analyst by the setting
BOB = {"Authorization": "Bearer tok-bob"}  # no role at all
OLGA = {"Authorization": "Bearer tok-olga"}  # an operator
POLICY: dict[str, Any] = {
    "rules": [
        {"effect": "allow", "subjects": ["role:operator"], "tools": ["*"]},
        {"effect": "allow", "subjects": ["role:analyst"], "tools": ["billing.*"]},
        # Everyone sees the clock; only operators may call it.
        {"effect": "allow", "subjects": ["*"], "actions": ["list"], "tools": ["current_time"]},
        {"effect": "allow", "subjects": ["*"], "tools": ["echo"]},
    ]
}
COUNT = {"tool": "billing.count", "args": {}}
CLOCK = {"tool": "current_time", "args": {}}


def _bearer(sub: str, roles: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {_jwt(sub, roles)}"}


@asynccontextmanager
async def _gateway(
    backend: Backend, tools: tuple[Tool, ...], catalogue: Path, roles: str = ROLES
) -> AsyncIterator[httpx.AsyncClient]:
    settings = test_settings(
        auth="enabled",
        api_tokens=TOKENS,
        jwt_secret=SECRET,
        operators="olga",
        service_users="svc",
        roles=roles,
        tool_catalogues=str(catalogue),
    )
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tools)
        async with serve_app(app) as client:
            yield client


async def _refused_row(backend: Backend, conclave_id: str) -> Any:
    return {row.conclave_id: row for row in await audit_rows(backend)}[conclave_id]


@pytest.mark.parametrize("how", ["jwt-claim", "setting"])
async def test_a_declared_role_calls_what_the_policy_allows_it_and_no_more(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path, how: str
):
    analyst = _bearer("carol", ["analyst"]) if how == "jwt-claim" else ANN
    user = "carol" if how == "jwt-claim" else "ann"
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        listed = (await client.get("/tools", params={"format": "mcp"}, headers=analyst)).json()
        counted = await client.post("/execute", json=COUNT, headers=analyst)
        clock = await client.post("/execute", json=CLOCK, headers=analyst)
        who = (await client.get("/whoami", headers=analyst)).json()
        rules = await client.get("/policy", headers=analyst)  # an operator's page
    names = {tool["name"] for tool in listed["tools"]}
    assert {"echo", "current_time"} < names and any(n.startswith("billing_count") for n in names)
    assert "slow" not in names
    assert counted.status_code == 200 and counted.json()["result"] == {"count": 1}
    assert clock.status_code == 403
    body = clock.json()
    assert body["code"] == "TOOL_FORBIDDEN"
    assert f"user {user!r} (roles: analyst)" in body["detail"]
    refused = await _refused_row(backend, body["conclave_id"])
    assert (refused.user_id, refused.tool_name, refused.status) == (
        user,
        "current_time",
        "rejected",
    )
    assert (refused.error_code, refused.http_status) == ("TOOL_FORBIDDEN", 403)
    assert (who["user_id"], who["roles"]) == (user, ["analyst"])
    assert rules.status_code == 403  # a declared role is no operator
    assert calls.count == 1


async def test_a_role_the_deployment_did_not_declare_gives_nothing(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path
):
    pretenders = [
        _bearer("carol", ["wizard", "Analyst", "analyst "]),  # names are exact
        _bearer("carol", "admin superuser"),
        BOB,
    ]
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        answers = [await client.post("/execute", json=COUNT, headers=h) for h in pretenders]
        roles = [(await client.get("/whoami", headers=h)).json()["roles"] for h in pretenders]
    assert [a.status_code for a in answers] == [404, 404, 404]  # hidden, as if missing
    assert {a.json()["code"] for a in answers} == {"UNKNOWN_TOOL"}
    assert roles == [[], [], []]
    assert calls.count == 0


async def test_a_service_acting_for_a_user_carries_the_users_settings_roles(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    def acting(user: str) -> dict[str, str]:
        return {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": user}

    def billing(answer: httpx.Response) -> bool:
        return any(tool["name"].startswith("billing_count") for tool in answer.json()["tools"])

    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        for_ann = await client.get("/tools", params={"format": "mcp"}, headers=acting("ann"))
        # carol is an analyst only by her own JWT's claim, which the service does not carry.
        for_carol = await client.get("/tools", params={"format": "mcp"}, headers=acting("carol"))
        who = (await client.get("/whoami", headers=acting("ann"))).json()
    assert billing(for_ann) and not billing(for_carol)
    assert (who["user_id"], who["roles"], who["on_behalf_of"]) == ("ann", ["analyst"], "svc")


@pytest.mark.parametrize(
    "roles",
    [
        ["analyst", *(f"group-{i}" for i in range(2000))],  # an identity provider's long list
        " ".join(["analyst", *(f"group-{i}" for i in range(2000))]),
    ],
    ids=["long-list", "long-string"],
)
async def test_a_long_roles_claim_keeps_only_the_known_roles(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path, roles: Any
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        who = await client.get("/whoami", headers=_bearer("carol", roles))
        counted = await client.post("/execute", json=COUNT, headers=_bearer("carol", roles))
    assert who.json()["roles"] == ["analyst"]
    assert counted.status_code == 200


def _mcp_call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}


MCP = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


async def test_execute_and_mcp_run_a_services_call_as_the_user_it_acts_for(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path
):
    """The hot routes read X-Conclave-Acting-User as every other route does: a service's call
    for ann is ann's (her roles, her audit row), and the header from anyone else is refused,
    never ignored (the call would otherwise run as its sender)."""
    for_ann = {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": "ann"}
    for_carol = {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": "carol"}
    bob_for_ann = {**BOB, "X-Conclave-Acting-User": "ann"}
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        executed = await client.post("/execute", json=COUNT, headers=for_ann)
        over_mcp = await client.post(
            "/mcp", json=_mcp_call("billing.count", {}), headers={**MCP, **for_ann}
        )
        carol = await client.post("/execute", json=COUNT, headers=for_carol)  # no analyst
        refused = await client.post("/execute", json=COUNT, headers=bob_for_ann)
        refused_mcp = await client.post(
            "/mcp", json=_mcp_call("billing.count", {}), headers={**MCP, **bob_for_ann}
        )
    assert executed.status_code == 200, executed.text
    assert over_mcp.status_code == 200 and over_mcp.json()["result"]["isError"] is False
    assert carol.status_code == 404 and carol.json()["code"] == "UNKNOWN_TOOL"  # hidden
    for answer in (refused, refused_mcp):
        assert answer.status_code == 403 and answer.json()["code"] == "ACTING_USER_FORBIDDEN"
    rows = sorted(await audit_rows(backend), key=lambda row: row.created_at)
    assert [(row.user_id, row.status) for row in rows] == [
        ("ann", "succeeded"),
        ("ann", "succeeded"),
        ("carol", "rejected"),
    ]
    assert calls.count == 2


async def test_an_idempotency_key_replays_only_what_the_caller_may_call_now(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path
):
    """dave is an analyst only by his JWT's roles claim. His key's earlier answer is not handed
    to a caller the policy refuses the tool: a service acting for dave (settings roles: none),
    or dave's own token without the claim. Each refusal is audited as a call of its own."""
    key = {"Idempotency-Key": "k-1"}
    service_for_dave = {"Authorization": "Bearer tok-svc", "X-Conclave-Acting-User": "dave"}
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        first = await client.post(
            "/execute", json=COUNT, headers={**_bearer("dave", ["analyst"]), **key}
        )
        again = await client.post(
            "/execute", json=COUNT, headers={**_bearer("dave", ["analyst"]), **key}
        )
        by_service = await client.post("/execute", json=COUNT, headers={**service_for_dave, **key})
        no_claim = await client.post("/execute", json=COUNT, headers={**_bearer("dave", []), **key})
    assert first.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["conclave_id"] == first.json()["conclave_id"]
    for refused in (by_service, no_claim):
        assert refused.status_code == 404 and refused.json()["code"] == "UNKNOWN_TOOL"
        assert "Idempotent-Replayed" not in refused.headers
    rows = await audit_rows(backend)
    assert sorted((row.status, row.idempotency_key) for row in rows) == [
        ("rejected", None),
        ("rejected", None),
        ("succeeded", "k-1"),
    ]
    assert calls.count == 1


@pytest.mark.parametrize(
    "roles",
    [["analyst", 1], [["analyst"]], {"analyst": True}, ["analyst", None], 7, True],
    ids=["number", "nested", "object", "null", "int", "bool"],
)
async def test_a_roles_claim_of_another_shape_makes_the_token_invalid(
    backend: Backend, tmp_path: Path, roles: Any
):
    async with _gateway(backend, (), _catalogue(tmp_path, POLICY)) as client:
        answer = await client.get("/whoami", headers=_bearer("carol", roles))
    assert answer.status_code == 401 and answer.json()["code"] == "INVALID_TOKEN"


async def test_the_dry_run_assumes_declared_roles(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:

        async def check(headers: dict[str, str], **params: str) -> httpx.Response:
            return await client.get("/policy/check", params=params, headers=headers)

        assumed = (await check(OLGA, tool="billing.count", user="bob", roles="analyst")).json()
        clock = (await check(OLGA, tool="current_time", user="bob", roles="analyst")).json()
        from_settings = (await check(OLGA, tool="billing.count", user="ann")).json()
        own = (await check(ANN, tool="billing.count")).json()
        both = (await check(OLGA, tool="billing.count", roles="auditor,analyst")).json()
        undeclared = await check(OLGA, tool="billing.count", roles="analyst,wizard")
        self_promotion = await check(ANN, tool="billing.count", roles="auditor")
    assert (assumed["allowed"], assumed["roles"], assumed["rule"]["index"]) == (
        True,
        ["analyst"],
        1,
    )
    assert (clock["allowed"], clock["rule"]) == (False, None)  # rule 2 only lists it
    assert (from_settings["allowed"], from_settings["roles"]) == (True, ["analyst"])
    assert (own["allowed"], own["rule"]["text"]) == (True, None)
    assert both["roles"] == ["analyst", "auditor"]
    assert undeclared.status_code == 422 and undeclared.json()["code"] == "VALIDATION_FAILED"
    assert "'wizard'" in undeclared.json()["detail"]
    assert self_promotion.status_code == 403


async def test_a_policy_naming_an_undeclared_role_stops_the_start(backend: Backend, tmp_path: Path):
    policy = {"rules": [{"effect": "allow", "subjects": ["role:auditor"], "tools": ["echo"]}]}
    catalogue = _catalogue(tmp_path, policy)
    with pytest.raises(ValueError, match=r"unknown role 'auditor'.*CONCLAVE_ROLES"):
        async with _gateway(backend, (), catalogue, roles=json.dumps({"analyst": []})):
            pass
    async with _gateway(backend, (), catalogue) as client:  # declared: it starts
        auditor = await client.post(
            "/execute",
            json={"tool": "echo", "args": {"message": "hi"}},
            headers=_bearer("al", "auditor"),
        )
    assert auditor.status_code == 200
