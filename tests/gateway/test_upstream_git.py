"""``mcp-server-git``, the reference Git server from PyPI, governed over stdio: its tools discovered
and served under the ``git__`` prefix, a call through ``/execute`` and one through ``/mcp`` with the
SDK client, each audited and published; the server's own refusal (a repository outside the one
it was started for) an audited tool error, never the server's answer passed on as a success."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conclave.gateway.app import create_app
from tests.conftest import Backend, eventually, open_platform, test_settings
from tests.gateway.conftest import audit_rows, published
from tests.gateway.upstream_fixtures import catalogue, git_server
from tests.httpserver import running_server


def _repository(path: Path) -> Path:
    """A Git repository with one commit, made with the git command line."""
    path.mkdir()
    for args in (
        ["init", "--quiet", "--initial-branch", "main"],
        ["config", "user.email", "ada@example.org"],
        ["config", "user.name", "Ada"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "notes.txt").write_text("governed\n")
    for args in (["add", "notes.txt"], ["commit", "--quiet", "-m", "First governed commit"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


def _git_entry(repository: Path) -> dict[str, Any]:
    return {
        "name": "git",
        "transport": "stdio",
        "command": git_server(),
        "args": ["--repository", str(repository)],
        "env": {"GIT_CONFIG_NOSYSTEM": "1"},
    }


async def test_git_server_over_stdio_through_execute_and_mcp(backend: Backend, tmp_path: Path):
    repository = _repository(tmp_path / "repo")
    settings = test_settings(
        tool_catalogues=catalogue(tmp_path, _git_entry(repository)),
        auth="enabled",
        api_tokens="tok-ada=ada",
    )
    auth = {"Authorization": "Bearer tok-ada"}
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with (
            running_server(app) as url,
            httpx2.AsyncClient(headers=auth) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
        ):
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"git__git_log", "git__git_status", "git__git_show"} <= names
            log = await mcp.call_tool("git__git_log", {"repo_path": str(repository)})
            outside = await mcp.call_tool("git__git_log", {"repo_path": str(tmp_path)})
            status = await http.post(
                f"{url}/execute",
                json={"tool": "git__git_status", "args": {"repo_path": str(repository)}},
            )
            missing = await http.post(f"{url}/execute", json={"tool": "git__git_log", "args": {}})
    assert log.is_error is False, log
    assert "First governed commit" in log.content[0].text  # type: ignore[union-attr]
    assert outside.is_error is True
    assert "outside the allowed repository" in outside.content[0].text  # type: ignore[union-attr]
    assert status.status_code == 200, status.text
    assert "On branch main" in status.json()["result"]
    # The upstream's own schema guards it: the call never reaches the server.
    assert missing.status_code == 422 and missing.json()["code"] == "VALIDATION_FAILED"

    rows = sorted(await audit_rows(backend), key=lambda row: row.created_at)
    assert [(row.tool_name, row.user_id) for row in rows] == [
        ("git__git_log", "ada"),
        ("git__git_log", "ada"),
        ("git__git_status", "ada"),
        ("git__git_log", "ada"),
    ]
    assert [row.status for row in rows] == ["succeeded", "failed", "succeeded", "rejected"]
    assert rows[1].error_code == "UPSTREAM_TOOL_ERROR"
    assert rows[0].args == {"repo_path": str(repository)}

    async def all_published() -> bool:
        found = {event.payload["conclave_id"] for event in await published(backend)}
        return {row.conclave_id for row in rows} <= found

    await eventually(all_published)
