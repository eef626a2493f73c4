"""MCP Inspector's CLI (the official TypeScript SDK) against the gateway's /mcp.

The TypeScript SDK checks what the Python SDK lets pass: it validates a result's
``structuredContent`` against the tool's ``outputSchema`` even when ``isError`` is true, so these
tests catch answers a TypeScript client (most desktop MCP clients) would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.interop.conftest import PLUGIN_DESCRIPTIONS, ClientRun, Gateway

# Exit codes of the Inspector CLI (its EXIT_CODES): a tool that answered isError: true, and a
# server that asked for credentials.
TOOL_ERROR = 5
AUTH_REQUIRED = 3

Inspector = Callable[..., ClientRun]

# The Inspector's two ways to connect: the initialize handshake (it offers 2025-11-25) and the
# stateless 2026-07-28 protocol.
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
era_param = pytest.mark.parametrize("era", sorted(ERAS), ids=[ERAS[e] for e in sorted(ERAS)])

# Every built-in tool (they run in the gateway itself, with no other service), a call that
# succeeds, and what its structured result must hold.
BUILT_IN_CALLS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "echo": ({"message": "from the TypeScript SDK"}, {"message": "from the TypeScript SDK"}),
    "evaluate_expression": ({"expression": "6*7"}, {"expression": "6*7", "value": 42}),
    "json_query": ({"document": {"a": [1, 2]}, "query": "a[1]"}, {"query": "a[1]", "result": 2}),
    "current_time": ({"timezone": "Europe/Rome"}, {"timezone": "Europe/Rome"}),
}


def call(
    inspector: Inspector,
    gateway: Gateway,
    tool: str,
    arguments: dict[str, Any],
    era: str = "legacy",
) -> ClientRun:
    return inspector(
        gateway,
        *("--protocol-era", era, "--method", "tools/call", "--tool-name", tool),
        *("--tool-args-json", json.dumps(arguments)),
    )


@era_param
def test_lists_the_built_in_tools_with_their_schemas(
    inspector: Inspector, gateway: Gateway, era: str
):
    run = inspector(gateway, "--protocol-era", era, "--method", "tools/list")
    assert run.returncode == 0, run.stderr
    tools = {tool["name"]: tool for tool in run.json()["tools"]}
    assert set(BUILT_IN_CALLS) <= set(tools)
    echo = tools["echo"]
    assert echo["inputSchema"]["required"] == ["message"]
    assert echo["outputSchema"]["type"] == "object"


@era_param
@pytest.mark.parametrize("tool", sorted(BUILT_IN_CALLS))
def test_each_built_in_tool_answers_a_structured_result(
    inspector: Inspector, gateway: Gateway, tool: str, era: str
):
    arguments, expected = BUILT_IN_CALLS[tool]
    run = call(inspector, gateway, tool, arguments, era)
    # A structured result that did not match the tool's outputSchema would fail here: the SDK
    # validates it before the CLI prints anything.
    assert run.returncode == 0, run.stderr
    result = run.json()
    assert result["isError"] is False
    assert expected.items() <= result["structuredContent"].items()
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert result["_meta"]["conclave"]["orthodoxy_status"] == "blessed"


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("evaluate_expression", {"expression": "1/0"}, "INVALID_EXPRESSION: division by zero"),
        ("echo", {"message": 42}, "VALIDATION_FAILED: "),
    ],
    ids=["tool-failure", "invalid-arguments"],
)
@era_param
def test_a_failed_call_reaches_the_client_as_an_error_result(
    inspector: Inspector,
    gateway: Gateway,
    tool: str,
    arguments: dict[str, Any],
    message: str,
    era: str,
):
    run = call(inspector, gateway, tool, arguments, era)
    # The CLI exits TOOL_ERROR after printing a result with isError: true. A result the SDK
    # refused (structured content outside the outputSchema) exits 1 with no result at all, and
    # the model never learns what went wrong.
    assert run.returncode == TOOL_ERROR, run.stderr
    assert run.error()["code"] == "tool_is_error"
    result = run.json()
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(message)


@pytest.mark.parametrize("name", sorted(PLUGIN_DESCRIPTIONS))
def test_a_plug_in_tool_runs_under_the_name_it_is_listed_with(
    inspector: Inspector, gateway: Gateway, name: str
):
    listed = inspector(gateway, "--method", "tools/list").json()["tools"]
    (tool,) = [t for t in listed if t["description"] == PLUGIN_DESCRIPTIONS[name]]
    run = call(inspector, gateway, tool["name"], {})
    assert run.returncode == 0, run.stderr
    assert run.json()["structuredContent"]["status"] == "healthy"


def test_an_unknown_tool_is_refused(inspector: Inspector, gateway: Gateway):
    run = call(inspector, gateway, "no_such_tool", {})
    assert run.returncode == TOOL_ERROR
    assert run.error()["code"] == "tool_not_found"


def test_the_right_token_is_accepted(inspector: Inspector, gateway_with_token: Gateway):
    run = inspector(gateway_with_token, "--method", "tools/list", token=gateway_with_token.token)
    assert run.returncode == 0, run.stderr
    assert "echo" in {tool["name"] for tool in run.json()["tools"]}


@era_param
def test_the_tool_policy_filters_the_listing_and_refuses_calls(
    inspector: Inspector, gateway_with_token: Gateway, era: str
):
    token = gateway_with_token.token
    listed = inspector(
        gateway_with_token, "--protocol-era", era, "--method", "tools/list", token=token
    )
    names = {tool["name"] for tool in listed.json()["tools"]}
    assert "current_time" in names and "json_query" not in names
    arguments = ("--tool-args-json", json.dumps({"timezone": "UTC"}))
    refused = inspector(
        gateway_with_token,
        *("--protocol-era", era, "--method", "tools/call", "--tool-name", "current_time"),
        *arguments,
        token=token,
    )
    # current_time declares an output schema: the SDK accepts the refusal as an error result.
    assert refused.returncode == TOOL_ERROR, refused.stderr
    assert refused.json()["content"][0]["text"].startswith("TOOL_FORBIDDEN: ")
    hidden = inspector(
        gateway_with_token,
        *("--protocol-era", era, "--method", "tools/call", "--tool-name", "json_query"),
        *("--tool-args-json", json.dumps({"document": {}, "query": "a"})),
        token=token,
    )
    unknown = inspector(
        gateway_with_token,
        *("--protocol-era", era, "--method", "tools/call", "--tool-name", "no_such_tool"),
        token=token,
    )
    assert hidden.returncode == unknown.returncode == TOOL_ERROR
    assert hidden.stdout == unknown.stdout


def test_a_wrong_token_fails_at_once_and_names_the_refusal(
    inspector: Inspector, gateway_with_token: Gateway
):
    # --stored-auth-only is how a CI job runs the Inspector: never start an OAuth login. What it
    # reports then is what the gateway said: the token is not valid.
    run = inspector(
        gateway_with_token, "--method", "tools/list", "--stored-auth-only", token="wrong"
    )
    assert run.returncode == AUTH_REQUIRED
    assert run.stdout == ""
    assert "INVALID_TOKEN" in run.error()["message"]


def test_a_wrong_token_does_not_start_an_oauth_login(
    inspector: Inspector, gateway_with_token: Gateway
):
    # Without --stored-auth-only and with nobody at the terminal, the Inspector gives up on a
    # 401 it would answer with an interactive OAuth login: it exits at once (no browser, no
    # callback listener left waiting) instead of hanging the job.
    run = inspector(gateway_with_token, "--method", "tools/list", token="wrong")
    assert run.returncode == AUTH_REQUIRED
    assert run.stdout == ""
    assert run.error()["code"] == "auth_required"
