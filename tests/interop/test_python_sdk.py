"""The official MCP Python SDK, 1.x and 2.x, at every protocol version it can negotiate.

Each (SDK, version) pair runs ``sdk_client.py`` once, in the SDK's own environment, and the tests
judge its report: the version negotiated, the tool list, a successful call, a tool failure,
invalid arguments and an unknown tool, and the fields each version may carry.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import ClientRun, Gateway, run_client

HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
# Revisions before 2025-06-18 define no tool title, output schema or structured content.
VERSIONS_WITHOUT_STRUCTURED_OUTPUT = {"2024-11-05", "2025-03-26"}
CASES = [("sdk1", version) for version in HANDSHAKE_VERSIONS] + [
    ("sdk2", version) for version in [*HANDSHAKE_VERSIONS, "2026-07-28"]
]
IDS = [f"{sdk}-{version}" for sdk, version in CASES]

Report = dict[str, Any]


@pytest.fixture(scope="session")
def sdk_report(
    request: pytest.FixtureRequest, gateway: Gateway, sdk_client_script: Path
) -> Callable[[str, str], Report]:
    """The client's report for (SDK, version). All the clients run once, side by side, when the
    first report is asked for: each spends most of its time loading its SDK."""
    runs: dict[tuple[str, str], ClientRun] = {}

    def start(sdk: str, version: str) -> ClientRun:
        python = request.getfixturevalue("sdk1_python") if sdk == "sdk1" else sys.executable
        return run_client([str(python), str(sdk_client_script), gateway.mcp_url, version])

    def report(sdk: str, version: str) -> Report:
        if not runs:
            request.getfixturevalue("sdk1_python")  # installed before the threads need it
            with ThreadPoolExecutor(max_workers=4) as pool:
                runs.update(zip(CASES, pool.map(lambda case: start(*case), CASES), strict=True))
        run = runs[sdk, version]
        assert run.returncode == 0, run.stderr[-3000:]
        return dict(run.json())

    return report


@pytest.fixture(params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest, sdk_report: Callable[[str, str], Report]) -> Report:
    sdk, version = request.param
    result = sdk_report(sdk, version)
    assert result["sdk"].startswith("1." if sdk == "sdk1" else "2.")
    return result


def tools_of(report: Report) -> dict[str, Any]:
    assert "tools" in report["tools"], report["tools"]
    return {tool["name"]: tool for tool in report["tools"]["tools"]}


def test_negotiates_the_version_it_asked_for(case: Report, request: pytest.FixtureRequest):
    _, version = request.node.callspec.params["case"]
    assert case["protocol_version"] == version


def test_lists_the_tools(case: Report):
    tools = tools_of(case)
    assert {"echo", "evaluate_expression", "json_query", "current_time"} <= set(tools)
    assert tools["echo"]["inputSchema"]["required"] == ["message"]


def test_a_successful_call(case: Report):
    result = case["success"]
    assert result.get("isError") is False, result
    assert result["content"][0]["text"] == '{"message": "hello from the Python SDK"}'


@pytest.mark.parametrize(
    ("label", "text"),
    [("failure", "INVALID_EXPRESSION: division by zero"), ("invalid", "VALIDATION_FAILED: ")],
)
def test_a_failed_call_is_an_error_result_with_readable_text(case: Report, label: str, text: str):
    result = case[label]
    assert result.get("isError") is True, result
    assert result["content"][0]["text"].startswith(text)


def test_an_unknown_tool_is_a_json_rpc_error(case: Report):
    assert case["unknown"]["code"] == -32602, case["unknown"]


def test_each_version_gets_the_fields_it_defines(case: Report):
    tools = tools_of(case)
    success = case["success"]
    if case["protocol_version"] in VERSIONS_WITHOUT_STRUCTURED_OUTPUT:
        for tool in tools.values():
            assert "title" not in tool and "outputSchema" not in tool, tool["name"]
        assert "structuredContent" not in success
        assert "structuredContent" not in case["failure"]
    else:
        assert tools["echo"]["outputSchema"]["type"] == "object"
        assert success["structuredContent"] == {"message": "hello from the Python SDK"}


def test_the_token_gateway_answers_a_client_with_its_token(
    gateway_with_token: Gateway, sdk_client_script: Path
):
    command = [sys.executable, str(sdk_client_script), gateway_with_token.mcp_url, "2025-11-25"]
    run = run_client([*command, str(gateway_with_token.token)])
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.json()["success"]["isError"] is False
