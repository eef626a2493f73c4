"""langchain-mcp-adapters: the gateway's MCP tools as LangChain tools, as an agent uses them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import HERE, Gateway, run_client

PROVIDER_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@pytest.fixture(scope="session")
def langchain_report(sdk1_python: Path, gateway: Gateway) -> dict[str, Any]:
    run = run_client([str(sdk1_python), str(HERE / "langchain_client.py"), gateway.mcp_url])
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(run.json())


def test_loads_the_gateway_tools(langchain_report: dict[str, Any]):
    assert {"echo", "evaluate_expression", "json_query", "current_time"} <= set(
        langchain_report["tools"]
    )


def test_every_tool_name_is_one_a_model_provider_accepts(langchain_report: dict[str, Any]):
    # LangChain hands these names to the model as they are; OpenAI and Anthropic refuse a
    # request whose tool names break this pattern, so one such tool breaks the whole agent.
    refused = [n for n in langchain_report["tools"] if not PROVIDER_NAME.fullmatch(n)]
    assert refused == []


def test_a_successful_call_gives_text_and_the_structured_result(langchain_report: dict[str, Any]):
    message = langchain_report["success"]
    assert message["status"] == "success", message
    assert message["content"][0]["text"] == '{"message": "hello from LangChain"}'
    assert message["artifact"]["structured_content"] == {"message": "hello from LangChain"}


def test_a_failed_call_is_an_error_message_the_model_can_read(langchain_report: dict[str, Any]):
    message = langchain_report["failure"]
    assert message["status"] == "error", message
    assert message["content"][0]["text"] == "INVALID_EXPRESSION: division by zero"
