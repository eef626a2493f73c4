"""The MCP conformance suite's server scenarios (``@modelcontextprotocol/conformance``).

Only the scenarios that apply to a stateless, tools-only server run: the others call fixture
tools, prompts or resources of the suite's own reference server, or features the gateway does
not offer (docs/gateway.md, "Clients tested", says which and why).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.interop.conftest import Gateway, run_client

APPLICABLE_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]


@pytest.mark.parametrize("scenario", APPLICABLE_SCENARIOS)
def test_server_scenario_passes(
    scenario: str,
    gateway: Gateway,
    node_bin: Path,
    node_env: dict[str, str],
    tmp_path: Path,
):
    command = [str(node_bin / "conformance"), "server", "--url", gateway.mcp_url]
    run = run_client([*command, "--scenario", scenario, "-o", str(tmp_path)], node_env)
    checks = [
        check for path in tmp_path.glob("*/checks.json") for check in json.loads(path.read_text())
    ]
    failed = [c for c in checks if c.get("status") == "FAILURE"]
    assert run.returncode == 0 and not failed, (run.stdout + run.stderr)[-2000:] + str(failed)
    assert any(c.get("status") == "SUCCESS" for c in checks), checks
