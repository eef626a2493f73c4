"""`conclave collector schedule add|list|pause|resume|remove` against the real expedition
service."""

from __future__ import annotations

import asyncio
import re

from typer.testing import CliRunner

from conclave.cli.main import app
from conclave.collector.app import create_app
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_settings
from tests.httpserver import running_server

runner = CliRunner()


async def _cli(*args: str):
    # The CLI is synchronous; run it off the loop that serves the collector.
    return await asyncio.to_thread(runner.invoke, app, ["collector", "schedule", *args])


async def test_schedule_lifecycle_through_the_cli(sqlite_engine, memory_bus, tmp_path):
    settings = collector_settings(tmp_path)
    async with (
        Platform.open(settings, engine=sqlite_engine, bus=memory_bus) as platform,
        running_server(create_app(settings, platform=platform)) as url,
    ):
        added = await _cli(
            "add", "nightly-audit", "0 3 * * *", "audit", "--collection", "things",
            "--priority", "low", "--server", url,
        )  # fmt: skip
        assert added.exit_code == 0, added.output
        assert "nightly-audit" in added.output and "next fires at" in added.output

        listed = await _cli("list", "--server", url)
        assert listed.exit_code == 0, listed.output
        assert "nightly-audit" in listed.output and "0 3 * * *" in listed.output

        bad = await _cli("add", "broken", "not a cron", "audit", "--server", url)
        assert bad.exit_code == 1
        assert "HTTP 422" in bad.output

        not_json = await _cli(
            "add", "x", "* * * * *", "audit", "--parameters", "{", "--server", url
        )
        assert not_json.exit_code == 2

        paused = await _cli("pause", "nightly-audit", "--server", url)
        assert paused.exit_code == 0 and "paused" in paused.output, paused.output
        assert re.search(r"\blow\s+no\s", (await _cli("list", "--server", url)).output)
        resumed = await _cli("resume", "nightly-audit", "--server", url)
        assert resumed.exit_code == 0 and "next fires at" in resumed.output, resumed.output
        assert re.search(r"\blow\s+yes\s", (await _cli("list", "--server", url)).output)
        unknown = await _cli("pause", "no-such", "--server", url)
        assert unknown.exit_code == 1 and "SCHEDULE_NOT_FOUND" in unknown.output

        removed = await _cli("remove", "nightly-audit", "--server", url)
        assert removed.exit_code == 0, removed.output
        assert "nightly-audit" not in (await _cli("list", "--server", url)).output


async def test_remove_names_exactly_one_schedule(sqlite_engine, memory_bus, tmp_path):
    # ".." is a valid schedule name; it used to turn the request into DELETE /.
    settings = collector_settings(tmp_path)
    async with (
        Platform.open(settings, engine=sqlite_engine, bus=memory_bus) as platform,
        running_server(create_app(settings, platform=platform)) as url,
    ):
        removed = await _cli("remove", "..", "--server", url)
    assert removed.exit_code == 1
    assert "HTTP 404 SCHEDULE_NOT_FOUND" in removed.output
