"""Fixtures of the interop suite: the real gateway as a server process, and the third-party clients.

The gateway runs as ``conclave serve gateway`` in a process of its own, embedded (SQLite file and
in-process bus in a temporary folder), on a free loopback port: the clients are separate programs
(Node.js, another Python) that talk to it over HTTP, as a user's would. One gateway without
authentication serves most tests; a second one, with a static bearer token, the auth tests. Both
live for the whole session. The clients are installed on first use (tests/interop/install.py);
when one cannot be installed the test is skipped, or fails under ``CONCLAVE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import missing_service
from tests.httpserver import free_port
from tests.interop.install import (
    HERE,
    ClientUnavailable,
    install_node_clients,
    install_python_clients,
)

TOKEN = "interop-token"
# Plug-in tools (an HTTP catalogue) with names MCP allows but model providers do not (a dot; over
# 64 characters). Both answer from the gateway's own /health, so they run with no other service.
PLUGIN_DESCRIPTIONS = {
    "ops.gateway_health": "Health of this gateway (a plug-in tool with a dotted name).",
    "reports.quarterly_revenue_by_region_and_product_line_for_the_finance_team": (
        "Health of this gateway (a plug-in tool with a name over 64 characters)."
    ),
}
# The token gateway's tool policy: current_time listed but refused to everyone, json_query hidden
# (neither listed nor callable), the rest allowed.
TOKEN_POLICY = {
    "default": "allow",
    "rules": [
        {"effect": "deny", "subjects": ["*"], "actions": ["call"], "tools": ["current_time"]},
        {"effect": "deny", "subjects": ["*"], "tools": ["json_query"]},
    ],
}
# Generous: the first call of a client on a busy 2-core machine loads a whole runtime.
CLIENT_TIMEOUT = 120


@dataclass(frozen=True)
class Gateway:
    """A running gateway: its base URL and, when it has one, the token it accepts."""

    url: str
    token: str | None = None

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@dataclass(frozen=True)
class ClientRun:
    """What a client process did: exit code, standard output and error."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def error(self) -> dict[str, Any]:
        """The Inspector CLI's error envelope (its last line on standard error)."""
        lines = [line for line in self.stderr.splitlines() if line.startswith('{"error"')]
        assert lines, f"no error envelope (exit {self.returncode}): {self.stderr[-1000:]}"
        return dict(json.loads(lines[-1])["error"])


def _plugin_catalogue(data_dir: Path, base_url: str, policy: dict[str, Any] | None) -> Path:
    entry = {
        "url": base_url,
        "method": "GET",
        "path": "/health",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        "output_schema": {
            "type": "object",
            "properties": {"status": {"type": "string"}},
            "required": ["status"],
        },
        "annotations": {"readOnlyHint": True},
    }
    tools = [
        {"name": name, "description": description, **entry}
        for name, description in PLUGIN_DESCRIPTIONS.items()
    ]
    path = data_dir / "plugins.json"
    path.write_text(json.dumps({"tools": tools, "policy": policy}))
    return path


def _gateway_environment(
    data_dir: Path, port: int, policy: dict[str, Any] | None, **settings: str
) -> dict[str, str]:
    """This process's environment without any Conclave setting of the developer's shell, plus
    the plug-in catalogue (with ``policy`` as its tool policy)."""
    prefixes = ("CONCLAVE_", "GATEWAY_", "RELDB_", "BUS_", "MCP_")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    catalogue = _plugin_catalogue(data_dir, f"http://127.0.0.1:{port}", policy)
    environment.update(
        CONCLAVE_DATA_DIR=str(data_dir), GATEWAY_TOOL_CATALOGUES=str(catalogue), **settings
    )
    return environment


@pytest.fixture(scope="session")
def _gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Gateway]]:
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    gateways: dict[str, Gateway] = {}
    variants = {
        "open": ({"CONCLAVE_AUTH": "disabled"}, None, None),
        "token": ({"CONCLAVE_API_TOKENS": f"{TOKEN}=interop-user"}, TOKEN, TOKEN_POLICY),
    }
    try:
        for name, (settings, token, policy) in variants.items():
            data_dir = tmp_path_factory.mktemp(f"gateway-{name}")
            port = free_port()
            log = data_dir / "gateway.log"
            command = [sys.executable, "-m", "conclave.cli.main", "serve", "gateway"]
            with log.open("wb") as output:
                process = subprocess.Popen(
                    [*command, "--host", "127.0.0.1", "--port", str(port)],
                    env=_gateway_environment(data_dir, port, policy, **settings),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            processes.append((process, log))
            gateways[name] = Gateway(f"http://127.0.0.1:{port}", token)
        for (process, log), gateway in zip(processes, gateways.values(), strict=True):
            _wait_until_healthy(process, log, gateway.url)
        yield gateways
    finally:
        for process, _ in processes:
            process.terminate()
        for process, _ in processes:
            process.wait(timeout=30)


def _wait_until_healthy(process: subprocess.Popen[bytes], log: Path, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the gateway exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the gateway did not become healthy: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def gateway(_gateways: dict[str, Gateway]) -> Gateway:
    """The gateway with authentication off (embedded, loopback)."""
    return _gateways["open"]


@pytest.fixture(scope="session")
def gateway_with_token(_gateways: dict[str, Gateway]) -> Gateway:
    """The gateway that requires the static bearer token ``TOKEN``, with ``TOKEN_POLICY``."""
    return _gateways["token"]


@pytest.fixture(scope="session")
def node_bin() -> Path:
    """The ``.bin`` folder of the installed npm clients (with their Node.js >= 22)."""
    try:
        return install_node_clients()
    except ClientUnavailable as exc:
        missing_service(str(exc))
        raise


@pytest.fixture(scope="session")
def sdk1_python() -> Path:
    """The Python of the environment with the MCP SDK 1.x and langchain-mcp-adapters."""
    try:
        return install_python_clients()
    except ClientUnavailable as exc:
        missing_service(str(exc))
        raise


def run_client(command: list[str], env: dict[str, str] | None = None) -> ClientRun:
    """Run a client program to its end; stdin is closed, as in CI (nobody answers prompts)."""
    result = subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    return ClientRun(result.returncode, result.stdout, result.stderr)


@pytest.fixture(scope="session")
def node_env(node_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose ``node`` is the npm-installed one, with a home of its own (the
    Inspector keeps a catalogue and OAuth state there) and secrets kept in memory only."""
    home = tmp_path_factory.mktemp("node-home")
    environment = dict(os.environ)
    environment.update(
        PATH=f"{node_bin}{os.pathsep}{environment.get('PATH', '')}",
        HOME=str(home),
        MCP_INSPECTOR_SECRET_STORE="memory",
        NO_COLOR="1",
    )
    return environment


@pytest.fixture(scope="session")
def inspector(node_bin: Path, node_env: dict[str, str]) -> Callable[..., ClientRun]:
    """Run MCP Inspector's CLI (the official TypeScript SDK) against a gateway's /mcp."""

    def run(gateway: Gateway, *arguments: str, token: str | None = None) -> ClientRun:
        command = [str(node_bin / "inspector"), "--cli", gateway.mcp_url, "--transport", "http"]
        if token is not None:
            command += ["--header", f"Authorization: Bearer {token}"]
        return run_client([*command, "--quiet", *arguments], node_env)

    return run


@pytest.fixture(scope="session")
def sdk_client_script() -> Path:
    return HERE / "sdk_client.py"
