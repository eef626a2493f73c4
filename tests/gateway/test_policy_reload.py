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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.app import create_app
from conclave.gateway.policy import ToolPolicy
from conclave.gateway.policy_reload import PolicyReloader, reloading_policy
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
            for _ in range(15):  # past the second the files must stay unchanged
                assert await _code(client) is None
                await asyncio.sleep(0.1)
        _write(catalogue, DENY_BOB)
        assert await eventually(lambda: _refused(client), timeout=10)
        # Valid, but with no policy left: that would let everyone call everything.
        catalogue.write_text("{}")
        for _ in range(15):
            assert await _code(client) == "TOOL_FORBIDDEN"
            await asyncio.sleep(0.1)


async def _allowed(client: httpx.AsyncClient) -> bool:
    return await _code(client) is None


async def _refused(client: httpx.AsyncClient) -> bool:
    return await _code(client) == "TOOL_FORBIDDEN"


@contextmanager
def _served(
    tmp_path: Path, reload_seconds: str
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """``conclave serve gateway`` (embedded) looking at its policy every ``reload_seconds``."""
    catalogue = tmp_path / "policy.json"
    _write(catalogue, DENY_BOB)
    prefixes = ("CONCLAVE_", "GATEWAY_", "RELDB_", "BUS_", "MCP_")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    environment.update(
        CONCLAVE_DATA_DIR=str(tmp_path / "data"),
        CONCLAVE_API_TOKENS=TOKENS,
        CONCLAVE_OPERATORS="olga",
        GATEWAY_TOOL_CATALOGUES=str(catalogue),
        GATEWAY_POLICY_RELOAD_SECONDS=reload_seconds,
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


def _sync_code(url: str) -> str | None:
    answer = httpx.post(f"{url}/execute", json=ECHO, headers=BOB, timeout=10)
    return None if answer.status_code == 200 else str(answer.json()["code"])


def test_sighup_applies_a_changed_policy_at_once(tmp_path: Path) -> None:
    with _served(tmp_path, "3600") as (url, catalogue, process):
        assert _sync_code(url) == "TOOL_FORBIDDEN"
        _write(catalogue, ALLOW_ALL)
        assert _sync_code(url) == "TOOL_FORBIDDEN"  # an hour between looks: not yet
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _sync_code(url) is not None:
            assert process.poll() is None, "SIGHUP stopped the gateway"
            assert time.monotonic() < deadline, "SIGHUP did not reload the policy"
            time.sleep(0.1)
        assert process.poll() is None


# What a reader sees of a catalogue being written in place (cp, a `>` redirection, an editor
# without a safe save): a prefix. Both are valid YAML and a valid catalogue, and each allows more
# than the finished file (an outside attack: the gateway applied them for an interval).
DENY_BOB_AND_EVE = """\
policy:
  default: allow
  rules:
    - effect: deny
      actions: [call]
      tools: [echo]
      subjects:
        - user:bob
        - user:eve
"""
PREFIXES = {
    "cut after the policy key": DENY_BOB_AND_EVE[: DENY_BOB_AND_EVE.index("policy:") + 8],
    "cut inside the denied users": DENY_BOB_AND_EVE[: DENY_BOB_AND_EVE.index("        - user:eve")],
}
EVE = {"Authorization": "Bearer tok-eve"}


@pytest.mark.parametrize("prefix", list(PREFIXES.values()), ids=list(PREFIXES))
async def test_a_catalogue_being_written_is_not_read_half_way(
    backend: Backend, tmp_path: Path, prefix: str
) -> None:
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text(DENY_BOB_AND_EVE)
    settings = test_settings(
        auth="enabled",
        api_tokens=TOKENS + ",tok-eve=eve",
        tool_catalogues=str(catalogue),
        policy_reload_seconds=0.1,
    )
    async with (
        open_platform(backend, settings) as platform,
        serve_app(create_app(settings, platform=platform)) as client,
    ):
        opened: list[str] = []

        async def watch(seconds: float) -> None:
            for _ in range(int(seconds / 0.1)):
                for name, headers in (("bob", BOB), ("eve", EVE)):
                    answer = await client.post("/execute", json=ECHO, headers=headers)
                    if answer.status_code == 200:
                        opened.append(name)
                await asyncio.sleep(0.1)

        # Written in two steps half a second apart, as a slow writer does: looked at every
        # 0.1 s, the half-written file is never read.
        catalogue.write_text(prefix)
        await watch(0.5)
        catalogue.write_text(DENY_BOB_AND_EVE)
        await watch(2.0)
        assert opened == []


def test_sighup_does_not_stop_a_gateway_that_looks_on_sighup_only(
    tmp_path: Path,
) -> None:
    with _served(tmp_path, "0") as (url, catalogue, process):
        _write(catalogue, ALLOW_ALL)
        time.sleep(1.5)
        assert _sync_code(url) == "TOOL_FORBIDDEN"  # never looked at without a signal
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _sync_code(url) is not None:
            assert process.poll() is None, "SIGHUP stopped the gateway"
            assert time.monotonic() < deadline, "SIGHUP did not reload the policy"
            time.sleep(0.1)


async def test_a_failure_nobody_expected_does_not_end_the_reloading(tmp_path: Path) -> None:
    catalogue = tmp_path / "policy.json"
    _write(catalogue, DENY_BOB)
    applied: list[ToolPolicy] = []

    def apply(policy: ToolPolicy) -> None:
        if not applied:
            applied.append(policy)
            raise RuntimeError("a failure of no expected kind")
        applied.append(policy)

    reloader = PolicyReloader([catalogue], frozenset(), [], apply, interval=0.1, configured=True)
    async with reloading_policy(reloader):
        _write(catalogue, ALLOW_ALL)
        await eventually(lambda: _settled(applied, 1), timeout=10)
        _write(catalogue, DENY_BOB)  # the loop still runs: this one is applied
        await eventually(lambda: _settled(applied, 2), timeout=10)
    assert [len(policy.rules) for policy in applied] == [1, 2]
    assert reloader.failures == 1 and reloader.reloads == 1


async def _settled(applied: list[ToolPolicy], count: int) -> bool:
    return len(applied) >= count
