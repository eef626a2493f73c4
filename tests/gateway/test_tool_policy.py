"""The tool policy (docs/gateway.md, "Tool policy"): who may list and call which tools, on
/execute, /tools in every format, /mcp with the official SDK client, and the dry run at
/policy/check; refusals are 403 problems, audited and published; a bad policy stops the start."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool
from tests.conftest import Backend, eventually, open_platform, serve_app, test_settings
from tests.gateway.conftest import Calls, audit_rows, published
from tests.httpserver import running_server

SECRET = "policy-test-secret-" + "x" * 16
TOKENS = "tok-ada=ada,tok-bob=bob,tok-olga=olga,tok-svc=svc"
ADA = {"Authorization": "Bearer tok-ada"}
BOB = {"Authorization": "Bearer tok-bob"}
OLGA = {"Authorization": "Bearer tok-olga"}  # an operator by settings
POLICY: dict[str, Any] = {
    "rules": [
        {"effect": "deny", "subjects": ["user:bob"], "actions": ["call"], "tools": ["billing.*"]},
        {"effect": "allow", "subjects": ["role:operator"], "tools": ["*"]},
        {
            "effect": "allow",
            "subjects": ["*"],
            "tools": ["echo", "current_time", "billing.*", "tag:auth"],
        },
        # Callable by ada, listed to no one but operators: a tool for one integration.
        {"effect": "allow", "subjects": ["user:ada"], "actions": ["call"], "tools": ["crash"]},
    ]
}
EVERYONE = {"echo", "current_time", "billing_count_", "login"}


def _catalogue(tmp_path: Path, policy: Any, name: str = "policy.json", **more: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"policy": policy, **more}))
    return path


def _jwt(sub: str, roles: Any = None) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + 60}
    if roles is not None:
        claims["roles"] = roles
    return jwt.encode(claims, SECRET, algorithm="HS256")


def _settings(*catalogues: Path, **overrides: Any) -> Any:
    return test_settings(
        auth="enabled",
        api_tokens=TOKENS,
        jwt_secret=SECRET,
        operators="olga",
        service_users="svc",
        tool_catalogues=",".join(str(path) for path in catalogues),
        **overrides,
    )


@asynccontextmanager
async def _gateway(
    backend: Backend, tools: tuple[Tool, ...], *catalogues: Path
) -> AsyncIterator[httpx.AsyncClient]:
    settings = _settings(*catalogues)
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tools)
        async with serve_app(app) as client:
            yield client


def _names(answer: httpx.Response, fmt: str) -> set[str]:
    tools = answer.json()["tools"]
    names = {t["function"]["name"] if fmt == "openai" else t["name"] for t in tools}
    # billing.count is listed under its wire alias (billing_count_<hash>)
    return {n[: len("billing_count_")] if n.startswith("billing_count_") else n for n in names}


async def test_listing_is_filtered_for_users_roles_and_formats(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        for fmt in ("openai", "anthropic", "mcp"):
            ada = await client.get("/tools", params={"format": fmt}, headers=ADA)
            assert ada.status_code == 200
            assert _names(ada, fmt) == EVERYONE, fmt
            assert ada.json()["count"] == len(EVERYONE)
        by_operator = _names(await client.get("/tools", headers=OLGA), "openai")
        jwt_operator = {"Authorization": f"Bearer {_jwt('carol', ['operator'])}"}
        by_jwt_role = _names(await client.get("/tools", headers=jwt_operator), "openai")
        jwt_plain = {"Authorization": f"Bearer {_jwt('carol', 'unknown-role')}"}
        by_jwt_user = _names(await client.get("/tools", headers=jwt_plain), "openai")
        filtered = await client.get("/tools", params={"tags": "auth"}, headers=ADA)
    assert {"slow", "crash", "evaluate_expression"} <= by_operator
    assert by_jwt_role == by_operator
    assert by_jwt_user == EVERYONE
    assert _names(filtered, "openai") == {"login"}


async def test_forbidden_call_is_403_audited_and_published_and_never_runs(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        listed = _names(await client.get("/tools", headers=BOB), "openai")
        answer = await client.post(
            "/execute", json={"tool": "billing.count", "args": {}}, headers=BOB
        )
        allowed = await client.post(
            "/execute", json={"tool": "billing.count", "args": {}}, headers=ADA
        )
    assert "billing_count_" in listed  # bob may see it, not call it
    assert answer.status_code == 403
    body = answer.json()
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert (body["code"], body["title"]) == ("TOOL_FORBIDDEN", "Tool forbidden")
    assert "rule 0 denies call of 'billing.count'" in body["detail"]
    assert body["orthodoxy_status"] == "heretical"
    assert allowed.status_code == 200 and allowed.json()["result"] == {"count": 1}
    assert calls.count == 1  # only ada's call ran
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    refused = rows[body["conclave_id"]]
    assert (refused.user_id, refused.tool_name, refused.status) == (
        "bob",
        "billing.count",
        "rejected",
    )
    assert (refused.error_code, refused.http_status) == ("TOOL_FORBIDDEN", 403)

    async def event() -> list[Any]:
        found = await published(backend)
        return [e for e in found if e.payload["conclave_id"] == body["conclave_id"]]

    [refusal] = await eventually(event)
    assert refusal.payload["error_code"] == "TOOL_FORBIDDEN"
    assert (refusal.payload["user_id"], refusal.payload["status"]) == ("bob", "rejected")


async def test_a_tool_hidden_from_the_caller_looks_missing(
    backend: Backend, test_tools: tuple[Tool, ...], calls: Calls, tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        hidden = await client.post("/execute", json={"tool": "slow", "args": {}}, headers=BOB)
        missing = await client.post("/execute", json={"tool": "nope", "args": {}}, headers=BOB)
        # Not listed to ada, but callable: it runs (and fails as it always does).
        unlisted = await client.post("/execute", json={"tool": "crash", "args": {}}, headers=ADA)
    assert hidden.status_code == missing.status_code == 404
    one, other = hidden.json(), missing.json()
    assert set(one) == set(other)
    assert (
        (one["code"], one["title"])
        == (other["code"], other["title"])
        == (
            "UNKNOWN_TOOL",
            "Unknown tool",
        )
    )
    assert one["detail"] == "No tool is called 'slow'."
    assert unlisted.status_code == 502 and unlisted.json()["code"] == "TOOL_FAILED"
    assert calls.count == 1
    rows = {row.conclave_id: row for row in await audit_rows(backend)}
    row = rows[one["conclave_id"]]
    assert (row.tool_name, row.error_code, row.status) == ("slow", "UNKNOWN_TOOL", "rejected")


async def test_mcp_lists_and_refuses_with_the_sdk_client(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    policy = _catalogue(tmp_path, POLICY)
    for fast in (True, False):  # the fast path and the SDK's own server
        settings = _settings(policy, mcp_fast_path=fast)
        async with (
            open_platform(backend, settings) as platform,
            running_server(create_app(settings, platform=platform, extra_tools=test_tools)) as url,
            httpx2.AsyncClient(headers=BOB) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
        ):
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            billing = next(name for name in names if name.startswith("billing_count_"))
            refused = await mcp.call_tool(billing, {})
            with pytest.raises(MCPError) as hidden:
                await mcp.call_tool("slow", {})
            echoed = await mcp.call_tool("echo", {"message": "hi"})
        assert {n[:14] if n.startswith("billing") else n for n in names} == EVERYONE, fast
    assert refused.is_error is True
    assert refused.content[0].text.startswith("TOOL_FORBIDDEN: You may not call 'billing.count'")
    assert refused.meta is not None and refused.meta["conclave"]["code"] == "TOOL_FORBIDDEN"
    assert hidden.value.code == -32602 and "Unknown tool: slow" in str(hidden.value)
    assert echoed.is_error is False
    codes = [row.error_code for row in await audit_rows(backend) if row.user_id == "bob"]
    assert sorted(codes, key=str) == sorted(["TOOL_FORBIDDEN", "UNKNOWN_TOOL", None] * 2, key=str)


async def test_dry_run_answers_who_may_do_what_and_why(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:

        async def check(headers: dict[str, str], **params: str) -> httpx.Response:
            return await client.get("/policy/check", params=params, headers=headers)

        own = (await check(ADA, tool="echo")).json()
        own_list = (await check(ADA, tool="crash", action="list")).json()
        hidden = await check(BOB, tool="slow")
        unknown = await check(OLGA, tool="no_such_tool")
        about_bob = (await check(OLGA, tool="billing.count", user="bob")).json()
        by_default = (await check(OLGA, tool="slow", user="ada")).json()
        as_operator = (await check(OLGA, tool="slow", user="ada", roles="operator")).json()
        nosy = await check(ADA, tool="echo", user="bob")
        self_promotion = await check(ADA, tool="slow", roles="operator")
        bad_role = await check(OLGA, tool="echo", roles="wizard")
        rules = await client.get("/policy", headers=OLGA)
        rules_for_ada = await client.get("/policy", headers=ADA)
        rows = await audit_rows(backend)
    assert own == {
        "user": "ada",
        "roles": [],
        "tool": "echo",
        "action": "call",
        "allowed": True,
        "rule": {"index": 2, "effect": "allow", "text": None},  # rule text: operators only
        "reason": "rule 2 allows call of 'echo' to user 'ada'",
    }
    assert (own_list["allowed"], own_list["rule"]) == (False, None)
    assert "the default denies" in own_list["reason"]
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["code"] == unknown.json()["code"] == "UNKNOWN_TOOL"
    assert about_bob["allowed"] is False
    assert about_bob["rule"] == {
        "index": 0,
        "effect": "deny",
        "text": "deny call of billing.* to user:bob",
    }
    assert (by_default["allowed"], by_default["rule"]) == (False, None)
    assert (as_operator["allowed"], as_operator["roles"]) == (True, ["operator"])
    assert as_operator["rule"]["index"] == 1
    assert nosy.status_code == self_promotion.status_code == 403
    assert nosy.json()["code"] == "FORBIDDEN"
    assert bad_role.status_code == 422 and bad_role.json()["code"] == "VALIDATION_FAILED"
    assert rules.status_code == 200 and rules.json()["default"] == "deny"
    assert [rule["index"] for rule in rules.json()["rules"]] == [0, 1, 2, 3]
    assert rules.json()["rules"][3]["text"] == "allow call of crash to user:ada"
    assert rules_for_ada.status_code == 403
    assert rows == []  # a dry run runs and records nothing


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"tool": "echo\x00"}, 422, "UNSAFE_INPUT"),
        ({"tool": "echo", "user": "bob\x00"}, 422, "UNSAFE_INPUT"),
        ({"tool": "x" * 257}, 422, "VALIDATION_FAILED"),
        ({"tool": "echo", "user": "u" * 257}, 422, "VALIDATION_FAILED"),
        ({"tool": "*"}, 404, "UNKNOWN_TOOL"),  # a glob is a name like any other here
        ({"tool": "echo", "action": "delete"}, 422, "VALIDATION_FAILED"),
        ({"tool": "echo", "user": "bridge"}, 422, "VALIDATION_FAILED"),  # reserved
    ],
)
async def test_dry_run_refuses_unusable_input(
    backend: Backend, tmp_path: Path, params: dict[str, str], status: int, code: str
):
    async with _gateway(backend, (), _catalogue(tmp_path, POLICY)) as client:
        answer = await client.get("/policy/check", params=params, headers=OLGA)
        surrogate = await client.get("/policy/check?tool=%ED%A0%80", headers=OLGA)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert (surrogate.status_code, surrogate.json()["code"]) == (422, "UNSAFE_INPUT")


async def test_no_policy_allows_everything_and_default_allow_keeps_it(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    open_door = {
        "default": "allow",
        "rules": [{"effect": "deny", "subjects": ["*"], "tools": ["slow"]}],
    }
    async with _gateway(backend, test_tools, _catalogue(tmp_path, open_door)) as client:
        names = _names(await client.get("/tools", headers=ADA), "openai")
        hidden = await client.post("/execute", json={"tool": "slow", "args": {}}, headers=ADA)
        read = (await client.get("/policy", headers=OLGA)).json()
    assert "slow" not in names and {"crash", "evaluate_expression"} <= names
    assert hidden.status_code == 404
    assert read["default"] == "allow" and read["configured"] is True
    async with _gateway(backend, test_tools) as client:
        everything = _names(await client.get("/tools", headers=ADA), "openai")
        read = (await client.get("/policy", headers=OLGA)).json()
    assert {"slow", "crash"} <= everything
    assert read == {"configured": False, "default": "allow", "rules": []}


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            {"rules": [{"effect": "allow", "subjects": ["role:wizard"], "tools": ["*"]}]},
            "unknown role 'wizard'",
        ),
        (
            {"rules": [{"effect": "allow", "subjects": ["ada"], "tools": ["*"]}]},
            "must be '\\*', 'user:<id>'",
        ),
        (
            {"rules": [{"effect": "allow", "subjects": ["*"], "tools": ["regex:^(a+)+$"]}]},
            "must be a name glob",
        ),
        (
            {"rules": [{"effect": "allow", "subjects": ["*"], "tools": ["upstream:time"]}]},
            "upstream:<server>/<tool>",
        ),
        (
            {"rules": [{"effect": "allow", "subjects": ["*"], "tools": ["a" * 201]}]},
            "longer than 200",
        ),
        ({"rules": [{"effect": "permit", "subjects": ["*"], "tools": ["*"]}]}, "effect"),
        ({"rules": [{"effect": "allow", "subjects": ["*"], "tools": []}]}, "tools"),
        ({"rules": [{"effect": "allow", "subjects": ["*"], "tools": ["*"], "who": 1}]}, "who"),
        (
            {"rules": [{"effect": "allow", "subjects": ["user:a\x00"], "tools": ["*"]}]},
            "cannot be stored",
        ),
        ({"default": "maybe"}, "default"),
    ],
)
async def test_an_invalid_policy_stops_the_start(
    backend: Backend, tmp_path: Path, policy: Any, message: str
):
    with pytest.raises(ValueError, match=message):
        async with _gateway(backend, (), _catalogue(tmp_path, policy)):
            pass


async def test_catalogue_files_with_different_defaults_stop_the_start(
    backend: Backend, tmp_path: Path
):
    first = _catalogue(tmp_path, {"default": "allow"}, "one.json")
    second = _catalogue(tmp_path, {"default": "deny"}, "two.json")
    with pytest.raises(ValueError, match="different defaults"):
        async with _gateway(backend, (), first, second):
            pass
