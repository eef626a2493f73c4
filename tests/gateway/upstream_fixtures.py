"""Real upstream MCP servers for the gateway's tests, and catalogues that name them.

``mcp-server-time`` and ``mcp-server-git`` (PyPI) and ``@modelcontextprotocol/server-everything``
(npm) are installed by ``tests/interop/install.py`` (pinned, once per lock file); the hostile
server is
:mod:`tests.gateway.hostile_mcp_server`, built with the MCP SDK's own server. When a server
cannot be installed its tests skip, or fail under ``CONCLAVE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool
from tests.conftest import Backend, missing_service, open_platform, serve_app, test_settings
from tests.httpserver import free_port
from tests.interop.install import (
    NODE_DIR,
    ClientUnavailable,
    install_node_clients,
    install_python_servers,
)

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
# Loopback upstreams are refused by the egress policy unless allowed, as an operator would.
ALLOW_LOOPBACK = {"egress_allow_hosts": "127.0.0.1"}


def node_servers() -> tuple[str, str]:
    """(node, server-everything's entry script), installed if need be."""
    try:
        bin_dir = install_node_clients()
    except ClientUnavailable as exc:
        missing_service(f"server-everything: {exc}")
    return str(bin_dir / "node"), str(EVERYTHING / "dist" / "index.js")


def time_server() -> str:
    """The ``mcp-server-time`` command, installed if need be."""
    try:
        python = install_python_servers()
    except ClientUnavailable as exc:
        missing_service(f"mcp-server-time: {exc}")
    return str(python.parent / "mcp-server-time")


def git_server() -> str:
    """The ``mcp-server-git`` command, installed if need be."""
    try:
        python = install_python_servers()
    except ClientUnavailable as exc:
        missing_service(f"mcp-server-git: {exc}")
    return str(python.parent / "mcp-server-git")


def time_entry() -> dict[str, Any]:
    return {
        "name": "time",
        "transport": "stdio",
        "command": time_server(),
        "args": ["--local-timezone", "UTC"],
    }


def everything_stdio_entry(name: str = "everything") -> dict[str, Any]:
    node, script = node_servers()
    return {"name": name, "transport": "stdio", "command": node, "args": [script, "stdio"]}


def hostile_entry(*args: str, name: str = "hostile") -> dict[str, Any]:
    return {
        "name": name,
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.gateway.hostile_mcp_server", *args],
        "cwd": str(ROOT),
        "env": {"PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"},
        "timeout_seconds": 10,
    }


def catalogue(tmp_path: Path, *servers: dict[str, Any]) -> str:
    """A catalogue file with ``servers`` under ``mcp_servers``; its path."""
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps({"mcp_servers": list(servers)}))
    return str(path)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server-everything exited ({process.returncode})")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail("server-everything did not listen within 60 s")


@pytest.fixture(scope="session")
def everything_http() -> Iterator[str]:
    """server-everything over streamable HTTP, for the session: its ``/mcp`` URL."""
    node, script = node_servers()
    port = free_port()
    process = subprocess.Popen(
        [node, script, "streamableHttp"],
        env={"PORT": str(port), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


@asynccontextmanager
async def gateway(
    backend: Backend,
    tmp_path: Path,
    *servers: dict[str, Any],
    extra_tools: Sequence[Tool] = (),
    **overrides: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway whose catalogue names ``servers`` (loopback allowed), with a client; the app
    is ``client.app``."""
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, *servers), **{**ALLOW_LOOPBACK, **overrides}
    )
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=tuple(extra_tools))
        async with serve_app(app) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
