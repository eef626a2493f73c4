"""The tool policy follows its catalogue file while the gateway runs (docs/gateway.md, "Tool
policy"): a changed file is applied within the reload interval, or at once on SIGHUP; a file
that no longer reads changes nothing, and the policy in force stays."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.app import create_app
from tests.conftest import Backend, eventually, open_platform, serve_app, test_settings
from tests.httpserver import free_port

TOKENS = "tok-bob=bob,tok-olga=olga"
BOB = {"Authorization": "Bearer tok-bob"}
OLGA = {"Authorization": "Bearer tok-olga"}
ECHO = {"tool": "echo", "args": {"message": "hi"}}
ALLOW_ALL = {"rules": [{"effect": "allow", "subjects": ["*"], "tools": ["*"]}]}
DENY_BOB = {
    "rules": [
        {"effect": "deny", "subjects": ["user:bob"], "actions": ["call"], "tools": ["echo"]},
        *ALLOW_ALL["rules"],
    ]
}


def _write(path: Path, policy: Any) -> None:
    # Replaced whole, as an editor or a deployment tool writes a file.
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps({"policy": policy}))
    os.replace(staged, path)


async def _code(client: httpx.AsyncClient) -> str | None:
    answer = await client.post("/execute", json=ECHO, headers=BOB)
    return None if answer.status_code == 200 else str(answer.json()["code"])


async def test_a_changed_policy_applies_without_a_restart_and_a_broken_one_does_not(
    backend: Backend, tmp_path: Path
) -> None:
    catalogue = tmp_path / "policy.json"
    _write(catalogue, DENY_BOB)
    settings = test_settings(
        auth="enabled",
        api_tokens=TOKENS,
        operators="olga",
        tool_catalogues=str(catalogue),
        policy_reload_seconds=0.1,
    )
    async with (
        open_platform(backend, settings) as platform,
        serve_app(create_app(settings, platform=platform)) as client,
    ):
        assert await _code(client) == "TOOL_FORBIDDEN"

        _write(catalogue, ALLOW_ALL)
        assert await eventually(lambda: _allowed(client), timeout=10)
        shown = (await client.get("/policy", headers=OLGA)).json()
        assert [rule["effect"] for rule in shown["rules"]] == ["allow"]

        # Half written, a role nobody declared, gone: bob keeps what he had.
        undeclared = {"rules": [{"effect": "deny", "subjects": ["role:x"], "tools": ["*"]}]}
        breakages = [
            lambda: catalogue.write_text('{"policy": {"rules": ['),
            lambda: _write(catalogue, undeclared),
            catalogue.unlink,
        ]
        for breakage in breakages:
            breakage()
            for _ in range(5):  # five looks of the reloader
                assert await _code(client) is None
                await asyncio.sleep(0.1)
        _write(catalogue, DENY_BOB)
        assert await eventually(lambda: _refused(client), timeout=10)
        # Valid, but with no policy left: that would let everyone call everything.
        catalogue.write_text("{}")
        for _ in range(5):
            assert await _code(client) == "TOOL_FORBIDDEN"
            await asyncio.sleep(0.1)


async def _allowed(client: httpx.AsyncClient) -> bool:
    return await _code(client) is None


async def _refused(client: httpx.AsyncClient) -> bool:
    return await _code(client) == "TOOL_FORBIDDEN"


@pytest.fixture
def served_gateway(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """``conclave serve gateway`` (embedded) whose policy is read at start and on SIGHUP only."""
    catalogue = tmp_path / "policy.json"
    _write(catalogue, DENY_BOB)
    prefixes = ("CONCLAVE_", "GATEWAY_", "RELDB_", "BUS_", "MCP_")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    environment.update(
        CONCLAVE_DATA_DIR=str(tmp_path / "data"),
        CONCLAVE_API_TOKENS=TOKENS,
        CONCLAVE_OPERATORS="olga",
        GATEWAY_TOOL_CATALOGUES=str(catalogue),
        GATEWAY_POLICY_RELOAD_SECONDS="3600",
    )
    port = free_port()
    command = [sys.executable, "-m", "conclave.cli.main", "serve", "gateway"]
    log = (tmp_path / "gateway.log").open("wb")
    process = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port)],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, (tmp_path / "gateway.log").read_text()[-2000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.2)
        yield url, catalogue, process
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_sighup_applies_a_changed_policy_at_once(
    served_gateway: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    url, catalogue, process = served_gateway

    def code() -> str | None:
        answer = httpx.post(f"{url}/execute", json=ECHO, headers=BOB, timeout=10)
        return None if answer.status_code == 200 else str(answer.json()["code"])

    assert code() == "TOOL_FORBIDDEN"
    _write(catalogue, ALLOW_ALL)
    assert code() == "TOOL_FORBIDDEN"  # an hour between looks: not yet
    process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while code() is not None:
        assert process.poll() is None, "SIGHUP stopped the gateway"
        assert time.monotonic() < deadline, "SIGHUP did not reload the policy"
        time.sleep(0.1)
    assert process.poll() is None
